//! HTTPS interception and network filters, driven by real curl and a local
//! TLS origin signed by a test CA (injected as the proxy's extra root).

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use vis_proxy::{
    FilterCtx, FilterError, FilterVerdict, Lane, NetworkFilter, Phase, ProxyConfig, Verdict,
};

struct BlockAll;

#[async_trait]
impl NetworkFilter for BlockAll {
    fn name(&self) -> &str {
        "block-all"
    }
    async fn check(&self, _: &FilterCtx) -> Result<FilterVerdict, FilterError> {
        Ok(FilterVerdict::Block("nothing leaves".into()))
    }
}

async fn mitm(
    policy: &'static str,
    filters: Vec<Arc<dyn NetworkFilter>>,
) -> (Harness, TestCa, Origin, tempfile::NamedTempFile) {
    let ca = test_ca();
    let o = tls_origin(&ca, &["localhost", "127.0.0.1"]).await;
    let h = start(Setup {
        policy,
        filters,
        extra_roots: vec![ca.der.clone()],
        ..Default::default()
    })
    .await;
    let bundle = temp_pem(h.proxy.ca_pem());
    (h, ca, o, bundle)
}

#[tokio::test]
async fn intercepted_read_only_host_allows_get_and_denies_post_inside_tls() {
    let (h, _ca, o, bundle) = mitm("rules: [{host: localhost, access: read-only}]\n", vec![]).await;
    let url = format!("https://localhost:{}/x", o.port());
    let ca = bundle.path().to_str().unwrap();
    let r = curl(&[
        "--http1.1",
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        ca,
        &url,
    ])
    .await;
    assert_eq!(r.status(), 200, "{r:?}");
    assert!(r.stdout.contains("HTTP/1.1 200 Connection Established"));
    assert_eq!(r.body(), "hello from origin: GET /x");
    let r = curl(&[
        "--http1.1",
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        ca,
        "-d",
        "a=b",
        &url,
    ])
    .await;
    assert_eq!(r.status(), 403, "{r:?}");
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("blocked-by-method-policy")
    );
    let seen = o.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    let bundle_pem = h.proxy.ca_bundle_pem();
    assert!(bundle_pem.starts_with(h.proxy.ca_pem()));
    assert_eq!(
        bundle_pem.matches("BEGIN CERTIFICATE").count(),
        2,
        "CA + the injected extra root"
    );
    assert!(seen[0].headers.get("proxy-authorization").is_none());
    let recs = h.sink.wait_for(2).await;
    let https: Vec<_> = recs.iter().filter(|d| d.lane == Lane::Https).collect();
    assert!(https.iter().all(|d| d.is_intercepted && d.phase == "https"));
    assert!(https
        .iter()
        .any(|d| d.decision == Verdict::Allow && d.path.as_deref() == Some("/x")));
    assert!(https
        .iter()
        .any(|d| d.decision == Verdict::Deny && d.method.as_deref() == Some("POST")));
}

#[tokio::test]
async fn an_h2_client_works_through_interception() {
    let (h, _ca, o, bundle) = mitm("rules: [{host: '127.0.0.1', methods: [GET]}]\n", vec![]).await;
    let url = format!("https://127.0.0.1:{}/h2", o.port());
    let r = curl(&[
        "--http2",
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        bundle.path().to_str().unwrap(),
        &url,
    ])
    .await;
    assert!(r.stdout.contains("HTTP/2 200"), "{r:?}");
    assert_eq!(r.body(), "hello from origin: GET /h2");
}

#[tokio::test]
async fn inner_host_must_match_the_connect_target() {
    let (h, _ca, o, bundle) = mitm("rules: [{host: localhost, access: ro}]\n", vec![]).await;
    let url = format!("https://localhost:{}/x", o.port());
    let r = curl(&[
        "--http1.1",
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        bundle.path().to_str().unwrap(),
        "-H",
        "Host: elsewhere.test",
        &url,
    ])
    .await;
    assert_eq!(r.status(), 400, "{r:?}");
    assert!(r.body().contains("does not match the CONNECT target"));
    assert!(o.seen().is_empty());
}

