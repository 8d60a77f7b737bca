//! Egress decisions reach the session (docs/decisions.md, G4): live `egress.decision` events on the
//! session's SSE stream, `GET /v1/sessions/:sid/egress` afterwards, never in a replay; and
//! the `/sh` and `/net-probe` slash commands.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

async fn next_decision(sse: &mut Sse) -> Value {
    let evs = sse
        .collect_until("egress.decision", Duration::from_secs(10))
        .await;
    evs.last().unwrap().data.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_and_denied_requests_of_a_child_are_live_events_and_listed_newest_first() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let mut sse = gw.events(&sid, -1).await;

    let url = format!("{}/events-allowed?a=1", origin.url());
    let ok = gw.exec(&sid, &["curl", "-sS", &url]).await;
    assert!(ok.ok() && ok.stdout.contains("origin-ok"), "{ok:?}");
    let allow = next_decision(&mut sse).await;
    assert_eq!(allow["decision"], "allow", "{allow}");
    assert_eq!(allow["lane"], "http", "{allow}");
    assert_eq!(allow["host"], "127.0.0.1", "{allow}");
    assert_eq!(allow["port"], json!(origin.port), "{allow}");
    assert_eq!(allow["method"], "GET", "{allow}");
    assert_eq!(allow["path"], "/events-allowed?a=1", "{allow}");
    assert!(allow["bytes_down"].as_u64().unwrap_or(0) > 0, "{allow}");
    assert!(allow["duration_ms"].is_u64(), "{allow}");
    assert!(allow["error_kind"].is_null(), "{allow}");

    let denied = gw
        .exec(
            &sid,
            &[
                "curl",
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "http://example.com/nope",
            ],
        )
        .await;
    assert_eq!(denied.stdout, "403", "{denied:?}");
    let deny = next_decision(&mut sse).await;
    assert_eq!(deny["decision"], "deny", "{deny}");
    assert_eq!(deny["host"], "example.com", "{deny}");
    assert_eq!(deny["port"], 80, "{deny}");
    assert_eq!(deny["method"], "GET", "{deny}");
    assert_eq!(deny["path"], "/nope", "{deny}");
    assert_eq!(deny["error_kind"], "blocked-by-allowlist", "{deny}");
    assert_eq!(deny["reason"], "host not permitted: example.com", "{deny}");
    assert_eq!(deny["decided_by"]["kind"], "host-gate", "{deny}");
    assert_eq!(deny["bytes_down"], 0, "{deny}");

    let listed = gw.wait_egress(&sid, 2).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["decision"], "deny", "newest first: {listed:?}");
    assert_eq!(listed[1]["decision"], "allow", "{listed:?}");
    assert_eq!(listed[0]["id"], deny["id"]);
    assert_eq!(listed[1]["id"], allow["id"]);
    let (s0, s1) = (listed[0]["seq"].as_i64(), listed[1]["seq"].as_i64());
    assert!(s0.is_some() && s1.is_some() && s0 > s1, "{listed:?}");

    // Live only: a replay from cursor 0 and the stored events never contain them.
    let mut replay = gw.events(&sid, 0).await;
    let replayed = replay.drain_for(Duration::from_millis(1500)).await;
    assert!(
        !ev_types(&replayed).contains(&"egress.decision"),
        "{:?}",
        ev_types(&replayed)
    );
    let stored = gw.events_since(&sid, 0).await;
    assert!(
        !types(&stored).iter().any(|t| t == "egress.decision"),
        "{stored:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_of_one_session_never_reach_another_sessions_stream() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let a = gw.create_session_at(&gw.dirs.root()).await;
    let b = gw.create_session_at(&gw.dirs.root()).await;
    let mut sse_b = gw.events(&b, -1).await;
    let ok = gw.exec(&a, &["curl", "-sS", &origin.url()]).await;
    assert!(ok.ok(), "{ok:?}");
    gw.wait_egress(&a, 1).await;
    let seen = sse_b.drain_for(Duration::from_millis(800)).await;
    assert!(!ev_types(&seen).contains(&"egress.decision"), "{seen:?}");
    assert!(gw.egress(&b).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_sh_runs_in_the_sandbox_and_completes_with_its_output_in_a_prose_block() {
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (evs, done) = gw.run_turn(&sid, "/sh echo hi").await;
    assert_eq!(done.event, "turn.completed", "{:?}", ev_types(&evs));
    let content = done.data["content"].as_array().expect("content");
    assert_eq!(content.len(), 1, "{}", done.data);
    assert_eq!(content[0]["type"], "prose");
    let md = content[0]["markdown"].as_str().unwrap();
    assert!(md.lines().any(|l| l.trim() == "hi"), "{md}");

    // The same sandbox: the proxy environment is there, a denied host is refused.
    let (_, done) = gw
        .run_turn(
            &sid,
            "/sh curl -sS -w ' status=%{http_code}' http://example.com/ && printenv HTTPS_PROXY",
        )
        .await;
    let md = done.data["content"][0]["markdown"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(md.contains("host not permitted: example.com"), "{md}");
    assert!(md.contains("status=403"), "{md}");
    assert!(md.contains("@127.0.0.1:"), "{md}");
    let d = gw.wait_egress(&sid, 1).await;
    assert_eq!(d[0]["host"], "example.com", "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_probe_reports_a_host_gate_denial_without_opening_a_socket() {
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let mut watch = gw.events(&sid, -1).await;
    let (evs, done) = gw
        .run_turn(&sid, "/net-probe GET http://example.com/")
        .await;
    assert_eq!(done.event, "turn.completed", "{:?}", ev_types(&evs));
    let md = done.data["content"][0]["markdown"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(md.contains("Target: HTTP GET example.com:80/"), "{md}");
    assert!(
        md.contains("Tier-1 (host / port / SSRF): DENY — host not permitted: example.com"),
        "{md}"
    );
    assert!(
        md.contains("FINAL: DENY — host not permitted: example.com"),
        "{md}"
    );
    let seen = watch.drain_for(Duration::from_millis(800)).await;
    assert!(
        !ev_types(&seen).contains(&"egress.decision"),
        "a probe is not a request: {:?}",
        ev_types(&seen)
    );
    assert!(gw.egress(&sid).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_probe_of_an_allowed_local_url_reports_allow_and_never_contacts_it() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (evs, done) = gw
        .run_turn(
            &sid,
            &format!("/net-probe {}/probe?token=abc", origin.url()),
        )
        .await;
    assert_eq!(done.event, "turn.completed", "{:?}", ev_types(&evs));
    let md = done.data["content"][0]["markdown"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        md.contains(&format!(
            "Target: HTTP GET 127.0.0.1:{}/probe?token=abc",
            origin.port
        )),
        "{md}"
    );
    assert!(md.contains("Tier-1 (host / port / SSRF): ALLOW"), "{md}");
    assert!(md.contains("FINAL: ALLOW"), "{md}");
    assert!(origin.requests().is_empty(), "the probe opened a request");
    assert!(gw.egress(&sid).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_probe_reports_a_method_denial_on_a_read_only_host() {
    let policy = json!({"allowed_domains": ["localhost", "127.0.0.1"],
                        "rules": [{"host": "localhost", "access": "read-only"}]});
    let gw = start_with_network(policy, Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (_, done) = gw
        .run_turn(&sid, "/net-probe POST http://localhost:9/")
        .await;
    let md = done.data.to_string();
    assert!(
        md.contains("method POST / not allowed for host localhost"),
        "{md}"
    );
    assert!(md.contains("FINAL: DENY"), "{md}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_list_pages_backwards_by_seq() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let script = format!(
        "for p in one two three; do curl -sS -o /dev/null {}/$p; done",
        origin.url()
    );
    let out = gw.exec(&sid, &["sh", "-c", &script]).await;
    assert!(out.ok(), "{out:?}");
    let all = gw.wait_egress(&sid, 3).await;
    let paths: Vec<&str> = all.iter().map(|d| d["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/three", "/two", "/one"]);

    let (s, page) = gw.get(format!("/v1/sessions/{sid}/egress?limit=2")).await;
    assert_eq!(s, reqwest::StatusCode::OK, "{page}");
    assert_eq!(page["decisions"].as_array().unwrap().len(), 2, "{page}");
    assert_eq!(page["has_more"], true, "{page}");
    assert_eq!(page["decisions"][0]["path"], "/three");
    let before = page["next_before"].as_i64().expect("next_before");
    assert_eq!(before, page["decisions"][1]["seq"].as_i64().unwrap());

    let (s, rest) = gw
        .get(format!("/v1/sessions/{sid}/egress?limit=2&before={before}"))
        .await;
    assert_eq!(s, reqwest::StatusCode::OK, "{rest}");
    let rest_paths: Vec<&str> = rest["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(rest_paths, ["/one"], "{rest}");
    assert_eq!(rest["has_more"], false, "{rest}");
    assert!(rest["next_before"].is_null(), "{rest}");

    let (s, v) = gw.get("/v1/sessions/no-such-session/egress").await;
    assert_eq!(s, reqwest::StatusCode::NOT_FOUND, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_probe_understands_host_port_targets_and_explains_its_usage() {
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (_, done) = gw.run_turn(&sid, "/net-probe localhost:5432").await;
    let md = done.data.to_string();
    assert!(md.contains("Target: SOCKS localhost:5432"), "{md}");
    assert!(md.contains("FINAL: ALLOW"), "{md}");
    let (_, done) = gw.run_turn(&sid, "/net-probe example.org:443").await;
    let md = done.data.to_string();
    assert!(
        md.contains("FINAL: DENY — host not permitted: example.org"),
        "{md}"
    );
    let (_, done) = gw.run_turn(&sid, "/net-probe").await;
    let md = done.data.to_string();
    assert!(
        md.contains("Usage: /net-probe [METHOD] <url | host[:port]>"),
        "{md}"
    );
    assert!(gw.egress(&sid).await.is_empty());
}
