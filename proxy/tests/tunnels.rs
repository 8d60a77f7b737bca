//! CONNECT and SOCKS5 lanes, the same verdict on every lane, and the SSRF
//! floor through the recording dialer (no packet leaves loopback).

mod common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vis_proxy::{Lane, Verdict};

/// SOCKS5 handshake with username auth; returns every byte the proxy sent.
async fn socks(port: u16, user: Option<&str>, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 64];
    match user {
        Some(u) => {
            s.write_all(&[5, 1, 2]).await.unwrap();
            s.read_exact(&mut buf[..2]).await.unwrap();
            out.extend_from_slice(&buf[..2]);
            let mut a = vec![1, u.len() as u8];
            a.extend_from_slice(u.as_bytes());
            a.extend_from_slice(&[1, b'x']);
            s.write_all(&a).await.unwrap();
            s.read_exact(&mut buf[..2]).await.unwrap();
            out.extend_from_slice(&buf[..2]);
            if buf[1] != 0 {
                return out;
            }
        }
        None => {
            s.write_all(&[5, 1, 0]).await.unwrap();
            s.read_exact(&mut buf[..2]).await.unwrap();
            out.extend_from_slice(&buf[..2]);
        }
    }
    s.write_all(request).await.unwrap();
    if let Ok(Ok(n)) =
        tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&mut buf)).await
    {
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn domain_req(name: &str, port: u16) -> Vec<u8> {
    let mut r = vec![5, 1, 0, 3, name.len() as u8];
    r.extend_from_slice(name.as_bytes());
    r.extend_from_slice(&port.to_be_bytes());
    r
}

fn rep(out: &[u8]) -> u8 {
    out[out.len() - 9]
}

#[tokio::test]
async fn the_same_host_gets_the_same_verdict_on_http_connect_and_socks5() {
    let h = start(Setup {
        policy: "allowed_domains: [origin.test]\n",
        ..Default::default()
    })
    .await;
    let o = origin().await;
    let ok = format!("http://origin.test:{}/v", o.port());
    let bad = format!("http://evil.test:{}/v", o.port());
    assert_eq!(curl(&["--proxy", &h.http_proxy(), &ok]).await.status(), 200);
    assert_eq!(
        curl(&["--proxy", &h.http_proxy(), &bad]).await.status(),
        403
    );
    let t = curl(&["--proxytunnel", "--proxy", &h.http_proxy(), &ok]).await;
    assert_eq!(t.status(), 200, "{t:?}");
    assert!(
        t.stdout.contains("HTTP/1.1 200 Connection Established"),
        "{}",
        t.stdout
    );
    let t = curl(&["--proxytunnel", "--proxy", &h.http_proxy(), &bad]).await;
    assert_ne!(t.code, 0);
    assert!(
        t.stdout.contains("403") || t.stderr.contains("403"),
        "{t:?}"
    );
    let s = curl(&["--proxy", &h.socks_proxy(), &ok]).await;
    assert_eq!(s.status(), 200, "{s:?}");
    assert_eq!(s.body(), "hello from origin: GET /v");
    let s = curl(&["--proxy", &h.socks_proxy(), &bad]).await;
    assert_ne!(s.code, 0);
    assert_eq!(
        rep(&socks(h.port(), Some(TOKEN), &domain_req("evil.test", o.port())).await),
        2
    );
    // a CONNECT or SOCKS5 tunnel shorter than a second is one record, when it closes
    let recs = h.sink.wait_for(6).await;
    let lanes: Vec<(Lane, Verdict)> = recs.iter().map(|d| (d.lane, d.decision)).collect();
    for lane in [Lane::Http, Lane::Connect, Lane::Socks] {
        assert!(lanes.contains(&(lane, Verdict::Allow)), "{lanes:?}");
        assert!(lanes.contains(&(lane, Verdict::Deny)), "{lanes:?}");
    }
    let tunnel = recs
        .iter()
        .find(|d| d.lane == Lane::Connect && d.decision == Verdict::Allow)
        .expect("the tunnel's record");
    assert_eq!(tunnel.state, None, "a short tunnel is one plain record");
    assert!(tunnel.bytes_up > 0 && tunnel.bytes_down > 0);
    assert_eq!(tunnel.method, None);
}

#[tokio::test]
async fn socks5_ipv4_and_ipv6_address_types_follow_the_policy() {
    let h = start(Setup {
        policy: "allowed_domains: ['127.0.0.1', '::1']\n",
        ..Default::default()
    })
    .await;
    let o4 = origin().await;
    let o6 = origin_on("[::1]:0").await;
    let p = format!("socks5://{TOKEN}:x@127.0.0.1:{}", h.port());
    let r = curl(&[
        "--proxy",
        &p,
        &format!("http://127.0.0.1:{}/four", o4.port()),
    ])
    .await;
    assert_eq!(r.status(), 200, "{r:?}");
    let r = curl(&["--proxy", &p, &format!("http://[::1]:{}/six", o6.port())]).await;
    assert_eq!(r.status(), 200, "{r:?}");
    assert_eq!(o6.seen()[0].path, "/six");
    let recs = h.sink.wait_for(2).await;
    assert!(recs
        .iter()
        .any(|d| d.host == "::1" && d.lane == Lane::Socks));

    let h2 = start(Setup {
        policy: "denied_domains: ['::1']\n",
        ..Default::default()
    })
    .await;
    let mut v6 = vec![5, 1, 0, 4];
    v6.extend_from_slice(&"::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    v6.extend_from_slice(&o6.port().to_be_bytes());
    assert_eq!(rep(&socks(h2.port(), Some(TOKEN), &v6).await), 2);
    let r = curl(&[
        "--proxy",
        &h2.http_proxy(),
        &format!("http://[::1]:{}/six", o6.port()),
    ])
    .await;
    assert_eq!(r.status(), 403);
    assert!(h2.dialer.dialled().is_empty());
}

#[tokio::test]
async fn socks5_auth_and_protocol_errors_answer_the_spec_codes() {
    let h = start(Setup::default()).await;
    let o = origin().await;
    assert_eq!(
        socks(h.port(), Some("unknown"), &[]).await,
        vec![5, 2, 1, 1]
    );
    let out = socks(h.port(), None, &domain_req("localhost", o.port())).await;
    assert_eq!(&out[..2], &[5, 0]);
    assert_eq!(rep(&out), 2, "no-auth client is refused at CONNECT");
    let out = raw_bytes(h.port(), &[5, 1, 0x80], "").await;
    assert_eq!(out, vec![5, 0xff]);
    let mut bind = domain_req("localhost", o.port());
    bind[1] = 2;
    assert_eq!(rep(&socks(h.port(), Some(TOKEN), &bind).await), 7);
    assert_eq!(
        rep(&socks(h.port(), Some(TOKEN), &[5, 1, 0, 5, 1, 2, 3, 4, 0, 80]).await),
        8
    );
    assert_eq!(
        rep(&socks(h.port(), Some(TOKEN), &[5, 1, 0, 3, 0, 0, 80]).await),
        8
    );
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cport = closed.local_addr().unwrap().port();
    drop(closed);
    assert_eq!(
        rep(&socks(h.port(), Some(TOKEN), &domain_req("localhost", cport)).await),
        5
    );
    let ok = socks(h.port(), Some(TOKEN), &domain_req("localhost", o.port())).await;
    assert_eq!(ok, vec![5, 2, 1, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
}

#[tokio::test]
async fn connect_follows_rule_ports_and_parses_ipv6_targets() {
    let o = origin().await;
    let o6 = origin_on("[::1]:0").await;
    let policy: &'static str = Box::leak(
        format!("rules: [{{host: localhost, ports: [{}]}}]\n", o.port()).into_boxed_str(),
    );
    let h = start(Setup {
        policy,
        ..Default::default()
    })
    .await;
    let auth = basic(TOKEN);
    let ok = raw(
        h.port(),
        format!(
            "CONNECT localhost:{} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n",
            o.port()
        )
        .as_bytes(),
        "\r\n\r\n",
    )
    .await;
    assert!(
        ok.starts_with("HTTP/1.1 200 Connection Established\r\n"),
        "{ok}"
    );
    let bad = raw(
        h.port(),
        format!(
            "CONNECT localhost:{} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n",
            o.port() + 1
        )
        .as_bytes(),
        "\r\n\r\n!",
    )
    .await;
    assert!(bad.starts_with("HTTP/1.1 403 Forbidden"), "{bad}");
    assert!(bad.contains("blocked-by-port-policy"));
    let v6 = raw(
        h.port(),
        format!(
            "CONNECT [::1]:{} HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n",
            o6.port()
        )
        .as_bytes(),
        "\r\n\r\n",
    )
    .await;
    assert!(
        v6.starts_with("HTTP/1.1 200 Connection Established"),
        "{v6}"
    );
    let none = raw(
        h.port(),
        format!("CONNECT localhost:{} HTTP/1.1\r\n\r\n", o.port()).as_bytes(),
        "\r\n\r\n!",
    )
    .await;
    assert!(none.starts_with("HTTP/1.1 407"), "{none}");
}

#[tokio::test]
async fn metadata_address_is_denied_on_every_lane_without_dialling() {
    let h = start(Setup {
        policy: "allow_private: true\n",
        ..Default::default()
    })
    .await;
    h.resolver.set("meta.test", &["169.254.169.254"]);
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "http://169.254.169.254/latest/meta-data/",
    ])
    .await;
    assert_eq!(r.status(), 403);
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("blocked-by-ssrf")
    );
    assert_eq!(
        r.body(),
        "blocked internal address for host: 169.254.169.254\n"
    );
    let r = curl(&["--proxy", &h.http_proxy(), "http://meta.test/"]).await;
    assert_eq!(r.body(), "blocked internal address for host: meta.test\n");
    let c = raw(
        h.port(),
        format!(
            "CONNECT 169.254.169.254:80 HTTP/1.1\r\nProxy-Authorization: {}\r\n\r\n",
            basic(TOKEN)
        )
        .as_bytes(),
        "\r\n\r\n!",
    )
    .await;
    assert!(c.starts_with("HTTP/1.1 403"), "{c}");
    assert_eq!(
        rep(&socks(
            h.port(),
            Some(TOKEN),
            &[5, 1, 0, 1, 169, 254, 169, 254, 0, 80]
        )
        .await),
        2
    );
    assert_eq!(
        rep(&socks(h.port(), Some(TOKEN), &domain_req("meta.test", 80)).await),
        2
    );
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "http://metadata.google.internal/",
    ])
    .await;
    assert_eq!(r.status(), 403);
    assert!(h.dialer.dialled().is_empty());
    // every attempt above is one denial record
    let recs = h.sink.wait_for(8).await;
    assert!(
        recs.iter()
            .all(|d| d.decision == Verdict::Deny
                && d.error_kind.as_deref() == Some("blocked-by-ssrf"))
    );
}