#[tokio::test]
async fn a_nested_connect_inside_an_intercepted_tunnel_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (h, _ca, o, _bundle) = mitm("rules: [{host: localhost, access: ro}]\n", vec![]).await;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", h.port()))
        .await
        .unwrap();
    s.write_all(
        format!(
            "CONNECT localhost:{} HTTP/1.1\r\nProxy-Authorization: {}\r\n\r\n",
            o.port(),
            basic(TOKEN)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = vec![0u8; 39];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(h.proxy_ca_der()))
        .unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, s)
        .await
        .unwrap();
    tls.write_all(
        format!(
            "CONNECT example.com:443 HTTP/1.1\r\nHost: localhost:{}\r\n\r\n",
            o.port()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tls.read(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("nested CONNECT"));
}

#[tokio::test]
async fn a_body_filter_sees_https_bodies_and_blocks_secrets() {
    let (h, _ca, o, bundle) = mitm(
        "allowed_domains: [localhost]\n",
        vec![Arc::new(BlockMethod("DELETE"))],
    )
    .await;
    let url = format!("https://localhost:{}/post", o.port());
    let ca = bundle.path().to_str().unwrap();
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        ca,
        "-d",
        "token=SECRET",
        &url,
    ])
    .await;
    assert_eq!(r.status(), 403, "{r:?}");
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("blocked-by-filter")
    );
    assert_eq!(r.body(), "body carries a secret\n");
    assert!(o.seen().is_empty());
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        ca,
        "-d",
        "clean",
        &url,
    ])
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(o.seen()[0].method, "POST");
    assert_eq!(&o.seen()[0].body[..], b"clean");
    let recs = h.sink.wait_for(2).await;
    let denied = recs.iter().find(|d| d.decision == Verdict::Deny).unwrap();
    assert_eq!(denied.decided_by.filter.as_deref(), Some("block-method"));
}

#[tokio::test]
async fn an_excluded_host_stays_an_opaque_tunnel_even_with_filters() {
    let spy = Arc::new(Spy::default());
    let (h, ca, o, _bundle) = mitm(
        "allowed_domains: [localhost]\nexclude_domains: [localhost]\n",
        vec![spy.clone()],
    )
    .await;
    let origin_ca = temp_pem(&ca.pem);
    let url = format!("https://localhost:{}/opaque", o.port());
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        origin_ca.path().to_str().unwrap(),
        &url,
    ])
    .await;
    assert_eq!(r.status(), 200, "{r:?}");
    assert!(spy.seen.lock().unwrap().is_empty());
    let d = &h.sink.wait_for(1).await[0];
    assert_eq!(d.lane, Lane::Connect);
    assert!(!d.is_intercepted);
}

#[tokio::test]
async fn upstream_certificates_are_verified_with_the_hostname() {
    let (h, _ca, o, bundle) = mitm(
        "rules: [{host: origin.test, access: ro}, {host: localhost, access: ro}]\n",
        vec![],
    )
    .await;
    let ca = bundle.path().to_str().unwrap();
    // origin.test resolves to 127.0.0.1, but the origin's certificate does not name it
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        ca,
        &format!("https://origin.test:{}/", o.port()),
    ])
    .await;
    assert_eq!(r.status(), 502, "{r:?}");
    assert!(o.seen().is_empty());
    // without the extra root the origin's chain is untrusted
    let plain = start(Setup {
        policy: "rules: [{host: localhost, access: ro}]\n",
        ..Default::default()
    })
    .await;
    let bundle2 = temp_pem(plain.proxy.ca_pem());
    let r = curl(&[
        "--proxy",
        &plain.http_proxy(),
        "--cacert",
        bundle2.path().to_str().unwrap(),
        &format!("https://localhost:{}/", o.port()),
    ])
    .await;
    assert_eq!(r.status(), 502, "{r:?}");
}

