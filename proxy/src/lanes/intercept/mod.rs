//! HTTPS interception: TLS server with a leaf for the SNI (CONNECT host as fallback),
//! HTTP/1.1 + h2 inside, every inner request run through the flow's steps on its own
//! ([`crate::phases`]), upstream TLS to the address validated at CONNECT. HTTP/1.1 over TLS
//! goes through the HTTP/1.1 relay ([`crate::lanes::h1`], the tunnel's side in [`relay`])
//! and, from the first request it does not take, the HTTP server; h2 and plain HTTP inside a
//! tunnel through the HTTP server.

mod relay;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{header, Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio_rustls::LazyConfigAcceptor;

use crate::body::ProxyBody;
use crate::conn_pool::{ConnPool, Early, EarlyDial, Key};
use crate::deny::{kind, reason, Denial};
use crate::h1_watch::{Signal, Watched};
use crate::lanes::forward::{forward, TunnelUpstream, Upstream, Who};
use crate::lanes::target::{bracket, head_size, parse_authority};
use crate::phases::Target;
use crate::policy::Allowed;
use crate::prefixed::{sniff, Inner, Prefixed};
use crate::record::{AllowRecord, RecordBase};
use crate::state::{ConnGuard, Shared};
use crate::traits::{Lane, Principal};
use crate::upstream::TunnelTlsConnector;

/// What CONNECT decided for an intercepted tunnel.
pub(crate) struct Tunnel {
    pub principal: Principal,
    pub host: String,
    pub port: u16,
    /// The address validated at CONNECT: every inner request goes there.
    pub addr: SocketAddr,
    /// The upstream may be dialled while the client's TLS handshake runs, before any inner
    /// request is decided (no network filter could refuse them all, and the host's rule is
    /// not `access: none`).
    pub dial_early: bool,
    /// The client connection's place under the overall cap, held for the tunnel's life.
    pub conn: ConnGuard,
    /// How CONNECT was allowed (for the tunnel's own record).
    pub allowed: Allowed,
    /// The CONNECT's own (cancelled) record: it holds the session's slot for the
    /// tunnel's life.
    pub hold: AllowRecord,
}

/// Where the tunnel's inner requests go.
enum InnerUpstream {
    /// TLS inside: upstream TLS to the validated address, name verified.
    Tls(Arc<TunnelUpstream>),
    /// Plain HTTP inside: plain HTTP to the validated address.
    Plain(Arc<ConnPool>, SocketAddr),
}

/// A tunnel being served.
struct Inside {
    shared: Arc<Shared>,
    /// The framing watch of the tunnel's HTTP/1 requests.
    signal: Arc<Signal>,
    principal: Principal,
    host: String,
    port: u16,
    up: InnerUpstream,
    conn: ConnGuard,
    _hold: AllowRecord,
}

/// The tunnel itself as a record (lane `connect`), for what happens before any inner
/// request: a client that refuses the interception certificate.
fn tunnel_record(shared: &Shared, t: &Tunnel) -> AllowRecord {
    AllowRecord::new(
        shared.svc.sink.clone(),
        t.principal.session_id.clone(),
        Arc::new(tunnel_base(t)),
        t.allowed.decider,
        t.allowed.rule_host.clone(),
    )
}

/// What a record of the tunnel itself says of it (lane `connect`).
fn tunnel_base(t: &Tunnel) -> RecordBase {
    RecordBase {
        lane: Lane::Connect,
        phase: "connect",
        method: None,
        path: None,
        host: t.host.clone(),
        port: t.port,
        is_intercepted: true,
    }
}

pub(crate) async fn run<IO>(shared: Arc<Shared>, t: Tunnel, mut io: IO)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let head_timeout = shared.cfg.head_timeout;
    // TLS or plain HTTP inside? Look at the first bytes (and put them back).
    let mut first = vec![0u8; 16];
    let n = match tokio::time::timeout(head_timeout, io.read(&mut first)).await {
        Ok(Ok(n)) if n > 0 => n,
        _ => return, // closed or silent: nothing was asked
    };
    first.truncate(n);
    let kind = sniff(&first);
    let io = Prefixed::new(first, io);
    match kind {
        Inner::Tls => run_tls(shared, t, io).await,
        Inner::Http => {
            let up = InnerUpstream::Plain(Arc::new(ConnPool::default()), t.addr);
            serve_inner(inside(shared, t, up), io, true).await
        }
        Inner::Other => {
            // Fail closed: what cannot be inspected is not relayed.
            let base = tunnel_base(&t);
            let d = Denial::bad_request(
                "the tunnel carries neither TLS nor HTTP, and this host's traffic must be inspected",
            );
            crate::record::emit_denial_of(
                shared.svc.sink.as_ref(),
                &t.principal.session_id,
                t.principal.label.as_deref(),
                &base,
                &d,
            );
        }
    }
}

