//! A gateway without a token (bound to 127.0.0.1) cannot be driven by a web page the user
//! happens to visit: foreign origins are refused and only loopback Host names are answered.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_cannot_use_a_gateway_that_has_no_token() {
    let gw = Gateway::start(Opts::default()).await;
    let pre = gw
        .raw(Method::OPTIONS, "/v1/sessions")
        .header("Origin", "http://evil.example")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status(), StatusCode::NO_CONTENT);
    assert!(
        pre.headers().get("access-control-allow-origin").is_none(),
        "the browser must not be allowed to continue"
    );
    let r = gw
        .req(Method::POST, "/v1/sessions")
        .header("Origin", "http://evil.example")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "origin-not-allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_origins_and_listed_origins_keep_cors() {
    let gw = Gateway::start(
        Opts::default().env("VIS_GATEWAY_CORS_ORIGINS", "https://companion.example"),
    )
    .await;
    for origin in ["http://localhost:5173", "https://companion.example"] {
        let r = gw
            .req(Method::GET, "/v1/sessions")
            .header("Origin", origin)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{origin}");
        assert_eq!(
            r.headers()
                .get("access-control-allow-origin")
                .and_then(|v| v.to_str().ok()),
            Some(origin)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_dns_name_is_refused_by_a_gateway_that_has_no_token() {
    let gw = Gateway::start(Opts::default()).await;
    let r = gw
        .req(Method::GET, "/v1/sessions")
        .header("Host", "attacker.example:7890")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::MISDIRECTED_REQUEST);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "host-not-allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_token_on_any_origin_is_echoed_as_the_protocol_says() {
    let gw = Gateway::start(Opts::default().require_token()).await;
    let r = gw
        .req(Method::GET, "/v1/sessions")
        .header("Origin", "http://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some("http://app.example")
    );
}
