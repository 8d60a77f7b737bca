//! Helpers for `scripts/bench-proxy` — everything on 127.0.0.1 only.
//!
//! * `origin`  — a minimal, fast HTTP/1.1 keep-alive origin (plain + TLS):
//!   `GET /small` → 256-byte body, `GET /bulk/<bytes>` → that many bytes.
//! * `proxy`   — `vis_proxy::Proxy` started in-process (stand-alone mode has
//!   no way to hand out its CA), one compiled policy per token, a decision
//!   sink that drops records; writes the CA PEM to a file.
//! * `load`    — fixed number of keep-alive connections for a fixed time:
//!   direct, absolute-form through an HTTP proxy, or through a CONNECT
//!   tunnel (optionally TLS end to end); prints RPS and latency percentiles.
//! * `newconn` — N sequential new connections (CONNECT + TLS + one GET).
//! * `bulk`    — one large download; prints bytes per second.
//! * `decide`  — CPU cost of one `vis_proxy::policy::decide` call for a policy file.
//! * `tlsrelay` — the floor of any HTTPS interception: answers CONNECT, ends the client's
//!   TLS with a fixed certificate, opens TLS to the target and copies the plaintext both
//!   ways. No HTTP parsing, no policy, no records: what two TLS layers cost on their own.
//!
//! Every command prints one JSON line on stdout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use async_trait::async_trait;
use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vis_proxy::policy::{NetworkConfig, Policy};
use vis_proxy::{
    Attribution, Decision, DecisionSink, Lookup, Principal, Proxy, ProxyConfig, Services,
};

const SMALL_BODY: usize = 256;

// ---------------------------------------------------------------- args

struct Args {
    map: HashMap<String, Vec<String>>,
}

