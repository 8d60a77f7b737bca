//! Upstream HTTP connections owned by one client connection.
//!
//! hyper-util's pooled client runs every upstream connection in a task of its
//! own and talks to it over channels, so each forwarded request crossed
//! tasks (and often threads) several times. Here the upstream connections
//! of one client connection are driven *inside that connection's task*
//! ([`ConnPool::run`] polls the client-side server connection and the
//! upstream connections together), and an upstream connection is reused for
//! the next request of the same client connection when that request was
//! validated to the same address (and, for TLS, the same server name).
//!
//! Nothing about the decision changes (docs/decisions.md, P1 and P4): the caller decides and
//! validates every request first and hands over the validated address; this
//! module only ever dials that address. When a plain-HTTP client connection
//! ends, its idle upstream socket goes to a small process-wide pool
//! ([`IdleTcp`], keyed by the validated address, checked for liveness on
//! reuse) so clients that open a connection per request still reuse
//! upstream connections.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use crate::body::ProxyBody;
use crate::deny::Denial;
use crate::traits::Dialer;
use crate::upstream::{connect_tls, describe, UpstreamTls};

/// Where an upstream connection goes: the validated address (and the
/// verified TLS server name).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Key {
    /// Plain HTTP to a validated address.
    Plain(SocketAddr),
    /// TLS (hostname verified against the name) to a validated address.
    Tls(SocketAddr, ServerName<'static>),
}

enum Sender {
    H1(http1::SendRequest<ProxyBody>),
    H2(http2::SendRequest<ProxyBody>),
}

enum Conn {
    Tcp1(Box<http1::Connection<TokioIo<TcpStream>, ProxyBody>>),
    Tls1(Box<http1::Connection<TokioIo<UpstreamTls>, ProxyBody>>),
    Tls2(Pin<Box<http2::Connection<TokioIo<UpstreamTls>, ProxyBody, TokioExecutor>>>),
}

impl Conn {
    /// `Ready` once the connection is finished (closed, failed or released).
    fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let r = match self {
            Conn::Tcp1(c) => c.poll_without_shutdown(cx),
            Conn::Tls1(c) => Pin::new(&mut **c).poll(cx),
            Conn::Tls2(c) => c.as_mut().poll(cx),
        };
        r.map(|res| {
            if let Err(e) = res {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        })
    }
}

struct Driven {
    id: u64,
    conn: Conn,
}

struct Idle {
    id: u64,
    key: Key,
    sender: Sender,
}

#[derive(Default)]
struct Inner {
    waker: Option<Waker>,
    conns: Vec<Driven>,
    idle: Vec<Idle>,
    next_id: u64,
    /// A TLS connection to a key made before a request needed it.
    early: Option<(Key, Early)>,
}

/// A TLS connection made before any request needed it: an intercepted tunnel's, dialled
/// during the client's handshake, or the HTTP/1.1 relay's, handed over with its client.
pub(crate) enum Early {
    /// Still being dialled.
    Dialling(EarlyDial),
    /// Open (and idle).
    Ready(Box<UpstreamTls>),
}

/// A TLS dial under way on this thread; stopped when dropped unused.
pub(crate) struct EarlyDial(tokio::task::JoinHandle<std::io::Result<UpstreamTls>>);

impl EarlyDial {
    /// Dial `key`'s validated address and verify its name, with `tls`.
    pub(crate) fn start(up: &Upstreams, key: &Key, tls: Arc<rustls::ClientConfig>) -> Option<Self> {
        let Key::Tls(addr, name) = key else {
            return None;
        };
        Some(EarlyDial(tokio::spawn(up.dial_tls(*addr, name, tls))))
    }

    /// The connection, once dialled (`None`: the dial failed; the caller dials again, so that
    /// its own error is the one reported).
    pub(crate) async fn finish(mut self) -> Option<UpstreamTls> {
        match (&mut self.0).await {
            Ok(Ok(tls)) => Some(tls),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "an early upstream dial failed");
                None
            }
            Err(_) => None,
        }
    }
}

