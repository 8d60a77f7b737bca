//! Bypass battery from a sandbox child: the same verdict for the same host on every lane
//! (plain HTTP, CONNECT, SOCKS5) and in every IP-literal spelling; the gateway's and the
//! proxy's own ports are never reachable; tokens are required and die with their session.

mod common;

use common::*;
use reqwest::Method;
use serde_json::json;
use std::collections::BTreeMap;

/// Runs each `label curl-args…` line of `cases` in one child and returns
/// `label → (curl exit code, body + " code=… connect=…")`.
async fn battery(
    gw: &Gateway,
    sid: &str,
    cases: &[(&str, String)],
) -> BTreeMap<String, (i32, String)> {
    let mut script = String::from(
        "S=${HTTP_PROXY#http://}\n\
         run() { label=$1; shift; body=$(curl -sS --max-time 8 -w ' code=%{http_code} connect=%{http_connect}' \"$@\" 2>&1); rc=$?; printf '%s\\t%s\\t%s\\n' \"$label\" \"$rc\" \"$(printf %s \"$body\" | tr '\\n' ' ')\"; }\n",
    );
    for (label, args) in cases {
        script.push_str(&format!("run {label} {args}\n"));
    }
    let out = gw.exec(sid, &["sh", "-c", &script]).await;
    assert!(out.ok(), "{out:?}");
    out.stdout
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, '\t');
            Some((
                it.next()?.to_string(),
                (it.next()?.parse().ok()?, it.next()?.to_string()),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lane_gives_the_same_verdict_for_the_same_host() {
    let origin = Origin::start().await;
    let gw = start_with_network(json!({"allowed_domains": ["localhost"]}), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let p = origin.port;
    let cases = vec![
        (
            "plain_name",
            format!("-x \"$HTTP_PROXY\" http://localhost:{p}/plain_name"),
        ),
        (
            "connect_name",
            format!("-p -x \"$HTTP_PROXY\" http://localhost:{p}/connect_name"),
        ),
        (
            "socks_name",
            format!("--socks5-hostname \"$S\" http://localhost:{p}/socks_name"),
        ),
        (
            "env_socks_name",
            format!("-x \"socks5h://$S\" http://localhost:{p}/env_socks_name"),
        ),
        (
            "plain_ip",
            format!("-x \"$HTTP_PROXY\" http://127.0.0.1:{p}/plain_ip"),
        ),
        (
            "plain_decimal",
            format!("-x \"$HTTP_PROXY\" http://2130706433:{p}/plain_decimal"),
        ),
        (
            "plain_hex",
            format!("-x \"$HTTP_PROXY\" http://0x7f.1:{p}/plain_hex"),
        ),
        (
            "plain_octal",
            format!("-x \"$HTTP_PROXY\" http://0177.0.0.1:{p}/plain_octal"),
        ),
        (
            "connect_ip",
            format!("-p -x \"$HTTP_PROXY\" http://127.0.0.1:{p}/connect_ip"),
        ),
        (
            "socks_h_ip",
            format!("--socks5-hostname \"$S\" http://127.0.0.1:{p}/socks_h_ip"),
        ),
        (
            "socks_ip",
            format!("--socks5 \"$S\" http://127.0.0.1:{p}/socks_ip"),
        ),
    ];
    let r = battery(&gw, &sid, &cases).await;
    assert_eq!(r.len(), cases.len(), "{r:?}");
    for label in ["plain_name", "connect_name", "socks_name", "env_socks_name"] {
        let (rc, body) = &r[label];
        assert_eq!(*rc, 0, "{label}: {body}");
        assert!(
            body.contains(&format!("origin-ok GET /{label}")),
            "{label}: {body}"
        );
    }
    for label in ["plain_ip", "plain_decimal", "plain_hex", "plain_octal"] {
        let (_, body) = &r[label];
        assert!(body.contains("code=403"), "{label}: {body}");
        assert!(
            body.contains("host not permitted: 127.0.0.1"),
            "{label}: {body}"
        );
    }
    let (rc, body) = &r["connect_ip"];
    assert!(
        *rc != 0 && body.contains("connect=403"),
        "connect_ip: {rc} {body}"
    );
    for label in ["socks_h_ip", "socks_ip"] {
        let (rc, body) = &r[label];
        assert_ne!(*rc, 0, "{label}: {body}");
        assert!(!body.contains("origin-ok"), "{label}: {body}");
    }
    let reached: Vec<String> = origin.requests().into_iter().map(|q| q.path).collect();
    assert_eq!(
        reached,
        [
            "/plain_name",
            "/connect_name",
            "/socks_name",
            "/env_socks_name"
        ],
        "only the allowed lanes reach the origin"
    );

    let decisions = gw.wait_egress(&sid, 11).await;
    let denies: Vec<_> = decisions
        .iter()
        .filter(|d| d["decision"] == "deny")
        .collect();
    assert_eq!(denies.len(), 7, "{decisions:?}");
    for d in &denies {
        assert_eq!(d["host"], "127.0.0.1", "{d}");
        assert_eq!(d["error_kind"], "blocked-by-allowlist", "{d}");
    }
    let lanes = |v: &str| -> Vec<String> {
        decisions
            .iter()
            .filter(|d| d["decision"] == v)
            .map(|d| d["lane"].as_str().unwrap_or("?").to_string())
            .collect()
    };
    for lane in ["http", "connect", "socks"] {
        assert!(lanes("allow").iter().any(|l| l == lane), "{decisions:?}");
        assert!(lanes("deny").iter().any(|l| l == lane), "{decisions:?}");
    }
}

/// Raw absolute-form requests for `host` (the client does not normalize it first).
async fn raw_get(proxy: u16, token: &str, host: &str) -> String {
    raw_proxy(
        proxy,
        &format!(
            "GET http://{host}/raw HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: Basic {}\r\nConnection: close\r\n\r\n",
            basic_token(token)
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_literal_spellings_of_loopback_are_judged_as_127_0_0_1() {
    let origin = Origin::start().await;
    let p = origin.port;
    let spellings = [
        format!("127.0.0.1:{p}"),
        format!("2130706433:{p}"),
        format!("0x7f.1:{p}"),
        format!("0x7f000001:{p}"),
        format!("0177.0.0.1:{p}"),
        format!("127.1:{p}"),
    ];

    // Only the name is allowed: every spelling of the address is denied the same way.
    let deny_gw =
        start_with_network(json!({"allowed_domains": ["localhost"]}), Opts::default()).await;
    let sid = deny_gw.create_session_at(&deny_gw.dirs.root()).await;
    let (proxy, token) = (
        deny_gw.proxy_port(&sid).await,
        session_token(&deny_gw, &sid).await,
    );
    for host in &spellings {
        let a = raw_get(proxy, &token, host).await;
        assert!(a.starts_with("HTTP/1.1 403"), "{host}: {a}");
        assert!(a.contains("host not permitted: 127.0.0.1"), "{host}: {a}");
    }
    for host in [format!("[::ffff:127.0.0.1]:{p}"), format!("[::1]:{p}")] {
        let a = raw_get(proxy, &token, &host).await;
        assert!(a.starts_with("HTTP/1.1 403"), "{host}: {a}");
    }
    assert!(origin.requests().is_empty());

    // Only the address is allowed: every spelling of it is allowed the same way.
    let allow_gw =
        start_with_network(json!({"allowed_domains": ["127.0.0.1"]}), Opts::default()).await;
    let sid = allow_gw.create_session_at(&allow_gw.dirs.root()).await;
    let (proxy, token) = (
        allow_gw.proxy_port(&sid).await,
        session_token(&allow_gw, &sid).await,
    );
    for host in &spellings {
        let a = raw_get(proxy, &token, host).await;
        assert!(a.starts_with("HTTP/1.1 200"), "{host}: {a}");
        assert!(a.contains("origin-ok GET /raw"), "{host}: {a}");
    }
    let connect = raw_proxy(
        proxy,
        &format!(
            "CONNECT 2130706433:{p} HTTP/1.1\r\nHost: 2130706433:{p}\r\nProxy-Authorization: Basic {}\r\n\r\n",
            basic_token(&token)
        ),
    )
    .await;
    assert!(connect.starts_with("HTTP/1.1 200"), "{connect}");
    let a = raw_get(proxy, &token, &format!("localhost:{p}")).await;
    assert!(
        a.starts_with("HTTP/1.1 403"),
        "the name is not the address: {a}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_port_and_the_proxy_port_are_denied_even_when_loopback_is_allowed() {
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let proxy = gw.proxy_port(&sid).await;
    let g = gw.port;
    let cases = vec![
        (
            "gw_plain",
            format!("-x \"$HTTP_PROXY\" http://127.0.0.1:{g}/healthz"),
        ),
        (
            "gw_name",
            format!("-x \"$HTTP_PROXY\" http://localhost:{g}/healthz"),
        ),
        (
            "gw_decimal",
            format!("-x \"$HTTP_PROXY\" http://2130706433:{g}/healthz"),
        ),
        (
            "gw_connect",
            format!("-p -x \"$HTTP_PROXY\" http://127.0.0.1:{g}/healthz"),
        ),
        (
            "gw_socks",
            format!("--socks5-hostname \"$S\" http://127.0.0.1:{g}/healthz"),
        ),
        ("gw_env", format!("http://127.0.0.1:{g}/healthz")),
        (
            "px_plain",
            format!("-x \"$HTTP_PROXY\" http://127.0.0.1:{proxy}/"),
        ),
        (
            "px_connect",
            format!("-p -x \"$HTTP_PROXY\" http://127.0.0.1:{proxy}/"),
        ),
        (
            "px_socks",
            format!("--socks5-hostname \"$S\" http://127.0.0.1:{proxy}/"),
        ),
    ];
    let r = battery(&gw, &sid, &cases).await;
    assert_eq!(r.len(), cases.len(), "{r:?}");
    for (label, (rc, body)) in &r {
        assert!(
            !body.contains("\"status\""),
            "{label} reached the gateway: {body}"
        );
        if label.ends_with("plain")
            || label.ends_with("name")
            || label.ends_with("decimal")
            || label.ends_with("env")
        {
            assert!(body.contains("code=403"), "{label}: {body}");
            assert!(
                body.contains("blocked loopback address for host"),
                "{label}: {body}"
            );
        } else if label.ends_with("connect") {
            assert!(
                *rc != 0 && body.contains("connect=403"),
                "{label}: {rc} {body}"
            );
        } else {
            assert_ne!(*rc, 0, "{label}: {body}");
        }
    }
    let decisions = gw.wait_egress(&sid, 9).await;
    assert!(
        decisions.iter().all(|d| d["decision"] == "deny"),
        "{decisions:?}"
    );
    assert!(
        decisions
            .iter()
            .all(|d| d["error_kind"] == "blocked-by-ssrf"),
        "{decisions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_unknown_token_gets_407_and_no_decision_is_recorded() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let proxy = gw.proxy_port(&sid).await;
    let target = format!("http://127.0.0.1:{}/", origin.port);

    let unknown = raw_proxy(
        proxy,
        &format!(
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
            basic_token("vis-0000000000000000000000000000dead")
        ),
    )
    .await;
    assert!(unknown.starts_with("HTTP/1.1 407"), "{unknown}");
    assert!(
        unknown.contains("Proxy-Authenticate: Basic realm=\"vis-session\"")
            || unknown
                .to_ascii_lowercase()
                .contains("proxy-authenticate: basic realm=\"vis-session\""),
        "{unknown}"
    );
    assert!(
        unknown
            .to_ascii_lowercase()
            .contains("x-vis-egress-error: proxy-auth-required"),
        "{unknown}"
    );
    assert!(
        unknown.ends_with("vis-agent: no live session for this proxy token\n"),
        "{unknown}"
    );

    let missing = raw_proxy(
        proxy,
        &format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    )
    .await;
    assert!(missing.starts_with("HTTP/1.1 407"), "{missing}");
    assert!(
        missing.ends_with("vis-agent: missing Proxy-Authorization (unattributable egress)\n"),
        "{missing}"
    );

    // A real client with a made-up token, on every lane.
    let bogus = "vis-ffffffffffffffffffffffffffffffff";
    let out = gw
        .exec(
            &sid,
            &[
                "sh",
                "-c",
                "curl -sS -o /dev/null -w '%{http_code}' -x \"http://$1:@127.0.0.1:$2\" \"$3\"; echo; \
                 curl -sS -o /dev/null --socks5-hostname \"$1:x@127.0.0.1:$2\" \"$3\"; echo \"socks=$?\"",
                "sh",
                bogus,
                &proxy.to_string(),
                &target,
            ],
        )
        .await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.first().copied(), Some("407"), "{out:?}");
    assert!(lines.get(1).is_some_and(|l| *l != "socks=0"), "{out:?}");
    assert!(origin.requests().is_empty());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        gw.egress(&sid).await.is_empty(),
        "unattributed requests have no session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_token_stops_working_once_the_session_is_deleted() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let proxy = gw.proxy_port(&sid).await;
    let token = session_token(&gw, &sid).await;
    let request = format!(
        "GET {}/alive HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Authorization: Basic {}\r\nConnection: close\r\n\r\n",
        origin.url(),
        basic_token(&token)
    );
    let get = || raw_proxy(proxy, &request);
    let before = get().await;
    assert!(before.starts_with("HTTP/1.1 200"), "{before}");
    let (s, v) = gw.delete(&format!("/v1/sessions/{sid}")).await;
    assert!(s.is_success(), "{s} {v}");
    let after = get().await;
    assert!(after.starts_with("HTTP/1.1 407"), "{after}");
    assert!(
        after.ends_with("vis-agent: no live session for this proxy token\n"),
        "{after}"
    );
    assert_eq!(origin.requests().len(), 1);
    let (s, _) = gw
        .req(Method::GET, &format!("/v1/sessions/{sid}"))
        .send()
        .await
        .map(|r| (r.status(), ()))
        .unwrap();
    assert!(!s.is_success(), "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_live_sessions_each_get_their_own_policy() {
    let origin = Origin::start().await;
    let gw = start_with_network(json!({"allowed_domains": ["127.0.0.1"]}), Opts::default()).await;
    let other_root = gw.dirs.base.path().join("root-b");
    std::fs::create_dir_all(&other_root).unwrap();
    write_network_policy(&other_root, &json!({"allowed_domains": ["localhost"]}));
    let a = gw.create_session_at(&gw.dirs.root()).await;
    let b = gw.create_session_at(&other_root).await;
    let url = format!("{}/which", origin.url());
    let args = [
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        url.as_str(),
    ];
    assert_eq!(gw.exec(&a, &args).await.stdout, "200");
    assert_eq!(gw.exec(&b, &args).await.stdout, "403");
    assert_eq!(origin.requests().len(), 1);
    assert_eq!(gw.wait_egress(&a, 1).await[0]["decision"], "allow");
    assert_eq!(gw.wait_egress(&b, 1).await[0]["decision"], "deny");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_on_a_kept_alive_connection_is_judged_on_its_own() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let origin = Origin::start().await;
    let policy = json!({"allowed_domains": ["127.0.0.1"],
                        "rules": [{"host": "127.0.0.1", "access": "read-only"}]});
    let gw = start_with_network(policy, Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (proxy, token) = (gw.proxy_port(&sid).await, session_token(&gw, &sid).await);
    let auth = basic_token(&token);
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", proxy))
        .await
        .unwrap();
    let mut conn = BufReader::new(stream);

    async fn response(conn: &mut BufReader<tokio::net::TcpStream>) -> (String, String) {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(WAIT, conn.read_line(&mut line))
                .await
                .expect("a response head")
                .unwrap();
            assert!(n > 0, "the connection closed early: {head}");
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let len = head
            .to_ascii_lowercase()
            .lines()
            .find_map(|l| {
                l.strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap())
            })
            .expect("content-length");
        let mut body = vec![0; len];
        conn.read_exact(&mut body).await.unwrap();
        (head, String::from_utf8_lossy(&body).to_string())
    }

    let o = origin.url();
    conn.get_mut()
        .write_all(format!("GET {o}/first HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (head, body) = response(&mut conn).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "origin-ok GET /first\n");

    conn.get_mut()
        .write_all(format!("DELETE {o}/second HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Authorization: Basic {auth}\r\nContent-Length: 0\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (head, body) = response(&mut conn).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("x-vis-egress-error: blocked-by-method-policy"),
        "{head}"
    );
    assert_eq!(
        body,
        "method DELETE /second not allowed for host 127.0.0.1\n"
    );
    assert_eq!(
        origin.requests().len(),
        1,
        "the denied request never reached the origin"
    );
}