impl Args {
    fn parse(v: &[String]) -> Result<Args> {
        let mut map: HashMap<String, Vec<String>> = HashMap::new();
        let mut i = 0;
        while i < v.len() {
            let k = v[i]
                .strip_prefix("--")
                .ok_or_else(|| anyhow!("unexpected argument {}", v[i]))?;
            let val = v
                .get(i + 1)
                .ok_or_else(|| anyhow!("--{k} needs a value"))?;
            map.entry(k.to_string()).or_default().push(val.clone());
            i += 2;
        }
        Ok(Args { map })
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.map.get(k).and_then(|v| v.last()).map(String::as_str)
    }
    fn all(&self, k: &str) -> Vec<String> {
        self.map.get(k).cloned().unwrap_or_default()
    }
    fn req(&self, k: &str) -> Result<&str> {
        self.get(k).ok_or_else(|| anyhow!("--{k} is required"))
    }
    fn num<T: std::str::FromStr>(&self, k: &str, default: T) -> Result<T> {
        match self.get(k) {
            None => Ok(default),
            Some(s) => s.parse().map_err(|_| anyhow!("--{k}: bad number {s}")),
        }
    }
    fn addr(&self, k: &str) -> Result<SocketAddr> {
        let a: SocketAddr = self.req(k)?.parse().context(k.to_string())?;
        if !a.ip().is_loopback() {
            bail!("--{k}: only loopback addresses are allowed");
        }
        Ok(a)
    }
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first().cloned() else {
        bail!("usage: bench-proxy origin|proxy|load|newconn|bulk --opt value …");
    };
    let args = Args::parse(&argv[1..])?;
    let threads: usize = args.num("threads", 1)?;
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    rt.block_on(async move {
        match cmd.as_str() {
            "origin" => origin(args).await,
            "proxy" => proxy(args).await,
            "load" => load(args).await,
            "newconn" => newconn(args).await,
            "bulk" => bulk(args).await,
            "decide" => decide_cost(args),
            "tlsrelay" => tls_relay(args).await,
            other => bail!("unknown command {other}"),
        }
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// ---------------------------------------------------------------- origin

async fn origin(args: Args) -> Result<()> {
    let http = TcpListener::bind(args.addr("http")?).await?;
    let tls = match args.get("https") {
        Some(_) => {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(args.req("cert")?)?.collect::<Result<_, _>>()?;
            let key = PrivateKeyDer::from_pem_file(args.req("key")?)?;
            let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_single_cert(certs, key)?;
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some((
                TcpListener::bind(args.addr("https")?).await?,
                tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
            ))
        }
        None => None,
    };
    // 1 MiB of filler for bulk bodies.
    let filler: Arc<Vec<u8>> = Arc::new((0..1 << 20).map(|i| b'a' + (i % 26) as u8).collect());
    println!("{{\"origin\":\"ready\"}}");
    let f2 = filler.clone();
    let plain = async move {
        loop {
            let (s, _) = http.accept().await?;
            let _ = s.set_nodelay(true);
            let f = filler.clone();
            tokio::spawn(async move {
                let _ = serve_origin_conn(s, f).await;
            });
        }
        #[allow(unreachable_code)]
        Ok::<(), anyhow::Error>(())
    };
    let secure = async move {
        let Some((l, acc)) = tls else {
            std::future::pending::<()>().await;
            return Ok(());
        };
        loop {
            let (s, _) = l.accept().await?;
            let _ = s.set_nodelay(true);
            let acc = acc.clone();
            let f = f2.clone();
            tokio::spawn(async move {
                if let Ok(t) = acc.accept(s).await {
                    let _ = serve_origin_conn(t, f).await;
                }
            });
        }
    };
    tokio::select! {
        r = plain => r,
        r = secure => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

async fn serve_origin_conn<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    filler: Arc<Vec<u8>>,
) -> Result<()> {
    let small_resp = {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {SMALL_BODY}\r\n\r\n"
        )
        .into_bytes();
        r.extend(std::iter::repeat_n(b'x', SMALL_BODY));
        r
    };
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        // answer every complete request head in the buffer (pipelining-safe)
        while let Some(end) = find_head_end(&buf) {
            let head = std::str::from_utf8(&buf[..end]).unwrap_or("");
            let target = head.split(' ').nth(1).unwrap_or("/");
            // absolute-form from a proxy that forwards it verbatim
            let path = match target.find("://") {
                Some(i) => match target[i + 3..].find('/') {
                    Some(j) => &target[i + 3 + j..],
                    None => "/",
                },
                None => target,
            };
            if let Some(n) = path.strip_prefix("/bulk/") {
                let mut left: u64 = n.trim().parse().unwrap_or(0);
                s.write_all(out.drain(..).as_slice()).await?;
                let hdr = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {left}\r\n\r\n"
                );
                s.write_all(hdr.as_bytes()).await?;
                while left > 0 {
                    let k = left.min(filler.len() as u64) as usize;
                    s.write_all(&filler[..k]).await?;
                    left -= k as u64;
                }
            } else if path == "/small" {
                out.extend_from_slice(&small_resp);
            } else {
                out.extend_from_slice(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n\r\nnot found\n",
                );
            }
            buf.drain(..end);
        }
        if !out.is_empty() {
            s.write_all(&out).await?;
            out.clear();
        }
        // A TLS stream may hold the tail of what it accepted (its socket was full at the
        // last write): without a flush the answer's last bytes wait for the next request.
        s.flush().await?;
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 1 << 20 {
            bail!("request head too large");
        }
    }
}

// ---------------------------------------------------------------- proxy

struct NullSink(AtomicU64);

impl DecisionSink for NullSink {
    fn record(&self, _session_id: &str, _d: Decision) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

struct TokenPolicies(HashMap<String, Principal>);

#[async_trait]
impl Attribution for TokenPolicies {
    async fn lookup(&self, token: &str) -> Lookup {
        match self.0.get(token) {
            Some(p) => Lookup::Found(p.clone()),
            None => Lookup::Unknown,
        }
    }
}

async fn proxy(args: Args) -> Result<()> {
    let mut map = HashMap::new();
    for (i, spec) in args.all("policy").iter().enumerate() {
        let (token, file) = spec
            .split_once('=')
            .ok_or_else(|| anyhow!("--policy TOKEN=FILE"))?;
        let text = std::fs::read_to_string(file).with_context(|| file.to_string())?;
        let cfg = NetworkConfig::from_yaml_str(&text).map_err(|e| anyhow!("{file}: {e}"))?;
        let policy = Arc::new(Policy::compile(&cfg).map_err(|e| anyhow!("{file}: {e}"))?);
        map.insert(
            token.to_string(),
            Principal {
                session_id: format!("bench-{i}").into(),
                policy,
                reserved_ports: Arc::from([]),
                project: None,
                label: None,
            },
        );
    }
    if map.is_empty() {
        bail!("at least one --policy TOKEN=FILE");
    }
    let mut pc = ProxyConfig::default()
        .with_env_extra_roots()
        .await
        .map_err(|e| anyhow!("{e}"))?;
    pc.listen = args.addr("listen")?;
    if let Some(n) = args.get("io-threads") {
        pc.io_threads = n.parse().map_err(|_| anyhow!("--io-threads: bad number {n}"))?;
    }
    let sink = Arc::new(NullSink(AtomicU64::new(0)));
    let p = Proxy::start(pc, Services::new(Arc::new(TokenPolicies(map)), sink.clone()))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    std::fs::write(args.req("ca-out")?, p.ca_pem())?;
    println!("{{\"proxy\":\"{}\"}}", p.local_addr());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    p.shutdown();
    eprintln!("bench proxy: {} decisions recorded", sink.0.load(Ordering::Relaxed));
    Ok(())
}

// ---------------------------------------------------------------- interception floor

async fn tls_relay(args: Args) -> Result<()> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(args.req("cert")?)?.collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_file(args.req("key")?)?;
    let mut server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(args.req("ca")?)? {
        roots.add(c?)?;
    }
    let mut client = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let listener = TcpListener::bind(args.addr("listen")?).await?;
    println!("{{\"tlsrelay\":\"{}\"}}", listener.local_addr()?);
    loop {
        let (s, _) = listener.accept().await?;
        let (acceptor, connector) = (acceptor.clone(), connector.clone());
        tokio::spawn(async move {
            if let Err(e) = relay_one(s, acceptor, connector).await {
                eprintln!("tlsrelay: {e}");
            }
        });
    }
}

async fn relay_one(
    mut s: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
) -> Result<()> {
    s.set_nodelay(true)?;
    // byte-wise, so nothing of the tunnel is consumed
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await? == 0 || head.len() > 8192 {
            bail!("no CONNECT head");
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let target: SocketAddr = text
        .split(' ')
        .nth(1)
        .ok_or_else(|| anyhow!("no CONNECT target"))?
        .parse()?;
    s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    let mut inside = acceptor.accept(s).await?;
    let up = TcpStream::connect(target).await?;
    up.set_nodelay(true)?;
    let mut outside = connector
        .connect(ServerName::IpAddress(target.ip().into()), up)
        .await?;
    tokio::io::copy_bidirectional(&mut inside, &mut outside).await?;
    Ok(())
}

// ---------------------------------------------------------------- client side

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type BoxIo = Box<dyn Io>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// origin-form straight to the origin
    Direct,
    /// absolute-form to an HTTP proxy (`Proxy-Authorization` when a token is given)
    Forward,
    /// CONNECT tunnel, then origin-form inside
    Tunnel,
}

#[derive(Clone)]
struct Client {
    mode: Mode,
    target: SocketAddr,
    proxy: Option<SocketAddr>,
    auth: Option<String>,
    tls: Option<tokio_rustls::TlsConnector>,
    path: String,
}

impl Client {
    fn from_args(args: &Args) -> Result<Client> {
        let mode = match args.get("mode").unwrap_or("direct") {
            "direct" => Mode::Direct,
            "forward" => Mode::Forward,
            "tunnel" => Mode::Tunnel,
            m => bail!("--mode direct|forward|tunnel, not {m}"),
        };
        let proxy = if mode == Mode::Direct {
            None
        } else {
            Some(args.addr("proxy")?)
        };
        let auth = args.get("token").map(|t| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{t}:"))
            )
        });
        let tls = if args.get("tls").is_some_and(|v| v == "1") {
            if mode == Mode::Forward {
                bail!("--tls needs --mode direct or tunnel");
            }
            let mut roots = rustls::RootCertStore::empty();
            for f in args.all("ca") {
                for c in CertificateDer::pem_file_iter(&f)? {
                    roots.add(c?)?;
                }
            }
            let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            // every connection is a new client (like a new curl/pip process)
            cfg.resumption = rustls::client::Resumption::disabled();
            Some(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
        } else {
            None
        };
        Ok(Client {
            mode,
            target: args.addr("target")?,
            proxy,
            auth,
            tls,
            path: args.get("path").unwrap_or("/small").to_string(),
        })
    }

