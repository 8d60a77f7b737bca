//! The real gateway under pressure at its edges: provider phantoms per session and per
//! route (Python's urllib as the child), the API's `/healthz` while the egress proxy is at
//! its connection cap, request bodies that stall, and tunnels visible while they run.

mod common;

use common::*;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const OPENAI_KEY: &str = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123456789";
const ANTHROPIC_KEY: &str = "sk-ant-api03-Qx9_fK2-ab3dE_FGhij-KLmno9pQRsT-uvWXyz0123AA";

fn env_of(v: &Value) -> std::collections::BTreeMap<String, String> {
    v["env"]
        .as_object()
        .expect("env")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// Python (urllib, as a sandbox child): POST `$ANTHROPIC_BASE_URL/v1/messages` with
/// `x-api-key: $<KEY_VAR>`; prints the status.
const SEND_PY: &str = r#"
import json, os, sys, urllib.request, urllib.error
req = urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
    data=json.dumps({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"x-api-key": os.environ[sys.argv[1]], "anthropic-version": "2023-06-01", "content-type": "application/json"},
    method="POST")
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("x-vis-egress-error"), e.read().decode().strip())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phantom_keys_keep_their_prefix_are_per_session_and_open_only_their_own_route() {
    let llm = FixtureLlm::start().await;
    // both providers on one host: the fixture speaks both dialects on one port
    let opts = Opts::default()
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("OPENAI_BASE_URL", &llm.openai_base_url())
        .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_base_url());
    let gw = start_with_network(loopback_policy(), opts).await;
    let a = gw.create_session_at(&gw.dirs.root()).await;
    let b = gw.create_session_at(&gw.dirs.root()).await;
    let env_a = env_of(&gw.sandbox_env(&a).await);
    let env_b = env_of(&gw.sandbox_env(&b).await);

    let ant = &env_a["ANTHROPIC_API_KEY"];
    assert!(ant.starts_with("sk-ant-api03-"), "{ant}");
    assert_eq!(ant.len(), ANTHROPIC_KEY.len());
    assert_ne!(ant, ANTHROPIC_KEY);
    assert!(env_a["OPENAI_API_KEY"].starts_with("sk-proj-"));
    assert_ne!(
        env_a["OPENAI_API_KEY"], env_b["OPENAI_API_KEY"],
        "each session has its own phantom"
    );
    assert_ne!(env_a["ANTHROPIC_API_KEY"], env_b["ANTHROPIC_API_KEY"]);

    // The OpenAI phantom through the Anthropic route is refused, though both share a host.
    let py = python();
    let wrong = gw.exec(&a, &[&py, "-c", SEND_PY, "OPENAI_API_KEY"]).await;
    assert!(wrong.ok(), "{wrong:?}");
    assert!(wrong.stdout.starts_with("403"), "{wrong:?}");
    assert!(
        wrong
            .stdout
            .contains("not allowed on the anthropic provider route"),
        "{wrong:?}"
    );
    assert!(llm.requests().is_empty(), "{:?}", llm.requests());

    // Session B's phantom is nothing to session A's route: never swapped for the key.
    let foreign = gw
        .exec(
            &a,
            &[
                "sh",
                "-c",
                "ANTHROPIC_API_KEY=\"$1\" \"$2\" -c \"$3\" ANTHROPIC_API_KEY",
                "sh",
                &env_b["ANTHROPIC_API_KEY"],
                &py,
                SEND_PY,
            ],
        )
        .await;
    assert!(foreign.ok(), "{foreign:?}");
    for r in llm.requests() {
        assert_ne!(
            r.header("x-api-key"),
            Some(ANTHROPIC_KEY),
            "another session's phantom opened the key: {foreign:?}"
        );
    }

    // The session's own Anthropic phantom reaches the provider as the real key.
    let n = llm.requests().len();
    let right = gw
        .exec(&a, &[&py, "-c", SEND_PY, "ANTHROPIC_API_KEY"])
        .await;
    assert!(right.ok(), "{right:?}");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), n + 1, "{reqs:?} {right:?}");
    assert_eq!(reqs[n].header("x-api-key"), Some(ANTHROPIC_KEY));
}

