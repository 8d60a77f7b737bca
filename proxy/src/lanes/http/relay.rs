//! The plain-HTTP lane's side of the HTTP/1.1 relay ([`crate::lanes::h1`]): each request
//! attributed by its own `Proxy-Authorization` and decided alone (nothing inherited from the
//! connection's earlier requests), its host validated by the SSRF floor, and the upstream
//! connection of the last answer kept for the next request to the same address. Only
//! absolute-form `http://` targets are taken; CONNECT, provider routes and everything else
//! go to the HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;

use crate::attribution::{authorize, token_from_proxy_authorization};
use crate::deny::{reason, Denial};
use crate::lanes::h1::{self, Fields, Form, Head, Side, UpConn};
use crate::phases::Target;
use crate::state::{ConnGuard, Shared};
use crate::traits::Principal;

/// Serve the connection's requests until it closes (`None`) or one needs the HTTP server:
/// then the bytes read and not served yet, and the stream.
pub(super) async fn serve(
    shared: &Arc<Shared>,
    conn: &ConnGuard,
    stream: TcpStream,
) -> Option<(Vec<u8>, TcpStream)> {
    let mut side = Plain {
        shared,
        conn,
        kept: None,
        tokens: Tokens::default(),
    };
    let end = h1::serve(&mut side, stream).await;
    if let Some((addr, up)) = side.kept.take() {
        retire(shared, addr, *up);
    }
    end
}

/// A kept connection that is still open and idle (nothing read and not relayed) goes to the
/// process-wide idle sockets.
fn retire(shared: &Shared, addr: SocketAddr, mut up: UpConn<TcpStream>) {
    if up.idle_and_open() {
        shared.up.idle_tcp.put(addr, up.io);
    }
}

/// The client connection as the relay sees it.
struct Plain<'a> {
    shared: &'a Arc<Shared>,
    conn: &'a ConnGuard,
    /// The upstream connection of the last answer, and the address it goes to.
    kept: Option<(SocketAddr, Box<UpConn<TcpStream>>)>,
    tokens: Tokens,
}

/// The token of a request's first `Proxy-Authorization` field. A client sends the same value
/// on every request of a connection: it is decoded once, and again only when it changes (the
/// token is still looked up for every request).
#[derive(Default)]
struct Tokens {
    raw: Vec<u8>,
    token: Option<String>,
}

impl Tokens {
    fn of(&mut self, fields: &Fields) -> Option<&str> {
        let raw = fields.values("proxy-authorization").next()?;
        if raw != self.raw.as_slice() {
            self.raw.clear();
            self.raw.extend_from_slice(raw);
            self.token = token_from_proxy_authorization(raw);
        }
        self.token.as_deref()
    }
}

impl Side for Plain<'_> {
    type Stream = TcpStream;

    fn shared(&self) -> &Arc<Shared> {
        self.shared
    }

    fn form(&self) -> Form {
        Form::Absolute {
            own_port: self.shared.own_port,
        }
    }

    /// The first request with a token the host knows moves the connection under the overall
    /// cap; 503 when the cap is full. A request without a known token goes on (and is
    /// refused by the attribution step).
    async fn gate(&mut self, head: &Head) -> Option<&'static [u8]> {
        if self.conn.is_authenticated() {
            return None;
        }
        let token = self.tokens.of(&head.fields);
        let attribution = self.shared.svc.attribution.as_ref();
        if authorize(attribution, token).await.is_err() || self.conn.authenticated() {
            return None;
        }
        Some(crate::listener::BUSY_503.as_bytes())
    }

    fn target(&self, head: &Head) -> Result<Target, Denial> {
        let Some(a) = &head.authority else {
            return Err(Denial::bad_request(reason::MALFORMED));
        };
        let path = head.path.as_str().to_string();
        let method = head.method.as_str();
        Ok(Target::http(
            method,
            path,
            a.host.clone(),
            a.port,
            Some(a.port),
        ))
    }

    async fn attribute(&mut self, fields: &Fields) -> Result<Principal, Denial> {
        let token = self.tokens.of(fields);
        authorize(self.shared.svc.attribution.as_ref(), token).await
    }

    fn validated(&self) -> Option<SocketAddr> {
        None
    }

    fn on_held_slot(&self) -> bool {
        false
    }

    /// The connection kept for `addr`, else an idle socket to it left by another client
    /// connection. A kept connection to another address goes to the idle sockets.
    async fn take(&mut self, addr: SocketAddr) -> Option<Box<UpConn<TcpStream>>> {
        if let Some((at, mut up)) = self.kept.take() {
            if at != addr {
                retire(self.shared, at, *up);
            } else if up.idle_and_open() {
                return Some(up);
            }
        }
        let tcp = self.shared.up.idle_tcp.take(addr)?;
        Some(UpConn::new(tcp))
    }

    async fn dial(&self, addr: SocketAddr) -> Result<Box<UpConn<TcpStream>>, Denial> {
        let up = &self.shared.up;
        let tcp = crate::dial::connect(up.dialer.as_ref(), up.connect_timeout, addr).await?;
        let _ = tcp.set_nodelay(true);
        Ok(UpConn::new(tcp))
    }

    fn keep(&mut self, addr: SocketAddr, conn: Box<UpConn<TcpStream>>) {
        if let Some((at, up)) = self.kept.replace((addr, conn)) {
            retire(self.shared, at, *up);
        }
    }
}
