//! The HTTP/1.1 relay: plain-HTTP proxy requests, and the requests inside an intercepted TLS
//! tunnel.
//!
//! Most requests are plain: a head, no body or a small `Content-Length` one, one answer. For
//! those the lane runs neither an HTTP server nor an HTTP client per request: it reads each
//! head once (httparse), runs the flow's steps on it ([`crate::phases`]) like every other
//! request, writes the head and the body upstream in one write on a connection it keeps (to
//! the validated address; in a tunnel TLS with the name verified and HTTP/1.1 offered alone),
//! and copies the answer back by its framing (`Content-Length`, chunked, or to the upstream's
//! close).
//!
//! What the relay does not take exactly — HTTP/1.0, a `Transfer-Encoding`, `Expect` or
//! `Upgrade` request, a body over [`wire::BODY_LIMIT`], two `Content-Length` headers, no `Host`
//! or two, a target not of the lane's form ([`Form`]), CONNECT, a head larger than the proxy's
//! cap or one that httparse or the `http` types refuse — hands the connection over, from that
//! request's first byte, to the lane's HTTP server (hyper, with the framing watch) for the
//! rest of its life. A request the relay does not follow therefore behaves as it always did.
//!
//! A lane says what differs through [`Side`]: who asks, what the steps check, and which
//! upstream connections it keeps. [`serve`] and the flow's steps are written once.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::Method;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::deny::{kind, Denial, DenyClass};
use crate::filters::header_map;
use crate::lanes::forward::strip_hop_by_hop;
use crate::phases::{self, Cleared, Framing, RequestView, ResponseView, Step, Target};
use crate::record::AllowRecord;
use crate::state::Shared;
use crate::traits::{Principal, ProviderCredential};

mod conn;
mod fields;
pub(crate) mod wire;

use conn::{exchange, read_up, BodyError, Failed, UpRead};
pub(crate) use conn::{Answered, ClientSide, UpConn};
use fields::write_field;
pub(crate) use fields::Fields;
use wire::{parse_head, response_head, write_fields, BodyFraming, Parsed};
pub(crate) use wire::{Form, Head};

/// The largest response head read from the upstream.
const MAX_RESPONSE_HEAD: usize = 256 * 1024;
/// A chunk-size or trailer line longer than this ends the response as malformed.
const MAX_LINE: usize = 4096;
/// Bytes asked of a socket per read.
const READ_CHUNK: usize = 16 * 1024;
/// Client bytes kept while an answer is awaited (a pipelined next request); past it the
/// client is not read until the answer is relayed.
const CLIENT_BUF_CAP: usize = 128 * 1024;

/// What a lane tells the relay.
pub(crate) trait Side: Send {
    /// The upstream stream: TLS in a tunnel, TCP for plain HTTP.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send;
    fn shared(&self) -> &Arc<Shared>;
    /// Which request targets the relay takes.
    fn form(&self) -> Form;
    /// Bytes to answer with before the request's steps, the connection then closed (the
    /// connection cap); `None`: go on.
    fn gate(&mut self, _head: &Head) -> impl Future<Output = Option<&'static [u8]>> + Send {
        async { None }
    }
    /// What the steps check for this request, or why it is refused before them.
    fn target(&self, head: &Head) -> Result<Target, Denial>;
    /// Who asks.
    fn attribute(
        &mut self,
        fields: &Fields,
    ) -> impl Future<Output = Result<Principal, Denial>> + Send;
    /// The address validated before the request (at CONNECT), if any.
    fn validated(&self) -> Option<SocketAddr>;
    /// The requests run on a slot the lane holds already.
    fn on_held_slot(&self) -> bool;
    /// An open, silent connection to `addr` kept from an earlier answer (or dialled early).
    fn take(
        &mut self,
        addr: SocketAddr,
    ) -> impl Future<Output = Option<Box<UpConn<Self::Stream>>>> + Send;
    /// A new connection to `addr` (validated).
    fn dial(
        &self,
        addr: SocketAddr,
    ) -> impl Future<Output = Result<Box<UpConn<Self::Stream>>, Denial>> + Send;
    /// Keep a connection whose answer ended cleanly for the next request.
    fn keep(&mut self, addr: SocketAddr, conn: Box<UpConn<Self::Stream>>);
}

