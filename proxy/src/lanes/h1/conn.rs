//! The relay's two connections: the client's and the kept upstream one.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::wire::{parse_response, RespHead, MAX_HEADERS};
use super::{CLIENT_BUF_CAP, MAX_RESPONSE_HEAD, READ_CHUNK};
use crate::deny::{Denial, DenyClass};

/// The client's side: its stream and the bytes read from it not consumed yet.
pub(crate) struct ClientSide<IO> {
    pub(super) io: IO,
    pub(super) buf: BytesMut,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> ClientSide<IO> {
    /// Read more; `false` at the end of the stream.
    pub(super) async fn fill(&mut self) -> io::Result<bool> {
        self.buf.reserve(READ_CHUNK);
        Ok(self.io.read_buf(&mut self.buf).await? > 0)
    }

    /// Write `out` to the client and flush it.
    pub(super) async fn send(&mut self, out: &[u8]) -> io::Result<()> {
        self.io.write_all(out).await?;
        self.io.flush().await
    }

    /// The next `n` bytes of the request body.
    pub(super) async fn body(
        &mut self,
        n: usize,
        idle: std::time::Duration,
    ) -> Result<Bytes, BodyError> {
        while self.buf.len() < n {
            match tokio::time::timeout(idle, self.fill()).await {
                Ok(Ok(true)) => {}
                Ok(_) => return Err(BodyError::Closed),
                Err(_) => return Err(BodyError::Stalled(idle)),
            }
        }
        Ok(self.buf.split_to(n).freeze())
    }
}

pub(super) enum BodyError {
    Closed,
    Stalled(std::time::Duration),
}

impl BodyError {
    pub(super) fn denial(&self) -> Denial {
        match self {
            BodyError::Closed => Denial::upstream(
                DenyClass::BodyTimeout,
                "the client closed its connection before the request body was complete",
            ),
            BodyError::Stalled(idle) => {
                Denial::upstream(DenyClass::BodyTimeout, crate::body::BodyStalled(*idle))
            }
        }
    }
}

/// A kept upstream connection (TLS in a tunnel, TCP for plain HTTP) and the bytes read from
/// it not relayed yet.
pub(crate) struct UpConn<S> {
    pub(crate) io: S,
    pub(super) buf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> UpConn<S> {
    pub(crate) fn new(io: S) -> Box<UpConn<S>> {
        Box::new(UpConn {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
        })
    }

    pub(super) async fn fill(&mut self) -> io::Result<usize> {
        self.buf.reserve(READ_CHUNK);
        self.io.read_buf(&mut self.buf).await
    }

    /// Move up to `left` body bytes already read into `out`; how many moved.
    pub(super) fn move_body(&mut self, out: &mut Vec<u8>, left: &mut u64) -> u64 {
        let take = (self.buf.len() as u64).min(*left) as usize;
        out.extend_from_slice(&self.buf[..take]);
        self.buf.advance(take);
        *left -= take as u64;
        take as u64
    }

    /// Still open and silent (an idle connection the upstream closed reads its end at once).
    pub(crate) fn idle_and_open(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut byte = [0u8; 1];
        let mut rb = ReadBuf::new(&mut byte);
        matches!(
            Pin::new(&mut self.io).poll_read(&mut cx, &mut rb),
            Poll::Pending
        )
    }
}

/// Why reading the upstream stopped.
pub(super) enum UpRead {
    Io(io::Error),
    /// The client closed its side while its answer was awaited.
    ClientGone,
}

/// Read from the upstream, watching the client meanwhile (its end drops the request, as the
/// HTTP server lane does; a pipelined next request is kept).
pub(super) async fn read_up<IO, S>(
    up: &mut UpConn<S>,
    client: &mut ClientSide<IO>,
) -> Result<usize, UpRead>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        if client.buf.len() >= CLIENT_BUF_CAP {
            return up.fill().await.map_err(UpRead::Io);
        }
        tokio::select! {
            biased;
            r = up.fill() => return r.map_err(UpRead::Io),
            r = client.fill() => match r {
                Ok(true) => {}
                _ => return Err(UpRead::ClientGone),
            },
        }
    }
}

/// The upstream's answer to one request, on the connection that carries its body.
pub(crate) struct Answered<S> {
    /// Boxed: the connection (a TLS session) moves through the request's steps.
    pub(super) conn: Box<UpConn<S>>,
    pub(super) head: RespHead,
}

/// Why an exchange with the upstream failed.
pub(super) enum Failed {
    /// Nothing came back (the connection closed or broke before any byte of an answer).
    Silent(io::Error),
    /// The upstream broke off or sent something that is not an HTTP/1.1 response.
    Broken(String),
    ClientGone,
}

/// Write `out` and read the response head (1xx answers skipped).
pub(super) async fn exchange<IO, S>(
    conn: &mut UpConn<S>,
    client: &mut ClientSide<IO>,
    out: &[u8],
    head: bool,
) -> Result<RespHead, Failed>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    if let Err(e) = conn.io.write_all(out).await {
        return Err(Failed::Silent(e));
    }
    if let Err(e) = conn.io.flush().await {
        return Err(Failed::Silent(e));
    }
    let mut answered = false;
    loop {
        if !conn.buf.is_empty() {
            answered = true;
            let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut slots);
            match resp.parse(&conn.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    if resp.code == Some(101) {
                        return Err(Failed::Broken(
                            "a 101 answer to a request without Upgrade".into(),
                        ));
                    }
                    if resp.code.is_some_and(|c| (100..200).contains(&c)) {
                        conn.buf.advance(n);
                        continue;
                    }
                    let parsed = parse_response(&conn.buf, &resp, head)
                        .map_err(|m| Failed::Broken(format!("malformed response head: {m}")));
                    // copied out, so that the read buffer stays the connection's own
                    let raw = Bytes::copy_from_slice(&conn.buf[..n]);
                    conn.buf.advance(n);
                    return parsed.map(|mut p| {
                        p.attach(raw);
                        p
                    });
                }
                Ok(httparse::Status::Partial) if conn.buf.len() <= MAX_RESPONSE_HEAD => {}
                Ok(httparse::Status::Partial) => {
                    return Err(Failed::Broken("response head too large".into()))
                }
                Err(e) => return Err(Failed::Broken(format!("malformed response head: {e}"))),
            }
        }
        match read_up(conn, client).await {
            Ok(0) if answered => {
                return Err(Failed::Broken(
                    "the connection closed inside the response head".into(),
                ))
            }
            Ok(0) => {
                return Err(Failed::Silent(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection closed before a response",
                )))
            }
            Ok(_) => {}
            Err(UpRead::Io(e)) if answered => return Err(Failed::Broken(e.to_string())),
            Err(UpRead::Io(e)) => return Err(Failed::Silent(e)),
            Err(UpRead::ClientGone) => return Err(Failed::ClientGone),
        }
    }
}
