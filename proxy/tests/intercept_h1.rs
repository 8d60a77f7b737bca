//! HTTP/1.1 inside an intercepted TLS tunnel: the relay that carries plain requests, and the
//! hand-over to the HTTP server for what it does not take. Real TLS on both sides, a real
//! HTTP/1.1 client (hyper's) or raw bytes where the test is about the bytes.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use vis_proxy::{Decision, Lane, Verdict};

/// The policy: POST allowed, so only a rule that can deny something makes the proxy intercept.
const POLICY: &str = "rules: [{host: localhost, methods: [GET, POST, HEAD]}]\n";

/// An upstream answer: the bytes, then whether the origin closes the connection.
type Script = fn(&str) -> (Vec<u8>, bool);

/// A TLS origin speaking HTTP/1.1 by hand: per request it reads the head (and a
/// `Content-Length` body) and writes what `script` says. Counts its connections.
struct Scripted {
    port: u16,
    conns: Arc<AtomicUsize>,
    heads: Arc<std::sync::Mutex<Vec<String>>>,
}

async fn scripted_tls_origin(ca: &TestCa, script: Script) -> Scripted {
    let acceptor = tls_acceptor(ca, &["localhost"]);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let conns = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (c, hs) = (conns.clone(), heads.clone());
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            c.fetch_add(1, Ordering::SeqCst);
            let (acceptor, hs) = (acceptor.clone(), hs.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                loop {
                    let head = read_head(&mut tls).await;
                    if head.is_empty() {
                        return;
                    }
                    let len = content_length(&head);
                    let mut body = vec![0u8; len];
                    if tls.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    hs.lock().unwrap().push(head.clone());
                    let (answer, close) = script(&head);
                    if tls.write_all(&answer).await.is_err() || close {
                        let _ = tls.shutdown().await;
                        return;
                    }
                    let _ = tls.flush().await;
                }
            });
        }
    });
    Scripted { port, conns, heads }
}

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

fn path_of(head: &str) -> &str {
    head.split(' ').nth(1).unwrap_or("")
}

async fn mitm() -> (Harness, TestCa) {
    let ca = test_ca();
    let h = start(Setup {
        policy: POLICY,
        extra_roots: vec![ca.der.clone()],
        ..Default::default()
    })
    .await;
    (h, ca)
}

/// An HTTP/1.1 client connection (hyper's) over the tunnel.
async fn client(tls: InterceptedTls) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

async fn send(
    c: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    method: &str,
    port: u16,
    path: &str,
    body: Vec<u8>,
) -> (u16, http::HeaderMap, Vec<u8>) {
    c.ready().await.expect("the tunnel is still open");
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("localhost:{port}"))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = c.send_request(req).await.expect("an answer");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("a whole body").to_bytes();
    (parts.status.as_u16(), parts.headers, body.to_vec())
}

async fn records(h: &Harness, n: usize) -> Vec<Decision> {
    for _ in 0..500 {
        let https: Vec<_> = h
            .sink
            .all()
            .into_iter()
            .filter(|d| d.lane == Lane::Https)
            .collect();
        if https.len() >= n {
            return https;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("fewer than {n} https records: {:?}", h.sink.all());
}

fn by_path(head: &str) -> (Vec<u8>, bool) {
    let path = path_of(head);
    let answer = match path {
        "/chunked" => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Origin: 1\r\n\r\n\
                       5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"
            .to_string(),
        "/early" => "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\
                     HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nafter"
            .to_string(),
        "/empty" => "HTTP/1.1 204 No Content\r\n\r\n".to_string(),
        "/to-close" => {
            return (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end".to_vec(),
                true,
            )
        }
        "/lengths" => {
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".to_string()
        }
        _ if head.starts_with("HEAD ") => {
            "HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n".to_string()
        }
        _ => {
            let body = format!(
                "{} {path} body={}",
                head.split(' ').next().unwrap_or(""),
                content_length(head)
            );
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n{body}",
                body.len()
            )
        }
    };
    (answer.into_bytes(), false)
}

#[tokio::test]
async fn keep_alive_requests_share_one_upstream_connection_and_each_is_decided_and_recorded() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut c = client(intercepted_tls(&h, o.port).await).await;
    for i in 0..5 {
        let (status, headers, body) = send(&mut c, "GET", o.port, &format!("/n{i}"), vec![]).await;
        assert_eq!(status, 200);
        assert_eq!(String::from_utf8_lossy(&body), format!("GET /n{i} body=0"));
        assert!(
            headers.get("connection").is_none(),
            "hop-by-hop fields stay with their hop"
        );
    }
    let (status, _, _) = send(&mut c, "DELETE", o.port, "/gone", vec![]).await;
    assert_eq!(status, 403, "the rule allows GET, POST and HEAD only");
    assert_eq!(o.conns.load(Ordering::SeqCst), 1);
    assert_eq!(o.heads.lock().unwrap().len(), 5, "the DELETE never left");
    let recs = records(&h, 6).await;
    assert_eq!(
        recs.iter().filter(|d| d.decision == Verdict::Allow).count(),
        5
    );
    assert!(recs.iter().all(|d| d.is_intercepted && d.phase == "https"));
    let first = recs
        .iter()
        .find(|d| d.path.as_deref() == Some("/n0"))
        .expect("/n0");
    assert_eq!(first.bytes_down, "GET /n0 body=0".len() as u64);
    let upstream = o.heads.lock().unwrap()[0].to_ascii_lowercase();
    assert!(upstream.starts_with("get /n0 http/1.1\r\n"), "{upstream}");
    assert!(
        upstream.contains(&format!("host: localhost:{}", o.port)),
        "{upstream}"
    );
}