#[tokio::test]
async fn ip_literal_encodings_cannot_bypass_the_floor() {
    let o = origin().await;
    let h = start(Setup {
        reserved: vec![o.port()],
        ..Default::default()
    })
    .await;
    let auth = basic(TOKEN);
    for host in [
        "0xa9fea9fe",
        "2852039166",
        "0251.0376.0251.0376",
        "169.254.43518",
        "0xA9.0xFE.0xA9.0xFE",
    ] {
        let out = raw(h.port(), format!("GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {auth}\r\n\r\n").as_bytes(), "\r\n\r\n!").await;
        assert!(out.starts_with("HTTP/1.1 403"), "{host}: {out}");
        assert!(
            out.contains("blocked internal address for host: 169.254.169.254"),
            "{host}: {out}"
        );
    }
    for host in ["2130706433", "0177.0.0.1", "0x7f.0.0.1", "127.1"] {
        let out = raw(h.port(), format!("GET http://{host}:{p}/ HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {auth}\r\n\r\n", p = o.port()).as_bytes(), "\r\n\r\n!").await;
        assert!(
            out.contains("blocked loopback address for host: 127.0.0.1"),
            "{host}: {out}"
        );
    }
    assert_eq!(
        rep(&socks(h.port(), Some(TOKEN), &domain_req("2130706433", o.port())).await),
        2
    );
    assert!(h.dialer.dialled().is_empty());
    assert!(o.seen().is_empty());
}