impl Drop for EarlyDial {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How upstream connections are opened: the dialer (validated addresses only), its
/// timeout, the upstream TLS configuration and the process-wide idle sockets.
pub(crate) struct Upstreams {
    /// TCP connects.
    pub dialer: Arc<dyn Dialer>,
    /// Connect (and TLS handshake) timeout.
    pub connect_timeout: Duration,
    /// Upstream TLS client configuration (trusted roots).
    pub tls: Arc<rustls::ClientConfig>,
    /// The same, offering HTTP/1.1 only (the intercepted HTTP/1 relay's upstream side).
    pub tls_h1: Arc<rustls::ClientConfig>,
    /// Idle plain-HTTP upstream sockets left by ended client connections.
    pub idle_tcp: IdleTcp,
}

impl Upstreams {
    /// TLS to a validated address, `name` verified, with `tls` (within the connect timeout):
    /// an owned future, so that it can also run as a task of its own.
    pub(crate) fn dial_tls(
        &self,
        addr: SocketAddr,
        name: &ServerName<'static>,
        tls: Arc<rustls::ClientConfig>,
    ) -> impl Future<Output = std::io::Result<UpstreamTls>> + Send + 'static {
        let (dialer, timeout, name) = (self.dialer.clone(), self.connect_timeout, name.clone());
        async move { connect_tls(dialer.as_ref(), timeout, addr, name, tls).await }
    }
}

/// Idle senders kept per client connection (more only with an h2 client
/// side, whose requests run concurrently).
const MAX_IDLE: usize = 4;

/// The upstream connections of one client connection.
#[derive(Default)]
pub(crate) struct ConnPool {
    inner: Mutex<Inner>,
    /// Set while [`ConnPool::run`] polls the client side: a connection
    /// registered then is polled right after, without a wake-up.
    in_poll: AtomicBool,
}