/// The session's proxy token, from its child environment's proxy URL.
async fn token_of(gw: &Gateway, sid: &str) -> String {
    let env = env_of(&gw.sandbox_env(sid).await);
    let url = &env["HTTP_PROXY"];
    let userinfo = url
        .trim_start_matches("http://")
        .split('@')
        .next()
        .unwrap_or_default();
    userinfo.split(':').next().unwrap_or_default().to_string()
}

fn basic(token: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{token}:vis"))
    )
}

/// CONNECT through the proxy; the answer's head ("" when the proxy closed instead).
async fn connect_tunnel(proxy: u16, token: &str, target: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(("127.0.0.1", proxy)).await.unwrap();
    let _ = s
        .write_all(
            format!(
                "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {}\r\n\r\n",
                basic(token)
            )
            .as_bytes(),
        )
        .await;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut b).await {
                Ok(1) => head.push(b[0]),
                _ => break,
            }
        }
    })
    .await;
    (s, String::from_utf8_lossy(&head).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_healthz_while_the_proxy_is_at_its_connection_cap() {
    const CAP: usize = 24;
    // a local service that holds every connection open
    let held = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("127.0.0.1:{}", held.local_addr().unwrap().port());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = held.accept().await {
            tokio::spawn(async move {
                let mut sink = Vec::new();
                let _ = s.read_to_end(&mut sink).await;
            });
        }
    });
    let opts = Opts::default().env("VIS_PROXY_MAX_CONNECTIONS", &CAP.to_string());
    let gw = start_with_network(loopback_policy(), opts).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let token = token_of(&gw, &sid).await;
    let proxy = gw.proxy_port(&sid).await;

    let mut tunnels = Vec::new();
    for _ in 0..CAP {
        let (s, head) = connect_tunnel(proxy, &token, &target).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        tunnels.push(s);
    }
    // established tunnels count: one more is refused
    let (_extra, head) = connect_tunnel(proxy, &token, &target).await;
    assert!(
        head.starts_with("HTTP/1.1 503"),
        "the proxy is at its cap and says so: {head:?}"
    );
    // and a flood of further connection attempts does not take the API down
    let mut flood = Vec::new();
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", proxy)).await {
            flood.push(s);
        }
    }
    let t = Instant::now();
    let (status, body) = gw.get("/healthz").await;
    let took = t.elapsed();
    assert!(status.is_success(), "{status} {body}");
    // generous for a shared CI machine; `scripts/bench-egress` measures the real figure
    assert!(took < Duration::from_secs(2), "/healthz took {took:?}");
    drop(tunnels);
}