#[tokio::test]
async fn plain_http_filters_block_fail_and_time_out_closed() {
    let o = origin().await;
    let url = format!("http://localhost:{}/f", o.port());
    let h = start(Setup {
        filters: vec![Arc::new(BlockMethod("POST"))],
        ..Default::default()
    })
    .await;
    assert_eq!(
        curl(&["--proxy", &h.http_proxy(), &url]).await.status(),
        200
    );
    let r = curl(&["--proxy", &h.http_proxy(), "-d", "x", &url]).await;
    assert_eq!(r.status(), 403);
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("blocked-by-filter")
    );
    assert_eq!(r.body(), "no POST to localhost\n");

    let h = start(Setup {
        filters: vec![Arc::new(Failing)],
        ..Default::default()
    })
    .await;
    let r = curl(&["--proxy", &h.http_proxy(), &url]).await;
    assert_eq!(r.status(), 403);
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("filter-error")
    );
    assert_eq!(r.body(), "network filter error in 'failing': boom\n");

    let config = ProxyConfig {
        filter_timeout: Duration::from_millis(100),
        ..Default::default()
    };
    let h = start(Setup {
        filters: vec![Arc::new(Slow)],
        config,
        ..Default::default()
    })
    .await;
    let r = curl(&["--proxy", &h.http_proxy(), &url]).await;
    assert_eq!(
        r.header("x-vis-egress-error").as_deref(),
        Some("filter-error")
    );
    assert_eq!(
        o.seen().len(),
        1,
        "only the first allowed GET reached the origin"
    );
}

#[tokio::test]
async fn filters_run_in_order_and_the_first_deny_wins() {
    let o = origin().await;
    let url = format!("http://localhost:{}/f", o.port());
    let spy = Arc::new(Spy::default());
    let h = start(Setup {
        filters: vec![
            Arc::new(BlockMethod("POST")),
            Arc::new(Failing),
            spy.clone(),
        ],
        ..Default::default()
    })
    .await;
    let r = curl(&["--proxy", &h.http_proxy(), "-d", "x", &url]).await;
    assert_eq!(r.body(), "no POST to localhost\n");
    assert!(
        spy.seen.lock().unwrap().is_empty(),
        "later filters are not called"
    );
}

#[tokio::test]
async fn response_filters_see_status_and_headers_and_can_replace_the_response() {
    let o = origin().await;
    let spy = Arc::new(Spy::default());
    let h = start(Setup {
        filters: vec![spy.clone(), Arc::new(Block200)],
        ..Default::default()
    })
    .await;
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        &format!("http://localhost:{}/resp", o.port()),
    ])
    .await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.body(), "no 200s\n");
    let seen = spy.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].phase, Phase::Http);
    assert_eq!(seen[0].port, o.port());
    assert_eq!(seen[1].phase, Phase::HttpResponse);
    assert_eq!(seen[1].status, Some(200));
    assert!(seen[1].headers.contains_key("content-length"));
    let d = &h.sink.wait_for(1).await[0];
    assert_eq!(d.phase, "http-response");
    assert_eq!(
        h.sink.all().len(),
        1,
        "no allow record for a response denied by a filter"
    );
}

#[tokio::test]
async fn socks_filters_get_a_socks_ctx_and_can_deny() {
    let o = origin().await;
    let spy = Arc::new(Spy::default());
    let h = start(Setup {
        filters: vec![spy.clone()],
        ..Default::default()
    })
    .await;
    let r = curl(&[
        "--proxy",
        &h.socks_proxy(),
        &format!("http://localhost:{}/s", o.port()),
    ])
    .await;
    assert_eq!(r.status(), 200);
    let ctx = spy.seen.lock().unwrap()[0].clone();
    assert_eq!(ctx.phase, Phase::Socks);
    assert_eq!(ctx.method, None);
    assert_eq!(ctx.path, None);
    assert!(ctx.headers.is_empty());
    let h = start(Setup {
        filters: vec![Arc::new(BlockAll)],
        ..Default::default()
    })
    .await;
    let r = curl(&[
        "--proxy",
        &h.socks_proxy(),
        &format!("http://localhost:{}/s", o.port()),
    ])
    .await;
    assert_ne!(r.code, 0);
    let d = &h.sink.wait_for(1).await[0];
    assert_eq!(d.error_kind.as_deref(), Some("blocked-by-filter"));
    assert_eq!(d.lane, Lane::Socks);
}

