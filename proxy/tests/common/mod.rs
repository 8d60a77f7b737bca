//! Test harness: a proxy on 127.0.0.1:0 with test traits, local origins,
//! and a curl runner. Only loopback addresses are ever dialled for real.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use vis_proxy::policy::Policy;
use vis_proxy::*;

pub const TOKEN: &str = "11111111-2222-3333-4444-555555555555";

#[derive(Default)]
pub struct TestAttribution {
    pub map: Mutex<HashMap<String, Principal>>,
}

#[async_trait]
impl Attribution for TestAttribution {
    async fn lookup(&self, token: &str) -> Lookup {
        if token == "explode" {
            return Lookup::Failed("backend down".into());
        }
        match self.map.lock().unwrap().get(token) {
            Some(p) => Lookup::Found(p.clone()),
            None => Lookup::Unknown,
        }
    }
}

#[derive(Default)]
pub struct RecordingSink {
    pub records: Mutex<Vec<(String, Decision)>>,
}

impl DecisionSink for RecordingSink {
    fn record(&self, session_id: &str, decision: Decision) {
        self.records
            .lock()
            .unwrap()
            .push((session_id.to_string(), decision));
    }
}

impl RecordingSink {
    pub fn all(&self) -> Vec<Decision> {
        self.records
            .lock()
            .unwrap()
            .iter()
            .map(|(_, d)| d.clone())
            .collect()
    }
    /// Wait until at least `n` records arrived (allowed records are emitted
    /// when the exchange ends, slightly after the client got its answer).
    pub async fn wait_for(&self, n: usize) -> Vec<Decision> {
        for _ in 0..200 {
            if self.records.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.all()
    }
}

/// Records every dial; really connects only to loopback, refuses the rest
/// without sending a packet.
#[derive(Default)]
pub struct RecordingDialer {
    pub attempts: Mutex<Vec<SocketAddr>>,
    /// When set, every dial hangs (to exercise the connect timeout).
    pub hang: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl Dialer for RecordingDialer {
    async fn dial(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        self.attempts.lock().unwrap().push(addr);
        if self.hang.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if addr.ip().is_loopback() {
            TcpStream::connect(addr).await
        } else {
            Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "test dialer: not loopback",
            ))
        }
    }
}

impl RecordingDialer {
    pub fn dialled(&self) -> Vec<SocketAddr> {
        self.attempts.lock().unwrap().clone()
    }
}

/// Answers from a table; each name may have a sequence of answers (one per
/// call, the last repeating) to simulate DNS rebinding.
#[derive(Default)]
pub struct TestResolver {
    pub table: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    pub calls: Mutex<Vec<String>>,
}

impl TestResolver {
    pub fn set(&self, name: &str, answers: &[&str]) {
        self.set_seq(name, &[answers]);
    }
    pub fn set_seq(&self, name: &str, seq: &[&[&str]]) {
        let v = seq
            .iter()
            .map(|a| a.iter().map(|s| s.parse().unwrap()).collect())
            .collect();
        self.table.lock().unwrap().insert(name.to_string(), v);
    }
    pub fn calls_for(&self, name: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    }
}

#[async_trait]
impl Resolver for TestResolver {
    async fn resolve(&self, host: &str, _port: u16) -> io::Result<Vec<IpAddr>> {
        self.calls.lock().unwrap().push(host.to_string());
        let mut t = self.table.lock().unwrap();
        match t.get_mut(host) {
            Some(seq) if seq.len() > 1 => Ok(seq.remove(0)),
            Some(seq) => Ok(seq[0].clone()),
            None if host == "localhost" => Ok(vec!["127.0.0.1".parse().unwrap()]),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such host")),
        }
    }
}

pub struct Harness {
    pub proxy: Proxy,
    pub attribution: Arc<TestAttribution>,
    pub sink: Arc<RecordingSink>,
    pub dialer: Arc<RecordingDialer>,
    pub resolver: Arc<TestResolver>,
}