    fn request(&self) -> Vec<u8> {
        let t = self.target;
        let mut r = match self.mode {
            Mode::Forward => format!("GET http://{t}{} HTTP/1.1\r\nHost: {t}\r\n", self.path),
            _ => format!("GET {} HTTP/1.1\r\nHost: {t}\r\n", self.path),
        };
        if self.mode == Mode::Forward {
            if let Some(a) = &self.auth {
                r.push_str(&format!("Proxy-Authorization: {a}\r\n"));
            }
        }
        r.push_str("User-Agent: bench-proxy\r\nAccept: */*\r\n\r\n");
        r.into_bytes()
    }

    /// Open a connection ready for requests (TCP, CONNECT, TLS as configured).
    async fn connect(&self) -> Result<BoxIo> {
        let first = self.proxy.unwrap_or(self.target);
        let mut s = TcpStream::connect(first).await?;
        s.set_nodelay(true)?;
        if self.mode == Mode::Tunnel {
            let t = self.target;
            let mut req = format!("CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n");
            if let Some(a) = &self.auth {
                req.push_str(&format!("Proxy-Authorization: {a}\r\n"));
            }
            req.push_str("\r\n");
            s.write_all(req.as_bytes()).await?;
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            // byte-wise so nothing of the tunnel is consumed
            while !head.ends_with(b"\r\n\r\n") {
                if s.read(&mut b).await? == 0 {
                    bail!("proxy closed during CONNECT");
                }
                head.push(b[0]);
                if head.len() > 8192 {
                    bail!("CONNECT answer too long");
                }
            }
            if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.0 200") {
                bail!("CONNECT refused: {}", String::from_utf8_lossy(&head));
            }
        }
        match &self.tls {
            Some(c) => {
                let name = ServerName::IpAddress(self.target.ip().into());
                Ok(Box::new(c.connect(name, s).await?))
            }
            None => Ok(Box::new(s)),
        }
    }
}