#[tokio::test]
async fn a_websocket_upgrade_works_through_interception() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ca = test_ca();
    let acceptor = tls_acceptor(&ca, &["localhost"]);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    // (the proxy may also have dialled a connection of its own during the client's
    // handshake, which carries no request here)
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let head = read_head(&mut tls).await.to_ascii_lowercase();
                if head.is_empty() {
                    return;
                }
                assert!(head.contains("upgrade: websocket"), "{head}");
                tls.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n").await.unwrap();
                let mut buf = [0u8; 64];
                loop {
                    let n = tls.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    tls.write_all(&buf[..n]).await.unwrap();
                    tls.flush().await.unwrap();
                }
            });
        }
    });
    let h = start(Setup {
        policy: "rules: [{host: localhost, access: ro}]\n",
        extra_roots: vec![ca.der.clone()],
        ..Default::default()
    })
    .await;
    let mut tls = intercepted_tls(&h, port).await;
    let req = format!("GET /ws HTTP/1.1\r\nHost: localhost:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
    tls.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut tls).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    tls.write_all(b"frame").await.unwrap();
    tls.flush().await.unwrap();
    let mut buf = [0u8; 5];
    tls.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"frame");
}

#[tokio::test]
async fn an_ipv6_literal_target_gets_an_ip_address_leaf() {
    use tokio::io::AsyncWriteExt;
    let h = start(Setup {
        policy: "rules: [{host: '::1', access: ro}]\n",
        ..Default::default()
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", h.port()))
        .await
        .unwrap();
    // the target need not exist: the leaf is presented before any upstream dial
    s.write_all(
        format!(
            "CONNECT [::1]:9 HTTP/1.1\r\nProxy-Authorization: {}\r\n\r\n",
            basic(TOKEN)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200"));
    let name = rustls::pki_types::ServerName::try_from("::1").unwrap();
    let tls = tls_client(&h.proxy_ca_der(), &[b"h2", b"http/1.1"])
        .connect(name, s)
        .await;
    assert!(tls.is_ok(), "the leaf for ::1 verifies under the proxy CA");
}

fn openai(host: &str) -> vis_proxy::ProviderCredential {
    vis_proxy::ProviderCredential {
        provider: "openai".into(),
        hosts: vec![host.into()],
        phantom: "sk-phantom-abc".into(),
        secret: "sk-real-xyz".into(),
        base_url: None,
    }
}

#[tokio::test]
async fn a_phantom_key_is_swapped_only_on_the_providers_host() {
    let o = origin().await;
    let spy = Arc::new(Spy::default());
    let h = start(Setup {
        filters: vec![spy.clone()],
        credentials: vec![openai("origin.test")],
        ..Default::default()
    })
    .await;
    let url = format!("http://origin.test:{}/v1?key=sk-phantom-abc", o.port());
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "-H",
        "Authorization: Bearer sk-phantom-abc",
        &url,
    ])
    .await;
    assert_eq!(r.status(), 200, "{r:?}");
    let seen = o.seen();
    assert_eq!(seen[0].headers["authorization"], "Bearer sk-real-xyz");
    assert_eq!(seen[0].path, "/v1?key=sk-real-xyz");
    let ctx = spy.seen.lock().unwrap()[0].clone();
    assert_eq!(
        ctx.headers["authorization"], "Bearer sk-phantom-abc",
        "filters see the phantom only"
    );
    let recs = h.sink.wait_for(1).await;
    assert_eq!(recs[0].provider.as_deref(), Some("openai"));
    assert_eq!(
        recs[0].path.as_deref(),
        Some("/v1?key=sk-phantom-abc"),
        "records never carry the secret"
    );

    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "-H",
        "x-api-key: sk-phantom-abc",
        &format!("http://other.test:{}/", o.port()),
    ])
    .await;
    assert_eq!(r.status(), 403);
    assert_eq!(
        r.body(),
        "provider credential for openai not allowed for host other.test\n"
    );
    assert_eq!(o.seen().len(), 1);
    let recs = h.sink.wait_for(2).await;
    let d = recs.iter().find(|d| d.decision == Verdict::Deny).unwrap();
    assert_eq!(d.decided_by.kind, vis_proxy::deny::DeciderKind::Credential);
}

