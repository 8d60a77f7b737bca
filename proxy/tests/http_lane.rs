//! Plain HTTP lane, attribution and the wire formats, driven by real curl.

mod common;

use common::*;
use vis_proxy::{Lane, Verdict};

#[tokio::test]
async fn request_without_token_gets_407_with_realm_and_kind() {
    let h = start(Setup::default()).await;
    let o = origin().await;
    let url = format!("http://127.0.0.1:{}/x", o.port());
    let r = curl(&["--proxy", &format!("http://127.0.0.1:{}", h.port()), &url]).await;
    assert_eq!(r.status(), 407, "{r:?}");
    assert_eq!(
        r.header("proxy-authenticate").as_deref(),
        Some("Basic realm=\"vis-session\"")
    );
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("proxy-auth-required")
    );
    assert_eq!(
        r.body(),
        "vis-agent: missing Proxy-Authorization (unattributable egress)\n"
    );
    assert!(o.seen().is_empty());
}

#[tokio::test]
async fn request_with_unknown_token_gets_407_naming_the_dead_session() {
    let h = start(Setup::default()).await;
    let o = origin().await;
    let url = format!("http://127.0.0.1:{}/x", o.port());
    let r = curl(&[
        "--proxy",
        &format!("http://nope:@127.0.0.1:{}", h.port()),
        &url,
    ])
    .await;
    assert_eq!(r.status(), 407);
    assert_eq!(
        r.body(),
        "vis-agent: no live session for this proxy token\n"
    );
}

#[tokio::test]
async fn attribution_backend_failure_fails_closed_with_403() {
    let h = start(Setup::default()).await;
    let o = origin().await;
    let url = format!("http://127.0.0.1:{}/x", o.port());
    let r = curl(&[
        "--proxy",
        &format!("http://explode:@127.0.0.1:{}", h.port()),
        &url,
    ])
    .await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.body(), "vis-agent: session policy error\n");
}

#[tokio::test]
async fn allowed_request_reaches_origin_without_proxy_headers_and_is_recorded() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let url = format!("http://origin.test:{}/hello?q=1", o.port());
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "-H",
        "Proxy-Connection: keep-alive",
        &url,
    ])
    .await;
    assert_eq!(r.status(), 200, "{r:?}");
    assert_eq!(r.body(), "hello from origin: GET /hello?q=1");
    let seen = o.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].headers.get("proxy-authorization").is_none());
    assert!(seen[0].headers.get("proxy-connection").is_none());
    assert_eq!(
        seen[0].headers["host"],
        format!("origin.test:{}", o.port()).as_str()
    );
    let recs = h.sink.wait_for(1).await;
    let d = &recs[0];
    assert_eq!(d.decision, Verdict::Allow);
    assert_eq!(d.lane, Lane::Http);
    assert_eq!(d.phase, "http");
    assert_eq!(d.method.as_deref(), Some("GET"));
    assert_eq!(d.path.as_deref(), Some("/hello?q=1"));
    assert_eq!(d.host, "origin.test");
    assert_eq!(d.port, o.port());
    assert!(d.bytes_down > 0);
    assert_eq!(h.sink.records.lock().unwrap()[0].0, "sess-1");
    assert_eq!(h.dialer.dialled(), vec![o.addr.unwrap()]);
}

#[tokio::test]
async fn method_policy_denial_is_a_plain_text_403_with_kind_and_record() {
    let h = start(Setup {
        policy: "rules: [{host: origin.test, access: read-only}]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let url = format!("http://origin.test:{}/submit", o.port());
    let r = curl(&["--proxy", &h.http_proxy(), "-X", "POST", "-d", "x=1", &url]).await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.header("content-type").as_deref(), Some("text/plain"));
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("blocked-by-method-policy")
    );
    assert_eq!(
        r.body(),
        "method POST /submit not allowed for host origin.test\n"
    );
    assert!(o.seen().is_empty());
    let d = &h.sink.wait_for(1).await[0];
    assert_eq!(d.decision, Verdict::Deny);
    assert_eq!(d.error_kind.as_deref(), Some("blocked-by-method-policy"));
    assert_eq!(d.decided_by.rule_host.as_deref(), Some("origin.test"));
    assert_eq!(d.bytes_up, 0);
}

