//! The Companion routes of the app-parity areas (settings, devices, search, artifacts, usage) driven in-process with `oneshot` over the real router
//! and a real gateway (temporary home, real SQLite store), no sockets.

use crate::engine::Gateway;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

struct Fixture {
    app: axum::Router,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let home = crate::home::Home::resolve(Some(dir.path().join("home"))).unwrap();
    std::fs::create_dir_all(&home.dir).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let store = crate::store::Store::open(&home.db_path()).unwrap();
    let gw: Arc<Gateway> = Gateway::new(store, home, root, Default::default(), 2, 100, None)
        .await
        .unwrap();
    let cfg = vis_companion_api::ApiConfig {
        require_token: false,
        token: "t".into(),
        host: "127.0.0.1".into(),
        port: 0,
        addresses: vec![],
        max_body_bytes: 1 << 20,
        gateway_id: "0123456789abcdef".into(),
        managed: false,
        cors_origins: vec![],
    };
    Fixture {
        app: vis_companion_api::app(crate::engine::areas::areas(&gw), cfg),
        _dir: dir,
    }
}

impl Fixture {
    async fn call(&self, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("x-vis-protocol", "2")
            .header("x-vis-min-gateway-protocol", "2")
            .header("x-vis-client", "vis-companion")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn session(&self) -> String {
        let (s, v) = self
            .call(Method::POST, "/v1/sessions", json!({"channel": "web"}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v["id"].as_str().unwrap().to_string()
    }
}

#[tokio::test]
async fn a_renamed_and_starred_session_answers_its_soul_and_is_found_by_search() {
    let f = fixture().await;
    let sid = f.session().await;
    let (s, v) = f
        .call(
            Method::PATCH,
            &format!("/v1/sessions/{sid}"),
            json!({"title": "Quarterly budget", "is_favorite": true}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["title"], "Quarterly budget");
    assert_eq!(v["favorite_rank"], 1);
    let (_, found) = f
        .call(
            Method::GET,
            "/v1/sessions/actions/search?q=budg",
            json!(null),
        )
        .await;
    assert_eq!(found["matches"][0]["session_id"], sid.as_str(), "{found}");
    assert_eq!(found["matches"][0]["hits"][0]["side"], "title");
    let (s, v) = f
        .call(
            Method::PATCH,
            &format!("/v1/sessions/{sid}"),
            json!({"title": 5}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
}

#[tokio::test]
async fn settings_devices_and_the_speech_routes_answer_their_shapes() {
    let f = fixture().await;
    let (s, t) = f
        .call(
            Method::POST,
            "/v1/settings",
            json!({"id": "reasoning_level", "action": "cycle"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(t["value"], "low");
    let (_, t) = f
        .call(Method::GET, "/v1/settings/reasoning_level", json!(null))
        .await;
    assert_eq!(t["value"], "low", "the choice is kept");
    let (s, _) = f
        .call(Method::POST, "/v1/settings", json!({"id": "x"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, d) = f
        .call(
            Method::POST,
            "/v1/devices",
            json!({"grant": "sealed", "relay_url": "https://r"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["device"]["is_relayed"], true);
    let (s, v) = f.call(Method::POST, "/v1/voice/model", json!(null)).await;
    assert_eq!(s, StatusCode::NOT_IMPLEMENTED);
    assert!(v["error"].is_string());
    let (s, _) = f
        .call(Method::GET, "/v1/sessions/x/speech/jobs/j", json!(null))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn mkdir_refuses_a_traversal_and_a_pin_needs_a_configured_provider() {
    let f = fixture().await;
    let (s, v) = f
        .call(
            Method::POST,
            "/v1/fs/actions/mkdir",
            json!({"path": "/tmp/../etc", "name": "x"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["type"], "invalid-path");
    let sid = f.session().await;
    let (s, v) = f
        .call(
            Method::PATCH,
            &format!("/v1/sessions/{sid}/model"),
            json!({"provider": "openai", "model": "m"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["type"], "unknown-provider");
    let (s, v) = f
        .call(
            Method::GET,
            &format!("/v1/sessions/{sid}/usage"),
            json!(null),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v, json!({"usage": null}));
}