#[tokio::test]
async fn chunked_informational_and_bodiless_answers_arrive_whole_and_the_tunnel_stays_usable() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut c = client(intercepted_tls(&h, o.port).await).await;
    let (status, headers, body) = send(&mut c, "GET", o.port, "/chunked", vec![]).await;
    assert_eq!((status, body.as_slice()), (200, &b"hello, world"[..]));
    assert_eq!(
        headers.get("x-origin").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let (status, _, body) = send(&mut c, "GET", o.port, "/early", vec![]).await;
    assert_eq!((status, body.as_slice()), (200, &b"after"[..]));
    let (status, _, body) = send(&mut c, "GET", o.port, "/empty", vec![]).await;
    assert_eq!((status, body.len()), (204, 0));
    let (status, _, body) = send(&mut c, "HEAD", o.port, "/head", vec![]).await;
    assert_eq!((status, body.len()), (200, 0));
    let (status, _, body) = send(&mut c, "GET", o.port, "/last", vec![]).await;
    assert_eq!((status, body.as_slice()), (200, &b"GET /last body=0"[..]));
    assert_eq!(o.conns.load(Ordering::SeqCst), 1);
    let recs = records(&h, 5).await;
    let chunked = recs
        .iter()
        .find(|d| d.path.as_deref() == Some("/chunked"))
        .expect("record");
    assert_eq!(chunked.bytes_down, 12, "data bytes, not chunk framing");
}

#[tokio::test]
async fn small_bodies_go_with_their_head_and_a_large_one_is_streamed_by_the_http_server() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut c = client(intercepted_tls(&h, o.port).await).await;
    let (status, _, body) = send(&mut c, "POST", o.port, "/small", b"0123456789".to_vec()).await;
    assert_eq!(
        (status, String::from_utf8_lossy(&body).as_ref()),
        (200, "POST /small body=10")
    );
    let big = vec![b'x'; 200 * 1024];
    let (status, _, body) = send(&mut c, "POST", o.port, "/big", big).await;
    assert_eq!(
        (status, String::from_utf8_lossy(&body).as_ref()),
        (200, "POST /big body=204800")
    );
    // after the hand-over the same connection keeps working
    let (status, _, body) = send(&mut c, "GET", o.port, "/after", vec![]).await;
    assert_eq!(
        (status, String::from_utf8_lossy(&body).as_ref()),
        (200, "GET /after body=0")
    );
    let recs = records(&h, 3).await;
    let up: Vec<_> = ["/small", "/big"]
        .iter()
        .map(|p| {
            recs.iter()
                .find(|d| d.path.as_deref() == Some(p))
                .map(|d| d.bytes_up)
        })
        .collect();
    assert_eq!(up, vec![Some(10), Some(200 * 1024)]);
    assert_eq!(
        o.conns.load(Ordering::SeqCst),
        1,
        "the HTTP server went on with the relay's upstream connection"
    );
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut tls = intercepted_tls(&h, o.port).await;
    let host = format!("localhost:{}", o.port);
    let mut reqs = String::new();
    for p in ["/p1", "/p2", "/p3"] {
        reqs.push_str(&format!("GET {p} HTTP/1.1\r\nHost: {host}\r\n\r\n"));
    }
    reqs.push_str(&format!(
        "GET /p4 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    ));
    tls.write_all(reqs.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut all))
        .await
        .expect("the proxy closes after the request that asked it to")
        .ok();
    let text = String::from_utf8_lossy(&all);
    let order: Vec<usize> = ["/p1 ", "/p2 ", "/p3 ", "/p4 "]
        .iter()
        .map(|p| text.find(&format!("GET {p}body")).unwrap_or(usize::MAX))
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]) && order[3] != usize::MAX,
        "{text}"
    );
    assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 4, "{text}");
    assert!(text.ends_with("GET /p4 body=0"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
}

#[tokio::test]
async fn a_request_with_two_different_lengths_is_refused_by_the_http_server_and_never_sent() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut tls = intercepted_tls(&h, o.port).await;
    let raw = format!(
        "POST /smuggle HTTP/1.1\r\nHost: localhost:{}\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabcGET /hidden HTTP/1.1\r\nHost: x\r\n\r\n",
        o.port
    );
    tls.write_all(raw.as_bytes()).await.unwrap();
    let head = read_head(&mut tls).await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    // the relay may have dialled the origin during the handshake; no request went on it
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        o.heads.lock().unwrap().is_empty(),
        "nothing reached the origin"
    );
}

