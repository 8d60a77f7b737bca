//! Every Companion route over a fake engine, driven in-process with `oneshot`: status codes,
//! answer shapes, and the errors a route owns (unknown session, bad body, bad parameters).

mod fake;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use fake::{FakeEngine, ENGINE_TID, RID, SID, TID, VID};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;
use vis_companion_api::{app, ApiConfig};

const UNKNOWN: &str = "99999999-9999-4999-8999-999999999999";

fn config() -> ApiConfig {
    ApiConfig {
        require_token: false,
        token: "t".into(),
        host: "127.0.0.1".into(),
        port: 0,
        addresses: vec![],
        max_body_bytes: 1 << 20,
        gateway_id: "0123456789abcdef".into(),
        managed: false,
        cors_origins: vec![],
    }
}

fn fixture() -> (Router, Arc<FakeEngine>) {
    let engine = Arc::new(FakeEngine::default());
    (app(fake::areas(engine.clone()), config()), engine)
}

struct Answer {
    status: StatusCode,
    content_type: String,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    /// `error.type` of an error answer.
    fn error(&self) -> String {
        self.json()["error"]["type"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

async fn call(app: &Router, method: &str, path: &str, body: Option<Value>) -> Answer {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("x-vis-protocol", "2")
        .header("x-vis-min-gateway-protocol", "2")
        .header("x-vis-client", "vis-companion")
        .header("x-vis-client-version", "test");
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let res = app
        .clone()
        .oneshot(req.body(body).expect("request"))
        .await
        .expect("infallible");
    let status = res.status();
    let content_type = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    // SSE answers never end: take the status and headers only.
    let body = if content_type.starts_with("text/event-stream") {
        Vec::new()
    } else {
        res.into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec()
    };
    Answer {
        status,
        content_type,
        body,
    }
}

fn fill(path: &str, sid: &str) -> String {
    path.replace("{sid}", sid)
        .replace("{tid}", TID)
        .replace("{etid}", ENGINE_TID)
        .replace("{rid}", RID)
        .replace("{vid}", VID)
}

/// `(method, path, body, status, members)`: a route called for the known session, the status
/// it answers and the members its JSON answer must have.
type Case = (
    &'static str,
    &'static str,
    Option<&'static str>,
    u16,
    &'static [&'static str],
);

const HAPPY: &[Case] = &[
    ("GET", "/healthz", None, 200, &[]),
    ("GET", "/v1/capabilities", None, 200, &[]),
    ("GET", "/v1/admin/status", None, 200, &[]),
    (
        "GET",
        "/v1/sessions",
        None,
        200,
        &["sessions", "total", "has_more", "awaiting"],
    ),
    (
        "POST",
        "/v1/sessions",
        Some(r#"{"title":"t"}"#),
        201,
        &["id", "channel", "title", "external_id", "workspace_id"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}",
        None,
        200,
        &["id", "status", "live", "current_turn_id", "server_time_ms"],
    ),
    ("POST", "/v1/sessions/{sid}/release", None, 204, &[]),
    (
        "GET",
        "/v1/sessions/{sid}/transcript",
        None,
        200,
        &["turns", "total", "offset", "has_more"],
    ),
    ("GET", "/v1/sessions/{sid}/model", None, 200, &["model"]),
    (
        "GET",
        "/v1/sessions/{sid}/slashes",
        None,
        200,
        &["commands"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/egress",
        None,
        200,
        &["decisions", "has_more", "next_before"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/artifacts",
        None,
        200,
        &["artifacts"],
    ),
    ("GET", "/v1/sessions/{sid}/turns", None, 200, &["turns"]),
    (
        "POST",
        "/v1/sessions/{sid}/turns",
        Some(r#"{"request":"hi"}"#),
        202,
        &["id", "turn_id", "status", "request_preview"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/turns/{tid}",
        None,
        200,
        &["id", "status", "engine_turn_id", "tokens", "cost"],
    ),
    (
        "PATCH",
        "/v1/sessions/{sid}/turns/{tid}",
        Some(r#"{"request":"again"}"#),
        200,
        &["id", "request"],
    ),
    (
        "DELETE",
        "/v1/sessions/{sid}/turns/{tid}",
        None,
        200,
        &["status"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/turns/{tid}/cancel",
        None,
        202,
        &["status"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/turns/{etid}/trace",
        None,
        200,
        &["iterations"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/turns/{tid}/attachments",
        None,
        200,
        &["attachments"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/cancel-current",
        None,
        202,
        &["status", "turn_id"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/resume-queue",
        None,
        200,
        &["turn"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/drain-queue",
        None,
        200,
        &["turn"],
    ),
    ("GET", "/v1/sessions/{sid}/events", None, 200, &[]),
    ("GET", "/v1/events?sids={sid}", None, 200, &[]),
    (
        "GET",
        "/v1/sessions/{sid}/events-since",
        None,
        200,
        &["events"],
    ),
    ("GET", "/v1/sessions/{sid}/seq", None, 200, &["seq"]),
    (
        "GET",
        "/v1/sessions/{sid}/human-input",
        None,
        200,
        &["requests"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/human-input/live",
        None,
        200,
        &["views"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/human-input/live/{vid}/log/n1",
        None,
        200,
        &["node_id", "from", "total", "lines"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/human-input/live/{vid}/actions/focus",
        Some(r#"{"node_id":"n1","item_ids":[]}"#),
        200,
        &["focused_ids", "node_id", "view_id"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/human-input/live/{vid}/actions/interrupt",
        Some(r#"{"note":"stop"}"#),
        200,
        &["is_interrupted", "view_id"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/human-input/{rid}/actions/submit",
        Some(r#"{"values":{"name":"x"}}"#),
        200,
        &["is_accepted", "request_id"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/human-input/{rid}/actions/cancel",
        None,
        200,
        &["is_cancelled", "request_id"],
    ),
    (
        "GET",
        "/v1/extensions",
        None,
        200,
        &["extensions", "failures"],
    ),
    (
        "POST",
        "/v1/extensions/reload",
        None,
        200,
        &["status", "title", "extensions"],
    ),
    (
        "POST",
        "/v1/sandbox/env",
        Some(r#"{"session_id":"{sid}"}"#),
        200,
        &["session_id", "cwd", "env", "proxy_port", "jail"],
    ),
    ("GET", "/v1/router", None, 200, &["providers"]),
    (
        "PATCH",
        "/v1/router",
        Some(r#"{"provider":"p","model":"m"}"#),
        200,
        &["default_provider", "default_model"],
    ),
    ("GET", "/v1/settings", None, 200, &["groups"]),
    (
        "GET",
        "/v1/settings/theme",
        None,
        200,
        &["id", "label", "type"],
    ),
    (
        "POST",
        "/v1/settings",
        Some(r#"{"id":"theme","action":"toggle"}"#),
        200,
        &["id"],
    ),
    ("GET", "/v1/devices", None, 200, &["devices", "push"]),
    ("DELETE", "/v1/devices/tok", None, 200, &["is_removed"]),
    (
        "DELETE",
        "/v1/projects/p1?is_recursive=true",
        None,
        200,
        &["project_id", "deleted_session_ids", "session_count"],
    ),
    ("DELETE", "/v1/projects/p1", None, 204, &[]),
    (
        "PATCH",
        "/v1/sessions/{sid}",
        Some(r#"{"title":"new"}"#),
        200,
        &["id", "title"],
    ),
    (
        "GET",
        "/v1/sessions/actions/search?q=hi",
        None,
        200,
        &["session_ids", "matches"],
    ),
    ("GET", "/v1/sessions/{sid}/usage", None, 200, &["usage"]),
    ("GET", "/v1/sessions/{sid}/transcript.md", None, 200, &[]),
    (
        "GET",
        "/v1/sessions/{sid}/suggest?kind=file&q=a",
        None,
        200,
        &[],
    ),
    (
        "PATCH",
        "/v1/sessions/{sid}/model",
        Some(r#"{"provider":"p","model":"m"}"#),
        200,
        &["model"],
    ),
    ("GET", "/v1/sessions/{sid}/forks", None, 200, &["turns"]),
    ("POST", "/v1/sessions/{sid}/forks", None, 201, &["session"]),
    (
        "GET",
        "/v1/sessions/{sid}/workspace/drafts",
        None,
        200,
        &["drafts"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/workspace/drafts",
        Some(r#"{"label":"try"}"#),
        201,
        &["workspace", "draft"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/workspace/drafts",
        None,
        400,
        &["error"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/workspace/resume",
        Some(r#"{"workspace_id":"w-fake"}"#),
        200,
        &["workspace", "draft"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/workspace/resume",
        Some(r#"{"workspace_id":"w-none"}"#),
        404,
        &["error"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/workspace/resume",
        Some("{}"),
        400,
        &["error"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/workspace/stash",
        None,
        200,
        &["workspace"],
    ),
    (
        "DELETE",
        "/v1/sessions/{sid}/workspace/drafts/w-fake",
        None,
        200,
        &["workspace", "draft"],
    ),
    (
        "DELETE",
        "/v1/sessions/{sid}/workspace/drafts/w-fake",
        Some(r#"{"reason":7}"#),
        400,
        &["error"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/iterations/i1/attachments",
        None,
        200,
        &["attachments"],
    ),
    (
        "POST",
        "/v1/sessions/{sid}/iterations/i1/attachments",
        Some(r#"{"filename":"a.txt","base64":"aGk=","media_type":"text/plain"}"#),
        201,
        &["index", "filename"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/iterations/i1/attachments/0",
        None,
        200,
        &[],
    ),
    ("GET", "/v1/mcp/servers", None, 503, &[]),
    ("GET", "/v1/voice/model", None, 200, &["status"]),
    ("POST", "/v1/voice/model", None, 501, &["error"]),
    ("GET", "/v1/speech/model", None, 200, &["status"]),
    ("GET", "/v1/speech/voices", None, 200, &["engine", "voices"]),
    ("POST", "/v1/sessions/{sid}/speech", None, 501, &["error"]),
    ("POST", "/v1/sessions/{sid}/voice", None, 501, &["error"]),
    (
        "GET",
        "/v1/sessions/{sid}/speech/jobs/j1",
        None,
        404,
        &["error"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/speech/jobs/j1/audio",
        None,
        404,
        &["error"],
    ),
    (
        "GET",
        "/v1/sessions/{sid}/voice/jobs/j1/events",
        None,
        404,
        &["error"],
    ),
    ("POST", "/v1/speech/voices", None, 501, &["error"]),
    ("DELETE", "/v1/speech/voices/v1", None, 404, &["error"]),
    ("GET", "/readyz", None, 200, &[]),
    ("GET", "/metrics", None, 200, &[]),
    (
        "GET",
        "/v1/fs?path=/",
        None,
        200,
        &["path", "parent", "entries", "is_truncated"],
    ),
    (
        "POST",
        "/v1/fs/actions/mkdir",
        Some(r#"{"path":"/"}"#),
        400,
        &["error"],
    ),
    (
        "POST",
        "/v1/devices",
        Some(r#"{"token":"t"}"#),
        400,
        &["error"],
    ),
    (
        "POST",
        "/v1/mcp/servers/m1/auth/start",
        None,
        503,
        &["error"],
    ),
    ("GET", "/v1/providers", None, 503, &["error"]),
    ("GET", "/v1/provider-presets", None, 503, &["error"]),
    ("POST", "/v1/admin/stop", None, 200, &["stopping", "status"]),
    ("DELETE", "/v1/sessions/{sid}", None, 204, &[]),
];

#[tokio::test]
async fn every_route_answers_its_status_and_shape_for_a_known_session() {
    let (app, engine) = fixture();
    let mut wrong = Vec::new();
    for (method, path, body, status, members) in HAPPY {
        let path = fill(path, SID);
        let body = body.map(|b| serde_json::from_str(&fill(b, SID)).expect("test body"));
        let a = call(&app, method, &path, body).await;
        if a.status.as_u16() != *status {
            wrong.push(format!(
                "{method} {path}: {} (want {status}) {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            ));
            continue;
        }
        let v = a.json();
        for m in *members {
            if v.get(m).is_none() {
                wrong.push(format!("{method} {path}: no `{m}` in {v}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let calls = engine.calls.all();
    assert!(calls.contains(&"request_stop".to_string()), "{calls:?}");
    assert!(
        calls.contains(&format!("delete_session {SID}")),
        "{calls:?}"
    );
}

/// Routes under a session that must answer 404 `session-not-found` for an unknown one.
const SESSION_ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/sessions/{sid}"),
    ("GET", "/v1/sessions/{sid}/transcript"),
    ("GET", "/v1/sessions/{sid}/model"),
    ("GET", "/v1/sessions/{sid}/slashes"),
    ("GET", "/v1/sessions/{sid}/egress"),
    ("GET", "/v1/sessions/{sid}/artifacts"),
    ("GET", "/v1/sessions/{sid}/turns"),
    ("GET", "/v1/sessions/{sid}/turns/{tid}"),
    ("POST", "/v1/sessions/{sid}/turns/{tid}/cancel"),
    ("GET", "/v1/sessions/{sid}/turns/{tid}/attachments"),
    ("POST", "/v1/sessions/{sid}/cancel-current"),
    ("POST", "/v1/sessions/{sid}/resume-queue"),
    ("POST", "/v1/sessions/{sid}/drain-queue"),
    ("GET", "/v1/sessions/{sid}/events"),
    ("GET", "/v1/sessions/{sid}/events-since"),
    ("GET", "/v1/sessions/{sid}/seq"),
    ("GET", "/v1/sessions/{sid}/human-input"),
    ("GET", "/v1/sessions/{sid}/human-input/live"),
    ("GET", "/v1/sessions/{sid}/usage"),
    ("GET", "/v1/sessions/{sid}/transcript.md"),
    ("GET", "/v1/sessions/{sid}/forks"),
    ("GET", "/v1/sessions/{sid}/workspace/drafts"),
    ("POST", "/v1/sessions/{sid}/speech"),
];

#[tokio::test]
async fn an_unknown_session_is_404_session_not_found_on_every_session_route() {
    let (app, _engine) = fixture();
    let mut wrong = Vec::new();
    for (method, path) in SESSION_ROUTES {
        let path = fill(path, UNKNOWN);
        let a = call(&app, method, &path, None).await;
        if a.status != StatusCode::NOT_FOUND || a.error() != "session-not-found" {
            wrong.push(format!("{method} {path}: {} {}", a.status, a.error()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test]
async fn bad_bodies_and_parameters_are_400_with_a_message_naming_the_problem() {
    let (app, engine) = fixture();
    let s = |p: &str| fill(p, SID);
    let cases: Vec<(&str, String, Option<Value>, &str)> = vec![
        (
            "POST",
            s("/v1/sessions/{sid}/turns"),
            Some(json!({"request": "  "})),
            "invalid-request",
        ),
        (
            "POST",
            s("/v1/sessions/{sid}/turns"),
            Some(json!({"request": "x", "attachments": "no"})),
            "invalid-request",
        ),
        (
            "GET",
            s("/v1/sessions/{sid}/transcript?limit=x"),
            None,
            "invalid-window",
        ),
        (
            "GET",
            s("/v1/sessions/{sid}/transcript?offset=-1"),
            None,
            "invalid-window",
        ),
        (
            "GET",
            "/v1/sessions?after=bad".into(),
            None,
            "invalid-window",
        ),
        (
            "GET",
            s("/v1/sessions/{sid}/egress?limit=0"),
            None,
            "invalid-window",
        ),
        (
            "GET",
            s("/v1/sessions/{sid}/human-input/live/{vid}/log/n?from=x"),
            None,
            "invalid-window",
        ),
        (
            "POST",
            s("/v1/sessions/{sid}/human-input/{rid}/actions/submit"),
            Some(json!({"values": 3})),
            "bad-request",
        ),
        (
            "POST",
            "/v1/sandbox/env".into(),
            Some(json!({"root": 5})),
            "invalid-request",
        ),
        (
            "PATCH",
            "/v1/router".into(),
            Some(json!({"provider": 1})),
            "invalid-request",
        ),
        (
            "POST",
            "/v1/settings".into(),
            Some(json!({"id": "x", "action": "spin"})),
            "invalid-request",
        ),
        (
            "GET",
            s("/v1/sessions/{sid}/suggest?kind=dir"),
            None,
            "invalid-kind",
        ),
        (
            "POST",
            s("/v1/sessions/{sid}/iterations/i1/attachments"),
            Some(json!({"filename": ""})),
            "invalid-attachment",
        ),
    ];
    let mut wrong = Vec::new();
    for (method, path, body, kind) in cases {
        let a = call(&app, method, &path, body).await;
        let message = a.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if a.status != StatusCode::BAD_REQUEST || a.error() != kind || message.is_empty() {
            wrong.push(format!(
                "{method} {path}: {} {} {message:?} (want {kind})",
                a.status,
                a.error()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        engine.calls.all().iter().all(|c| !c.starts_with("egress")),
        "a bad window never reaches the engine"
    );
}

#[tokio::test]
async fn an_unknown_turn_is_404_turn_not_found() {
    let (app, _engine) = fixture();
    let path = format!("/v1/sessions/{SID}/turns/{UNKNOWN}");
    let a = call(&app, "GET", &path, None).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.error(), "turn-not-found");
}

#[tokio::test]
async fn a_replayed_idempotency_key_answers_200_and_a_new_turn_202() {
    let (app, _engine) = fixture();
    let path = format!("/v1/sessions/{SID}/turns");
    let fresh = call(&app, "POST", &path, Some(json!({"request": "hi"}))).await;
    assert_eq!(fresh.status, StatusCode::ACCEPTED);
    let replay = call(
        &app,
        "POST",
        &path,
        Some(json!({"request": "hi", "idempotency_key": "seen"})),
    )
    .await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.json()["turn_id"], TID);
}

#[tokio::test]
async fn a_settled_turn_record_carries_its_outcome_and_an_open_one_does_not() {
    let (app, _engine) = fixture();
    let a = call(
        &app,
        "GET",
        &format!("/v1/sessions/{SID}/turns/{TID}"),
        None,
    )
    .await;
    let v = a.json();
    assert_eq!(v["status"], "completed");
    assert_eq!(v["engine_turn_id"], ENGINE_TID);
    for present_as_null in ["provider", "confidence", "eval", "error", "duration_ms"] {
        assert_eq!(
            v.get(present_as_null),
            Some(&Value::Null),
            "{present_as_null} in {v}"
        );
    }
    for absent in [
        "started_at",
        "queued_at",
        "idempotency_key",
        "attachment_previews",
    ] {
        assert!(v.get(absent).is_none(), "{absent} in {v}");
    }
    let queued = call(
        &app,
        "POST",
        &format!("/v1/sessions/{SID}/resume-queue"),
        None,
    )
    .await;
    assert_eq!(queued.json()["turn"]["id"], TID);
    let drained = call(
        &app,
        "POST",
        &format!("/v1/sessions/{SID}/drain-queue"),
        None,
    )
    .await;
    assert_eq!(drained.json(), json!({"turn": null}));
}

#[tokio::test]
async fn stored_events_and_egress_decisions_are_sent_as_stored() {
    let (app, _engine) = fixture();
    let a = call(
        &app,
        "GET",
        &format!("/v1/sessions/{SID}/events-since?cursor=0"),
        None,
    )
    .await;
    assert_eq!(
        a.json(),
        json!({"events": [
            {"type": "stream.gap", "session_id": SID, "from": 1, "to": 1},
            {"type": "turn.started", "seq": 2, "turn_id": "t"}
        ]})
    );
    let e = call(&app, "GET", &format!("/v1/sessions/{SID}/egress"), None).await;
    assert_eq!(
        e.json()["decisions"],
        json!([{"id": "e1", "decision": "deny"}])
    );
}

#[tokio::test]
async fn window_parameters_reach_the_engine_clamped() {
    let (app, engine) = fixture();
    call(
        &app,
        "GET",
        &format!("/v1/sessions/{SID}/egress?limit=5000&before=9"),
        None,
    )
    .await;
    call(
        &app,
        "GET",
        &format!("/v1/sessions/{SID}/transcript?limit=2&offset=1"),
        None,
    )
    .await;
    let log = format!("/v1/sessions/{SID}/human-input/live/{VID}/log/n?from=-4&limit=9999");
    call(&app, "GET", &log, None).await;
    let calls = engine.calls.all();
    for want in [
        "egress 1000 Some(9)",
        "transcript Some(2) Some(1)",
        &format!("live_log {VID} 0 2000"),
    ] {
        assert!(calls.iter().any(|c| c == want), "{want} not in {calls:?}");
    }
}

#[tokio::test]
async fn the_session_list_answers_304_to_its_own_etag() {
    let (app, _engine) = fixture();
    let first = app
        .clone()
        .oneshot(
            Request::get("/v1/sessions")
                .header("x-vis-protocol", "2")
                .header("x-vis-min-gateway-protocol", "2")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    let tag = first.headers()["etag"].to_str().expect("etag").to_string();
    let again = app
        .clone()
        .oneshot(
            Request::get("/v1/sessions")
                .header("x-vis-protocol", "2")
                .header("x-vis-min-gateway-protocol", "2")
                .header("if-none-match", &tag)
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
}

#[tokio::test]
async fn a_session_stream_is_an_event_stream_and_transcript_md_is_markdown() {
    let (app, _engine) = fixture();
    let s = call(&app, "GET", &format!("/v1/sessions/{SID}/events"), None).await;
    assert!(
        s.content_type.starts_with("text/event-stream"),
        "{}",
        s.content_type
    );
    let md = call(
        &app,
        "GET",
        &format!("/v1/sessions/{SID}/transcript.md"),
        None,
    )
    .await;
    assert!(
        md.content_type.starts_with("text/markdown"),
        "{}",
        md.content_type
    );
    assert_eq!(md.body, b"# fake\n");
}

#[tokio::test]
async fn an_old_client_is_426_before_any_route_runs() {
    let (app, engine) = fixture();
    let res = app
        .clone()
        .oneshot(
            Request::post("/v1/admin/stop")
                .header("x-vis-protocol", "1")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    assert_eq!(res.status(), StatusCode::UPGRADE_REQUIRED);
    assert!(engine.calls.all().is_empty(), "no engine call");
}