#[tokio::test]
async fn a_provider_host_is_intercepted_to_inject_its_credential() {
    let ca = test_ca();
    let o = tls_origin(&ca, &["localhost"]).await;
    let h = start(Setup {
        credentials: vec![openai("localhost")],
        extra_roots: vec![ca.der.clone()],
        ..Default::default()
    })
    .await;
    let bundle = temp_pem(h.proxy.ca_pem());
    let url = format!("https://localhost:{}/v1/chat", o.port());
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        bundle.path().to_str().unwrap(),
        "-H",
        "Authorization: Bearer sk-phantom-abc",
        &url,
    ])
    .await;
    assert_eq!(r.status(), 200, "{r:?}");
    assert_eq!(o.seen()[0].headers["authorization"], "Bearer sk-real-xyz");
    let d = &h.sink.wait_for(1).await[0];
    assert!(d.is_intercepted);
    assert_eq!(d.provider.as_deref(), Some("openai"));
}

fn routed(base_url: String, host: &str) -> vis_proxy::ProviderCredential {
    vis_proxy::ProviderCredential {
        base_url: Some(base_url),
        ..openai(host)
    }
}

#[tokio::test]
async fn the_provider_route_forwards_to_the_base_url_with_the_credential() {
    let o = origin().await;
    let creds = vec![routed(
        format!("http://origin.test:{}/v1/", o.port()),
        "api.example",
    )];
    let h = start(Setup {
        policy: "allowed_domains: [nothing.test]\n",
        credentials: creds,
        ..Default::default()
    })
    .await;
    let direct = format!(
        "http://127.0.0.1:{}/_vis/provider/openai/{TOKEN}/chat/completions?x=1",
        h.port()
    );
    let r = curl(&[
        "-H",
        "Authorization: Bearer sk-phantom-abc",
        "-d",
        "{}",
        &direct,
    ])
    .await;
    assert_eq!(r.status(), 200, "{r:?}");
    let seen = o.seen();
    assert_eq!(seen[0].path, "/v1/chat/completions?x=1");
    assert_eq!(
        seen[0].headers["host"],
        format!("origin.test:{}", o.port()).as_str()
    );
    assert_eq!(seen[0].headers["authorization"], "Bearer sk-real-xyz");
    let proxied = format!(
        "http://127.0.0.1:{}/_vis/provider/openai/{TOKEN}/models",
        h.port()
    );
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "-H",
        "x-api-key: sk-phantom-abc",
        &proxied,
    ])
    .await;
    assert_eq!(r.status(), 200, "{r:?}");
    assert_eq!(o.seen()[1].path, "/v1/models");
    assert_eq!(o.seen()[1].headers["x-api-key"], "sk-real-xyz");
    let recs = h.sink.wait_for(2).await;
    assert!(recs
        .iter()
        .all(|d| d.lane == Lane::Provider && d.provider.as_deref() == Some("openai")));
    let r = curl(&[&format!(
        "http://127.0.0.1:{}/_vis/provider/openai/not-a-token/x",
        h.port()
    )])
    .await;
    assert_eq!(r.status(), 407);
    let r = curl(&[&format!(
        "http://127.0.0.1:{}/_vis/provider/nope/{TOKEN}/x",
        h.port()
    )])
    .await;
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn the_provider_route_speaks_verified_tls_to_an_https_base_url() {
    let ca = test_ca();
    let o = tls_origin(&ca, &["localhost"]).await;
    let creds = vec![routed(
        format!("https://localhost:{}/api", o.port()),
        "localhost",
    )];
    let h = start(Setup {
        credentials: creds,
        extra_roots: vec![ca.der.clone()],
        ..Default::default()
    })
    .await;
    let direct = format!(
        "http://127.0.0.1:{}/_vis/provider/openai/{TOKEN}/v1/messages",
        h.port()
    );
    let r = curl(&["-H", "Authorization: Bearer sk-phantom-abc", &direct]).await;
    assert_eq!(r.status(), 200, "{r:?}");
    assert_eq!(o.seen()[0].path, "/api/v1/messages");
    assert_eq!(o.seen()[0].headers["authorization"], "Bearer sk-real-xyz");
}

