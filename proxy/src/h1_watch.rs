//! A watch on the HTTP/1 request framing of a client connection, for what hyper accepts but
//! does not show: the size of a request body's chunks.
//!
//! hyper 1.x takes any chunk size that fits a `u64`, so a chunked request whose first chunk
//! claims `FFFFFFFFFFFFFFFF` bytes is forwarded and then waits for bytes that never come
//! (the request body's idle timeout, then a 408). [`Watched`] wraps the connection's IO
//! under hyper and follows the request framing as the bytes are read: each request head is
//! parsed once it is complete (httparse, as hyper does), a `Content-Length` body is skipped
//! by count, a chunked body is followed line by line (`httparse::parse_chunk_size`, the data
//! skipped by count, the trailers to their empty line), and a `CONNECT` or `Upgrade` request
//! ends the watch (the bytes after it are not HTTP/1 requests). A chunk size above
//! [`MAX_CHUNK_SIZE`] raises the connection's [`Signal`] for that request; the request's
//! body ([`crate::body::Paced`]) turns it into a 400 at once (docs/decisions.md, hardening
//! round 3). The wrapper never writes to the socket and never changes a byte.
//!
//! Anything the watch does not follow exactly (a head httparse refuses, two framings at
//! once, more than 100 headers, a malformed chunk line, HTTP/2 inside an intercepted
//! tunnel) ends the watch for the connection: it fails open, to today's behaviour (hyper
//! decides; a stalled body still ends with the 408), never with a 400 for a request it did
//! not understand.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest chunk size a request body may declare: 1 TiB (2^40 bytes). The proxy takes
/// bodies of any length (they are streamed), so the limit is on one chunk, whose size a
/// client states before its bytes; real clients send chunks of kilobytes to a few
/// megabytes. A larger size only comes from a client that is broken or probing (2^64 - 1,
/// a negative number written as unsigned).
pub const MAX_CHUNK_SIZE: u64 = 1 << 40;

/// Headers per request head the watch parses (hyper's default limit).
const MAX_HEADERS: usize = 100;

/// A chunk-size line longer than this (extensions) ends the watch.
const MAX_CHUNK_LINE: usize = 4096;

/// What the watch of one connection tells the requests served on it.
#[derive(Default, Debug)]
pub struct Signal {
    /// The ordinal (1, 2, ...) of the request whose body declared a chunk too large; 0: none.
    bad_request: AtomicU64,
    /// The size it declared.
    size: AtomicU64,
    /// Requests handed to the service so far (their ordinals).
    served: AtomicU64,
    /// The body of the request being read waits here.
    waker: AtomicWaker,
}

impl Signal {
    /// The next request the service handles on this connection (hyper serves an HTTP/1
    /// connection's requests one after another, in the order the watch saw their heads).
    pub fn next_request(self: &Arc<Self>) -> RequestWatch {
        let request = self.served.fetch_add(1, Ordering::Relaxed) + 1;
        RequestWatch {
            signal: self.clone(),
            request,
        }
    }

    fn raise(&self, request: u64, size: u64) {
        self.size.store(size, Ordering::Relaxed);
        self.bad_request.store(request, Ordering::Release);
        self.waker.wake();
    }
}

/// One request's view of its connection's [`Signal`].
#[derive(Clone, Debug)]
pub struct RequestWatch {
    signal: Arc<Signal>,
    request: u64,
}

impl RequestWatch {
    /// The chunk size this request's body declared, when it is above [`MAX_CHUNK_SIZE`].
    pub fn too_large(&self) -> Option<u64> {
        (self.signal.bad_request.load(Ordering::Acquire) == self.request)
            .then(|| self.signal.size.load(Ordering::Relaxed))
    }

    /// [`RequestWatch::too_large`], or `cx` woken when the watch raises the signal.
    pub fn poll_too_large(&self, cx: &mut Context<'_>) -> Option<u64> {
        if let Some(n) = self.too_large() {
            return Some(n);
        }
        self.signal.waker.register(cx.waker());
        self.too_large()
    }
}

/// The watch's reading of a connection's request bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before (or inside) a request head.
    Head,
    /// This many bytes of a `Content-Length` body to come.
    Body(u64),
    /// A chunk-size line.
    ChunkSize,
    /// This many bytes of chunk data to come.
    ChunkData(u64),
    /// The CRLF after chunk data (`true`: the CR was seen).
    ChunkEnd(bool),
    /// After the last chunk: at the start of a trailer line (or of the final empty line).
    LineStart,
    /// Inside a trailer line (`true`: its CR was seen).
    InLine(bool),
    /// The final empty line's LF.
    EndLf,
    /// Not followed any more.
    Done,
}