impl Harness {
    pub fn port(&self) -> u16 {
        self.proxy.local_addr().port()
    }
    pub fn proxy_ca_der(&self) -> Vec<u8> {
        self.proxy.ca_der().to_vec()
    }
    pub fn http_proxy(&self) -> String {
        format!("http://{TOKEN}:@127.0.0.1:{}", self.port())
    }
    pub fn socks_proxy(&self) -> String {
        format!("socks5h://{TOKEN}:x@127.0.0.1:{}", self.port())
    }
    pub fn add_token(&self, token: &str, sid: &str, policy_yaml: &str, reserved: Vec<u16>) {
        let policy = Arc::new(Policy::from_yaml(policy_yaml).unwrap());
        self.attribution.map.lock().unwrap().insert(
            token.into(),
            Principal {
                session_id: sid.into(),
                policy,
                reserved_ports: reserved.into(),
                project: None,
                label: None,
            },
        );
    }
}

pub struct Setup {
    pub policy: &'static str,
    pub filters: Vec<Arc<dyn NetworkFilter>>,
    pub reserved: Vec<u16>,
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub config: ProxyConfig,
    pub credentials: Vec<ProviderCredential>,
}

pub struct StaticCreds(pub Vec<ProviderCredential>);

impl Credentials for StaticCreds {
    fn credentials(&self, _: &Principal) -> std::sync::Arc<[ProviderCredential]> {
        self.0.clone().into()
    }
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            policy: "{}",
            filters: vec![],
            reserved: vec![],
            extra_roots: vec![],
            config: ProxyConfig::default(),
            credentials: vec![],
        }
    }
}

pub async fn start(setup: Setup) -> Harness {
    let attribution = Arc::new(TestAttribution::default());
    let sink = Arc::new(RecordingSink::default());
    let dialer = Arc::new(RecordingDialer::default());
    let resolver = Arc::new(TestResolver::default());
    resolver.set("origin.test", &["127.0.0.1"]);
    resolver.set("other.test", &["127.0.0.1"]);
    let services = Services::new(attribution.clone(), sink.clone())
        .with_dialer(dialer.clone())
        .with_resolver(resolver.clone())
        .with_filters(Arc::new(StaticFilters(setup.filters)))
        .with_credentials(Arc::new(StaticCreds(setup.credentials)));
    let mut cfg = setup.config;
    cfg.use_system_roots = false;
    cfg.extra_roots = setup.extra_roots;
    let proxy = Proxy::start(cfg, services).await.unwrap();
    let h = Harness {
        proxy,
        attribution,
        sink,
        dialer,
        resolver,
    };
    h.add_token(TOKEN, "sess-1", setup.policy, setup.reserved);
    h
}

/// What the origin saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

#[derive(Clone, Default)]
pub struct Origin {
    pub addr: Option<SocketAddr>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Origin {
    pub fn port(&self) -> u16 {
        self.addr.unwrap().port()
    }
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

type OriginBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn origin_handle(
    seen: Arc<Mutex<Vec<Seen>>>,
    req: Request<Incoming>,
) -> Result<Response<OriginBody>, Infallible> {
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let headers = req.headers().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        headers,
        body,
    });
    if path.starts_with("/stream") {
        // Three chunks; the third is only sent after the test says "go" by
        // requesting /release (keeps the test free of timing assumptions).
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        tokio::spawn(async move {
            let _ = tx
                .send(Ok(Frame::data(Bytes::from_static(b"chunk-1\n"))))
                .await;
            let _ = tx
                .send(Ok(Frame::data(Bytes::from_static(b"chunk-2\n"))))
                .await;
            RELEASE.notified().await;
            let _ = tx
                .send(Ok(Frame::data(Bytes::from_static(b"chunk-3\n"))))
                .await;
        });
        let stream = tokio_stream_from(rx);
        return Ok(Response::new(BodyExt::boxed(StreamBody::new(stream))));
    }
    if path.starts_with("/release") {
        RELEASE.notify_one();
    }
    Ok(Response::new(
        Full::new(Bytes::from(format!("hello from origin: {method} {path}"))).boxed(),
    ))
}