#[tokio::test]
async fn keep_alive_requests_are_each_decided_on_their_own() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test]\nrules: [{host: origin.test, access: ro}]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let a = format!("http://origin.test:{}/a", o.port());
    let b = format!("http://origin.test:{}/b", o.port());
    let c = format!("http://other.test:{}/c", o.port());
    // one curl process reuses its proxy connection for all three URLs
    let p = h.http_proxy();
    let r = curl(&[
        "-v", "--proxy", &p, &a, &b, "--next", "-sS", "-i", "-v", "--proxy", &p, "-d", "x=1", &a,
        "--next", "-sS", "-i", "-v", "--proxy", &p, &c,
    ])
    .await;
    let statuses: Vec<&str> = r.stdout.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(statuses.len(), 4, "{}", r.stdout);
    assert!(statuses[0].starts_with("200") && statuses[1].starts_with("200"));
    assert!(
        statuses[2].starts_with("403"),
        "POST must be denied: {statuses:?}"
    );
    assert!(
        statuses[3].starts_with("403"),
        "other host must be denied: {statuses:?}"
    );
    assert!(
        r.stderr.contains("Re-using existing connection"),
        "{}",
        r.stderr
    );
    assert_eq!(o.seen().len(), 2);
    let recs = h.sink.wait_for(4).await;
    assert_eq!(recs.len(), 4);
}

#[tokio::test]
async fn second_request_on_one_raw_connection_to_a_denied_host_is_denied() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let auth = basic(TOKEN);
    let req = format!(
        "GET http://origin.test:{p}/one HTTP/1.1\r\nHost: origin.test:{p}\r\nProxy-Authorization: {auth}\r\n\r\nGET http://evil.test:{p}/two HTTP/1.1\r\nHost: evil.test:{p}\r\nProxy-Authorization: {auth}\r\n\r\n",
        p = o.port()
    );
    let out = raw(h.port(), req.as_bytes(), "host not permitted: evil.test\n").await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("HTTP/1.1 403"), "{out}");
    assert!(
        out.contains("x-vis-egress-error: blocked-by-allowlist"),
        "{out}"
    );
    assert_eq!(o.seen().len(), 1);
}

#[tokio::test]
async fn garbage_origin_form_and_https_absolute_requests_get_400() {
    let h = start(Setup::default()).await;
    let out = raw(h.port(), b"THIS IS NOT HTTP\r\n\r\n", "\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    let out = raw(
        h.port(),
        b"GET /just/a/path HTTP/1.1\r\nHost: x\r\n\r\n",
        "\n\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(out.contains("malformed proxy request"));
    let out = raw(
        h.port(),
        b"GET https://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n",
        "CONNECT\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    let out = raw(h.port(), b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(out.ends_with("malformed proxy request\n"), "{out}");
}

#[tokio::test]
async fn socks4_first_byte_is_closed_cleanly() {
    let h = start(Setup::default()).await;
    let out = raw(h.port(), &[0x04, 0x01, 0x00, 0x50, 127, 0, 0, 1, 0], "").await;
    assert_eq!(out, "");
    assert!(h.sink.all().is_empty());
}

#[tokio::test]
async fn chunked_response_streams_incrementally() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = start(Setup::default()).await;
    let o = origin().await;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", h.port()))
        .await
        .unwrap();
    let req = format!("GET http://127.0.0.1:{p}/stream HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nProxy-Authorization: {}\r\n\r\n", basic(TOKEN), p = o.port());
    s.write_all(req.as_bytes()).await.unwrap();
    // chunk-3 is only produced after /release; seeing chunk-2 first proves streaming
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("chunk-2") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&got).contains("chunk-3"));
    let rel = curl(&[
        "--proxy",
        &h.http_proxy(),
        &format!("http://127.0.0.1:{}/release", o.port()),
    ])
    .await;
    assert_eq!(rel.status(), 200);
    while !String::from_utf8_lossy(&got).contains("chunk-3") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got)
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked"));
}

#[tokio::test]
async fn reserved_ports_are_denied_on_loopback() {
    let o = origin().await;
    let h = start(Setup {
        reserved: vec![o.port()],
        ..Default::default()
    })
    .await;
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        &format!("http://127.0.0.1:{}/", o.port()),
    ])
    .await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.body(), "blocked loopback address for host: 127.0.0.1\n");
    let own = format!("http://localhost:{}/", h.port());
    let r = curl(&["--proxy", &h.http_proxy(), &own]).await;
    assert_eq!(r.status(), 403, "the proxy's own port is reserved");
    assert!(o.seen().is_empty());
    assert!(h.dialer.dialled().is_empty());
}

#[tokio::test]
async fn two_sessions_get_their_own_policies_and_a_removed_token_gets_407() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test]\n",
        ..Default::default()
    })
    .await;
    h.add_token("tok-b", "sess-b", "allowed_domains: [other.test]\n", vec![]);
    let o = origin().await;
    let a_url = format!("http://origin.test:{}/", o.port());
    let b_proxy = format!("http://tok-b:@127.0.0.1:{}", h.port());
    assert_eq!(
        curl(&["--proxy", &h.http_proxy(), &a_url]).await.status(),
        200
    );
    assert_eq!(curl(&["--proxy", &b_proxy, &a_url]).await.status(), 403);
    h.attribution.map.lock().unwrap().remove("tok-b");
    assert_eq!(curl(&["--proxy", &b_proxy, &a_url]).await.status(), 407);
}

