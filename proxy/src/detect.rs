//! First-byte demultiplexing (docs/decisions.md, P1): `0x05` SOCKS5, `0x04` SOCKS4
//! (refused, clean close), anything else HTTP.

use std::io;
use std::time::Duration;

use tokio::net::TcpStream;

/// What the first byte says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `0x05`.
    Socks5,
    /// `0x04` — unsupported, closed cleanly.
    Socks4,
    /// Anything else.
    Http,
    /// The client closed before sending anything.
    Eof,
}

/// Classify the first bytes of a connection (pure).
pub fn classify(first: &[u8]) -> Protocol {
    match first.first() {
        None => Protocol::Eof,
        Some(0x05) => Protocol::Socks5,
        Some(0x04) => Protocol::Socks4,
        Some(_) => Protocol::Http,
    }
}

/// The HTTP/2 prior-knowledge preface (`PRI * HTTP/2.0`), refused with 400.
pub fn is_h2c_preface(head: &[u8]) -> bool {
    head.starts_with(b"PRI * HTTP/2.0")
}

/// Peek (without consuming) the first byte, with the first-byte timeout.
pub async fn detect(stream: &TcpStream, timeout: Duration) -> io::Result<Protocol> {
    detect_byte(stream, timeout).await.map(|(p, _)| p)
}

/// [`detect`], also returning the first byte itself (`None` at EOF): an HTTP connection
/// whose first byte is not `P` cannot start with the h2c preface, and needs no second peek.
pub async fn detect_byte(
    stream: &TcpStream,
    timeout: Duration,
) -> io::Result<(Protocol, Option<u8>)> {
    let mut b = [0u8; 1];
    match tokio::time::timeout(timeout, stream.peek(&mut b)).await {
        Ok(Ok(n)) => Ok((classify(&b[..n]), b[..n].first().copied())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no first byte")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_byte_selects_the_lane() {
        assert_eq!(classify(&[5, 1, 0]), Protocol::Socks5);
        assert_eq!(classify(&[4, 1]), Protocol::Socks4);
        assert_eq!(classify(b"GET "), Protocol::Http);
        assert_eq!(classify(b"CONNECT"), Protocol::Http);
        assert_eq!(classify(&[]), Protocol::Eof);
        assert!(is_h2c_preface(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
    }
}