async fn run_tls<IO>(shared: Arc<Shared>, t: Tunnel, io: IO)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let head_timeout = shared.cfg.head_timeout;
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
    let start = match tokio::time::timeout(head_timeout, acceptor).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let rec = tunnel_record(&shared, &t);
            rec.set_failure(
                kind::CLIENT_TLS_REJECTED,
                format!("the client's TLS handshake failed: {e}"),
            );
            return;
        }
        Err(_) => return,
    };
    let hello = start.client_hello();
    let name = hello
        .server_name()
        .map(str::to_string)
        .unwrap_or_else(|| t.host.clone());
    // Dial the upstream now, while the handshake below and the client's first request are on
    // their way: for the relay (HTTP/1.1 alone) when the client does not offer h2, else for
    // the HTTP server lane. No byte of a request goes on it before that request has passed
    // its steps; CONNECT has allowed the host, validated the address and said whether an
    // early connection is allowed (`Tunnel::dial_early`).
    let offers_h2 = hello.alpn().is_some_and(|mut a| a.any(|p| p == b"h2"));
    let server_name = match ServerName::try_from(t.host.clone()) {
        Ok(n) => n,
        Err(_) => return,
    };
    let connector = TunnelTlsConnector {
        dialer: shared.svc.dialer.clone(),
        timeout: shared.cfg.connect_timeout,
        addr: t.addr,
        name: server_name.clone(),
        tls: shared.up.tls.clone(),
    };
    let authority = if t.port == 443 {
        bracket(&t.host)
    } else {
        format!("{}:{}", bracket(&t.host), t.port)
    };
    let up = Arc::new(TunnelUpstream {
        local: ConnPool::default(),
        addr: t.addr,
        key: Key::Tls(t.addr, server_name),
        authority,
        client: Client::builder(TokioExecutor::new()).build(connector),
    });
    let kept = if !t.dial_early {
        relay::Kept::None
    } else if offers_h2 {
        // h2 (or whatever the handshake settles on) goes through the HTTP server lane, whose
        // pool takes the early connection for its first request
        if let Some(d) = EarlyDial::start(&shared.up, &up.key, shared.up.tls.clone()) {
            up.local.give_early(&up.key, Early::Dialling(d));
        }
        relay::Kept::None
    } else {
        relay::Kept::dial_early(&shared, &up)
    };
    let cfg = match shared.ca.server_config(&name) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "could not mint an interception leaf");
            return;
        }
    };
    let tls = match tokio::time::timeout(head_timeout, start.into_stream(cfg)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            // The client refused our certificate (it does not trust the session's CA, or
            // pins another): tell the phone why its request failed.
            let rec = tunnel_record(&shared, &t);
            rec.set_failure(
                kind::CLIENT_TLS_REJECTED,
                format!(
                    "the client did not accept the interception certificate for {name} \
                     (does it trust the session's CA bundle?): {e}"
                ),
            );
            return;
        }
        Err(_) => {
            let rec = tunnel_record(&shared, &t);
            rec.set_failure(
                kind::CLIENT_TLS_REJECTED,
                format!("the client did not finish the TLS handshake for {name}"),
            );
            return;
        }
    };
    let tunnel = inside(shared, t, InnerUpstream::Tls(up.clone()));
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        // HTTP/2 has no chunked bodies: its frames are not watched
        return serve_inner(tunnel, tls, false).await;
    }
    // HTTP/1.1: the relay, until a request needs the HTTP server
    match relay::serve(&tunnel, &up, tls, kept).await {
        relay::End::Closed => {}
        relay::End::Handoff(read, tls, kept) => {
            relay::hand_over(kept, &up);
            serve_inner(tunnel, Prefixed::new(read, tls), true).await
        }
    }
}

