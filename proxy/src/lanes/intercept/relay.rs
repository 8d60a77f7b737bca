//! The intercepted tunnel's side of the HTTP/1.1 relay ([`crate::lanes::h1`]): the tunnel's
//! principal, the Host each request must name, and the one upstream connection it keeps (TLS
//! to the address validated at CONNECT, the name verified, HTTP/1.1 offered alone), dialled
//! early while the client's handshake runs where CONNECT allows it.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{authority_matches, Inside};
use crate::conn_pool::{Early, EarlyDial, Key};
use crate::deny::Denial;
use crate::lanes::forward::TunnelUpstream;
use crate::lanes::h1::{self, Fields, Form, Head, Side, UpConn};
use crate::phases::Target;
use crate::state::Shared;
use crate::traits::Principal;
use crate::upstream::UpstreamTls;

/// How the relay left the client connection.
pub(super) enum End<IO> {
    /// Closed (or to be closed by the caller dropping it).
    Closed,
    /// For the HTTP server lane, with the bytes read and not served yet and the upstream
    /// connection (for the lane's pool).
    Handoff(Vec<u8>, IO, Kept),
}

/// Serve the tunnel's requests until the client closes or a request needs the HTTP server.
/// `kept`: the upstream connection to start with (one dialled early, or none).
pub(super) async fn serve<IO>(t: &Inside, up: &TunnelUpstream, io: IO, kept: Kept) -> End<IO>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
{
    let mut side = Tunnel { t, up, kept };
    match h1::serve(&mut side, io).await {
        None => End::Closed,
        Some((read, io)) => End::Handoff(read, io, side.kept),
    }
}

/// The tunnel as the relay sees it.
struct Tunnel<'a> {
    t: &'a Inside,
    up: &'a TunnelUpstream,
    kept: Kept,
}

impl Side for Tunnel<'_> {
    type Stream = UpstreamTls;

    fn shared(&self) -> &Arc<Shared> {
        &self.t.shared
    }

    fn form(&self) -> Form {
        Form::Origin
    }

    fn target(&self, head: &Head) -> Result<Target, Denial> {
        let t = self.t;
        // the one Host value, read as the other lanes read it (visible ASCII only)
        let host = head
            .fields
            .values("host")
            .next()
            .filter(|v| v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)))
            .and_then(|v| std::str::from_utf8(v).ok());
        if !authority_matches(host, &t.host, t.port) {
            return Err(Denial::bad_request(format!(
                "Host does not match the CONNECT target {}",
                t.host
            )));
        }
        let path = head.path.as_str().to_string();
        let method = head.method.as_str();
        Ok(Target::intercepted(method, path, t.host.clone(), t.port))
    }

    async fn attribute(&mut self, _: &Fields) -> Result<Principal, Denial> {
        Ok(self.t.principal.clone())
    }

    fn validated(&self) -> Option<SocketAddr> {
        Some(self.up.addr)
    }

    /// The relay serves its tunnel's requests one after another, on the tunnel's slot.
    fn on_held_slot(&self) -> bool {
        true
    }

    async fn take(&mut self, _: SocketAddr) -> Option<Box<UpConn<UpstreamTls>>> {
        self.kept.take_open().await
    }

    async fn dial(&self, _: SocketAddr) -> Result<Box<UpConn<UpstreamTls>>, Denial> {
        dial(&self.t.shared, self.up).await
    }

    fn keep(&mut self, _: SocketAddr, conn: Box<UpConn<UpstreamTls>>) {
        self.kept = Kept::Ready(conn);
    }
}
/// A new upstream connection: the address validated at CONNECT, the name verified, HTTP/1.1.
async fn dial(shared: &Shared, up: &TunnelUpstream) -> Result<Box<UpConn<UpstreamTls>>, Denial> {
    let Key::Tls(addr, name) = &up.key else {
        return Err(Denial::bad_request(crate::deny::reason::MALFORMED));
    };
    let tls = shared
        .up
        .dial_tls(*addr, name, shared.up.tls_h1.clone())
        .await
        .map_err(|e| Denial::upstream(crate::dial::classify_io(&e), e))?;
    Ok(UpConn::new(tls))
}

/// The relay's upstream connection between requests.
pub(super) enum Kept {
    /// None yet, or the last one could not be kept.
    None,
    /// Being dialled since the client's handshake began (the first request awaits it).
    Dialling(EarlyDial),
    /// Kept from the last answer.
    Ready(Box<UpConn<UpstreamTls>>),
}

impl Kept {
    /// Start dialling the tunnel's upstream now, on this thread, while the client's TLS
    /// handshake and its first request are still on their way.
    pub(super) fn dial_early(shared: &Shared, up: &TunnelUpstream) -> Kept {
        match EarlyDial::start(&shared.up, &up.key, shared.up.tls_h1.clone()) {
            Some(d) => Kept::Dialling(d),
            None => Kept::None,
        }
    }

    /// A connection to send on that is open and silent, if there is one: a dial under way
    /// is awaited, and one that failed or a connection the upstream closed gives `None`
    /// (the request then dials itself, as if nothing had been kept).
    async fn take_open(&mut self) -> Option<Box<UpConn<UpstreamTls>>> {
        let mut conn = match std::mem::replace(self, Kept::None) {
            Kept::None => return None,
            Kept::Ready(c) => c,
            Kept::Dialling(d) => UpConn::new(d.finish().await?),
        };
        conn.idle_and_open().then_some(conn)
    }
}

/// Hand the relay's upstream connection (open and idle, or still being dialled) to the HTTP
/// server lane's pool for the tunnel: that lane's next request goes on it.
pub(super) fn hand_over(kept: Kept, up: &TunnelUpstream) {
    let early = match kept {
        Kept::None => return,
        Kept::Dialling(d) => Early::Dialling(d),
        Kept::Ready(mut c) => {
            if !c.idle_and_open() {
                return;
            }
            Early::Ready(Box::new(c.io))
        }
    };
    up.local.give_early(&up.key, early);
}