#[tokio::test]
async fn an_origin_that_closed_its_kept_connection_gets_the_next_request_on_a_new_one() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, |head| {
        // every answer says keep-alive, and then the origin closes anyway
        (by_path(head).0, true)
    })
    .await;
    let mut c = client(intercepted_tls(&h, o.port).await).await;
    for i in 0..3 {
        let (status, _, body) = send(&mut c, "GET", o.port, &format!("/k{i}"), vec![]).await;
        assert_eq!(
            (status, String::from_utf8_lossy(&body).into_owned()),
            (200, format!("GET /k{i} body=0"))
        );
        // let the close reach the proxy, or the resend-once path carries it
        if i == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(o.conns.load(Ordering::SeqCst), 3);
}

/// Waits up to 5 s for the origin to have accepted `n` connections.
async fn accepted(conns: &AtomicUsize, n: usize) -> bool {
    for _ in 0..500 {
        if conns.load(Ordering::SeqCst) >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn the_upstream_is_dialled_while_the_client_handshakes_and_the_first_requests_go_on_that_connection(
) {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let tls = intercepted_tls(&h, o.port).await;
    assert!(
        accepted(&o.conns, 1).await,
        "the origin was not dialled before the client's first request"
    );
    assert!(
        o.heads.lock().unwrap().is_empty(),
        "nothing was sent on it yet"
    );
    let mut c = client(tls).await;
    for i in 0..2 {
        let (status, _, body) = send(&mut c, "GET", o.port, &format!("/e{i}"), vec![]).await;
        assert_eq!(
            (status, body),
            (200, format!("GET /e{i} body=0").into_bytes())
        );
    }
    assert_eq!(
        o.conns.load(Ordering::SeqCst),
        1,
        "the early connection carried both"
    );
}

#[tokio::test]
async fn an_h2_client_s_first_request_goes_on_the_connection_dialled_during_its_handshake() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let tls = intercepted_tls_offering(&h, o.port, &[b"h2", b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert!(
        accepted(&o.conns, 1).await,
        "the origin was not dialled before the client's first request"
    );
    let (mut send_req, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    for i in 0..2 {
        let req = http::Request::builder()
            .uri(format!("https://localhost:{}/h2-{i}", o.port))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = send_req.send_request(req).await.expect("an answer");
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, format!("GET /h2-{i} body=0").as_bytes());
    }
    assert_eq!(
        o.conns.load(Ordering::SeqCst),
        1,
        "the early connection carried both"
    );
}

#[tokio::test]
async fn with_a_network_filter_the_upstream_is_dialled_only_for_a_request_the_filter_let_through() {
    let ca = test_ca();
    let h = start(Setup {
        policy: POLICY,
        filters: vec![Arc::new(BlockMethod("GET"))],
        extra_roots: vec![ca.der.clone()],
        ..Default::default()
    })
    .await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut c = client(intercepted_tls(&h, o.port).await).await;
    let (status, _, _) = send(&mut c, "GET", o.port, "/refused", vec![]).await;
    assert_eq!(status, 403, "the filter blocks GET");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        o.conns.load(Ordering::SeqCst),
        0,
        "a filter could refuse every request: no connection before one passes"
    );
    let (status, _, body) = send(&mut c, "POST", o.port, "/let", b"ok".to_vec()).await;
    assert_eq!((status, body), (200, b"POST /let body=2".to_vec()));
    assert_eq!(o.conns.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_early_connection_the_origin_closed_unused_is_replaced_for_the_first_request() {
    let (h, ca) = mitm().await;
    // The origin hangs up on its first connection right after the handshake, and serves
    // the ones after it.
    let acceptor = tls_acceptor(&ca, &["localhost"]);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let conns = Arc::new(AtomicUsize::new(0));
    let c2 = conns.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let n = c2.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                if n == 0 {
                    let _ = tls.shutdown().await;
                    return;
                }
                while !read_head(&mut tls).await.is_empty() {
                    let _ = tls
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    let tls = intercepted_tls(&h, port).await;
    assert!(accepted(&conns, 1).await, "the early dial did not happen");
    tokio::time::sleep(Duration::from_millis(100)).await; // the hang-up reaches the proxy
    let mut c = client(tls).await;
    // POST: not resent on a failure, so it must not be sent on the closed connection at all
    let (status, _, body) = send(&mut c, "POST", port, "/first", b"x".to_vec()).await;
    assert_eq!((status, body), (200, b"ok".to_vec()));
    assert_eq!(conns.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_close_delimited_answer_is_relayed_to_its_end_and_then_the_tunnel_closes() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut tls = intercepted_tls(&h, o.port).await;
    let req = format!(
        "GET /to-close HTTP/1.1\r\nHost: localhost:{}\r\n\r\n",
        o.port
    );
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut all))
        .await
        .expect("closed")
        .ok();
    let text = String::from_utf8_lossy(&all).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200 ok\r\n"), "{text}");
    assert!(text.contains("connection: close\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nuntil the end"), "{text}");
}

#[tokio::test]
async fn an_answer_with_two_different_lengths_is_a_502_and_not_relayed() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut c = client(intercepted_tls(&h, o.port).await).await;
    let (status, _, body) = send(&mut c, "GET", o.port, "/lengths", vec![]).await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("two different Content-Length values"),
        "{body}"
    );
    assert!(!body.contains("abcd"), "{body}");
    let d = records(&h, 1).await.remove(0);
    assert!(d.reason.is_some_and(|r| r.contains("Content-Length")));
}

#[tokio::test]
async fn a_client_that_leaves_before_the_origin_answers_is_recorded_as_no_response() {
    let (h, ca) = mitm().await;
    let o = scripted_tls_origin(&ca, |_| (Vec::new(), false)).await;
    let mut tls = intercepted_tls(&h, o.port).await;
    let req = format!("GET /silent HTTP/1.1\r\nHost: localhost:{}\r\n\r\n", o.port);
    tls.write_all(req.as_bytes()).await.unwrap();
    for _ in 0..500 {
        if !o.heads.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(tls);
    let d = records(&h, 1).await.remove(0);
    assert_eq!(d.path.as_deref(), Some("/silent"));
    assert_eq!(
        d.error_kind.as_deref(),
        Some("upstream-no-response"),
        "{d:?}"
    );
}

#[tokio::test]
async fn filters_see_both_heads_and_a_phantom_key_is_swapped_on_the_relay() {
    let ca = test_ca();
    let spy = Arc::new(Spy::default());
    let h = start(Setup {
        policy: POLICY,
        filters: vec![spy.clone()],
        credentials: vec![vis_proxy::ProviderCredential {
            provider: "openai".into(),
            hosts: vec!["localhost".into()],
            phantom: "sk-phantom-abc".into(),
            secret: "sk-real-xyz".into(),
            base_url: None,
        }],
        extra_roots: vec![ca.der.clone()],
        ..Default::default()
    })
    .await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut c = client(intercepted_tls(&h, o.port).await).await;
    for (path, auth) in [
        ("/plain", None),
        ("/v1?key=sk-phantom-abc", Some("Bearer sk-phantom-abc")),
    ] {
        c.ready().await.expect("the tunnel is still open");
        let mut req = http::Request::builder()
            .uri(path)
            .header("host", format!("localhost:{}", o.port))
            .header("x-case", "Mixed Value");
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = c
            .send_request(req.body(Full::new(Bytes::new())).unwrap())
            .await
            .expect("an answer");
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.expect("a whole body");
    }
    let heads = o.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2, "{heads:?}");
    assert!(
        !heads[0].to_ascii_lowercase().contains("authorization"),
        "{}",
        heads[0]
    );
    assert!(heads[0].contains("x-case: Mixed Value\r\n"), "{}", heads[0]);
    assert_eq!(path_of(&heads[1]), "/v1?key=sk-real-xyz");
    assert!(
        heads[1].contains("authorization: Bearer sk-real-xyz\r\n"),
        "{}",
        heads[1]
    );
    assert!(!heads[1].contains("sk-phantom"), "{}", heads[1]);

    let recs = records(&h, 2).await;
    let plain = recs.iter().find(|d| d.path.as_deref() == Some("/plain"));
    assert_eq!(plain.map(|d| d.provider.clone()), Some(None));
    let keyed = recs
        .iter()
        .find(|d| d.provider.as_deref() == Some("openai"));
    assert_eq!(
        keyed.and_then(|d| d.path.clone()).as_deref(),
        Some("/v1?key=sk-phantom-abc"),
        "records never carry the secret"
    );
    let seen = spy.seen.lock().unwrap().clone();
    let requests: Vec<_> = seen.iter().filter(|c| c.status.is_none()).collect();
    let answers: Vec<_> = seen.iter().filter(|c| c.status.is_some()).collect();
    assert_eq!((requests.len(), answers.len()), (2, 2), "{seen:?}");
    assert_eq!(requests[0].headers["x-case"], "Mixed Value");
    assert_eq!(
        requests[1].headers["authorization"], "Bearer sk-phantom-abc",
        "filters see the phantom only"
    );
    assert_eq!(answers[0].status, Some(200));
    let body = "GET /plain body=0";
    assert_eq!(answers[0].headers["content-length"], body.len().to_string());
    assert!(
        !answers[0].headers.contains_key("connection"),
        "response filters see the fields the client gets: {:?}",
        answers[0].headers
    );
}

#[tokio::test]
async fn a_kept_alive_tunnel_waits_one_head_timeout_after_each_answer_and_then_closes() {
    let ca = test_ca();
    let t = Duration::from_millis(500);
    let h = start(Setup {
        policy: POLICY,
        extra_roots: vec![ca.der.clone()],
        config: vis_proxy::ProxyConfig {
            head_timeout: t,
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let o = scripted_tls_origin(&ca, by_path).await;
    let mut tls = intercepted_tls(&h, o.port).await;
    // each request comes 0.6 of the timeout after the last answer: well past the first
    // deadline the connection had, never past the one its last answer set
    for i in 0..4 {
        tokio::time::sleep(t * 6 / 10).await;
        let req = format!("GET /n{i} HTTP/1.1\r\nHost: localhost:{}\r\n\r\n", o.port);
        tls.write_all(req.as_bytes()).await.unwrap();
        let head = read_head(&mut tls).await;
        assert!(head.starts_with("HTTP/1.1 200"), "request {i}: {head}");
        let mut body = vec![0u8; content_length(&head)];
        tls.read_exact(&mut body).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&body), format!("GET /n{i} body=0"));
    }
    let answered = std::time::Instant::now();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut rest))
        .await
        .expect("an idle tunnel is closed")
        .ok();
    let waited = answered.elapsed();
    assert!(rest.is_empty(), "{rest:?}");
    assert!(
        waited >= t * 9 / 10 && waited < t * 4,
        "closed {waited:?} after the last answer, the head timeout being {t:?}"
    );
}

#[tokio::test]
async fn requests_inside_an_intercepted_tunnel_run_on_the_slot_the_tunnel_took_and_a_connect_past_the_cap_is_refused(
) {
    let ca = test_ca();
    let h = start(Setup {
        policy: POLICY,
        extra_roots: vec![ca.der.clone()],
        config: vis_proxy::ProxyConfig {
            max_per_session: 2,
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let o = scripted_tls_origin(&ca, by_path).await;
    // two tunnels hold the session's two slots; each still carries its requests
    let mut a = client(intercepted_tls(&h, o.port).await).await;
    let mut b = client(intercepted_tls(&h, o.port).await).await;
    for i in 0..3 {
        for c in [&mut a, &mut b] {
            let (status, _, body) = send(c, "GET", o.port, &format!("/n{i}"), vec![]).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        }
    }
    // a third tunnel is past the cap
    let (_c, head) = connect_tunnel(h.port(), TOKEN, &format!("localhost:{}", o.port)).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert_eq!(records(&h, 6).await.len(), 6);
}