/// What the bytes read said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    /// The request (1 = the connection's first).
    pub request: u64,
    /// The chunk size it declared.
    pub size: u64,
}

/// Follows the framing of the requests on one connection (pure: bytes in, events out).
#[derive(Debug)]
pub struct Tracker {
    state: State,
    /// Request heads seen.
    requests: u64,
    /// A head or chunk-size line split across reads.
    pending: Vec<u8>,
    /// The largest head kept in `pending`.
    max_head: usize,
}

impl Tracker {
    /// A connection's tracker; heads larger than `max_head` end the watch (hyper refuses them).
    pub fn new(max_head: usize) -> Self {
        Tracker {
            state: State::Head,
            requests: 0,
            pending: Vec::new(),
            max_head,
        }
    }

    /// The watch has ended for this connection.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Follow `data`, the next bytes the client sent; a chunk size above the limit is
    /// reported once and ends the watch.
    pub fn feed(&mut self, data: &[u8]) -> Option<TooLarge> {
        if self.pending.is_empty() {
            return self.follow(data);
        }
        // A head or chunk-size line split across reads: join its start with as much of
        // `data` as it may still need (one byte past the limit tells it is too long).
        let old = self.pending.len();
        let limit = self.line_limit();
        let take = data.len().min((limit + 1).saturating_sub(old));
        let mut joined = std::mem::take(&mut self.pending);
        joined.extend_from_slice(&data[..take]);
        match self.line(&joined) {
            Line::Complete(n) => self.follow(&data[n.saturating_sub(old).min(data.len())..]),
            Line::Partial if joined.len() <= limit && take == data.len() => {
                self.pending = joined;
                None
            }
            Line::Partial | Line::Ended => {
                self.end();
                None
            }
            Line::TooLarge(t) => Some(t),
        }
    }

    fn line_limit(&self) -> usize {
        match self.state {
            State::Head => self.max_head,
            _ => MAX_CHUNK_LINE,
        }
    }

    fn end(&mut self) {
        self.state = State::Done;
        self.pending = Vec::new();
    }

    /// Follow `data` from the current state; an incomplete head or line is kept in `pending`.
    fn follow(&mut self, mut data: &[u8]) -> Option<TooLarge> {
        while !data.is_empty() {
            match self.state {
                State::Done => return None,
                State::Head | State::ChunkSize => match self.line(data) {
                    Line::Complete(n) => data = &data[n..],
                    Line::Partial => {
                        if data.len() >= self.line_limit() {
                            self.end();
                        } else {
                            self.pending.extend_from_slice(data);
                        }
                        return None;
                    }
                    Line::Ended => return None,
                    Line::TooLarge(t) => return Some(t),
                },
                State::Body(left) => {
                    let n = left.min(data.len() as u64);
                    data = &data[n as usize..];
                    self.state = if left == n {
                        State::Head
                    } else {
                        State::Body(left - n)
                    };
                }
                State::ChunkData(left) => {
                    let n = left.min(data.len() as u64);
                    data = &data[n as usize..];
                    self.state = if left == n {
                        State::ChunkEnd(false)
                    } else {
                        State::ChunkData(left - n)
                    };
                }
                State::ChunkEnd(cr) => {
                    let b = data[0];
                    data = &data[1..];
                    self.state = match (cr, b) {
                        (false, b'\r') => State::ChunkEnd(true),
                        (true, b'\n') => State::ChunkSize,
                        _ => State::Done,
                    };
                }
                // The trailers, as hyper reads them: lines ending in CRLF up to an empty one.
                State::LineStart => {
                    let b = data[0];
                    data = &data[1..];
                    self.state = match b {
                        b'\r' => State::EndLf,
                        _ => State::InLine(false),
                    };
                }
                State::InLine(cr) => {
                    let b = data[0];
                    data = &data[1..];
                    self.state = match (cr, b) {
                        (true, b'\n') => State::LineStart,
                        (true, _) => State::Done,
                        (false, b'\r') => State::InLine(true),
                        (false, _) => State::InLine(false),
                    };
                }
                State::EndLf => {
                    let b = data[0];
                    data = &data[1..];
                    self.state = match b {
                        b'\n' => State::Head,
                        _ => State::Done,
                    };
                }
            }
        }
        None
    }