/// One keep-alive connection's response reader.
struct Conn {
    io: BoxIo,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Conn {
    fn new(io: BoxIo) -> Conn {
        Conn {
            io,
            buf: vec![0u8; 64 * 1024],
            start: 0,
            end: 0,
        }
    }

    async fn fill(&mut self) -> Result<()> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end == self.buf.len() {
                bail!("response head too large");
            }
        }
        let n = self.io.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            bail!("connection closed by peer");
        }
        self.end += n;
        Ok(())
    }

    /// Read one response; returns (status, body bytes).
    async fn response(&mut self) -> Result<(u16, u64)> {
        let head_len = loop {
            if let Some(e) = find_head_end(&self.buf[self.start..self.end]) {
                break e;
            }
            self.fill().await?;
        };
        let head = std::str::from_utf8(&self.buf[self.start..self.start + head_len])
            .map_err(|_| anyhow!("non-UTF-8 response head"))?;
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("bad status line"))?;
        let mut len: Option<u64> = None;
        for line in head.split("\r\n").skip(1) {
            if let Some((k, v)) = line.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().ok();
                } else if k.trim().eq_ignore_ascii_case("transfer-encoding") {
                    bail!("chunked responses are not supported by this client");
                }
            }
        }
        let Some(len) = len else {
            bail!("response without Content-Length: {head}");
        };
        self.start += head_len;
        let mut left = len;
        loop {
            let have = (self.end - self.start) as u64;
            if have >= left {
                self.start += left as usize;
                break;
            }
            left -= have;
            self.start = self.end;
            self.fill().await?;
        }
        Ok((status, len))
    }
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

