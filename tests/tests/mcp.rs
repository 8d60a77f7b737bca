//! MCP servers end to end: a fixture MCP server written with the official SDK
//! (`tests/src/bin/fixture-mcp.rs`, over stdio and streamable HTTP) whose tools a fixture LLM
//! calls from `python_execution` blocks; the phone's `/v1/mcp/servers…` routes.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

const FIXTURE: &str = env!("CARGO_BIN_EXE_fixture-mcp");

async fn block(gw: &Gateway, llm: &FixtureLlm, sid: &str, code: &str) -> String {
    gw.run_block(llm, sid, code).await.1
}

fn stdio_config(dirs: &Dirs) {
    std::fs::write(
        dirs.root().join("vis.yml"),
        format!("mcp:\n  servers:\n    fixture:\n      transport: stdio\n      command: {FIXTURE}\n      args: [stdio]\n"),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_servers_tools_are_async_functions_in_a_block_with_docs_and_apropos() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    stdio_config(&dirs);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
r = await fixture.add(a=2, b=3)
print("sum", r["sum"])
print(await fixture.search_issues(q="crash"))
print(apropos("integers sum").splitlines()[0])
print("doc:", "Add two integers" in doc("fixture.add"))
try:
    await fixture.fail(message="nope")
except Exception as e:
    print("failed:", type(e).__name__, e)
"#;
    let out = block(&gw, &llm, &sid, code).await;
    assert!(out.contains("sum 5"), "{out}");
    assert!(out.contains("no issues match crash"), "{out}");
    assert!(out.contains("fixture.add"), "apropos: {out}");
    assert!(out.contains("doc: True"), "{out}");
    assert!(out.contains("failed: RuntimeError nope"), "{out}");
    // The hand-written server is listed, not managed, with its tools counted.
    let (s, v) = gw.get("/v1/mcp/servers").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let srv = &v["servers"][0];
    assert_eq!(srv["name"], "fixture");
    assert_eq!(srv["is_managed"], false);
    assert_eq!(srv["tools"], 6);
    assert_eq!(srv["is_connected"], true);
    assert!(srv.get("env").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_server_is_restarted_on_the_next_call_and_its_failure_is_listed() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    stdio_config(&dirs);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = "try:\n    await fixture.die()\nexcept Exception as e:\n    print('died:', type(e).__name__)\n";
    let out = block(&gw, &llm, &sid, code).await;
    assert!(out.contains("died: ConnectionError"), "{out}");
    let (_, v) = gw.get("/v1/mcp/servers").await;
    assert!(
        v["servers"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("die")),
        "the failure is listed: {v}"
    );
    let out = block(
        &gw,
        &llm,
        &sid,
        "print('after:', (await fixture.add(a=1, b=1))['sum'])",
    )
    .await;
    assert!(
        out.contains("after: 2"),
        "restarted on the next call: {out}"
    );
    let (_, v) = gw.get("/v1/mcp/servers").await;
    assert_eq!(v["servers"][0]["is_connected"], true, "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn servers_added_from_the_phone_are_saved_killed_started_and_removed() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &loopback_policy());
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    // An HTTP server, reached through the egress proxy.
    let port_file = dirs.home().join("mcp-port");
    let mut http = std::process::Command::new(FIXTURE)
        .arg("http")
        .arg(&port_file)
        .spawn()
        .unwrap();
    let mut port = String::new();
    for _ in 0..200 {
        port = std::fs::read_to_string(&port_file).unwrap_or_default();
        if !port.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let server = json!({"transport": "streamable_http", "url": format!("http://127.0.0.1:{port}/mcp"),
        "headers": {"Authorization": "Bearer secret-token"}});
    let (s, v) = gw
        .post("/v1/mcp/servers", json!({"name": "web", "server": server}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["is_managed"], true);
    assert!(!v.to_string().contains("secret-token"), "never echoed: {v}");
    let saved = std::fs::read_to_string(dirs.home().join("mcp-servers.json")).unwrap();
    assert!(saved.contains("secret-token"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dirs.home().join("mcp-servers.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let sid = gw.create_session_at(&dirs.root()).await;
    let out = block(&gw, &llm, &sid, "print(await web.echo(text='over http'))").await;
    assert_eq!(out.trim(), "over http");
    let decisions = gw.wait_egress(&sid, 1).await;
    assert!(
        decisions
            .iter()
            .any(|d| d["decision"] == "allow" && d["host"] == "127.0.0.1"),
        "through the proxy: {decisions:?}"
    );

    // kill: calls fail until start.
    let (s, v) = gw.post_empty("/v1/mcp/servers/web/actions/kill").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["is_killed"], true);
    let out = block(&gw, &llm, &sid, "print('web' in dir())").await;
    assert_eq!(out.trim(), "False", "a killed server is not offered");
    let (_, v) = gw.post_empty("/v1/mcp/servers/web/actions/start").await;
    assert_eq!(v["is_killed"], false);
    let out = block(&gw, &llm, &sid, "print(await web.echo(text='back'))").await;
    assert_eq!(out.trim(), "back");

    // disable, then remove.
    let (s, v) = gw
        .post(
            "/v1/mcp/servers/web/actions/enable",
            json!({"enabled": false}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["enabled"], false);
    let (s, _) = gw.delete("/v1/mcp/servers/web").await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, v) = gw.get("/v1/mcp/servers").await;
    assert_eq!(v["servers"], json!([]));
    let _ = http.kill();
    let _ = http.wait();
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_servers_get_clear_errors_and_the_gateway_keeps_serving() {
    let dirs = Dirs::new();
    let gw = Gateway::start_in(dirs.clone(), Opts::default().sandbox()).await;
    let test = |server: Value| {
        let gw = &gw;
        async move {
            gw.post(
                "/v1/mcp/servers/actions/test",
                json!({"name": "probe", "server": server}),
            )
            .await
        }
    };
    let (s, v) = test(json!({"transport": "stdio", "command": "/nonexistent/mcp-server"})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["is_connected"], false);
    assert!(
        v["error"]
            .as_str()
            .unwrap_or("")
            .contains("/nonexistent/mcp-server"),
        "{v}"
    );
    let (_, v) = test(json!({"transport": "stdio", "command": FIXTURE, "args": ["crash"]})).await;
    assert!(
        v["error"].as_str().unwrap_or("").contains("initialize"),
        "{v}"
    );
    let (_, v) = test(
        json!({"transport": "stdio", "command": FIXTURE, "args": ["hang"], "timeout_ms": 500}),
    )
    .await;
    assert!(v["error"].as_str().unwrap_or("").contains("500 ms"), "{v}");
    let (_, v) = test(json!({"transport": "stdio", "command": FIXTURE, "args": ["stdio"]})).await;
    assert_eq!(v["is_connected"], true, "{v}");
    assert_eq!(v["tools"].as_array().map(Vec::len), Some(6), "{v}");
    // Malformed requests are 400s naming what is wrong.
    let (s, v) = gw
        .post(
            "/v1/mcp/servers",
            json!({"name": "bad-name", "server": {"transport": "stdio", "command": "x"}}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.to_string().contains("Python identifier"), "{v}");
    let (s, v) = gw
        .post(
            "/v1/mcp/servers",
            json!({"name": "x", "server": {"transport": "carrier-pigeon"}}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = gw.post_empty("/v1/mcp/servers/ghost/actions/kill").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = gw.post_empty("/v1/mcp/servers/ghost/auth/start").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, _) = gw.get("/healthz").await;
    assert_eq!(s, StatusCode::OK);
}

/// A raw stdio server (no SDK: the SDK cannot produce it) whose only tool has an input schema
/// that is not a JSON Schema object.
const BAD_SCHEMA_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "bad", "version": "1"}}
    elif msg["method"] == "tools/list":
        result = {"tools": [{"name": "broken", "inputSchema": {"type": "object", "properties": ["not", "an", "object"]}}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_whose_schema_is_not_valid_json_schema_is_left_out_with_the_reason_listed() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let script = dirs.root().join("bad_server.py");
    std::fs::write(&script, BAD_SCHEMA_SERVER).unwrap();
    std::fs::write(
        dirs.root().join("vis.yml"),
        format!("mcp:\n  servers:\n    bad:\n      transport: stdio\n      command: python3\n      args: [{}]\n", script.display()),
    )
    .unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let out = block(&gw, &llm, &sid, "print('bad' in dir())").await;
    assert_eq!(out.trim(), "False", "{out}");
    let (_, v) = gw.get("/v1/mcp/servers").await;
    let err = v["servers"][0]["last_error"].as_str().unwrap_or_default();
    assert!(err.contains("broken") && err.contains("properties"), "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn other_clients_hear_of_every_change_to_the_server_list() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut watcher = gw.events(&sid, -1).await;
    let server = json!({"transport": "stdio", "command": FIXTURE, "args": ["stdio"],
        "env": {"TOKEN": "never-on-the-stream"}});
    let (s, v) = gw
        .post(
            "/v1/mcp/servers",
            json!({"name": "tools", "server": server}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let evs = watcher
        .collect_until("mcp.servers_updated", Duration::from_secs(10))
        .await;
    let ev = evs.last().unwrap();
    assert_eq!(
        (ev.data["change"].clone(), ev.data["server"].clone()),
        (json!("saved"), json!("tools"))
    );
    assert!(!ev.data.to_string().contains("never-on-the-stream"));
    let (s, _) = gw.post_empty("/v1/mcp/servers/tools/actions/kill").await;
    assert_eq!(s, StatusCode::OK);
    let evs = watcher
        .collect_until("mcp.servers_updated", Duration::from_secs(10))
        .await;
    assert_eq!(evs.last().unwrap().data["change"], "killed");
    let (s, _) = gw.delete("/v1/mcp/servers/tools").await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let evs = watcher
        .collect_until("mcp.servers_updated", Duration::from_secs(10))
        .await;
    assert_eq!(evs.last().unwrap().data["change"], "removed");
    // Live-only: a replay from the start does not carry them.
    let replay = gw.events_since(&sid, 0).await;
    assert!(
        !replay.iter().any(|e| e["type"] == "mcp.servers_updated"),
        "{replay:?}"
    );
}

/// A raw stdio server whose one tool answers the `TOKEN` its environment holds, and which
/// refuses to start without one (as a server missing its API key does).
const TOKEN_SERVER: &str = r#"
import json, os, sys
if not os.environ.get("TOKEN"):
    sys.exit("TOKEN is not set")
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "keys", "version": "1"}}
    elif msg["method"] == "tools/list":
        result = {"tools": [{"name": "token", "description": "The token.", "inputSchema": {"type": "object", "properties": {}}}]}
    elif msg["method"] == "tools/call":
        result = {"content": [{"type": "text", "text": os.environ.get("TOKEN", "") + "|" + os.environ.get("OTHER", "-")}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn editing_a_server_from_the_phone_keeps_the_secrets_it_does_not_resend() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let script = dirs.root().join("token_server.py");
    std::fs::write(&script, TOKEN_SERVER).unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let script = script.to_string_lossy().into_owned();
    let server = json!({"transport": "stdio", "command": "python3", "args": [script],
        "env": {"TOKEN": "s3cret", "OTHER": "o"}});
    let (s, v) = gw
        .post("/v1/mcp/servers", json!({"name": "keys", "server": server}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["env_keys"], json!(["OTHER", "TOKEN"]), "names only: {v}");
    assert!(!v.to_string().contains("s3cret"), "{v}");
    // The app's edit form: the row's non-secret fields back, `env` left out (it comes back
    // blank), "Validate & save" tests then saves.
    let edited = json!({"enabled": true, "transport": "stdio", "command": "python3",
        "args": [script], "timeout_ms": 20000});
    let (s, v) = gw
        .post(
            "/v1/mcp/servers/actions/test",
            json!({"name": "keys", "server": edited}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["is_connected"], true,
        "the test used the kept secrets: {v}"
    );
    let (s, v) = gw
        .post("/v1/mcp/servers", json!({"name": "keys", "server": edited}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["timeout_ms"], 20000, "{v}");
    let sid = gw.create_session_at(&dirs.root()).await;
    let out = block(&gw, &llm, &sid, "print(await keys.token())").await;
    assert_eq!(out.trim(), "s3cret|o", "the secrets survived the edit");

    // A key sent as null is removed; the others stay.
    let mut one_off = edited.clone();
    one_off["env"] = json!({"OTHER": null});
    let (s, v) = gw
        .post(
            "/v1/mcp/servers",
            json!({"name": "keys", "server": one_off}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["env_keys"], json!(["TOKEN"]), "{v}");
    let out = block(&gw, &llm, &sid, "print(await keys.token())").await;
    assert_eq!(out.trim(), "s3cret|-");

    // `env: null` clears them all, on purpose: the server then fails to start, and says so.
    let mut cleared = edited.clone();
    cleared["env"] = Value::Null;
    let (s, v) = gw
        .post(
            "/v1/mcp/servers",
            json!({"name": "keys", "server": cleared}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["env_keys"], json!([]), "{v}");
    let (_, v) = gw
        .post(
            "/v1/mcp/servers/actions/test",
            json!({"name": "keys", "server": edited}),
        )
        .await;
    assert_eq!(v["is_connected"], false, "{v}");
    // A secret map of the wrong shape is a 400 naming the field, and changes nothing.
    let mut bad = edited.clone();
    bad["env"] = json!({"TOKEN": 5});
    let (s, v) = gw
        .post("/v1/mcp/servers", json!({"name": "keys", "server": bad}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.to_string().contains("env"), "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_servers_kept_headers_never_follow_it_to_another_origin() {
    let gw = Gateway::start(Opts::default().sandbox()).await;
    let server = json!({"transport": "streamable_http", "url": "http://127.0.0.1:9/mcp",
        "headers": {"Authorization": "Bearer keep-me"}});
    let (s, v) = gw
        .post("/v1/mcp/servers", json!({"name": "web", "server": server}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["header_keys"], json!(["Authorization"]), "{v}");
    // Same origin, another path: the header is kept.
    let moved = json!({"transport": "streamable_http", "url": "http://127.0.0.1:9/v2/mcp"});
    let (s, v) = gw
        .post("/v1/mcp/servers", json!({"name": "web", "server": moved}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["header_keys"], json!(["Authorization"]), "{v}");
    // Another origin without the headers resent: refused, nothing changed.
    let away = json!({"transport": "streamable_http", "url": "http://127.0.0.2:9/mcp"});
    let (s, v) = gw
        .post("/v1/mcp/servers", json!({"name": "web", "server": away}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.to_string().contains("headers"), "{v}");
    let (_, v) = gw.get("/v1/mcp/servers").await;
    assert_eq!(v["servers"][0]["url"], "http://127.0.0.1:9/v2/mcp", "{v}");
    let saved = std::fs::read_to_string(gw.dirs.home().join("mcp-servers.json")).unwrap();
    assert!(saved.contains("keep-me"), "{saved}");
}

#[tokio::test(flavor = "multi_thread")]
async fn validating_a_server_leaves_no_session_in_the_users_list() {
    let gw = Gateway::start(Opts::default().sandbox()).await;
    let (s, v) = gw
        .post(
            "/v1/mcp/servers/actions/test",
            json!({"name": "probe", "server": {"transport": "stdio", "command": FIXTURE, "args": ["stdio"]}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["is_connected"], true, "{v}");
    let (s, v) = gw.get("/v1/sessions").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["sessions"], json!([]), "{v}");
    // Its traffic stays reachable for an operator, by its channel.
    let (_, v) = gw.get("/v1/sessions?channel=system").await;
    assert_eq!(v["sessions"][0]["title"], "MCP server tests", "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_server_costs_a_turn_about_a_second_and_is_named_as_down() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    std::fs::write(
        dirs.root().join("vis.yml"),
        format!(
            "mcp:\n  servers:\n    fixture:\n      transport: stdio\n      command: {FIXTURE}\n      args: [stdio]\n    slow:\n      transport: stdio\n      command: {FIXTURE}\n      args: [hang]\n"
        ),
    )
    .unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
print("sum", (await fixture.add(a=1, b=2))["sum"])
print("apropos:", apropos("slow"))
try:
    await slow.anything()
except Exception as e:
    print("slow:", type(e).__name__, e)
"#;
    let started = std::time::Instant::now();
    let out = block(&gw, &llm, &sid, code).await;
    let took = started.elapsed();
    assert!(out.contains("sum 3"), "{out}");
    assert!(
        took < Duration::from_secs(6),
        "the hanging server held the turn {took:?}"
    );
    assert!(out.contains("slow:"), "{out}");
    assert!(
        out.contains("not connected") || out.contains("down"),
        "named as not available: {out}"
    );
    assert!(out.contains("apropos:") && out.contains("slow"), "{out}");
    // The next turn does not pay again for the good server: its connection is kept.
    let started = std::time::Instant::now();
    let out = block(
        &gw,
        &llm,
        &sid,
        "print((await fixture.add(a=2, b=2))['sum'])",
    )
    .await;
    assert_eq!(out.trim(), "4");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread")]
async fn reference_style_server_entries_are_accepted_and_a_bad_one_is_reported_on_itself() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let script = dirs.root().join("token_server.py");
    std::fs::write(&script, TOKEN_SERVER).unwrap();
    std::fs::write(dirs.root().join(".env"), "OTHER_FROM_DOTENV=dot\n").unwrap();
    // No `transport` (inferred from `command`), `${VAR}` from the project environment, and
    // one entry that cannot work.
    std::fs::write(
        dirs.root().join("vis.yml"),
        format!(
            "environment:\n  MY_TOKEN: from-env\nmcp:\n  servers:\n    keys:\n      command: python3\n      args: [{}]\n      env:\n        TOKEN: \"${{MY_TOKEN}}\"\n        OTHER: \"${{OTHER_FROM_DOTENV}}\"\n    broken:\n      transport: carrier-pigeon\n",
            script.display()
        ),
    )
    .unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let out = block(&gw, &llm, &sid, "print(await keys.token())").await;
    assert_eq!(out.trim(), "from-env|dot");
    let (s, v) = gw.get("/v1/mcp/servers").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let broken = v["servers"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "broken"))
        .cloned()
        .unwrap_or_default();
    assert!(
        broken["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("carrier-pigeon")),
        "{v}"
    );
    let keys = v["servers"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "keys"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(keys["transport"], "stdio", "{v}");
}