#[tokio::test]
async fn private_and_cgnat_answers_need_allow_private_and_then_dial_the_validated_address() {
    let h = start(Setup::default()).await;
    h.resolver.set("private.test", &["10.0.0.5"]);
    h.resolver.set("cgnat.test", &["100.64.0.1"]);
    h.resolver.set("ula.test", &["fc00::1"]);
    for host in [
        "private.test",
        "cgnat.test",
        "ula.test",
        "10.1.2.3",
        "100.100.1.1",
        "[fd12::1]",
    ] {
        let r = curl(&["--proxy", &h.http_proxy(), &format!("http://{host}/")]).await;
        assert_eq!(r.status(), 403, "{host}");
        assert!(
            r.body().starts_with("blocked private address for host: "),
            "{host}: {}",
            r.body()
        );
    }
    assert!(h.dialer.dialled().is_empty());
    h.add_token("priv", "sess-p", "allow_private: true\n", vec![]);
    let r = curl(&[
        "--proxy",
        &format!("http://priv:@127.0.0.1:{}", h.port()),
        "http://private.test/",
    ])
    .await;
    assert_eq!(
        r.status(),
        502,
        "the recording dialer refuses non-loopback: {r:?}"
    );
    assert_eq!(h.dialer.dialled(), vec!["10.0.0.5:80".parse().unwrap()]);
}