async fn load(args: Args) -> Result<()> {
    let client = Client::from_args(&args)?;
    let conns: usize = args.num("conns", 32)?;
    let duration = Duration::from_secs_f64(args.num("duration", 10.0)?);
    let warmup = Duration::from_secs_f64(args.num("warmup", 2.0)?);
    let req = Arc::new(client.request());
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (client, req, measuring, stop, errors, first_error) = (
            client.clone(),
            req.clone(),
            measuring.clone(),
            stop.clone(),
            errors.clone(),
            first_error.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::with_capacity(1 << 16);
            let mut conn: Option<Conn> = None;
            while !stop.load(Ordering::Relaxed) {
                let r: Result<()> = async {
                    if conn.is_none() {
                        conn = Some(Conn::new(client.connect().await?));
                    }
                    let c = conn.as_mut().unwrap();
                    let t0 = Instant::now();
                    c.io.write_all(&req).await?;
                    c.io.flush().await?;
                    let (status, _) = c.response().await?;
                    let dt = t0.elapsed();
                    if status != 200 {
                        bail!("status {status}");
                    }
                    if measuring.load(Ordering::Relaxed) {
                        lat.push(dt.as_nanos().min(u32::MAX as u128) as u32);
                    }
                    Ok(())
                }
                .await;
                if let Err(e) = r {
                    conn = None;
                    if measuring.load(Ordering::Relaxed) {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    {
                        let mut g = first_error.lock().unwrap();
                        if g.is_none() {
                            *g = Some(e.to_string());
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            lat
        }));
    }
    tokio::time::sleep(warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await?);
    }
    all.sort_unstable();
    let n = all.len();
    let out = serde_json::json!({
        "requests": n,
        "errors": errors.load(Ordering::Relaxed),
        "first_error": first_error.lock().unwrap().clone(),
        "seconds": elapsed,
        "rps": n as f64 / elapsed,
        "p50_us": pct(&all, 0.50),
        "p90_us": pct(&all, 0.90),
        "p99_us": pct(&all, 0.99),
        "conns": conns,
    });
    println!("{out}");
    Ok(())
}

async fn newconn(args: Args) -> Result<()> {
    let client = Client::from_args(&args)?;
    let n: usize = args.num("n", 200)?;
    let warm: usize = args.num("warm", 10)?;
    let budget = Duration::from_secs_f64(args.num("max-seconds", 20.0)?);
    let req = client.request();
    let mut times = Vec::with_capacity(n);
    let begin = Instant::now();
    for i in 0..n + warm {
        if begin.elapsed() > budget {
            break;
        }
        let t0 = Instant::now();
        let mut c = Conn::new(client.connect().await?);
        c.io.write_all(&req).await?;
        c.io.flush().await?;
        let (status, _) = c.response().await?;
        if status != 200 {
            bail!("status {status}");
        }
        let dt = t0.elapsed();
        drop(c);
        if i >= warm {
            times.push(dt.as_nanos() as u32);
        }
    }
    times.sort_unstable();
    let out = serde_json::json!({
        "connections": times.len(),
        "p50_us": pct(&times, 0.50),
        "p90_us": pct(&times, 0.90),
        "mean_us": times.iter().map(|&t| t as f64).sum::<f64>() / times.len().max(1) as f64 / 1000.0,
    });
    println!("{out}");
    Ok(())
}

async fn bulk(args: Args) -> Result<()> {
    let mut client = Client::from_args(&args)?;
    let bytes: u64 = args.num("bytes", 1u64 << 30)?;
    let repeat: usize = args.num("repeat", 3)?;
    client.path = format!("/bulk/{bytes}");
    let req = client.request();
    let mut speeds = Vec::new();
    for _ in 0..repeat {
        let t0 = Instant::now();
        let mut io = client.connect().await?;
        io.write_all(&req).await?;
        io.flush().await?;
        // read the head, then count body bytes with a big buffer
        let mut buf = vec![0u8; 256 * 1024];
        let mut got: Vec<u8> = Vec::new();
        let body_start;
        loop {
            let n = io.read(&mut buf).await?;
            if n == 0 {
                bail!("closed before the head");
            }
            got.extend_from_slice(&buf[..n]);
            if let Some(e) = find_head_end(&got) {
                body_start = e;
                break;
            }
        }
        if !got.starts_with(b"HTTP/1.1 200") {
            bail!("bulk: {}", String::from_utf8_lossy(&got[..body_start]));
        }
        let mut left = bytes - (got.len() - body_start) as u64;
        while left > 0 {
            let n = io.read(&mut buf).await?;
            if n == 0 {
                bail!("closed with {left} bytes missing");
            }
            left = left.saturating_sub(n as u64);
        }
        let dt = t0.elapsed().as_secs_f64();
        speeds.push(bytes as f64 / dt);
    }
    speeds.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let out = serde_json::json!({
        "bytes": bytes,
        "median_bytes_per_s": speeds[speeds.len() / 2],
        "best_bytes_per_s": speeds[speeds.len() - 1],
        "runs": speeds,
    });
    println!("{out}");
    Ok(())
}

// ---------------------------------------------------------------- decide cost

fn decide_cost(args: Args) -> Result<()> {
    use vis_proxy::policy::{decide, DecideInput};
    let file = args.req("policy")?;
    let text = std::fs::read_to_string(file).with_context(|| file.to_string())?;
    let cfg = NetworkConfig::from_yaml_str(&text).map_err(|e| anyhow!("{file}: {e}"))?;
    let policy = Policy::compile(&cfg).map_err(|e| anyhow!("{file}: {e}"))?;
    let host = args.get("host").unwrap_or("127.0.0.1");
    let n: u32 = args.num("n", 200_000)?;
    let input = DecideInput {
        method: Some("GET"),
        host,
        path: Some("/small"),
        port: Some(80),
    };
    if decide(&policy, input).is_err() {
        bail!("{host} is denied by {file}");
    }
    let t0 = Instant::now();
    for _ in 0..n {
        std::hint::black_box(decide(std::hint::black_box(&policy), std::hint::black_box(input)))
            .ok();
    }
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    println!("{}", serde_json::json!({ "decide_ns": ns, "calls": n }));
    Ok(())
}
