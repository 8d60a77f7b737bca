//! Timeouts, limits, relay behaviour, WebSocket pass-through and the probe.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vis_proxy::policy::Policy;
use vis_proxy::{Principal, ProxyConfig};

#[tokio::test]
async fn a_client_that_sends_nothing_is_closed_after_the_first_byte_timeout() {
    let config = ProxyConfig {
        first_byte_timeout: Duration::from_millis(100),
        ..Default::default()
    };
    let h = start(Setup {
        config,
        ..Default::default()
    })
    .await;
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    let mut b = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut b))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn an_oversized_request_head_is_refused() {
    let h = start(Setup::default()).await;
    let big = "a".repeat(100 * 1024);
    let req =
        format!("GET http://localhost:1/ HTTP/1.1\r\nHost: localhost\r\nX-Big: {big}\r\n\r\n");
    let out = raw(h.port(), req.as_bytes(), "\r\n\r\n").await;
    assert!(
        out.starts_with("HTTP/1.1 431"),
        "{}",
        &out[..out.len().min(200)]
    );
}

#[tokio::test]
async fn an_idle_tunnel_to_a_silent_origin_is_torn_down() {
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let (s, _) = silent.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(s);
    });
    let config = ProxyConfig {
        idle_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let h = start(Setup {
        config,
        ..Default::default()
    })
    .await;
    let (mut s, head) = connect_tunnel(h.port(), TOKEN, &format!("localhost:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut b = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut b))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "the proxy closed the idle tunnel");
    held.abort();
}

#[tokio::test]
async fn a_client_half_close_after_connect_still_receives_the_late_answer() {
    let origin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = origin.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = origin.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        s.write_all(format!("late answer to {}", String::from_utf8_lossy(&got)).as_bytes())
            .await
            .unwrap();
    });
    let h = start(Setup::default()).await;
    let (mut s, head) = connect_tunnel(h.port(), TOKEN, &format!("localhost:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 200"));
    s.write_all(b"question").await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert_eq!(out, "late answer to question");
    // shorter than a second: one record when it ends, with its bytes
    let recs = h.sink.wait_for(1).await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].state, None);
    assert_eq!(recs[0].bytes_up, 8);
    assert_eq!(recs[0].bytes_down, "late answer to question".len() as u64);
}

#[tokio::test]
async fn connections_beyond_the_per_session_cap_are_refused_without_affecting_other_sessions_until_a_slot_returns(
) {
    let o = origin().await;
    let config = ProxyConfig {
        max_per_session: 1,
        ..Default::default()
    };
    let h = start(Setup {
        config,
        ..Default::default()
    })
    .await;
    h.add_token("tok-b", "sess-b", "{}", vec![]);
    let target = format!("localhost:{}", o.port());
    let (_held, head) = connect_tunnel(h.port(), TOKEN, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"));
    let (_s2, head2) = connect_tunnel(h.port(), TOKEN, &target).await;
    assert!(head2.starts_with("HTTP/1.1 503"), "{head2}");
    let (_s3, head3) = connect_tunnel(h.port(), "tok-b", &target).await;
    assert!(head3.starts_with("HTTP/1.1 200"), "{head3}");
    // the held tunnel ends: its slot comes back to the session
    drop(_held);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_s4, head4) = connect_tunnel(h.port(), TOKEN, &target).await;
        if head4.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(head4.starts_with("HTTP/1.1 503"), "{head4}");
        assert!(
            std::time::Instant::now() < deadline,
            "the slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_websocket_upgrade_passes_through_plain_http() {
    let ws = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = ws.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = ws.accept().await.unwrap();
        let head = read_head(&mut s).await.to_ascii_lowercase();
        assert!(head.contains("upgrade: websocket"), "{head}");
        assert!(!head.contains("proxy-authorization"));
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                return;
            }
            s.write_all(&buf[..n]).await.unwrap();
        }
    });
    let h = start(Setup::default()).await;
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    let req = format!(
        "GET http://localhost:{port}/ws HTTP/1.1\r\nHost: localhost:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nProxy-Authorization: {}\r\n\r\n",
        basic(TOKEN)
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(b"frame-1").await.unwrap();
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"frame-1");
    drop(s);
    // closed within a second: one record, with its bytes
    let recs = h.sink.wait_for(1).await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].state, None);
    assert_eq!(recs[0].bytes_up, 7);
}