/// The tunnel's state for the requests inside it.
fn inside(shared: Arc<Shared>, t: Tunnel, up: InnerUpstream) -> Arc<Inside> {
    Arc::new(Inside {
        shared,
        signal: Arc::new(Signal::default()),
        principal: t.principal,
        host: t.host,
        port: t.port,
        up,
        conn: t.conn,
        _hold: t.hold,
    })
}

/// Serve the requests inside the tunnel with the HTTP server (HTTP/1.1, or h2 over TLS),
/// each decided alone.
async fn serve_inner<IO>(tunnel: Arc<Inside>, io: IO, h1: bool)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = tunnel.shared.clone();
    let head_timeout = shared.cfg.head_timeout;
    let pool: Arc<dyn PoolRef> = match &tunnel.up {
        InnerUpstream::Tls(u) => u.clone(),
        InnerUpstream::Plain(p, _) => p.clone(),
    };
    let signal = tunnel.signal.clone();
    let max_buf = shared.cfg.max_header_bytes.max(8192);
    let io = if h1 {
        Watched::new(io, signal, max_buf)
    } else {
        Watched::unwatched(io, signal)
    };
    let svc = service_fn(move |req| {
        let t = tunnel.clone();
        async move { Ok::<_, Infallible>(inner(t, req).await) }
    });
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(max_buf);
    // The tunnel's upstream connections are driven in this task.
    let conn = b.serve_connection_with_upgrades(TokioIo::new(io), svc);
    if let Err(e) = pool.pool().run(&shared.up, conn).await {
        tracing::debug!(error = %e, "intercepted connection ended with an error");
    }
}

/// The connection pool a tunnel's task drives.
trait PoolRef: Send + Sync {
    fn pool(&self) -> &ConnPool;
}

impl PoolRef for TunnelUpstream {
    fn pool(&self) -> &ConnPool {
        &self.local
    }
}

impl PoolRef for ConnPool {
    fn pool(&self) -> &ConnPool {
        self
    }
}

/// The authority an inner request names: its target's (absolute form, h2 `:authority`), else
/// its `Host` (visible ASCII only).
fn given_authority<'a>(uri: &'a http::Uri, headers: &'a http::HeaderMap) -> Option<&'a str> {
    match uri.authority() {
        Some(a) => Some(a.as_str()),
        None => headers.get(header::HOST).and_then(|v| v.to_str().ok()),
    }
}

/// Does the inner request's `Host` / `:authority` (`given`) name the CONNECT target? `host`
/// is the target as CONNECT normalized it.
fn authority_matches(given: Option<&str>, host: &str, port: u16) -> bool {
    let Some(given) = given else {
        return false;
    };
    let given = given.trim();
    // The usual case, read without allocating: the client names the host exactly as CONNECT
    // did, with the same port or none. Anything else is parsed and normalized in full.
    let split = given.rsplit_once(':');
    match split {
        Some((h, p)) if h == host && !h.contains(':') => return p.parse::<u16>() == Ok(port),
        None if given == host => return true,
        _ => {}
    }
    let explicit_port = split.map(|(h, _)| !h.is_empty() && (!h.contains(':') || h.ends_with(']')));
    match parse_authority(given) {
        Some((h, p)) => h == host && (explicit_port != Some(true) || p == port),
        None => false,
    }
}

