//! OAuth sign-ins for HTTP MCP servers, end to end: the fixture MCP server behind its own
//! authorization server (`fixture-mcp http-oauth`), the phone's `auth/*` routes, the test
//! playing the browser, and the server's tools called from `python_execution` blocks.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

const FIXTURE: &str = env!("CARGO_BIN_EXE_fixture-mcp");

/// The fixture server process, killed when the test ends (passing or not).
struct OAuthServer {
    child: std::process::Child,
    base: String,
}

impl OAuthServer {
    async fn start(dirs: &Dirs, ttl_secs: u64) -> OAuthServer {
        let port_file = dirs.home().join("mcp-oauth-port");
        let child = std::process::Command::new(FIXTURE)
            .arg("http-oauth")
            .arg(&port_file)
            .arg(ttl_secs.to_string())
            .spawn()
            .unwrap();
        let mut port = String::new();
        for _ in 0..400 {
            port = std::fs::read_to_string(&port_file).unwrap_or_default();
            if !port.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(!port.is_empty(), "the fixture did not start");
        OAuthServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// Every token the authorization server handed out, and how many refreshes it served.
    async fn issued(&self) -> (Vec<String>, u64) {
        let v: Value = client()
            .get(format!("{}/issued", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let tokens = v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        (tokens, v["refreshes"].as_u64().unwrap())
    }
}

impl Drop for OAuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn block(gw: &Gateway, llm: &FixtureLlm, sid: &str, code: &str) -> String {
    gw.run_block(llm, sid, code).await.1
}

/// The browser: opens the authorization URL and reads where the server sends it back.
async fn authorize(url: &str) -> String {
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = browser.get(url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FOUND, "{}", r.text().await.unwrap());
    r.headers()["location"].to_str().unwrap().to_string()
}

fn query_param(url: &str, key: &str) -> Option<String> {
    let q = url.split_once('?')?.1;
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

async fn server_view(gw: &Gateway, name: &str) -> Value {
    let (s, v) = gw.get("/v1/mcp/servers").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} is not listed: {v}"))
}

async fn add_server(gw: &Gateway, name: &str, url: &str) {
    let (s, v) = gw
        .post(
            "/v1/mcp/servers",
            json!({"name": name, "server": {"transport": "streamable_http", "url": url}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

async fn start_flow(gw: &Gateway, name: &str) -> Value {
    let (s, flow) = gw
        .post_empty(&format!("/v1/mcp/servers/{name}/auth/start"))
        .await;
    assert_eq!(s, StatusCode::OK, "{flow}");
    flow
}

async fn complete(gw: &Gateway, name: &str, flow: &Value, input: &str) -> (StatusCode, Value) {
    gw.post(
        &format!("/v1/mcp/servers/{name}/auth/complete"),
        json!({"flow_id": flow["flow_id"], "input": input}),
    )
    .await
}

/// The paths the gateway's own "MCP server tests" session sent through the egress proxy.
async fn probe_session_paths(gw: &Gateway) -> Vec<String> {
    // Not in the user's list: asked for by its channel.
    let (_, v) = gw.get("/v1/sessions?channel=system").await;
    let sessions = v["sessions"].as_array().cloned().unwrap_or_default();
    let probe = sessions
        .iter()
        .find(|s| s["title"] == "MCP server tests")
        .unwrap_or_else(|| panic!("no probe session in {v}"));
    let sid = probe["id"].as_str().unwrap();
    gw.wait_egress(sid, 3)
        .await
        .iter()
        .filter(|d| d["decision"] == "allow" && d["host"] == "127.0.0.1")
        .filter_map(|d| d["path"].as_str().map(str::to_string))
        .collect()
}

/// Every GET the phone can make without ids of its own, plus the session's.
async fn every_get(gw: &Gateway, sid: &str) -> String {
    let mut all = String::new();
    for path in [
        "/v1/mcp/servers".to_string(),
        "/v1/sessions".into(),
        "/v1/admin/status".into(),
        "/v1/capabilities".into(),
        "/v1/settings".into(),
        "/v1/router".into(),
        "/metrics".into(),
        format!("/v1/sessions/{sid}"),
        format!("/v1/sessions/{sid}/transcript"),
        format!("/v1/sessions/{sid}/transcript.md"),
        format!("/v1/sessions/{sid}/egress"),
        format!("/v1/sessions/{sid}/turns"),
        format!("/v1/sessions/{sid}/events-since"),
    ] {
        let r = gw.req(reqwest::Method::GET, &path).send().await.unwrap();
        all.push_str(&r.text().await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_asks_for_a_sign_in_is_signed_in_from_the_phone_and_its_tools_work() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &loopback_policy());
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let srv = OAuthServer::start(&dirs, 3600).await;
    add_server(&gw, "web", &srv.mcp_url()).await;

    // Nobody signed in: the block is told to sign in, and so is the list.
    let sid = gw.create_session_at(&dirs.root()).await;
    let refused = "try:\n    await web.echo(text='x')\nexcept PermissionError as e:\n    print('refused:', e)\n";
    let out = block(&gw, &llm, &sid, refused).await;
    assert!(out.contains("refused:") && out.contains("sign-in"), "{out}");
    assert!(out.contains("Settings"), "{out}");
    let v = server_view(&gw, "web").await;
    assert_eq!(v["needs_auth"], true, "{v}");
    assert_eq!(v["is_authorized"], false, "{v}");
    assert!(
        v["last_error"].as_str().unwrap_or("").contains("sign-in"),
        "{v}"
    );

    let (s, v) = gw
        .post(
            "/v1/mcp/servers/actions/test",
            json!({"name": "web", "server": {"transport": "streamable_http", "url": srv.mcp_url()}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["is_connected"], false, "{v}");
    assert!(v["error"].as_str().unwrap_or("").contains("sign-in"), "{v}");

    // start: an authorization URL with a PKCE challenge and a state.
    let flow = start_flow(&gw, "web").await;
    assert_eq!(flow["status"], "pending", "{flow}");
    assert_eq!(flow["kind"], "pkce");
    let url = flow["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!("{}/authorize?", srv.base)),
        "{url}"
    );
    assert_eq!(
        query_param(url, "code_challenge_method").as_deref(),
        Some("S256")
    );
    assert!(
        query_param(url, "code_challenge").is_some_and(|c| c.len() >= 43),
        "{url}"
    );
    let state = query_param(url, "state").expect("a state");
    assert!(flow["redirect_uri"]
        .as_str()
        .unwrap()
        .starts_with("http://127.0.0.1:"));

    // The browser approves and lands on the redirect URI with a code.
    let landed = authorize(url).await;
    assert_eq!(
        query_param(&landed, "state").as_deref(),
        Some(state.as_str())
    );
    // A forged state is refused and leaves the sign-in waiting for the right one.
    let forged = landed.replace(&format!("state={state}"), "state=forged");
    let (s, v) = complete(&gw, "web", &flow, &forged).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(error_type(&v), "mcp-auth-state-mismatch", "{v}");
    let (s, v) = gw
        .post(
            "/v1/mcp/servers/web/auth/poll",
            json!({"flow_id": flow["flow_id"]}),
        )
        .await;
    assert_eq!(
        (s, v["status"].clone()),
        (StatusCode::OK, json!("pending")),
        "{v}"
    );

    let (s, v) = complete(&gw, "web", &flow, &landed).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "ok", "{v}");
    // Discovery, registration and the token request went through the egress proxy.
    let oauth_paths = probe_session_paths(&gw).await;
    for p in [
        "/.well-known/oauth-authorization-server",
        "/register",
        "/token",
    ] {
        assert!(
            oauth_paths.iter().any(|x| x.starts_with(p)),
            "{p} not in {oauth_paths:?}"
        );
    }
    let v = server_view(&gw, "web").await;
    assert_eq!(v["is_authorized"], true, "{v}");
    assert_eq!(v["needs_auth"], false, "{v}");
    assert!(v.get("last_error").is_none(), "{v}");

    // The tools are callable now.
    let out = block(
        &gw,
        &llm,
        &sid,
        "print(await web.echo(text='signed in'))\nprint((await web.add(a=20, b=22))['sum'])",
    )
    .await;
    assert_eq!(out.trim(), "signed in\n42", "{out}");

    // The tokens stay in the home's private token file: never in a GET, never in the logs.
    let file = dirs.home().join("mcp-tokens.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let (tokens, _) = srv.issued().await;
    assert!(!tokens.is_empty());
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(
        tokens.iter().any(|t| saved.contains(t.as_str())),
        "saved: {saved}"
    );
    let seen = every_get(&gw, &sid).await;
    let logs = format!("{}{}", gw.stdout(), gw.stderr());
    for t in &tokens {
        assert!(!seen.contains(t.as_str()), "{t} appears in a GET");
        assert!(!logs.contains(t.as_str()), "{t} appears in the logs");
    }

    // logout: the tokens are gone and the server asks for a sign-in again.
    let (s, v) = gw.post_empty("/v1/mcp/servers/web/auth/logout").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["is_authorized"], false, "{v}");
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(
        tokens.iter().all(|t| !saved.contains(t.as_str())),
        "{saved}"
    );
    let v = server_view(&gw, "web").await;
    assert_eq!(
        (v["is_authorized"].clone(), v["needs_auth"].clone()),
        (json!(false), json!(true)),
        "{v}"
    );
    let out = block(&gw, &llm, &sid, refused).await;
    assert!(out.contains("refused:") && out.contains("sign-in"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_code_a_refusal_or_a_bad_request_is_a_clear_error() {
    let dirs = Dirs::new();
    std::fs::write(
        dirs.root().join("vis.yml"),
        format!(
            "jail: {{network: {}}}\nmcp:\n  servers:\n    local:\n      transport: stdio\n      command: {FIXTURE}\n      args: [stdio]\n",
            loopback_policy()
        ),
    )
    .unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::default().sandbox()).await;
    let srv = OAuthServer::start(&dirs, 3600).await;
    add_server(&gw, "web", &srv.mcp_url()).await;

    // A code the authorization server never issued: 400, and the flow is over.
    let flow = start_flow(&gw, "web").await;
    let (s, v) = complete(&gw, "web", &flow, "not-a-real-code").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(error_type(&v), "mcp-auth-code-rejected", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("invalid_grant"),
        "{v}"
    );
    let (_, v) = gw
        .post(
            "/v1/mcp/servers/web/auth/poll",
            json!({"flow_id": flow["flow_id"]}),
        )
        .await;
    assert_eq!(v["status"], "error", "{v}");
    let (s, v) = complete(&gw, "web", &flow, "another-code").await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");

    // The user refused in the browser.
    let flow = start_flow(&gw, "web").await;
    let state = query_param(flow["url"].as_str().unwrap(), "state").unwrap();
    let denied = format!(
        "{}?error=access_denied&error_description=not+today&state={state}",
        flow["redirect_uri"].as_str().unwrap()
    );
    let (s, v) = complete(&gw, "web", &flow, &denied).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(error_type(&v), "mcp-auth-denied", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("not today"),
        "{v}"
    );
    // A redirect URL without its state, and an empty input.
    let (s, v) = complete(
        &gw,
        "web",
        &flow,
        "http://127.0.0.1:1/mcp-callback?code=abc",
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("state"),
        "{v}"
    );
    let (s, _) = complete(&gw, "web", &flow, "  ").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // cancel ends it; the flow is then unknown.
    let (s, v) = gw
        .post(
            "/v1/mcp/servers/web/auth/cancel",
            json!({"flow_id": flow["flow_id"]}),
        )
        .await;
    assert_eq!(
        (s, v["is_cancelled"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    let (s, v) = gw
        .post(
            "/v1/mcp/servers/web/auth/poll",
            json!({"flow_id": flow["flow_id"]}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(error_type(&v), "mcp-auth-flow-not-found", "{v}");

    // Requests that cannot be right.
    let (s, v) = gw.post_empty("/v1/mcp/servers/local/auth/start").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(error_type(&v), "mcp-auth-not-http", "{v}");
    let (s, v) = gw.post_empty("/v1/mcp/servers/ghost/auth/start").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = gw.post_empty("/v1/mcp/servers/web/auth/dance").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(error_type(&v), "mcp-auth-step-not-found", "{v}");
    let (s, v) = gw.post_empty("/v1/mcp/servers/web/auth/complete").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("flow_id"),
        "{v}"
    );
    // A server that answers without asking for a sign-in has nothing to sign in to.
    let plain_port = dirs.home().join("plain-port");
    let mut plain = std::process::Command::new(FIXTURE)
        .arg("http")
        .arg(&plain_port)
        .spawn()
        .unwrap();
    let mut port = String::new();
    for _ in 0..400 {
        port = std::fs::read_to_string(&plain_port).unwrap_or_default();
        if !port.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    add_server(&gw, "open", &format!("http://127.0.0.1:{port}/mcp")).await;
    let (s, v) = gw.post_empty("/v1/mcp/servers/open/auth/start").await;
    let _ = plain.kill();
    let _ = plain.wait();
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(error_type(&v), "mcp-auth-not-needed", "{v}");
    let (s, _) = gw.get("/healthz").await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_browser_on_the_gateways_machine_finishes_the_sign_in_and_expired_tokens_are_refreshed() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &loopback_policy());
    let mut gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    // Access tokens live two seconds.
    let srv = OAuthServer::start(&dirs, 2).await;
    add_server(&gw, "web", &srv.mcp_url()).await;

    let flow = start_flow(&gw, "web").await;
    // The browser follows the redirect to the gateway's loopback listener itself.
    let page = client()
        .get(flow["url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("Signed in to web"));
    let (_, v) = gw
        .post(
            "/v1/mcp/servers/web/auth/poll",
            json!({"flow_id": flow["flow_id"]}),
        )
        .await;
    assert_eq!(v["status"], "ok", "{v}");

    let sid = gw.create_session_at(&dirs.root()).await;
    let out = block(&gw, &llm, &sid, "print(await web.echo(text='one'))").await;
    assert_eq!(out.trim(), "one");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let out = block(&gw, &llm, &sid, "print(await web.echo(text='two'))").await;
    assert_eq!(out.trim(), "two", "the expired token was refreshed");
    let (_, refreshes) = srv.issued().await;
    assert!(refreshes >= 1, "refreshes: {refreshes}");
    let paths: Vec<Value> = gw
        .egress(&sid)
        .await
        .iter()
        .map(|d| d["path"].clone())
        .collect();
    assert!(
        paths.contains(&json!("/token")),
        "the refresh went through the proxy: {paths:?}"
    );

    // The sign-in survives a restart of the gateway.
    gw.stop().await;
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let v = server_view(&gw, "web").await;
    assert_eq!(v["is_authorized"], true, "{v}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let out = block(&gw, &llm, &sid, "print(await web.echo(text='three'))").await;
    assert_eq!(out.trim(), "three");

    // Removing the server removes its sign-in.
    let (s, _) = gw.delete("/v1/mcp/servers/web").await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (tokens, _) = srv.issued().await;
    let saved = std::fs::read_to_string(dirs.home().join("mcp-tokens.json")).unwrap();
    assert!(
        tokens.iter().all(|t| !saved.contains(t.as_str())),
        "{saved}"
    );
}
