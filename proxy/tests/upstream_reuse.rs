//! Upstream connections owned by one client connection: reused for the next
//! request to the same validated address, never for another address; every
//! request still gets its own decision; an upstream that closes between
//! requests is re-dialled; idle sockets of ended client connections are
//! reused by later ones.

mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vis_proxy::Verdict;

/// One request on an open client connection; returns the whole response
/// (head + Content-Length body).
async fn roundtrip(s: &mut TcpStream, host: &str, port: u16, path: &str) -> String {
    let req = format!(
        "GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\nProxy-Authorization: {}\r\n\r\n",
        basic(TOKEN)
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("response in time")
            .unwrap();
        assert!(n > 0, "proxy closed: {}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .to_ascii_lowercase()
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if out.len() >= end + 4 + len {
                return text;
            }
        }
    }
}

#[tokio::test]
async fn one_client_connection_reuses_its_upstream_connection_and_decides_every_request() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test, other.test]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    for path in ["/1", "/2", "/3"] {
        let r = roundtrip(&mut s, "origin.test", o.port(), path).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.ends_with(&format!("GET {path}")), "{r}");
    }
    // another name validated to the same address: decided on its own, may
    // share the connection (the key is the validated address, as before)
    let r = roundtrip(&mut s, "other.test", o.port(), "/4").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(h.dialer.dialled(), vec![o.addr.unwrap()]);
    let recs = h.sink.wait_for(4).await;
    assert_eq!(recs.len(), 4);
    assert!(recs.iter().all(|d| d.decision == Verdict::Allow));
    assert_eq!(recs[3].host, "other.test");
}

#[tokio::test]
async fn a_second_host_on_the_same_client_connection_gets_its_own_decision_and_connection() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test, second.test]\n",
        ..Default::default()
    })
    .await;
    let a = origin().await;
    let b = origin().await;
    h.resolver.set("second.test", &["127.0.0.1"]);
    h.resolver.set("third.test", &["127.0.0.1"]);
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    let r = roundtrip(&mut s, "origin.test", a.port(), "/a1").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = roundtrip(&mut s, "second.test", b.port(), "/b1").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    // not allowed: denied although a connection to that address is idle
    let r = roundtrip(&mut s, "third.test", b.port(), "/b2").await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    let r = roundtrip(&mut s, "origin.test", a.port(), "/a2").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(a.seen().len(), 2);
    assert_eq!(b.seen().len(), 1);
    // one dial per validated address, none for the denied request
    assert_eq!(h.dialer.dialled(), vec![a.addr.unwrap(), b.addr.unwrap()]);
    let recs = h.sink.wait_for(4).await;
    let summary: Vec<(String, Verdict)> =
        recs.iter().map(|d| (d.host.clone(), d.decision)).collect();
    assert!(
        summary.contains(&("third.test".into(), Verdict::Deny)),
        "{summary:?}"
    );
    assert_eq!(
        summary.iter().filter(|(_, v)| *v == Verdict::Allow).count(),
        3
    );
}

/// An origin that answers one request per connection (keep-alive response,
/// no `Connection: close`) and then closes the socket.
async fn one_shot_origin() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut n = 0u32;
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            n += 1;
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(k) => buf.extend_from_slice(&chunk[..k]),
                }
            }
            let body = format!("conn {n}");
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
            drop(s);
        }
    });
    (addr, task)
}

#[tokio::test]
async fn an_upstream_that_closes_between_requests_is_dialled_again() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test]\n",
        ..Default::default()
    })
    .await;
    let (addr, _task) = one_shot_origin().await;
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    // back to back: the close may or may not have been seen yet
    let r1 = roundtrip(&mut s, "origin.test", addr.port(), "/1").await;
    let r2 = roundtrip(&mut s, "origin.test", addr.port(), "/2").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // after a pause: the close has certainly been seen
    let r3 = roundtrip(&mut s, "origin.test", addr.port(), "/3").await;
    assert!(
        r1.starts_with("HTTP/1.1 200") && r1.ends_with("conn 1"),
        "{r1}"
    );
    assert!(
        r2.starts_with("HTTP/1.1 200") && r2.ends_with("conn 2"),
        "{r2}"
    );
    assert!(
        r3.starts_with("HTTP/1.1 200") && r3.ends_with("conn 3"),
        "{r3}"
    );
    assert_eq!(h.dialer.dialled(), vec![addr, addr, addr]);
}

#[tokio::test]
async fn a_later_client_connection_reuses_an_idle_upstream_socket_of_an_ended_one() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    let r = roundtrip(&mut s, "origin.test", o.port(), "/1").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    drop(s);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    let r = roundtrip(&mut s, "origin.test", o.port(), "/2").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(h.dialer.dialled(), vec![o.addr.unwrap()]);
    assert_eq!(o.seen().len(), 2);
}

#[tokio::test]
async fn an_idle_upstream_socket_the_origin_closed_is_not_reused() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test]\n",
        ..Default::default()
    })
    .await;
    let (addr, _task) = one_shot_origin().await;
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    let r = roundtrip(&mut s, "origin.test", addr.port(), "/1").await;
    assert!(r.ends_with("conn 1"), "{r}");
    drop(s);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    let r = roundtrip(&mut s, "origin.test", addr.port(), "/2").await;
    assert!(
        r.starts_with("HTTP/1.1 200") && r.ends_with("conn 2"),
        "{r}"
    );
    assert_eq!(h.dialer.dialled(), vec![addr, addr]);
}