/// Serve requests until the client closes (`None`) or a request needs the HTTP server:
/// then the bytes read and not served yet, and the client's stream.
pub(crate) async fn serve<IO, U>(side: &mut U, io: IO) -> Option<(Vec<u8>, IO)>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send,
    U: Side,
{
    let shared = side.shared().clone();
    let cfg = &shared.cfg;
    let form = side.form();
    let mut client = ClientSide {
        io,
        buf: BytesMut::with_capacity(READ_CHUNK),
    };
    // One timer for the connection, moved on only when it fires before the deadline of the
    // head awaited: a request on a kept-alive connection sets no timer of its own.
    let idle = tokio::time::sleep(cfg.head_timeout);
    tokio::pin!(idle);
    loop {
        // The whole head within the head timeout from the moment the relay waits for it: an
        // idle keep-alive connection ends then, as in the HTTP server lane.
        let deadline = tokio::time::Instant::now() + cfg.head_timeout;
        let head = loop {
            if !client.buf.is_empty() {
                match parse_head(&mut client.buf, cfg.max_header_bytes, form) {
                    Parsed::Take(head) => break head,
                    Parsed::Handoff => return Some((client.buf.to_vec(), client.io)),
                    Parsed::Partial => {}
                }
            }
            let filled = loop {
                tokio::select! {
                    biased;
                    r = client.fill() => break r,
                    () = &mut idle => {
                        if tokio::time::Instant::now() >= deadline {
                            return None;
                        }
                        idle.as_mut().reset(deadline);
                    }
                }
            };
            match filled {
                Ok(true) => {}
                _ => return None,
            }
        };
        if let Some(answer) = side.gate(&head).await {
            let _ = client.send(answer).await;
            return None;
        }
        match request(&shared, side, &mut client, head).await {
            Next::Keep => {}
            Next::Close => {
                let _ = tokio::time::timeout(cfg.head_timeout, client.io.shutdown()).await;
                return None;
            }
        }
    }
}

/// What the connection does after an answer.
pub(crate) enum Next {
    Keep,
    Close,
}

/// One request through the flow's steps.
async fn request<IO, U>(
    shared: &Arc<Shared>,
    side: &mut U,
    client: &mut ClientSide<IO>,
    head: Head,
) -> Next
where
    IO: AsyncRead + AsyncWrite + Unpin + Send,
    U: Side,
{
    let target = side.target(&head);
    let flow = Flow {
        shared,
        side,
        client,
        method: head.method,
        fields: ReqFields {
            read: head.fields,
            map: None,
        },
        close: head.close,
        path: head.path.as_str().to_string(),
        body_len: head.body_len,
        body: None,
        unread: head.body_len > 0,
        gone: false,
        broken: false,
    };
    match target {
        Ok(target) => phases::run(shared, target, flow).await,
        Err(d) => flow.refuse(Step::Decide, d).await,
    }
}

/// A request's fields as read, and as a map once a credential swap needed one (from then on
/// the map is what goes upstream).
struct ReqFields {
    read: Fields,
    map: Option<HeaderMap>,
}

impl ReqFields {
    /// The fields as a map, built on first use.
    fn map(&mut self) -> &mut HeaderMap {
        let read = &self.read;
        self.map.get_or_insert_with(|| read.to_map())
    }
}

