//! A stream with bytes already read from it put back in front (the first bytes of an
//! intercepted tunnel are read to tell TLS from plain HTTP).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `io`, with `prefix` read first.
pub struct Prefixed<IO> {
    prefix: Vec<u8>,
    at: usize,
    io: IO,
}

impl<IO> Prefixed<IO> {
    /// Read `prefix`, then `io`.
    pub fn new(prefix: Vec<u8>, io: IO) -> Self {
        Prefixed { prefix, at: 0, io }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
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

/// What the first bytes of an intercepted tunnel are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inner {
    /// A TLS record (handshake): `0x16`.
    Tls,
    /// An HTTP/1.x request line: an upper-case token.
    Http,
    /// Neither.
    Other,
}

/// Classify the first bytes a client sent inside a CONNECT tunnel (pure).
pub fn sniff(first: &[u8]) -> Inner {
    match first.first() {
        Some(0x16) => Inner::Tls,
        Some(b) if b.is_ascii_uppercase() => {
            let token = first.iter().take_while(|c| c.is_ascii_uppercase()).count();
            // `GET `, `POST `, … (or a prefix of a method still arriving)
            if token == first.len() || first.get(token) == Some(&b' ') {
                Inner::Http
            } else {
                Inner::Other
            }
        }
        _ => Inner::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn tls_and_http_are_told_apart_by_their_first_bytes() {
        assert_eq!(sniff(&[0x16, 0x03, 0x01]), Inner::Tls);
        assert_eq!(sniff(b"GET / HTTP/1.1\r\n"), Inner::Http);
        assert_eq!(sniff(b"PO"), Inner::Http);
        assert_eq!(sniff(b"SSH-2.0-OpenSSH"), Inner::Other);
        assert_eq!(sniff(&[0x00, 0x01]), Inner::Other);
        assert_eq!(sniff(b""), Inner::Other);
    }

    #[tokio::test]
    async fn the_prefix_is_read_before_the_stream() {
        let (a, mut b) = tokio::io::duplex(64);
        use tokio::io::AsyncWriteExt;
        b.write_all(b" world").await.unwrap();
        drop(b);
        let mut p = Prefixed::new(b"hello".to_vec(), a);
        let mut out = String::new();
        p.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