pub static RELEASE: tokio::sync::Notify = tokio::sync::Notify::const_new();

fn tokio_stream_from<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

/// A plain HTTP/1.1 origin on the given loopback address.
pub async fn origin_on(bind: &str) -> Origin {
    let l = TcpListener::bind(bind).await.unwrap();
    let mut o = Origin {
        addr: Some(l.local_addr().unwrap()),
        ..Default::default()
    };
    let seen = o.seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |r| origin_handle(seen.clone(), r));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    o.seen = o.seen.clone();
    o
}

pub async fn origin() -> Origin {
    origin_on("127.0.0.1:0").await
}

/// Result of one curl run.
#[derive(Debug)]
pub struct Curl {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Curl {
    pub fn status(&self) -> u16 {
        // with -i the last status line of the output is the final response
        self.stdout
            .lines()
            .rev()
            .find(|l| l.starts_with("HTTP/"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }
    pub fn header(&self, name: &str) -> Option<String> {
        let prefix = format!("{}:", name.to_ascii_lowercase());
        self.stdout
            .lines()
            .rev()
            .find(|l| l.to_ascii_lowercase().starts_with(&prefix))
            .map(|l| l[prefix.len()..].trim().to_string())
    }
    pub fn body(&self) -> String {
        match self.stdout.rfind("\r\n\r\n") {
            Some(i) => self.stdout[i + 4..].to_string(),
            None => self.stdout.clone(),
        }
    }
}

pub async fn curl(args: &[&str]) -> Curl {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "20", "--noproxy", ""])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .output()
        .await
        .unwrap();
    Curl {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Send raw bytes to the proxy and read until the peer closes, `until`
/// appears, or one complete response (head + Content-Length body) arrived.
pub async fn raw(port: u16, bytes: &[u8], until: &str) -> String {
    String::from_utf8_lossy(&raw_bytes(port, bytes, until).await).into_owned()
}

fn complete_response(out: &[u8]) -> bool {
    let text = String::from_utf8_lossy(out);
    let Some(end) = text.find("\r\n\r\n") else {
        return false;
    };
    let head = text[..end].to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    match len {
        Some(n) => out.len() >= end + 4 + n,
        None => false,
    }
}

pub async fn raw_bytes(port: u16, bytes: &[u8], until: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // After a complete response without the marker, a pipelined second
        // answer may still be on its way: wait for it briefly, not 10 s.
        let wait = if !until.is_empty() && complete_response(&out) {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(10)
        };
        match tokio::time::timeout(wait, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => {
                out.extend_from_slice(&buf[..n]);
                if !until.is_empty() && String::from_utf8_lossy(&out).contains(until) {
                    break;
                }
            }
        }
    }
    out
}

pub fn basic(token: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{token}:"))
    )
}

/// Filters for tests.
pub struct BlockMethod(pub &'static str);

#[async_trait]
impl NetworkFilter for BlockMethod {
    fn name(&self) -> &str {
        "block-method"
    }
    async fn check(&self, ctx: &FilterCtx) -> Result<FilterVerdict, FilterError> {
        if ctx.method.as_deref() == Some(self.0) {
            return Ok(FilterVerdict::Block(format!(
                "no {} to {}",
                self.0, ctx.host
            )));
        }
        if ctx
            .body
            .as_deref()
            .map(|b| b.contains("SECRET"))
            .unwrap_or(false)
        {
            return Ok(FilterVerdict::Block("body carries a secret".into()));
        }
        Ok(FilterVerdict::Allow)
    }
}

pub struct Failing;

#[async_trait]
impl NetworkFilter for Failing {
    fn name(&self) -> &str {
        "failing"
    }
    async fn check(&self, _: &FilterCtx) -> Result<FilterVerdict, FilterError> {
        Err(FilterError {
            message: "boom".into(),
            trace: None,
        })
    }
}

pub struct Slow;

#[async_trait]
impl NetworkFilter for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    async fn check(&self, _: &FilterCtx) -> Result<FilterVerdict, FilterError> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(FilterVerdict::Allow)
    }
}