async fn inner(t: Arc<Inside>, req: Request<Incoming>) -> Response<ProxyBody> {
    // HTTP/1 requests come one after another, in the order the watch saw them
    let watch = (req.version() < http::Version::HTTP_2).then(|| t.signal.next_request());
    if head_size(&req) > t.shared.cfg.max_header_bytes {
        return Denial::head_too_large().to_response();
    }
    if req.method() == Method::CONNECT {
        return Denial::bad_request("nested CONNECT is not allowed inside an intercepted tunnel")
            .to_response();
    }
    if !authority_matches(given_authority(req.uri(), req.headers()), &t.host, t.port) {
        return Denial::bad_request(format!("Host does not match the CONNECT target {}", t.host))
            .to_response();
    }
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    if !path.starts_with('/') {
        return Denial::bad_request(reason::MALFORMED).to_response();
    }
    let (method, host) = (req.method().as_str(), t.host.clone());
    let (target, upstream) = match &t.up {
        InnerUpstream::Tls(u) => (
            Target::intercepted(method, path, host, t.port),
            Upstream::Tunnel(u.clone()),
        ),
        // plain HTTP inside a CONNECT tunnel: the plain lane's rules and filter phases,
        // sent to the address validated at CONNECT (whose port CONNECT checked)
        InnerUpstream::Plain(local, addr) => (
            Target::http(method, path, host, t.port, None),
            Upstream::PlainAt {
                local: local.clone(),
                addr: *addr,
            },
        ),
    };
    let who = Who::Known(t.principal.clone());
    let conn = Some(t.conn.clone());
    forward(&t.shared, target, who, req, upstream, conn, watch).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check on a request whose `Host` header is `host_header` (origin form), or whose
    /// URI names `authority` (absolute form, as h2's `:authority`).
    fn matches(authority: Option<&str>, host_header: Option<&str>) -> bool {
        let uri: http::Uri = match authority {
            Some(a) => format!("https://{a}/x")
                .parse()
                .unwrap_or_else(|e| panic!("{a}: {e}")),
            None => http::Uri::from_static("/x"),
        };
        let mut headers = http::HeaderMap::new();
        if let Some(h) = host_header {
            headers.insert(
                header::HOST,
                h.parse().unwrap_or_else(|e| panic!("{h}: {e}")),
            );
        }
        authority_matches(given_authority(&uri, &headers), "example.com", 8443)
    }

    #[test]
    fn the_connect_host_with_its_port_or_none_matches_and_another_port_or_host_does_not() {
        for (host, expected) in [
            ("example.com:8443", true),
            ("example.com", true),
            (" example.com:8443 ", true),
            ("EXAMPLE.com.:8443", true),
            ("example.com:443", false),
            ("example.com:0", false),
            ("example.com:x", false),
            ("example.com:", false),
            ("example.org:8443", false),
            ("example.com.evil:8443", false),
            ("", false),
        ] {
            assert_eq!(matches(None, Some(host)), expected, "Host: {host:?}");
        }
        assert!(matches(Some("example.com:8443"), None));
        assert!(!matches(Some("example.com:443"), Some("example.com:8443")));
        assert!(!matches(None, None));
    }

    #[test]
    fn an_address_host_matches_in_any_of_its_spellings_and_a_bare_v6_address_never() {
        let check = |given: &str, host: &str, port: u16| {
            let mut headers = http::HeaderMap::new();
            headers.insert(
                header::HOST,
                given.parse().unwrap_or_else(|e| panic!("{e}")),
            );
            let uri = http::Uri::from_static("/");
            authority_matches(given_authority(&uri, &headers), host, port)
        };
        assert!(check("127.0.0.1:443", "127.0.0.1", 443));
        assert!(check("2130706433:443", "127.0.0.1", 443));
        assert!(check("[::1]:443", "::1", 443));
        assert!(check("[0:0:0:0:0:0:0:1]", "::1", 443));
        assert!(!check("::1", "::1", 443));
        assert!(!check("::1:443", "::1", 443));
        assert!(!check("[::1]:80", "::1", 443));
    }
}
