//! What real clients see when something past the policy fails, long flows, plain HTTP
//! inside an intercepted CONNECT, the connection cap and stalled request bodies.

mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vis_proxy::{Decision, FlowState, Lane, ProxyConfig, Verdict};

/// Wait until a record matching `pred` arrived.
async fn wait_until(h: &Harness, pred: impl Fn(&Decision) -> bool) -> Option<Decision> {
    for _ in 0..500 {
        if let Some(d) = h.sink.all().into_iter().find(|d| pred(d)) {
            return Some(d);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// A TCP origin that answers every connection with `script` (reads the request head first).
async fn scripted_origin(answer: &'static [u8], close: bool) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let _ = read_head(&mut s).await;
                let _ = s.write_all(answer).await;
                if close {
                    drop(s);
                } else {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_a_502_with_its_own_kind_so_git_does_not_blame_the_policy()
{
    let h = start(Setup::default()).await;
    let out = tokio::process::Command::new("git")
        .args(["-c", &format!("http.proxy={}", h.http_proxy())])
        .args(["ls-remote", "https://nxdomain.test/some/repo.git"])
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("502"), "{stderr}");
    assert!(!stderr.contains("403"), "{stderr}");

    let r = curl(&["--proxy", &h.http_proxy(), "http://nxdomain.test/"]).await;
    assert_eq!(r.status(), 502, "{r:?}");
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("upstream-dns-failure")
    );
    assert_eq!(r.body(), "cannot resolve host: nxdomain.test\n");
    let recs = h.sink.wait_for(2).await;
    for d in &recs {
        assert_eq!(d.host, "nxdomain.test");
        assert_eq!(d.decision, Verdict::Allow, "not a policy denial: {d:?}");
        assert_eq!(d.error_kind.as_deref(), Some("upstream-dns-failure"));
        assert_eq!(
            d.reason.as_deref(),
            Some("cannot resolve host: nxdomain.test")
        );
    }
}

#[tokio::test]
async fn a_client_that_rejects_the_interception_certificate_leaves_a_record_saying_so() {
    let h = start(Setup {
        policy: "rules: [{host: origin.test, access: read-only}]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    // curl trusts only the system roots here, not the session's CA bundle
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        &format!("https://origin.test:{}/x", o.port()),
    ])
    .await;
    assert_ne!(r.code, 0, "{r:?}");
    let d = wait_until(&h, |d| d.error_kind.is_some())
        .await
        .expect("a record for the failed handshake");
    assert_eq!(d.error_kind.as_deref(), Some("client-tls-rejected"));
    assert_eq!(d.lane, Lane::Connect);
    assert_eq!(d.host, "origin.test");
    assert!(d.is_intercepted);
    let reason = d.reason.unwrap_or_default();
    assert!(reason.contains("interception certificate"), "{reason}");
    assert!(o.seen().is_empty());
}

#[tokio::test]
async fn an_upstream_that_closes_mid_body_is_recorded_with_the_reason() {
    let port = scripted_origin(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a part",
        true,
    )
    .await;
    let h = start(Setup::default()).await;
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        &format!("http://origin.test:{port}/big"),
    ])
    .await;
    assert_ne!(r.code, 0, "curl notices the short body: {r:?}");
    let d = wait_until(&h, |d| d.path.as_deref() == Some("/big"))
        .await
        .expect("a record");
    assert_eq!(d.decision, Verdict::Allow);
    assert_eq!(d.error_kind.as_deref(), Some("upstream-incomplete"));
    assert!(d
        .reason
        .is_some_and(|r| r.contains("before its body was complete")));
    assert_eq!(d.bytes_down, "only a part".len() as u64);
}

#[tokio::test]
async fn an_upstream_that_never_answers_is_recorded_as_such_when_the_client_gives_up() {
    let port = scripted_origin(b"", false).await;
    let h = start(Setup::default()).await;
    let r = curl(&[
        "--max-time",
        "1",
        "--proxy",
        &h.http_proxy(),
        &format!("http://origin.test:{port}/silent"),
    ])
    .await;
    assert_eq!(r.code, 28, "curl timed out: {r:?}");
    let d = wait_until(&h, |d| d.path.as_deref() == Some("/silent"))
        .await
        .expect("a record");
    assert_eq!(d.error_kind.as_deref(), Some("upstream-no-response"));
    assert!(d
        .reason
        .is_some_and(|r| r.contains("no response from the upstream")));
}

#[tokio::test]
async fn a_tunnel_is_reported_when_it_opens_and_again_with_its_bytes_when_it_closes() {
    let h = start(Setup::default()).await;
    let o = origin().await;
    // a long download through an opaque tunnel: the origin holds the last chunk back
    let url = format!("http://origin.test:{}/stream", o.port());
    let proxy = h.http_proxy();
    let download =
        tokio::spawn(async move { curl(&["--proxytunnel", "--proxy", &proxy, &url]).await });
    let open = wait_until(&h, |d| d.lane == Lane::Connect)
        .await
        .expect("the tunnel is reported while it runs");
    assert_eq!(open.state, Some(FlowState::Open));
    assert_eq!(open.decision, Verdict::Allow);
    assert!(!download.is_finished());
    // let the download finish
    let release = curl(&[
        "--proxy",
        &h.http_proxy(),
        &format!("http://origin.test:{}/release", o.port()),
    ])
    .await;
    assert_eq!(release.status(), 200);
    let done = download.await.unwrap();
    assert!(done.body().ends_with("chunk-3\n"), "{done:?}");
    let closed = wait_until(&h, |d| {
        d.lane == Lane::Connect && d.state == Some(FlowState::Closed)
    })
    .await
    .expect("the closing record");
    assert_eq!(closed.flow, open.flow);
    assert!(closed.bytes_down > 0 && closed.bytes_up > 0);
}

#[tokio::test]
async fn plain_http_inside_an_intercepted_connect_is_decided_by_the_rules() {
    let h = start(Setup {
        policy: "rules: [{host: origin.test, access: read-only}]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let url = format!("http://origin.test:{}/inside", o.port());
    let get = curl(&["--proxytunnel", "--proxy", &h.http_proxy(), &url]).await;
    assert_eq!(get.status(), 200, "{get:?}");
    assert_eq!(get.body(), "hello from origin: GET /inside");
    let post = curl(&[
        "--proxytunnel",
        "--proxy",
        &h.http_proxy(),
        "-X",
        "POST",
        "-d",
        "x=1",
        &url,
    ])
    .await;
    assert_eq!(post.status(), 403, "{post:?}");
    assert_eq!(
        post.header("x-vis-egress-error").as_deref(),
        Some("blocked-by-method-policy")
    );
    let seen: Vec<String> = o.seen().iter().map(|s| s.method.clone()).collect();
    assert_eq!(seen, vec!["GET"]);
    let deny = wait_until(&h, |d| d.decision == Verdict::Deny)
        .await
        .unwrap();
    assert_eq!(deny.method.as_deref(), Some("POST"));
    assert_eq!(deny.path.as_deref(), Some("/inside"));
    assert_eq!(deny.lane, Lane::Http);
}

async fn open_tunnel(proxy: u16, target: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(("127.0.0.1", proxy)).await.unwrap();
    s.write_all(
        format!(
            "CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {}\r\n\r\n",
            basic(TOKEN)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let head = tokio::time::timeout(Duration::from_secs(5), read_head(&mut s))
        .await
        .unwrap_or_default();
    (s, head)
}

#[tokio::test]
async fn an_absurd_chunk_size_inside_an_intercepted_connect_is_answered_400_at_once() {
    let h = start(Setup {
        policy: "rules: [{host: origin.test, methods: [GET, POST]}]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let target = format!("origin.test:{}", o.port());
    let (mut s, head) = open_tunnel(h.port(), &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s.write_all(
        format!(
            "POST /inner HTTP/1.1\r\nHost: {target}\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nabc"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let got = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(got.is_ok(), "answered and closed instead of hanging");
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let d = wait_until(&h, |d| d.path.as_deref() == Some("/inner"))
        .await
        .unwrap();
    assert_eq!(d.error_kind.as_deref(), Some("request-chunk-too-large"));
    assert!(o.seen().is_empty(), "nothing reached the origin");
}

#[tokio::test]
async fn established_tunnels_count_against_the_overall_connection_cap() {
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    // says nothing; closes when its client does
    tokio::spawn(async move {
        while let Ok((mut s, _)) = silent.accept().await {
            tokio::spawn(async move {
                let mut sink = Vec::new();
                let _ = s.read_to_end(&mut sink).await;
            });
        }
    });
    let h = start(Setup {
        config: ProxyConfig {
            max_connections: 3,
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let target = format!("origin.test:{port}");
    let mut tunnels = Vec::new();
    for _ in 0..3 {
        let (s, head) = open_tunnel(h.port(), &target).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        tunnels.push(s);
    }
    let (_s, head) = open_tunnel(h.port(), &target).await;
    assert!(
        head.starts_with("HTTP/1.1 503"),
        "a fourth connection is answered 503 while three tunnels are open: {head:?}"
    );
    drop(tunnels.pop());
    let mut reopened = String::new();
    for _ in 0..50 {
        let (s, head) = open_tunnel(h.port(), &target).await;
        if head.starts_with("HTTP/1.1 200") {
            reopened = head;
            tunnels.push(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        reopened.starts_with("HTTP/1.1 200"),
        "a closed tunnel frees its place"
    );
}

#[tokio::test]
async fn a_request_body_that_stalls_is_cut_with_a_408_and_recorded() {
    let o = origin().await;
    let h = start(Setup {
        config: ProxyConfig {
            body_idle_timeout: Duration::from_millis(300),
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let auth = basic(TOKEN);
    let port = o.port();
    // declares 100 bytes, sends 10, then nothing
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    s.write_all(
        format!(
            "POST http://origin.test:{port}/upload HTTP/1.1\r\nHost: origin.test:{port}\r\nProxy-Authorization: {auth}\r\nContent-Length: 100\r\n\r\n0123456789"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    let answered = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    if out.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(answered.is_ok(), "the proxy answered a stalled body");
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    let d = wait_until(&h, |d| d.path.as_deref() == Some("/upload"))
        .await
        .unwrap();
    assert_eq!(d.error_kind.as_deref(), Some("request-body-timeout"));
    assert!(
        d.reason
            .as_deref()
            .is_some_and(|r| r.starts_with("request body timed out")),
        "{d:?}"
    );
}

#[tokio::test]
async fn a_chunk_of_2_to_the_64_minus_1_bytes_is_answered_400_at_once_and_recorded() {
    let o = origin().await;
    // the body's idle timeout is far away: the answer must not wait for it
    let h = start(Setup::default()).await;
    let auth = basic(TOKEN);
    let port = o.port();
    // a chunk that claims 2^64 - 1 bytes and never sends them
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    s.write_all(
        format!(
            "POST http://origin.test:{port}/huge HTTP/1.1\r\nHost: origin.test:{port}\r\nProxy-Authorization: {auth}\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nabc"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // answered 400 at once (not after the body's idle timeout), and the connection closed
    let mut out = Vec::new();
    let got = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(got.is_ok(), "answered and closed instead of hanging");
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("18446744073709551615"), "{text}");
    let d = wait_until(&h, |d| d.path.as_deref() == Some("/huge"))
        .await
        .unwrap();
    assert_eq!(d.error_kind.as_deref(), Some("request-chunk-too-large"));

    // the same, with the chunk-size line arriving after the request went upstream (a
    // first chunk of 3 bytes, then the lie)
    let mut s = TcpStream::connect(("127.0.0.1", h.port())).await.unwrap();
    s.write_all(
        format!(
            "POST http://origin.test:{port}/later HTTP/1.1\r\nHost: origin.test:{port}\r\nProxy-Authorization: {auth}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.write_all(b"ffffffffffffffff\r\nabc").await.unwrap();
    let mut out = Vec::new();
    let got = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(got.is_ok(), "answered and closed instead of hanging");
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let d = wait_until(&h, |d| d.path.as_deref() == Some("/later"))
        .await
        .unwrap();
    assert_eq!(d.error_kind.as_deref(), Some("request-chunk-too-large"));
}

#[tokio::test]
async fn a_response_still_streaming_after_a_second_is_reported_while_it_runs() {
    // chunked, one chunk at once, another after 1.3 s, then it never ends
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        let _ = read_head(&mut s).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            .await;
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let _ = s.write_all(b"5\r\nworld\r\n").await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let h = start(Setup::default()).await;
    let proxy = h.http_proxy();
    let url = format!("http://origin.test:{port}/events");
    let download =
        tokio::spawn(async move { curl(&["--max-time", "4", "--proxy", &proxy, &url]).await });
    let open = wait_until(&h, |d| d.path.as_deref() == Some("/events"))
        .await
        .expect("reported while streaming");
    assert_eq!(open.state, Some(FlowState::Open));
    assert!(!download.is_finished());
    // at least the first chunk, relayed before the report
    assert!(open.bytes_down >= 5, "{open:?}");
    let _ = download.await;
    let closed = wait_until(&h, |d| {
        d.path.as_deref() == Some("/events") && d.state == Some(FlowState::Closed)
    })
    .await
    .expect("and again when it ends");
    assert_eq!(closed.flow, open.flow);
}