/// Records every ctx it sees; allows.
#[derive(Default)]
pub struct Spy {
    pub seen: Mutex<Vec<FilterCtx>>,
}

#[async_trait]
impl NetworkFilter for Spy {
    fn name(&self) -> &str {
        "spy"
    }
    async fn check(&self, ctx: &FilterCtx) -> Result<FilterVerdict, FilterError> {
        self.seen.lock().unwrap().push(ctx.clone());
        Ok(FilterVerdict::Allow)
    }
}

/// Denies responses with status 200.
pub struct Block200;

#[async_trait]
impl NetworkFilter for Block200 {
    fn name(&self) -> &str {
        "block-200"
    }
    async fn check(&self, ctx: &FilterCtx) -> Result<FilterVerdict, FilterError> {
        if ctx.status == Some(200) {
            return Ok(FilterVerdict::Block("no 200s".into()));
        }
        Ok(FilterVerdict::Allow)
    }
}

/// A test CA for local TLS origins.
pub struct TestCa {
    pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub der: rustls::pki_types::CertificateDer<'static>,
    pub pem: String,
}

pub fn test_ca() -> TestCa {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "test origin CA");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let cert = p.self_signed(&key).unwrap();
    TestCa {
        der: cert.der().clone(),
        pem: cert.pem(),
        issuer: rcgen::Issuer::new(p, key),
    }
}

/// An HTTPS origin (h2 + http/1.1) on 127.0.0.1 whose leaf covers `names`.
pub async fn tls_origin(ca: &TestCa, names: &[&str]) -> Origin {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let p = rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .unwrap();
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let mut cfg = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone(), ca.der.clone()], key_der)
    .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let o = Origin {
        addr: Some(l.local_addr().unwrap()),
        ..Default::default()
    };
    let seen = o.seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let seen = seen.clone();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let svc = service_fn(move |r| origin_handle(seen.clone(), r));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    o
}

/// Write text to a temp file that lives as long as the returned handle.
pub fn temp_pem(text: &str) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// A TLS acceptor (http/1.1 only) for `names`, signed by `ca`.
pub fn tls_acceptor(ca: &TestCa, names: &[&str]) -> tokio_rustls::TlsAcceptor {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let p = rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .unwrap();
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let mut cfg = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone(), ca.der.clone()], key_der)
    .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(cfg))
}

/// A TLS client config trusting only `der`.
pub fn tls_client(der: &[u8], alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(der.to_vec()))
        .unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
}

/// Read an HTTP head byte by byte.
pub async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap_or(0) == 0 {
            break;
        }
        out.push(b[0]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub type InterceptedTls = tokio_rustls::client::TlsStream<TcpStream>;

/// A CONNECT to `target` through the proxy with `token`: the socket and the answer's head.
pub async fn connect_tunnel(proxy_port: u16, token: &str, target: &str) -> (TcpStream, String) {
    use tokio::io::AsyncWriteExt;
    let mut s = TcpStream::connect(("127.0.0.1", proxy_port)).await.unwrap();
    s.write_all(
        format!(
            "CONNECT {target} HTTP/1.1\r\nProxy-Authorization: {}\r\n\r\n",
            basic(token)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let head = read_head(&mut s).await;
    (s, head)
}

/// A CONNECT to `localhost:port` through the proxy, then TLS (HTTP/1.1 offered alone) to the
/// proxy's interception leaf.
pub async fn intercepted_tls(h: &Harness, port: u16) -> InterceptedTls {
    intercepted_tls_offering(h, port, &[b"http/1.1"]).await
}

/// [`intercepted_tls`] offering these ALPN protocols.
pub async fn intercepted_tls_offering(h: &Harness, port: u16, alpn: &[&[u8]]) -> InterceptedTls {
    let (s, head) = connect_tunnel(h.port(), TOKEN, &format!("localhost:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    tls_client(&h.proxy_ca_der(), alpn)
        .connect(name, s)
        .await
        .unwrap()
}