#[tokio::test]
async fn dns_rebinding_dials_the_address_validated_by_the_single_lookup() {
    let h = start(Setup::default()).await;
    let o = origin().await;
    h.resolver
        .set_seq("rebind.test", &[&["127.0.0.1"], &["169.254.169.254"]]);
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        &format!("http://rebind.test:{}/first", o.port()),
    ])
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        h.resolver.calls_for("rebind.test"),
        1,
        "resolved exactly once for the request"
    );
    assert_eq!(h.dialer.dialled(), vec![o.addr.unwrap()]);
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        &format!("http://rebind.test:{}/second", o.port()),
    ])
    .await;
    assert_eq!(r.status(), 403);
    assert_eq!(h.dialer.dialled().len(), 1);
}

#[tokio::test]
async fn mixed_public_and_private_answers_block_and_public_ones_dial_the_first_answer() {
    let h = start(Setup::default()).await;
    h.resolver.set("mixed.test", &["93.184.216.34", "10.0.0.1"]);
    h.resolver.set("public.test", &["93.184.216.34", "1.1.1.1"]);
    assert_eq!(
        curl(&["--proxy", &h.http_proxy(), "http://mixed.test/"])
            .await
            .status(),
        403
    );
    assert!(h.dialer.dialled().is_empty());
    assert_eq!(
        curl(&["--proxy", &h.http_proxy(), "http://public.test/"])
            .await
            .status(),
        502
    );
    assert_eq!(
        h.dialer.dialled(),
        vec!["93.184.216.34:80".parse().unwrap()]
    );
    let r = curl(&["--proxy", &h.http_proxy(), "http://nxdomain.test/"]).await;
    assert_eq!(r.body(), "cannot resolve host: nxdomain.test\n");
}

#[tokio::test]
async fn a_denied_name_is_also_denied_by_its_addresses() {
    let h = start(Setup {
        policy: "denied_domains: [denied.test]\n",
        ..Default::default()
    })
    .await;
    h.resolver.set("denied.test", &["93.184.216.34"]);
    h.resolver.set("alias.test", &["93.184.216.34"]);
    h.resolver.set("fine.test", &["93.184.216.35"]);
    let r = curl(&["--proxy", &h.http_proxy(), "http://denied.test/"]).await;
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("blocked-by-denylist")
    );
    refused_by_address_and_fine_test_dialled(&h, &["http://93.184.216.34/", "http://alias.test/"])
        .await;
}

/// Each target is refused for a denied address without a dial; `fine.test` (resolving
/// elsewhere) is dialled (the test dialer refuses, so 502).
async fn refused_by_address_and_fine_test_dialled(h: &Harness, targets: &[&str]) {
    for target in targets {
        let r = curl(&["--proxy", &h.http_proxy(), target]).await;
        assert_eq!(r.status(), 403, "{target}");
        assert!(
            r.body()
                .starts_with("blocked denied-domain address for host:"),
            "{target}: {}",
            r.body()
        );
    }
    assert!(h.dialer.dialled().is_empty());
    assert_eq!(
        curl(&["--proxy", &h.http_proxy(), "http://fine.test/"])
            .await
            .status(),
        502
    );
    assert_eq!(h.dialer.dialled().len(), 1);
}

#[tokio::test]
async fn a_denied_ip_literal_also_denies_every_name_that_resolves_to_it() {
    let h = start(Setup {
        policy: "denied_domains: [93.184.216.34, '::ffff:93.184.216.36']\n",
        ..Default::default()
    })
    .await;
    h.resolver.set("alias.test", &["93.184.216.34"]);
    h.resolver.set("mapped.test", &["93.184.216.36"]);
    h.resolver.set("fine.test", &["93.184.216.35"]);
    refused_by_address_and_fine_test_dialled(&h, &["http://alias.test/", "http://mapped.test/"])
        .await;
}