fn noop_cx_poll<T>(f: impl FnOnce(&mut Context<'_>) -> Poll<T>) -> Poll<T> {
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    f(&mut cx)
}

impl ConnPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` inconsistent
        // in a way that matters (worst case: a connection is dropped).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drive `server` (the client connection) and this pool's upstream
    /// connections in the current task until `server` completes; then hand
    /// idle plain-HTTP upstream sockets to the process-wide pool.
    pub(crate) fn run<'a, F: Future>(&'a self, up: &'a Upstreams, server: F) -> Run<'a, F> {
        Run {
            pool: self,
            up,
            server: Box::pin(server),
        }
    }

    fn poll_conns(&self, cx: &mut Context<'_>) {
        let mut inner = self.lock();
        match &inner.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => inner.waker = Some(cx.waker().clone()),
        }
        inner
            .conns
            .retain_mut(|d| d.conn.poll_done(cx).is_pending());
    }

    fn register(&self, conn: Conn) -> u64 {
        let wake = {
            let mut inner = self.lock();
            inner.next_id += 1;
            let id = inner.next_id;
            inner.conns.push(Driven { id, conn });
            let wake = if self.in_poll.load(Ordering::SeqCst) {
                None
            } else {
                inner.waker.clone()
            };
            (id, wake)
        };
        if let Some(w) = wake.1 {
            w.wake();
        }
        wake.0
    }

    /// A ready sender for `key`: h1 senders are taken out (one request at a
    /// time), h2 senders are shared.
    fn checkout(&self, key: &Key) -> Option<(u64, Sender)> {
        let mut inner = self.lock();
        let mut i = inner.idle.len();
        while i > 0 {
            i -= 1;
            if inner.idle[i].key != *key {
                continue;
            }
            match &inner.idle[i].sender {
                Sender::H2(s) if s.is_ready() => {
                    return Some((inner.idle[i].id, Sender::H2(s.clone())));
                }
                Sender::H1(s) if s.is_ready() => {
                    let idle = inner.idle.remove(i);
                    return Some((idle.id, idle.sender));
                }
                // closed, or (rarely) not yet back to idle: let it finish
                _ => {
                    inner.idle.remove(i);
                }
            }
        }
        None
    }

    fn checkin(&self, id: u64, key: &Key, sender: Sender) {
        if let Sender::H2(_) = sender {
            return; // the pool still holds the original
        }
        let mut inner = self.lock();
        inner.idle.push(Idle {
            id,
            key: key.clone(),
            sender,
        });
        if inner.idle.len() > MAX_IDLE {
            inner.idle.remove(0);
        }
    }

    /// Keep `early` for the first request to `key` that finds no idle connection.
    pub(crate) fn give_early(&self, key: &Key, early: Early) {
        self.lock().early = Some((key.clone(), early));
    }

    /// The early connection to `key`, once dialled (and taken: it is this request's).
    async fn take_early(&self, key: &Key) -> Option<UpstreamTls> {
        let early = {
            let mut inner = self.lock();
            match &inner.early {
                Some((k, _)) if k == key => inner.early.take().map(|(_, e)| e),
                _ => None,
            }
        }?;
        match early {
            Early::Ready(tls) => Some(*tls),
            Early::Dialling(d) => d.finish().await,
        }
    }

    /// A new upstream connection for `key`: a pooled idle socket (plain
    /// HTTP; `true` = reused) or a fresh dial of the validated address.
    async fn open(&self, up: &Upstreams, key: &Key) -> Result<(u64, Sender, bool), Denial> {
        match key {
            Key::Plain(addr) => {
                let (tcp, reused) = match up.idle_tcp.take(*addr) {
                    Some(s) => (s, true),
                    None => (
                        crate::dial::connect(up.dialer.as_ref(), up.connect_timeout, *addr).await?,
                        false,
                    ),
                };
                let _ = tcp.set_nodelay(true);
                let (sender, conn) = http1::Builder::new()
                    .handshake::<_, ProxyBody>(TokioIo::new(tcp))
                    .await
                    .map_err(|e| upstream_denial(&e))?;
                let id = self.register(Conn::Tcp1(Box::new(conn)));
                Ok((id, Sender::H1(sender), reused))
            }
            Key::Tls(addr, name) => {
                let tls = up
                    .dial_tls(*addr, name, up.tls.clone())
                    .await
                    .map_err(|e| Denial::upstream(crate::dial::classify_io(&e), e))?;
                let (id, sender) = self.attach(key, tls).await?;
                Ok((id, sender, false))
            }
        }
    }

    /// An HTTP connection (h2 when the upstream chose it) on an open TLS connection to `key`,
    /// driven by this pool.
    async fn attach(&self, key: &Key, tls: UpstreamTls) -> Result<(u64, Sender), Denial> {
        let h2 = tls.0.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(tls);
        if h2 {
            let (sender, conn) = h2_handshake(io).await?;
            let id = self.register(Conn::Tls2(Box::pin(conn)));
            // shared by concurrent requests: into the pool right away
            self.lock().idle.push(Idle {
                id,
                key: key.clone(),
                sender: Sender::H2(sender.clone()),
            });
            Ok((id, Sender::H2(sender)))
        } else {
            let (sender, conn) = http1::Builder::new()
                .handshake::<_, ProxyBody>(io)
                .await
                .map_err(|e| upstream_denial(&e))?;
            let id = self.register(Conn::Tls1(Box::new(conn)));
            Ok((id, Sender::H1(sender)))
        }
    }

    /// Send `req` (origin-form URI) to `key`'s validated address on a
    /// reused or new connection; on h2 the URI gets `https://{authority}`.
    /// A request that provably never left (the connection closed while
    /// idle) is retried on another connection.
    pub(crate) async fn send(
        &self,
        up: &Upstreams,
        key: &Key,
        authority: &str,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, Denial> {
        let origin_form = req.uri().clone();
        let mut absolute = None;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (id, mut sender, reused) = match self.checkout(key) {
                Some((id, s)) => (id, s, true),
                // an early connection may have been closed by the upstream meanwhile: a
                // request that never left it is sent again, as on a reused one
                None => match self.take_early(key).await {
                    Some(tls) => {
                        let (id, s) = self.attach(key, tls).await?;
                        (id, s, true)
                    }
                    None => self.open(up, key).await?,
                },
            };
            let res = match &mut sender {
                Sender::H1(s) => {
                    *req.uri_mut() = origin_form.clone();
                    s.try_send_request(req).await
                }
                Sender::H2(s) => {
                    if absolute.is_none() {
                        let pq = origin_form.path_and_query().map(|p| p.as_str());
                        absolute = format!("https://{authority}{}", pq.unwrap_or("/"))
                            .parse::<Uri>()
                            .ok();
                    }
                    let Some(abs) = absolute.clone() else {
                        return Err(Denial::bad_request(crate::deny::reason::MALFORMED));
                    };
                    *req.uri_mut() = abs;
                    s.try_send_request(req).await
                }
            };
            match res {
                Ok(resp) => {
                    self.checkin(id, key, sender);
                    return Ok(resp);
                }
                Err(mut e) => {
                    let back = e.take_message();
                    match back {
                        Some(r) if reused && attempts < 3 => {
                            tracing::debug!(error = %e.error(), "reused upstream connection was closed; retrying");
                            req = r;
                        }
                        _ => return Err(upstream_denial(&e.into_error())),
                    }
                }
            }
        }
    }

    /// Move idle plain-HTTP upstream sockets to the process-wide pool; every
    /// other connection closes with this pool.
    fn retire(&self, up: &Upstreams) {
        let (idle, mut conns) = {
            let mut inner = self.lock();
            (
                std::mem::take(&mut inner.idle),
                std::mem::take(&mut inner.conns),
            )
        };
        for i in idle {
            let (Key::Plain(addr), Sender::H1(sender)) = (i.key, i.sender) else {
                continue;
            };
            if !sender.is_ready() {
                continue;
            }
            let Some(pos) = conns.iter().position(|d| d.id == i.id) else {
                continue;
            };
            let Conn::Tcp1(mut conn) = conns.swap_remove(pos).conn else {
                continue;
            };
            // With its sender gone an idle connection finishes at once and
            // gives its socket back.
            drop(sender);
            if let Poll::Ready(Ok(())) = noop_cx_poll(|cx| conn.poll_without_shutdown(cx)) {
                let parts = (*conn).into_parts();
                if parts.read_buf.is_empty() {
                    up.idle_tcp.put(addr, parts.io.into_inner());
                }
            }
        }
    }
}