/// One plain-HTTP request through the proxy on a new connection; the status line ("" when
/// the proxy closed instead of answering).
async fn proxied_get(proxy: u16, token: &str, url: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", proxy)).await else {
        return String::new();
    };
    let host = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or("");
    let req = format!(
        "GET {url} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {}\r\nConnection: close\r\n\r\n",
        basic(token)
    );
    if s.write_all(req.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    text.lines().next().unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_unauthenticated_connections_do_not_lock_a_session_out_of_the_proxy() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let token = token_of(&gw, &sid).await;
    let proxy = gw.proxy_port(&sid).await;
    // 2,100 connections that never say a word, each opened again as soon as it is closed
    // (opened 50 at a time, so the listener's accept queue does not overflow).
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let mut idlers = Vec::new();
    for i in 0..2100u64 {
        let (stop, opened) = (stop.clone(), opened.clone());
        idlers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(i / 50 * 25)).await;
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", proxy)).await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                opened.fetch_add(1, Ordering::Relaxed);
                let mut sink = Vec::new();
                let _ =
                    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut sink)).await;
            }
        }));
    }
    let deadline = Instant::now() + WAIT;
    while opened.load(Ordering::Relaxed) < 2100 {
        assert!(
            Instant::now() < deadline,
            "the idle connections were not opened: {}",
            opened.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // every idler has started (the ramp takes ~1 s), and the proxy has had time to accept
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let url = format!("{}/through", origin.url());
    let mut answers = Vec::new();
    for _ in 0..10 {
        answers.push(proxied_get(proxy, &token, &url).await);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in idlers {
        t.abort();
    }
    assert!(
        answers.iter().all(|a| a.starts_with("HTTP/1.1 200")),
        "the session's requests were refused: {answers:?}"
    );
    let log = gw.stderr();
    let refusals = log
        .lines()
        .filter(|l| l.contains("refused a connection"))
        .count();
    assert!(
        refusals <= 3,
        "refusals are logged at most once per 10 s, not once each: {refusals} lines"
    );
}

/// Sends `head` + `body` to the API and returns the status line (bounded).
async fn raw_api(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    let _ = tokio::time::timeout(Duration::from_secs(8), async {
        while !out.windows(2).any(|w| w == b"\r\n") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_stalls_gets_a_408_from_the_api_instead_of_holding_it() {
    let gw = Gateway::start(Opts::default().env("VIS_GATEWAY_BODY_IDLE_MS", "500")).await;
    let head = "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Vis-Protocol: 2\r\nX-Vis-Min-Gateway-Protocol: 2\r\nContent-Type: application/json\r\n";
    let t = Instant::now();
    let short = raw_api(
        gw.port,
        &format!("{head}Content-Length: 1000\r\n\r\n{{\"channel\":"),
    )
    .await;
    assert!(short.starts_with("HTTP/1.1 408"), "{short:?}");
    let huge = raw_api(
        gw.port,
        &format!("{head}Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nabc"),
    )
    .await;
    assert!(
        huge.starts_with("HTTP/1.1 408") || huge.starts_with("HTTP/1.1 400"),
        "{huge:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(8));
    // the gateway still serves
    let (s, v) = gw.get("/healthz").await;
    assert!(s.is_success(), "{v}");
}

/// A loopback echo server; its `host:port`.
async fn echo_server() -> String {
    let held = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("127.0.0.1:{}", held.local_addr().unwrap().port());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = held.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 64];
                while let Ok(n) = s.read(&mut b).await {
                    if n == 0 || s.write_all(&b[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    target
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_that_lasts_reaches_the_phone_while_it_runs_and_again_when_it_closes() {
    let target = echo_server().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let token = token_of(&gw, &sid).await;
    let proxy = gw.proxy_port(&sid).await;
    let mut sse = gw.events(&sid, -1).await;
    let (mut tunnel, head) = connect_tunnel(proxy, &token, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let open = sse
        .collect_until_any(&["egress.decision"], Duration::from_secs(10))
        .await;
    let open = open.last().expect("an egress event while the tunnel runs");
    assert_eq!(open.data["state"], "open", "{:?}", open.data);
    assert_eq!(open.data["lane"], "connect");
    tunnel.write_all(b"ping").await.unwrap();
    let mut echo = [0u8; 4];
    tunnel.read_exact(&mut echo).await.unwrap();
    drop(tunnel);
    let closed = sse
        .collect_until_any(&["egress.decision"], Duration::from_secs(10))
        .await;
    let closed = closed.last().expect("the closing event");
    assert_eq!(closed.data["state"], "closed", "{:?}", closed.data);
    assert_eq!(closed.data["id"], open.data["id"], "one record");
    assert_eq!(closed.data["bytes_up"], 4);
    assert_eq!(closed.data["bytes_down"], 4);
    let stored = gw.wait_egress(&sid, 1).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["state"], "closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_shorter_than_a_second_reaches_the_phone_once_when_it_closes() {
    let target = echo_server().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let token = token_of(&gw, &sid).await;
    let proxy = gw.proxy_port(&sid).await;
    let mut sse = gw.events(&sid, -1).await;
    let (mut tunnel, head) = connect_tunnel(proxy, &token, &target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tunnel.write_all(b"ping").await.unwrap();
    let mut echo = [0u8; 4];
    tunnel.read_exact(&mut echo).await.unwrap();
    drop(tunnel);
    let seen = sse
        .collect_until_any(&["egress.decision"], Duration::from_secs(10))
        .await;
    let only = seen.last().expect("the tunnel's event");
    assert!(only.data["state"].is_null(), "{:?}", only.data);
    assert_eq!(only.data["lane"], "connect");
    assert_eq!(only.data["bytes_up"], 4);
    assert_eq!(only.data["bytes_down"], 4);
    let later = sse.drain_for(Duration::from_millis(1500)).await;
    assert!(
        later.iter().all(|e| e.event != "egress.decision"),
        "a second event for a short tunnel: {later:?}"
    );
    let stored = gw.wait_egress(&sid, 1).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(stored[0]["state"].is_null(), "{:?}", stored[0]);
}

/// Writes `wire` to the proxy on a new connection and reads until the proxy closes it (or
/// `within` passes); what came back, and how long it took.
async fn raw_proxy(proxy: u16, wire: &[u8], within: Duration) -> (String, Duration) {
    let mut s = TcpStream::connect(("127.0.0.1", proxy)).await.unwrap();
    let t = Instant::now();
    s.write_all(wire).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(within, s.read_to_end(&mut out)).await;
    (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_size_of_2_to_the_64_minus_1_is_answered_400_at_once_and_the_connection_closed() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let token = token_of(&gw, &sid).await;
    let proxy = gw.proxy_port(&sid).await;
    let url = format!("{}/huge", origin.url());
    let head = format!(
        "POST {url} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nProxy-Authorization: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        origin.port,
        basic(&token)
    );
    let wire = format!("{head}FFFFFFFFFFFFFFFF\r\nhello");
    // the request body's idle timeout (10 s) must not be what answers
    let (answer, took) = raw_proxy(proxy, wire.as_bytes(), Duration::from_secs(12)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    assert!(
        took < Duration::from_secs(3),
        "answered and closed after {took:?}"
    );
    assert!(answer.contains("18446744073709551615"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(
        origin.requests().is_empty(),
        "nothing was sent upstream: {:?}",
        origin.requests().len()
    );
    let d = gw.wait_egress(&sid, 1).await;
    let d = d
        .iter()
        .find(|d| d["path"] == "/huge")
        .unwrap_or_else(|| panic!("recorded: {d:?}"));
    assert_eq!(d["error_kind"], "request-chunk-too-large", "{d}");
    assert!(
        d["reason"]
            .as_str()
            .is_some_and(|r| r.contains("18446744073709551615")),
        "{d}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_uploads_with_trailers_and_pipelined_requests_still_go_through_the_proxy() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let token = token_of(&gw, &sid).await;
    let proxy = gw.proxy_port(&sid).await;
    let (base, host, auth) = (
        origin.url(),
        format!("127.0.0.1:{}", origin.port),
        basic(&token),
    );
    // three requests in one write: several chunks (one of them a large one, one with an
    // extension, data that looks like an absurd size line) and trailers; a GET; a
    // Content-Length body; the last one closes the connection
    let big = "x".repeat(100_000);
    let mut wire = format!(
        "POST {base}/up HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {auth}\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\nhello\r\n12;note=odd\r\nFFFFFFFFFFFFFFFF\r\n\r\n{:x}\r\n{big}\r\n0\r\nX-Checksum: 1\r\n\r\n",
        big.len()
    );
    wire.push_str(&format!(
        "GET {base}/next HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {auth}\r\n\r\n"
    ));
    wire.push_str(&format!(
        "PUT {base}/last HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {auth}\r\nContent-Length: 4\r\nConnection: close\r\n\r\ndone"
    ));
    let (answer, _) = raw_proxy(proxy, wire.as_bytes(), Duration::from_secs(10)).await;
    assert_eq!(
        answer.matches("HTTP/1.1 200").count(),
        3,
        "three answers: {answer}"
    );
    let order: Vec<&str> = answer
        .lines()
        .filter(|l| l.starts_with("origin-ok"))
        .collect();
    assert_eq!(
        order,
        [
            "origin-ok POST /up",
            "origin-ok GET /next",
            "origin-ok PUT /last"
        ]
    );
    let seen = origin.requests();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let expected = format!("helloFFFFFFFFFFFFFFFF\r\n{big}");
    assert_eq!(
        String::from_utf8_lossy(&seen[0].body),
        expected,
        "the chunked body arrived whole"
    );
    assert_eq!(seen[2].body, b"done");
}