/// One request on the relay.
struct Flow<'a, IO, U> {
    shared: &'a Arc<Shared>,
    side: &'a mut U,
    client: &'a mut ClientSide<IO>,
    method: Method,
    fields: ReqFields,
    close: bool,
    /// Path + query sent upstream (a phantom in a `key=` parameter swapped).
    path: String,
    body_len: u64,
    /// The body, once read.
    body: Option<Bytes>,
    /// The body is still on the client connection.
    unread: bool,
    /// The client closed (or its stream broke): nothing more is written to it.
    gone: bool,
    /// The body could not be read whole: the connection ends after the answer.
    broken: bool,
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send, U: Side> Flow<'_, IO, U> {
    async fn read_body(&mut self, idle: std::time::Duration) -> Result<Bytes, Denial> {
        if let Some(b) = self.body.take() {
            return Ok(b);
        }
        self.unread = false;
        match self.client.body(self.body_len as usize, idle).await {
            Ok(b) => Ok(b),
            Err(e) => {
                self.broken = true;
                self.gone = matches!(e, BodyError::Closed);
                Err(e.denial())
            }
        }
    }

    /// The request as it goes upstream: head (hop-by-hop fields removed) and body.
    fn upstream_bytes(&mut self, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + body.len());
        out.extend_from_slice(self.method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.path.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        match &mut self.fields.map {
            Some(m) => {
                strip_hop_by_hop(m);
                write_fields(&mut out, m);
            }
            None => self
                .fields
                .read
                .each_relayed(|n, v| write_field(&mut out, n, v)),
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        out
    }

    /// Send on the kept connection (or the one dialled early), or a new one. A kept
    /// connection that closed before answering an idempotent request is replaced once and
    /// the request sent again.
    async fn send(
        &mut self,
        addr: SocketAddr,
        out: &[u8],
        record: &AllowRecord,
    ) -> Result<Answered<U::Stream>, Denial> {
        let head = self.method == Method::HEAD;
        let mut retried = false;
        loop {
            let (mut conn, reused) = match self.side.take(addr).await {
                Some(c) => (c, true),
                None => (self.side.dial(addr).await?, false),
            };
            match exchange(&mut conn, self.client, out, head).await {
                Ok(head) => return Ok(Answered { conn, head }),
                Err(Failed::Silent(e)) if reused && !retried && self.method.is_idempotent() => {
                    tracing::debug!(error = %e, "kept upstream connection was closed; retrying");
                    retried = true;
                }
                Err(Failed::Silent(e)) => {
                    return Err(Denial::upstream(crate::dial::classify_io(&e), e))
                }
                Err(Failed::Broken(m)) => {
                    return Err(Denial::upstream(DenyClass::UpstreamUnreachable, m))
                }
                Err(Failed::ClientGone) => {
                    self.gone = true;
                    record.client_gave_up();
                    return Err(Denial::upstream(
                        DenyClass::UpstreamTimeout,
                        "the client closed its connection before the upstream answered",
                    ));
                }
            }
        }
    }

    /// Copy the response body to the client by its framing (chunked bodies re-chunked, their
    /// trailers dropped).
    async fn copy_body(
        &mut self,
        conn: &mut UpConn<U::Stream>,
        framing: BodyFraming,
        mut out: Vec<u8>,
        record: &AllowRecord,
    ) -> Result<(), CopyEnd> {
        // A body still coming after `LONG_FLOW` is reported while it runs: one timer per
        // response that needs more than the first read, none for the others.
        let mut opened = false;
        let mut long: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        // every wait for the upstream first hands the client what is ready
        macro_rules! more {
            () => {{
                if !out.is_empty() {
                    self.client
                        .send(&out)
                        .await
                        .map_err(|_| CopyEnd::ClientGone)?;
                    out.clear();
                }
                let read = if opened {
                    Some(read_up(conn, self.client).await)
                } else {
                    let at = record.long_at();
                    let sleep = long.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                    tokio::select! {
                        biased;
                        r = read_up(conn, self.client) => Some(r),
                        () = sleep.as_mut() => None,
                    }
                };
                let read = match read {
                    Some(r) => r,
                    None => {
                        record.open();
                        opened = true;
                        read_up(conn, self.client).await
                    }
                };
                read.map_err(|e| match e {
                    UpRead::Io(e) => CopyEnd::Upstream(e.to_string()),
                    UpRead::ClientGone => CopyEnd::ClientGone,
                })?
            }};
        }
        let down = &record.down;
        match framing {
            BodyFraming::None => {}
            BodyFraming::Length(mut left) => loop {
                down.fetch_add(conn.move_body(&mut out, &mut left), Ordering::Relaxed);
                if left == 0 {
                    break;
                }
                if more!() == 0 {
                    return Err(CopyEnd::Upstream(format!(
                        "closed with {left} bytes to come"
                    )));
                }
            },
            BodyFraming::Close => loop {
                down.fetch_add(conn.buf.len() as u64, Ordering::Relaxed);
                out.extend_from_slice(&conn.buf);
                conn.buf.clear();
                if more!() == 0 {
                    break;
                }
            },
            BodyFraming::Chunked => loop {
                let size = loop {
                    match httparse::parse_chunk_size(&conn.buf) {
                        Ok(httparse::Status::Complete((used, size))) => {
                            conn.buf.advance(used);
                            break size;
                        }
                        Ok(httparse::Status::Partial) if conn.buf.len() <= MAX_LINE => {
                            if more!() == 0 {
                                return Err(CopyEnd::Upstream("closed in a chunk size".into()));
                            }
                        }
                        _ => return Err(CopyEnd::Upstream("malformed chunk size".into())),
                    }
                };
                if size == 0 {
                    // trailers, to the empty line: read and dropped
                    loop {
                        match conn.buf.iter().position(|b| *b == b'\n') {
                            Some(i) => {
                                let empty = conn.buf[..i].trim_ascii().is_empty();
                                conn.buf.advance(i + 1);
                                if empty {
                                    break;
                                }
                            }
                            None if conn.buf.len() <= MAX_LINE => {
                                if more!() == 0 {
                                    return Err(CopyEnd::Upstream("closed in the trailers".into()));
                                }
                            }
                            None => return Err(CopyEnd::Upstream("trailer line too long".into())),
                        }
                    }
                    out.extend_from_slice(b"0\r\n\r\n");
                    break;
                }
                out.extend_from_slice(format!("{size:x}\r\n").as_bytes());
                let mut left = size;
                loop {
                    down.fetch_add(conn.move_body(&mut out, &mut left), Ordering::Relaxed);
                    if left == 0 {
                        break;
                    }
                    if more!() == 0 {
                        return Err(CopyEnd::Upstream("closed inside a chunk".into()));
                    }
                }
                while conn.buf.len() < 2 {
                    if more!() == 0 {
                        return Err(CopyEnd::Upstream("closed after a chunk".into()));
                    }
                }
                if &conn.buf[..2] != b"\r\n" {
                    return Err(CopyEnd::Upstream("a chunk not followed by CRLF".into()));
                }
                conn.buf.advance(2);
                out.extend_from_slice(b"\r\n");
            },
        }
        self.client
            .send(&out)
            .await
            .map_err(|_| CopyEnd::ClientGone)
    }
}