#[tokio::test]
async fn upstream_connection_refused_is_a_502() {
    let h = start(Setup::default()).await;
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        &format!("http://127.0.0.1:{port}/"),
    ])
    .await;
    assert_eq!(r.status(), 502, "{r:?}");
    assert!(r.body().starts_with("upstream error:"));
}

#[tokio::test]
async fn each_request_on_one_connection_is_attributed_by_its_own_token() {
    let h = start(Setup::default()).await;
    let o = origin().await;
    let (p, auth) = (o.port(), basic(TOKEN));
    let req = format!(
        "GET http://origin.test:{p}/one HTTP/1.1\r\nHost: origin.test:{p}\r\nProxy-Authorization: {auth}\r\n\r\n\
         GET http://origin.test:{p}/two HTTP/1.1\r\nHost: origin.test:{p}\r\n\r\n\
         GET http://origin.test:{p}/three HTTP/1.1\r\nHost: origin.test:{p}\r\nProxy-Authorization: {auth}\r\n\r\n"
    );
    let out = raw(h.port(), req.as_bytes(), "GET /three").await;
    let statuses: Vec<&str> = out.split("HTTP/1.1 ").skip(1).map(|s| &s[..3]).collect();
    assert_eq!(statuses, ["200", "407", "200"], "{out}");
    let paths: Vec<String> = o.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/one", "/three"]);
}

#[tokio::test]
async fn a_request_the_relay_does_not_take_is_served_by_the_http_server_in_order() {
    let h = start(Setup::default()).await;
    let o = origin().await;
    let (p, auth) = (o.port(), basic(TOKEN));
    // a plain GET (the relay), a chunked upload (the HTTP server from here on), a GET
    let req = format!(
        "GET http://origin.test:{p}/first HTTP/1.1\r\nHost: origin.test:{p}\r\nProxy-Authorization: {auth}\r\n\r\n\
         POST http://origin.test:{p}/upload HTTP/1.1\r\nHost: origin.test:{p}\r\nProxy-Authorization: {auth}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n\
         GET http://origin.test:{p}/last HTTP/1.1\r\nHost: origin.test:{p}\r\nProxy-Authorization: {auth}\r\n\r\n"
    );
    let out = raw(h.port(), req.as_bytes(), "GET /last").await;
    let answers: Vec<&str> = out.split("HTTP/1.1 200").skip(1).collect();
    assert_eq!(answers.len(), 3, "{out}");
    assert!(answers[0].contains("GET /first") && answers[1].contains("POST /upload"));
    let seen = o.seen();
    let got: Vec<(&str, &str, &[u8])> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.path.as_str(), &s.body[..]))
        .collect();
    assert_eq!(
        got,
        [
            ("GET", "/first", &b""[..]),
            ("POST", "/upload", &b"hello"[..]),
            ("GET", "/last", &b""[..])
        ]
    );
    assert!(seen
        .iter()
        .all(|s| !s.headers.contains_key("proxy-authorization")));
    assert_eq!(h.sink.wait_for(3).await.len(), 3);
}

#[tokio::test]
async fn a_small_body_and_the_client_s_host_field_reach_the_origin_as_sent() {
    let h = start(Setup::default()).await;
    let o = origin().await;
    let (p, auth) = (o.port(), basic(TOKEN));
    let req = format!(
        "PUT http://ORIGIN.test:{p}/put?x=1 HTTP/1.1\r\nHost: vhost.example\r\nProxy-Authorization: {auth}\r\n\
         Proxy-Connection: keep-alive\r\nContent-Length: 3\r\nX-Kept: yes\r\n\r\nabc"
    );
    let out = raw(h.port(), req.as_bytes(), "PUT /put?x=1").await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let seen = o.seen();
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!((s.method.as_str(), s.path.as_str()), ("PUT", "/put?x=1"));
    assert_eq!(&s.body[..], b"abc");
    assert_eq!(s.headers["host"], "vhost.example");
    assert_eq!(s.headers["x-kept"], "yes");
    assert!(!s.headers.contains_key("proxy-connection"));
    let recs = h.sink.wait_for(1).await;
    assert_eq!(
        (recs[0].host.as_str(), recs[0].path.as_deref()),
        ("origin.test", Some("/put?x=1"))
    );
}

#[tokio::test]
async fn a_port_that_is_not_one_is_a_400_not_a_request_to_port_80() {
    let h = start(Setup::default()).await;
    let auth = basic(TOKEN);
    for target in ["http://origin.test:99999/", "http://origin.test:/"] {
        let req = format!(
            "GET {target} HTTP/1.1\r\nHost: origin.test\r\nProxy-Authorization: {auth}\r\n\r\n"
        );
        let out = raw(h.port(), req.as_bytes(), "\r\n\r\n").await;
        assert!(out.starts_with("HTTP/1.1 400"), "{target}: {out}");
    }
}