    /// Read a request head or a chunk-size line (per the state) at the start of `data`.
    fn line(&mut self, data: &[u8]) -> Line {
        if self.state == State::ChunkSize {
            return match httparse::parse_chunk_size(data) {
                Ok(httparse::Status::Complete((_, size))) if size > MAX_CHUNK_SIZE => {
                    let request = self.requests;
                    self.end();
                    Line::TooLarge(TooLarge { request, size })
                }
                Ok(httparse::Status::Complete((n, size))) => {
                    self.state = if size == 0 {
                        State::LineStart
                    } else {
                        State::ChunkData(size)
                    };
                    Line::Complete(n)
                }
                Ok(httparse::Status::Partial) => Line::Partial,
                Err(_) => {
                    self.end();
                    Line::Ended
                }
            };
        }
        let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        match req.parse_with_uninit_headers(data, &mut headers) {
            Ok(httparse::Status::Complete(n)) => {
                self.requests += 1;
                match framing(&req) {
                    Some(next) => {
                        self.state = next;
                        Line::Complete(n)
                    }
                    None => {
                        self.end();
                        Line::Ended
                    }
                }
            }
            Ok(httparse::Status::Partial) => Line::Partial,
            Err(_) => {
                self.end();
                Line::Ended
            }
        }
    }
}

/// What reading a head or a chunk-size line gave.
enum Line {
    /// Read, this many bytes; the state moved on.
    Complete(usize),
    /// More bytes are needed.
    Partial,
    /// The watch ended.
    Ended,
    /// A chunk size above the limit (the watch ended).
    TooLarge(TooLarge),
}

/// How a parsed request's body is framed; `None` when the watch cannot follow it.
fn framing(req: &httparse::Request<'_, '_>) -> Option<State> {
    if req.method == Some("CONNECT") {
        return None;
    }
    let mut length: Option<u64> = None;
    let mut chunked: Option<bool> = None;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let v = std::str::from_utf8(h.value).ok()?.trim();
            if length.is_some() || v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            length = Some(v.parse().ok()?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // the last coding of the last header decides
            let last = h.value.rsplit(|b| *b == b',').next()?;
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            return None;
        }
    }
    match (chunked, length) {
        (Some(true), None) if req.version == Some(1) => Some(State::ChunkSize),
        (Some(_), _) => None,
        (None, Some(n)) if n > 0 => Some(State::Body(n)),
        (None, _) => Some(State::Head),
    }
}

/// A client connection's IO with the watch on what it reads (writes pass through).
pub struct Watched<IO> {
    io: IO,
    tracker: Tracker,
    signal: Arc<Signal>,
}

impl<IO> Watched<IO> {
    /// Watch `io`'s requests (heads up to `max_head` bytes); `signal` goes to its requests.
    pub fn new(io: IO, signal: Arc<Signal>, max_head: usize) -> Self {
        Watched {
            io,
            tracker: Tracker::new(max_head),
            signal,
        }
    }

    /// `io` unwatched: nothing is followed (an HTTP/2 connection).
    pub fn unwatched(io: IO, signal: Arc<Signal>) -> Self {
        let mut tracker = Tracker::new(0);
        tracker.end();
        Watched {
            io,
            tracker,
            signal,
        }
    }

    /// The wrapped IO.
    pub fn into_inner(self) -> IO {
        self.io
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.tracker.done() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            if let Some(t) = this.tracker.feed(&buf.filled()[before..]) {
                this.signal.raise(t.request, t.size);
            }
        }
        r
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABSURD: &[u8] =
        b"POST http://a.test/up HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF\r\nhello";

    /// Feeds `data` in pieces of `step` bytes; every report.
    fn feed_by(data: &[u8], step: usize) -> (Vec<TooLarge>, Tracker) {
        let mut t = Tracker::new(64 * 1024);
        let out = data.chunks(step).filter_map(|c| t.feed(c)).collect();
        (out, t)
    }

    fn reports(data: &[u8]) -> Vec<TooLarge> {
        let whole = feed_by(data, data.len().max(1)).0;
        // however the bytes are split across reads, the watch reads the same
        for step in [1, 2, 3, 7, 64] {
            assert_eq!(feed_by(data, step).0, whole, "read {step} bytes at a time");
        }
        whole
    }

    #[test]
    fn a_chunk_size_of_2_to_the_64_minus_1_is_reported_for_its_request() {
        assert_eq!(
            reports(ABSURD),
            vec![TooLarge {
                request: 1,
                size: u64::MAX
            }]
        );
    }