type H2Parts = (
    http2::SendRequest<ProxyBody>,
    http2::Connection<TokioIo<UpstreamTls>, ProxyBody, TokioExecutor>,
);

/// The h2 handshake behind a boxed `Send` future (keeps the compiler's
/// `Send` inference for the callers' futures tractable).
fn h2_handshake(
    io: TokioIo<UpstreamTls>,
) -> Pin<Box<dyn Future<Output = Result<H2Parts, Denial>> + Send>> {
    Box::pin(async move {
        http2::Builder::new(TokioExecutor::new())
            .handshake::<_, ProxyBody>(io)
            .await
            .map_err(|e| upstream_denial(&e))
    })
}

/// Future of [`ConnPool::run`] (a plain struct rather than an `async fn`,
/// so that it is `Send` whenever the server connection is).
pub(crate) struct Run<'a, F> {
    pool: &'a ConnPool,
    up: &'a Upstreams,
    server: Pin<Box<F>>,
}

impl<F: Future> Future for Run<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // Upstream first: a response that just arrived reaches its request
        // (and the client) in this same poll, instead of after the
        // scheduler re-polls the task for the wake-up it caused.
        this.pool.poll_conns(cx);
        this.pool.in_poll.store(true, Ordering::SeqCst);
        let r = this.server.as_mut().poll(cx);
        this.pool.in_poll.store(false, Ordering::SeqCst);
        match r {
            Poll::Ready(out) => {
                this.pool.retire(this.up);
                Poll::Ready(out)
            }
            Poll::Pending => {
                this.pool.poll_conns(cx);
                Poll::Pending
            }
        }
    }
}

fn upstream_denial(e: &hyper::Error) -> Denial {
    let (class, msg) = describe(e);
    Denial::upstream(class, msg)
}

/// How long an idle upstream socket stays in [`IdleTcp`].
const IDLE_TTL: Duration = Duration::from_secs(90);
const IDLE_PER_ADDR: usize = 32;
const IDLE_ADDRS: usize = 256;

/// Process-wide idle plain-HTTP upstream sockets, keyed by the validated
/// address they were dialled to. They wait as `std` sockets, registered with
/// no event loop, so a connection on any proxy thread can take one. Nobody
/// reads them while they wait; a socket the origin closed (or that has
/// unexpected bytes) is dropped on checkout.
#[derive(Default)]
pub(crate) struct IdleTcp {
    map: Mutex<HashMap<SocketAddr, Vec<(Instant, std::net::TcpStream)>>>,
}

/// Nothing to read and not closed: still a usable idle socket.
fn alive(s: &std::net::TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

impl IdleTcp {
    /// An idle socket to `addr`, registered with the calling thread's runtime.
    pub(crate) fn take(&self, addr: SocketAddr) -> Option<TcpStream> {
        let found = {
            let mut map = self.map.lock().ok()?;
            let v = map.get_mut(&addr)?;
            let mut found = None;
            while let Some((t, s)) = v.pop() {
                if t.elapsed() < IDLE_TTL && alive(&s) {
                    found = Some(s);
                    break;
                }
            }
            if v.is_empty() {
                map.remove(&addr);
            }
            found
        }?;
        TcpStream::from_std(found).ok()
    }

    pub(crate) fn put(&self, addr: SocketAddr, s: TcpStream) {
        let Ok(s) = s.into_std() else {
            return;
        };
        let Ok(mut map) = self.map.lock() else {
            return;
        };
        if map.len() >= IDLE_ADDRS && !map.contains_key(&addr) {
            map.retain(|_, v| {
                v.retain(|(t, _)| t.elapsed() < IDLE_TTL);
                !v.is_empty()
            });
            if map.len() >= IDLE_ADDRS {
                return;
            }
        }
        let v = map.entry(addr).or_default();
        v.retain(|(t, _)| t.elapsed() < IDLE_TTL);
        if v.len() >= IDLE_PER_ADDR {
            v.remove(0);
        }
        v.push((Instant::now(), s));
    }
}