#[tokio::test]
async fn the_probe_reports_every_verdict_without_opening_a_socket() {
    let spy = Arc::new(Spy::default());
    let h = start(Setup {
        filters: vec![spy.clone(), Arc::new(BlockMethod("POST"))],
        ..Default::default()
    })
    .await;
    let principal = Principal {
        session_id: "p".into(),
        policy: Arc::new(Policy::from_yaml("allowed_domains: [origin.test]\n").unwrap()),
        reserved_ports: Arc::from([]),
        project: None,
        label: None,
    };
    let r = h
        .proxy
        .probe(&principal, "GET https://origin.test/a?token=abc")
        .await
        .unwrap();
    assert!(r.final_verdict.allow);
    assert_eq!(r.filters.len(), 2);
    assert_eq!(r.target.path.as_deref(), Some("/a?token=abc"));
    assert!(r.render().contains("FINAL: ALLOW"));
    let r = h
        .proxy
        .probe(&principal, "POST http://origin.test/")
        .await
        .unwrap();
    assert_eq!(
        r.final_verdict.reason.as_deref(),
        Some("no POST to origin.test")
    );
    let r = h
        .proxy
        .probe(&principal, "https://google.com/")
        .await
        .unwrap();
    assert_eq!(
        r.final_verdict.reason.as_deref(),
        Some("host not permitted: google.com")
    );
    let open = Principal {
        policy: Arc::new(Policy::unrestricted()),
        ..principal.clone()
    };
    let r = h
        .proxy
        .probe(&open, "http://169.254.169.254/")
        .await
        .unwrap();
    assert!(r
        .render()
        .contains("Tier-1 (host / port / SSRF): DENY — blocked internal address"));
    assert_eq!(
        h.proxy.probe(&open, " ").await.unwrap_err().to_string(),
        vis_proxy::probe::USAGE
    );
    assert!(h.dialer.dialled().is_empty());
    assert_eq!(spy.seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn filters_never_see_the_proxy_token() {
    let o = origin().await;
    let spy = Arc::new(Spy::default());
    let h = start(Setup {
        filters: vec![spy.clone()],
        ..Default::default()
    })
    .await;
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "-H",
        "Authorization: Bearer leaked",
        &format!("http://localhost:{}/t", o.port()),
    ])
    .await;
    assert_eq!(r.status(), 200);
    let ctx = spy.seen.lock().unwrap()[0].clone();
    assert!(!ctx.headers.contains_key("proxy-authorization"));
    assert_eq!(
        ctx.headers.get("authorization").map(String::as_str),
        Some("Bearer leaked")
    );
    assert_eq!(ctx.body, None);
}

#[tokio::test]
async fn a_hanging_upstream_connect_times_out_as_504_and_socks_reply_04() {
    let config = ProxyConfig {
        connect_timeout: Duration::from_millis(100),
        ..Default::default()
    };
    let h = start(Setup {
        config,
        ..Default::default()
    })
    .await;
    h.dialer
        .hang
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let r = curl(&["--proxy", &h.http_proxy(), "http://localhost:9/"]).await;
    assert_eq!(r.status(), 504, "{r:?}");
    let (_s, head) = connect_tunnel(h.port(), TOKEN, "localhost:9").await;
    assert!(head.starts_with("HTTP/1.1 504"), "{head}");
    let s = curl(&["--proxy", &h.socks_proxy(), "http://localhost:9/"]).await;
    assert_ne!(s.code, 0);
    assert!(s.stderr.contains("(4)"), "{}", s.stderr);
    assert_eq!(h.dialer.dialled().len(), 3);
}

#[tokio::test]
async fn a_streamed_response_stays_incremental_when_filters_are_registered() {
    let spy = Arc::new(Spy::default());
    let h = start(Setup {
        filters: vec![spy.clone()],
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    let req = format!("GET http://127.0.0.1:{p}/stream-f HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nProxy-Authorization: {}\r\n\r\n", basic(TOKEN), p = o.port());
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("chunk-2") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&got).contains("chunk-3"));
    let phases: Vec<_> = spy.seen.lock().unwrap().iter().map(|c| c.phase).collect();
    assert_eq!(
        phases,
        vec![vis_proxy::Phase::Http, vis_proxy::Phase::HttpResponse]
    );
    RELEASE.notify_one();
    while !String::from_utf8_lossy(&got).contains("chunk-3") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
}
