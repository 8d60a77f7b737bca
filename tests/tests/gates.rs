//! CORS, the protocol gate (426), the token gate (401), health, token file, lock.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;

fn hv<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_options_preflight_answers_204_with_cors_headers_before_token_and_protocol() {
    let gw = Gateway::start(Opts::default().require_token()).await;
    for path in ["/v1/sessions", "/v1/sessions/x/turns", "/nope", "/healthz"] {
        let r = gw
            .raw(Method::OPTIONS, path)
            .header("Origin", "http://app.example")
            .header("Access-Control-Request-Method", "POST")
            .header(
                "Access-Control-Request-Headers",
                "x-vis-protocol, authorization, content-type",
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT, "{path}");
        assert_eq!(hv(&r, "access-control-allow-origin"), "http://app.example");
        assert_eq!(hv(&r, "access-control-allow-credentials"), "true");
        let methods = hv(&r, "access-control-allow-methods");
        for m in ["GET", "POST", "PATCH", "DELETE", "OPTIONS"] {
            assert!(methods.contains(m), "{methods}");
        }
        assert_eq!(
            hv(&r, "access-control-allow-headers"),
            "x-vis-protocol, authorization, content-type"
        );
        assert!(hv(&r, "access-control-expose-headers").contains("ETag"));
        assert_eq!(hv(&r, "access-control-max-age"), "600");
        assert!(r
            .headers()
            .get_all("vary")
            .iter()
            .any(|v| v.to_str().unwrap_or("").contains("Origin")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_headers_are_on_every_response_with_a_star_origin_when_none_is_sent() {
    let gw = Gateway::start(Opts::default()).await;
    let r = gw.req(Method::GET, "/v1/sessions").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(hv(&r, "access-control-allow-origin"), "*");
    assert!(hv(&r, "access-control-expose-headers").contains("ETag"));
    // also on errors and on a 426
    let r = gw.raw(Method::GET, "/v1/sessions").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UPGRADE_REQUIRED);
    assert_eq!(hv(&r, "access-control-allow-origin"), "*");
    let r = gw
        .raw(Method::OPTIONS, "/v1/sessions")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        hv(&r, "access-control-allow-headers"),
        "Authorization, Content-Type, X-Vis-Gateway-Secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_protocol_headers_gets_426_unknown_even_without_a_token() {
    let gw = Gateway::start(Opts::default().require_token()).await;
    let (s, v) = into_json(gw.raw(Method::GET, "/v1/sessions").send().await.unwrap()).await;
    assert_eq!(s, StatusCode::UPGRADE_REQUIRED, "{v}");
    assert_eq!(v["error"]["type"], "incompatible_protocol");
    assert!(v["error"]["message"].is_string());
    assert_eq!(v["compatibility"]["reason"], "unknown");
    assert_eq!(v["compatibility"]["is_compatible"], false);
    assert_eq!(v["protocol"]["protocol"], 2);
    assert_eq!(v["error"]["title"], "Update this client");
    assert!(v["error"]["remedy"].is_array());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_one_is_client_too_old_and_min_gateway_three_is_gateway_too_old() {
    let gw = Gateway::start(Opts::default()).await;
    let (s, v) = into_json(
        gw.raw(Method::GET, "/v1/sessions")
            .header("X-Vis-Protocol", "1")
            .header("X-Vis-Min-Gateway-Protocol", "1")
            .header("X-Vis-Client", "vis-companion")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::UPGRADE_REQUIRED);
    assert_eq!(v["compatibility"]["reason"], "client-too-old");
    assert_eq!(v["compatibility"]["upgrade"], "client");
    assert_eq!(v["error"]["title"], "Update this client");
    assert_eq!(v["compatibility"]["client_protocol"], 1);
    assert_eq!(v["compatibility"]["client_name"], "vis-companion");
    let (s, v) = into_json(
        gw.raw(Method::GET, "/v1/sessions")
            .header("X-Vis-Protocol", "3")
            .header("X-Vis-Min-Gateway-Protocol", "3")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::UPGRADE_REQUIRED);
    assert_eq!(v["compatibility"]["reason"], "gateway-too-old");
    assert_eq!(v["compatibility"]["upgrade"], "gateway");
    assert_eq!(v["error"]["title"], "Update the gateway");
    // protocol 2 demanding a gateway of 3 is also refused
    let (s, v) = into_json(
        gw.raw(Method::GET, "/v1/sessions")
            .header("X-Vis-Protocol", "2")
            .header("X-Vis-Min-Gateway-Protocol", "3")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::UPGRADE_REQUIRED);
    assert_eq!(v["compatibility"]["reason"], "gateway-too-old");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_open_and_readyz_capabilities_and_metrics_need_only_the_token() {
    let gw = Gateway::start(Opts::default().require_token()).await;
    let (s, v) = into_json(gw.raw(Method::GET, "/healthz").send().await.unwrap()).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["require_token"], true);
    for path in ["/readyz", "/v1/capabilities", "/metrics"] {
        let (s, v) = into_json(gw.raw(Method::GET, path).send().await.unwrap()).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{path}: {v}");
        assert_eq!(error_type(&v), "unauthorized");
        let r = gw
            .raw(Method::GET, path)
            .bearer_auth(&gw.token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path} with the token");
    }
    let (_, ready) = into_json(
        gw.raw(Method::GET, "/readyz")
            .bearer_auth(&gw.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(ready["status"], "ok");
    let r = gw
        .raw(Method::GET, "/metrics")
        .bearer_auth(&gw.token)
        .send()
        .await
        .unwrap();
    assert!(hv(&r, "content-type").starts_with("text/plain"));
    let text = r.text().await.unwrap();
    assert!(text.contains("# TYPE vis_turns_total counter"), "{text}");
    assert!(text.contains("vis_turns_running"), "{text}");
    // /docs needs neither (whether or not docs are built, it is never 401/426)
    let r = gw.raw(Method::GET, "/docs").send().await.unwrap();
    assert!(
        r.status() != StatusCode::UNAUTHORIZED && r.status() != StatusCode::UPGRADE_REQUIRED,
        "{}",
        r.status()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_to_127_0_0_1_no_token_is_needed() {
    let gw = Gateway::start(Opts::default()).await;
    assert_eq!(gw.registry["require_token"], false);
    let (s, v) = gw.get("/v1/sessions").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = into_json(
        gw.raw(Method::GET, "/v1/capabilities")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_token_on_loopback_answers_401_without_and_200_with_either_carrier() {
    let gw = Gateway::start(Opts::default().require_token()).await;
    let proto = |b: reqwest::RequestBuilder| {
        b.header("X-Vis-Protocol", "2")
            .header("X-Vis-Min-Gateway-Protocol", "2")
    };
    let (s, v) = into_json(
        proto(gw.raw(Method::GET, "/v1/sessions"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(
        v,
        json!({"error": {"type": "unauthorized", "message": "missing or invalid bearer token"}})
    );
    let (s, _) = into_json(
        proto(gw.raw(Method::GET, "/v1/sessions"))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let r = proto(gw.raw(Method::GET, "/v1/sessions"))
        .header("Authorization", format!("Bearer  {} ", gw.token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "a trimmed Bearer token");
    let r = proto(gw.raw(Method::GET, "/v1/sessions"))
        .header("X-Vis-Gateway-Secret", &gw.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// Every gated route of the table as `(method, template)`; `{sid}` is a real session, the
/// other ids are unknown UUIDs. Kept in step with the source by the coverage test below.
/// Routes checked elsewhere (open, token-only, or stopping the gateway).
const SPECIAL: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/v1/capabilities"),
    ("GET", "/metrics"),
    ("POST", "/v1/admin/stop"),
];

fn fill(template: &str, sid: &str) -> String {
    let path = template
        .replace("{sid}", sid)
        .replace("{tid}", "00000000-0000-4000-8000-000000000001")
        .replace("{vid}", "00000000-0000-4000-8000-000000000002")
        .replace("{rid}", "00000000-0000-4000-8000-000000000003")
        .replace("{nid}", "n1")
        .replace("{iid}", "00000000-0000-4000-8000-000000000004:1")
        .replace("{idx}", "0")
        .replace("{token}", "unknown-device")
        .replace("{pid}", "00000000-0000-4000-8000-000000000005")
        .replace("{jid}", "job-1")
        .replace("{wid}", "00000000-0000-4000-8000-000000000006")
        .replace("{id}", "reasoning_level");
    if path == "/v1/events" {
        format!("/v1/events?sids={sid}")
    } else {
        path
    }
}

/// Every route of the source but the special ones, in the walk's order: the routes that
/// delete the session (or its project) last, so the walk keeps its session until the end.
fn route_table(sid: &str) -> Vec<(Method, String)> {
    let mut routes: Vec<(String, String)> = common::routes::source_routes()
        .into_iter()
        .filter(|(m, p)| !SPECIAL.contains(&(m.as_str(), p.as_str())))
        .collect();
    let destroys = |(m, p): &(String, String)| {
        m == "DELETE" && (p == "/v1/sessions/{sid}" || p == "/v1/projects/{pid}")
    };
    routes.sort_by_key(|r| destroys(r));
    routes
        .iter()
        .map(|(m, t)| (Method::from_bytes(m.as_bytes()).unwrap(), fill(t, sid)))
        .collect()
}

#[test]
fn the_route_walk_reads_every_route_module_and_each_path_is_registered_once() {
    let routes = common::routes::source_routes();
    assert!(routes.len() >= 110, "{routes:?}");
    for expected in [
        ("GET", "/v1/sessions"),
        ("DELETE", "/v1/sessions/{sid}"),
        ("POST", "/v1/sessions/{sid}/turns"),
        ("GET", "/v1/events"),
        ("GET", "/v1/fs"),
        ("GET", "/v1/mcp/servers"),
        ("GET", "/v1/providers"),
        ("GET", "/v1/speech/voices"),
        ("GET", "/healthz"),
    ] {
        let e = (expected.0.to_string(), expected.1.to_string());
        assert!(routes.contains(&e), "{expected:?} not found");
    }
    for s in SPECIAL {
        let e = (s.0.to_string(), s.1.to_string());
        assert!(routes.contains(&e), "special route {s:?} not in the source");
    }
    // One `.route(` per path: a path registered twice would merge two method routers.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../companion-api/src/routes");
    let mut paths = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()) {
        let src = std::fs::read_to_string(e.path()).unwrap();
        for (i, _) in src.match_indices(".route(") {
            let path = src[i..].split('"').nth(1).unwrap_or("").to_string();
            assert!(!paths.contains(&path), "{path} is registered twice");
            paths.push(path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_to_0_0_0_0_every_gated_route_needs_the_token_and_accepts_both_carriers() {
    let gw = Gateway::start(Opts::default().host("0.0.0.0")).await;
    assert_eq!(gw.registry["require_token"], true);
    let sid = gw.create_session().await;
    let proto = |b: reqwest::RequestBuilder| {
        b.header("X-Vis-Protocol", "2")
            .header("X-Vis-Min-Gateway-Protocol", "2")
            .header("X-Vis-Client", "vis-companion")
    };
    let mut table = route_table(&sid);
    table.push((Method::POST, "/v1/admin/stop".into()));
    for (m, p) in &table {
        let (s, v) = into_json(
            proto(gw.raw(m.clone(), p))
                .json(&json!({}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{m} {p}: {v}");
        assert_eq!(error_type(&v), "unauthorized", "{m} {p}");
        let (s, _) = into_json(
            proto(gw.raw(m.clone(), p))
                .bearer_auth("not-the-token")
                .json(&json!({}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{m} {p} wrong token");
    }
    let sse_client = stream_client();
    for (i, (m, p)) in route_table(&sid).iter().enumerate() {
        for carrier in ["bearer", "secret"] {
            let b = proto(sse_client.request(m.clone(), gw.u(p)));
            let b = if carrier == "bearer" {
                b.bearer_auth(&gw.token)
            } else {
                b.header("X-Vis-Gateway-Secret", &gw.token)
            };
            let b = if *m == Method::POST && p.ends_with("/turns") {
                b.json(&json!({"request": "/help"}))
            } else {
                b.json(&json!({}))
            };
            let r = tokio::time::timeout(WAIT, b.send())
                .await
                .expect("timeout")
                .unwrap();
            let s = r.status();
            assert!(
                s != StatusCode::UNAUTHORIZED && s != StatusCode::UPGRADE_REQUIRED,
                "#{i} {m} {p} with {carrier}: {s}"
            );
            // (SSE routes never end their body: read it only for a 404.)
            let body = if s == StatusCode::NOT_FOUND {
                r.text().await.unwrap_or_default()
            } else {
                drop(r);
                String::new()
            };
            // A 404 is fine for a thing that does not exist (e.g. the MCP server "{name}"),
            // never for a route that does not (`not-found` "no such route").
            assert!(
                s != StatusCode::NOT_FOUND
                    || (p.contains("/turns/0000")
                        || p.contains("human-input/0000")
                        || p.contains("/live/0000")
                        || p.contains("/iterations/0000")
                        || p.contains("/projects/0000")
                        || p.contains("/jobs/")
                        || p.contains("/speech/voices/")
                        || p.contains("/workspace/drafts/0000")
                        || (p.contains("{name}") && !body.contains("no such route"))
                        || (p.starts_with("/v1/providers/") && !body.contains("no such route"))
                        // an earlier call of the walk deleted the session (its project)
                        || body.contains("session-not-found")),
                "#{i} {m} {p} with {carrier}: unexpected 404 {body}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_file_is_created_with_mode_0600_and_matches_the_registry() {
    let gw = Gateway::start(Opts::default()).await;
    let path = gw.dirs.home().join("gateway.token");
    let meta = std::fs::metadata(&path).expect("token file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&path).unwrap();
    assert_eq!(token.trim(), gw.token);
    assert!(!gw.token.is_empty());
    let reg = std::fs::metadata(gw.dirs.registry()).unwrap();
    assert_eq!(
        reg.permissions().mode() & 0o077,
        0,
        "the registry holds the token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_on_the_same_home_fails_with_already_running() {
    let gw = Gateway::start(Opts::default()).await;
    let mut cmd = command(&gw.dirs, &Opts::default());
    cmd.args(["start", "--port", "0", "--root"])
        .arg(gw.dirs.root());
    let out = tokio::time::timeout(WAIT, tokio::process::Command::from(cmd).output())
        .await
        .expect("second start hung")
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a gateway is already running"), "{err}");
    // the first one still serves, and its registry is untouched
    let (s, _) = gw.get("/healthz").await;
    assert_eq!(s, StatusCode::OK);
    let reg: Value =
        serde_json::from_str(&std::fs::read_to_string(gw.dirs.registry()).unwrap()).unwrap();
    assert_eq!(reg["pid"], gw.pid());
    assert_eq!(reg["port"], gw.port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_secret_match_only_for_the_right_secret() {
    let gw = Gateway::start(Opts::default()).await;
    let get = |secret: Option<&str>| {
        let mut b = gw.raw(Method::GET, "/healthz");
        if let Some(s) = secret {
            b = b.header("X-Vis-Gateway-Secret", s);
        }
        async move { into_json(b.send().await.unwrap()).await.1 }
    };
    assert_eq!(get(None).await["secret_match"], false);
    assert_eq!(get(Some("nope")).await["secret_match"], false);
    let v: Value = get(Some(&gw.token)).await;
    assert_eq!(v["secret_match"], true);
    assert_eq!(v["protocol"]["protocol"], 2);
    assert_eq!(v["protocol"]["min_client"], 2);
    assert_eq!(v["pid"], gw.pid());
    assert_eq!(v["port"], gw.port);
    let id = v["id"].as_str().unwrap();
    assert_eq!(id.len(), 16);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_status_answers_running_with_the_status_map() {
    let gw = Gateway::start(Opts::default()).await;
    let (s, v) = gw.get("/v1/admin/status").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["status"], "running");
    for k in [
        "id",
        "protocol",
        "pid",
        "host",
        "port",
        "require_token",
        "running_turns",
    ] {
        assert!(v.get(k).is_some(), "{k}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localhost_and_ipv6_loopback_binds_always_require_the_token() {
    for host in ["localhost", "::1"] {
        let gw = Gateway::start(Opts::default().host(host)).await;
        assert_eq!(gw.registry["require_token"], true, "{host}");
        let (s, v) = into_json(
            gw.raw(Method::GET, "/v1/sessions")
                .header("X-Vis-Protocol", "2")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{host}: {v}");
        let (s, _) = gw.get("/v1/sessions").await;
        assert_eq!(s, StatusCode::OK, "{host} with the token");
        let (s, h) = into_json(gw.raw(Method::GET, "/healthz").send().await.unwrap()).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(h["require_token"], true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_reused_across_restarts_and_a_token_file_flag_moves_it() {
    let gw = Gateway::start(Opts::default().require_token()).await;
    let first = gw.token.clone();
    let gw = gw.restart_after_kill().await;
    assert_eq!(gw.token, first, "same token after a restart");
    let (s, _) = gw.get("/v1/sessions").await;
    assert_eq!(s, StatusCode::OK);
    drop(gw);
    let dirs = Dirs::new();
    let custom = dirs.base.path().join("secrets").join("my.token");
    std::fs::create_dir_all(custom.parent().unwrap()).unwrap();
    std::fs::write(&custom, "  preset-token-value \n").unwrap();
    let mut opts = Opts::default().require_token();
    opts.extra_args = vec!["--token-file".into(), custom.display().to_string()];
    let gw = Gateway::start_in(dirs.clone(), opts).await;
    assert_eq!(gw.token, "preset-token-value", "read and trimmed");
    assert!(!dirs.home().join("gateway.token").exists());
    let r = gw
        .raw(Method::GET, "/v1/sessions")
        .header("X-Vis-Protocol", "2")
        .bearer_auth("preset-token-value")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_is_private_to_the_gateway_user() {
    let dirs = Dirs::new();
    let home = dirs.base.path().join("fresh-home");
    let mut cmd = std::process::Command::new(binary());
    cmd.arg("--home").arg(&home);
    cmd.args(["start", "--port", "0", "--root"])
        .arg(dirs.root());
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY");
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while !home.join("gateway.json").exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mode = |p: &std::path::Path| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    };
    let home_private = mode(&home) & 0o077 == 0;
    let mut open = Vec::new();
    for f in ["vis.db", "vis.db-wal", "vis.db-shm"] {
        let p = home.join(f);
        if p.exists() && mode(&p) & 0o077 != 0 && !home_private {
            open.push(format!("{f} {:o}", mode(&p)));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        open.is_empty(),
        "home {:o}, readable by others: {open:?}",
        mode(&home)
    );
}