    #[test]
    fn the_limit_is_one_tebibyte_per_chunk() {
        let at = format!(
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{MAX_CHUNK_SIZE:x}\r\nab"
        );
        assert!(reports(at.as_bytes()).is_empty());
        let above = format!(
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\nab",
            MAX_CHUNK_SIZE + 1
        );
        assert_eq!(
            reports(above.as_bytes()),
            vec![TooLarge {
                request: 1,
                size: MAX_CHUNK_SIZE + 1
            }]
        );
    }

    #[test]
    fn chunks_extensions_trailers_and_pipelined_requests_are_followed_to_the_request_that_lies() {
        let mut wire = Vec::new();
        // 1: chunks whose data looks like an absurd size line, an extension, trailers
        wire.extend_from_slice(
            b"POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
              12\r\nFFFFFFFFFFFFFFFF\r\n\r\n3;name=value\r\nabc\r\n0\r\nX-Sum: 1\r\nX-More: 2\r\n\r\n",
        );
        // 2: a Content-Length body that looks like a chunked one
        wire.extend_from_slice(
            b"PUT /b HTTP/1.1\r\nHost: a\r\nContent-Length: 20\r\n\r\nFFFFFFFFFFFFFFFF\r\nhi",
        );
        // 3: no body, after empty lines
        wire.extend_from_slice(b"\r\nGET /c HTTP/1.1\r\nHost: a\r\n\r\n");
        // 4: chunked without trailers
        wire.extend_from_slice(
            b"POST /d HTTP/1.1\r\nHost: a\r\ntransfer-encoding: Chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
        );
        // 5: the liar
        wire.extend_from_slice(ABSURD);
        assert_eq!(
            reports(&wire),
            vec![TooLarge {
                request: 5,
                size: u64::MAX
            }]
        );
    }

    #[test]
    fn what_follows_connect_or_an_upgrade_is_not_read_as_requests() {
        let mut connect = b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n".to_vec();
        connect.extend_from_slice(ABSURD);
        let (out, t) = feed_by(&connect, connect.len());
        assert!(out.is_empty() && t.done());
        let mut upgrade =
            b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
                .to_vec();
        upgrade.extend_from_slice(ABSURD);
        assert!(reports(&upgrade).is_empty());
    }

    #[test]
    fn framing_it_cannot_follow_ends_the_watch_without_a_report() {
        for wire in [
            // a chunk-size line hyper refuses too
            &b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..],
            // 17 hex digits: more than a u64
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1FFFFFFFFFFFFFFFF\r\n",
            // chunk data longer than announced
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
            // two framings at once
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            // two lengths
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
            // chunked that is not the last coding
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            // HTTP/1.0 with chunked
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            // an HTTP/2 connection preface
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        ] {
            let mut w = wire.to_vec();
            w.extend_from_slice(ABSURD);
            let (out, t) = feed_by(&w, w.len());
            assert!(out.is_empty(), "{}", String::from_utf8_lossy(wire));
            assert!(t.done(), "{}", String::from_utf8_lossy(wire));
        }
    }

    #[test]
    fn a_head_or_chunk_line_longer_than_its_limit_ends_the_watch() {
        let mut t = Tracker::new(100);
        let long = format!("GET / HTTP/1.1\r\nX-Long: {}\r\n\r\n", "a".repeat(200));
        assert_eq!(t.feed(&long.as_bytes()[..60]), None);
        assert!(!t.done());
        assert_eq!(t.feed(&long.as_bytes()[60..]), None);
        assert!(t.done());
        let mut t = Tracker::new(64 * 1024);
        let head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;";
        assert_eq!(t.feed(head), None);
        assert_eq!(t.feed(&vec![b'x'; MAX_CHUNK_LINE]), None);
        assert!(t.done());
    }

    #[test]
    fn a_raised_signal_reaches_its_own_request_only() {
        let signal = Arc::new(Signal::default());
        let first = signal.next_request();
        let second = signal.next_request();
        assert_eq!(first.too_large(), None);
        signal.raise(2, u64::MAX);
        assert_eq!(first.too_large(), None);
        assert_eq!(second.too_large(), Some(u64::MAX));
    }

    #[tokio::test]
    async fn the_watched_stream_passes_every_byte_through_and_raises_the_signal() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(1024);
        let signal = Arc::new(Signal::default());
        let req = signal.next_request();
        let mut watched = Watched::new(server, signal.clone(), 8192);
        client.write_all(ABSURD).await.unwrap();
        drop(client);
        let mut got = Vec::new();
        watched.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, ABSURD);
        assert_eq!(req.too_large(), Some(u64::MAX));
    }
}
