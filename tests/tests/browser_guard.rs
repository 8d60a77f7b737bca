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

/// Sends raw request bytes to the gateway and returns the status line and the headers.
async fn raw(gw: &Gateway, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    text.split("\r\n\r\n").next().unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_browser_guard_cannot_vouch_for_is_refused() {
    let gw = Gateway::start(Opts::default()).await;
    let port = gw.port;
    // An Origin that is not ASCII is neither served nor echoed.
    let mut req = format!("GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://")
        .into_bytes();
    req.push(0xe9);
    req.extend_from_slice(b"vil.example\r\nConnection: close\r\n\r\n");
    let head = raw(&gw, &req).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{head}"
    );
    // An absolute-form target naming another host.
    let head = raw(
        &gw,
        format!("GET http://attacker.example/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 421"), "{head}");
    // A Host that is not UTF-8.
    req = b"GET /v1/sessions HTTP/1.1\r\nHost: attacker\xff.example\r\nConnection: close\r\n\r\n"
        .to_vec();
    let head = raw(&gw, &req).await;
    assert!(head.starts_with("HTTP/1.1 421"), "{head}");
    // What a loopback client sends is still served.
    req = format!("GET http://127.0.0.1:{port}/healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").into_bytes();
    let head = raw(&gw, &req).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}