#[tokio::test]
async fn an_https_response_filter_replaces_the_response_inside_tls() {
    let (h, _ca, o, bundle) = mitm("{}", vec![Arc::new(Block200)]).await;
    let url = format!("https://localhost:{}/r", o.port());
    let r = curl(&[
        "--proxy",
        &h.http_proxy(),
        "--cacert",
        bundle.path().to_str().unwrap(),
        &url,
    ])
    .await;
    assert_eq!(r.status(), 403, "{r:?}");
    assert_eq!(r.body(), "no 200s\n");
    assert_eq!(
        o.seen().len(),
        1,
        "the request reached the origin (response filters cannot undo it)"
    );
    let d = &h.sink.wait_for(1).await[0];
    assert_eq!(d.phase, "https-response");
    assert!(d.is_intercepted);
}

#[tokio::test]
async fn one_intercepted_tunnel_reuses_one_verified_upstream_connection_and_decides_each_request() {
    let (h, _ca, o, bundle) = mitm("rules: [{host: localhost, access: read-only}]\n", vec![]).await;
    let ca = bundle.path().to_str().unwrap();
    let a = format!("https://localhost:{}/one", o.port());
    let b = format!("https://localhost:{}/two", o.port());
    // one curl process: one CONNECT, three requests inside the same TLS
    // connection; the POST is denied inside the tunnel
    let p = h.http_proxy();
    let r = curl(&[
        "--http1.1",
        "--proxy",
        &p,
        "--cacert",
        ca,
        &a,
        &b,
        "--next",
        "-sS",
        "-i",
        "--http1.1",
        "--proxy",
        &p,
        "--cacert",
        ca,
        "-d",
        "x=1",
        &a,
    ])
    .await;
    let statuses: Vec<&str> = r.stdout.split("HTTP/1.1 ").skip(1).collect();
    assert!(
        statuses
            .iter()
            .filter(|s| s.starts_with("200 OK") || s.starts_with("200\r"))
            .count()
            >= 2,
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("hello from origin: GET /one"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("hello from origin: GET /two"),
        "{}",
        r.stdout
    );
    assert!(
        statuses.iter().any(|s| s.starts_with("403")),
        "{}",
        r.stdout
    );
    assert_eq!(o.seen().len(), 2);
    // one upstream dial for the tunnel (the CONNECT validated the address)
    assert_eq!(h.dialer.dialled(), vec![o.addr.unwrap()]);
    let recs = h.sink.wait_for(3).await;
    let https: Vec<_> = recs.iter().filter(|d| d.lane == Lane::Https).collect();
    assert_eq!(https.len(), 3, "{recs:?}");
    assert_eq!(
        https
            .iter()
            .filter(|d| d.decision == Verdict::Allow)
            .count(),
        2
    );
}