/// Why copying a response body stopped early.
enum CopyEnd {
    Upstream(String),
    ClientGone,
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send, U: Side> Framing for Flow<'_, IO, U> {
    type Answer = Next;
    type Upstream = (SocketAddr, Answered<U::Stream>);

    async fn attribute(&mut self) -> Result<Principal, Denial> {
        self.side.attribute(&self.fields.read).await
    }

    async fn request_view(&mut self) -> Result<RequestView, Denial> {
        let mut body = None;
        if self.body_len > 0 {
            let bytes = self.read_body(self.shared.cfg.head_timeout).await?;
            body = Some(String::from_utf8_lossy(&bytes).into_owned());
            self.body = Some(bytes);
        }
        let headers = match &self.fields.map {
            Some(m) => header_map(m),
            None => header_map(&self.fields.read.to_map()),
        };
        Ok(RequestView { headers, body })
    }

    fn credentials(
        &mut self,
        creds: &[ProviderCredential],
        target: &Target,
    ) -> Result<Option<String>, Denial> {
        let names = self.fields.read.iter().map(|(n, _)| n);
        if !crate::credentials::could_carry(names, &self.path) {
            return Ok(None);
        }
        crate::credentials::apply(
            creds,
            &target.base.host,
            target.route.as_deref(),
            self.fields.map(),
            &mut self.path,
        )
    }

    fn validated(&self) -> Option<SocketAddr> {
        self.side.validated()
    }

    fn on_held_slot(&self) -> bool {
        self.side.on_held_slot()
    }

    async fn connect(
        &mut self,
        _: &Target,
        c: &Cleared,
    ) -> Result<(SocketAddr, Answered<U::Stream>), Denial> {
        let body = if self.body_len > 0 {
            self.read_body(self.shared.cfg.body_idle_timeout).await?
        } else {
            Bytes::new()
        };
        c.record.up.fetch_add(body.len() as u64, Ordering::Relaxed);
        let out = self.upstream_bytes(&body);
        // Until the response head arrives, a record dropped (the client gave up) says the
        // upstream never answered.
        c.record.awaiting_response(true);
        let sent = self.send(c.addr, &out, &c.record).await;
        c.record.awaiting_response(false);
        sent.map(|a| (c.addr, a))
    }

    fn response_view(&self, up: &(SocketAddr, Answered<U::Stream>)) -> Option<ResponseView> {
        Some(ResponseView {
            status: up.1.head.status.as_u16(),
            headers: header_map(&up.1.head.to_map()),
        })
    }

    async fn relay(mut self, up: (SocketAddr, Answered<U::Stream>), c: Cleared) -> Next {
        let (addr, Answered { mut conn, head }) = up;
        let close = self.close || head.framing == BodyFraming::Close;
        let mut out = Vec::with_capacity(512 + conn.buf.len());
        head.write(&mut out, close);
        let record = c.record;
        match self.copy_body(&mut conn, head.framing, out, &record).await {
            Ok(()) => {
                if head.reusable && conn.buf.is_empty() {
                    self.side.keep(addr, conn);
                }
                if close {
                    Next::Close
                } else {
                    Next::Keep
                }
            }
            Err(CopyEnd::Upstream(m)) => {
                record.set_failure(
                    kind::UPSTREAM_INCOMPLETE,
                    format!("the upstream's response ended before its body was complete: {m}"),
                );
                Next::Close
            }
            Err(CopyEnd::ClientGone) => Next::Close,
        }
    }

    /// The answer to a refusal; a body not read yet is read first (it is small), so the
    /// connection stays usable and the client sees the answer.
    async fn refuse(mut self, _: Step, d: Denial) -> Next {
        if self.gone {
            return Next::Close;
        }
        if self.unread {
            let wait = self.shared.cfg.head_timeout;
            let _ = self.read_body(wait).await;
            if self.gone {
                return Next::Close;
            }
        }
        let resp = d.to_response();
        let close = self.close || self.broken || resp.headers().contains_key(header::CONNECTION);
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut out = Vec::with_capacity(256 + body.len());
        response_head(&mut out, parts.status, &parts.headers, close);
        out.extend_from_slice(&body);
        match self.client.send(&out).await {
            Ok(()) if !close => Next::Keep,
            _ => Next::Close,
        }
    }
}
