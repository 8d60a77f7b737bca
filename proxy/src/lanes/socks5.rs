//! SOCKS5 (RFC 1928 + RFC 1929). The wire parsers are pure functions over byte slices
//! (fuzzed in `proxy/fuzz`); `serve` reads the handshake and runs the flow's steps
//! ([`crate::phases`]), answering refusals with REP codes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::attribution::authorize;
use crate::deny::{reason, socks_reply_frame, Denial, DenyClass};
use crate::phases::{self, Cleared, Framing, Step, Target};
use crate::policy::normalize_host;
use crate::record::RecordBase;
use crate::state::{ConnGuard, Shared};
use crate::traits::{Lane, Phase, Principal};

/// A malformed SOCKS5 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocksError {
    /// Wrong version byte: close without a reply.
    BadVersion,
    /// ATYP not 1/3/4 or a zero-length name: REP `08`.
    BadAddress,
}

/// Parse the greeting `05 N methods…`; `Ok(None)` = need more bytes.
pub fn parse_greeting(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, SocksError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != 5 {
        return Err(SocksError::BadVersion);
    }
    let Some(&n) = buf.get(1) else {
        return Ok(None);
    };
    let end = 2 + n as usize;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some((buf[2..end].to_vec(), end)))
}

/// Parse RFC 1929 `01 ulen user plen pass`; returns the username (the token).
pub fn parse_auth(buf: &[u8]) -> Result<Option<(String, usize)>, SocksError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != 1 {
        return Err(SocksError::BadVersion);
    }
    let Some(&ulen) = buf.get(1) else {
        return Ok(None);
    };
    let uend = 2 + ulen as usize;
    let Some(&plen) = buf.get(uend) else {
        return Ok(None);
    };
    let end = uend + 1 + plen as usize;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some((
        String::from_utf8_lossy(&buf[2..uend]).into_owned(),
        end,
    )))
}

/// Destination of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocksAddr {
    /// ATYP 1 / 4.
    Ip(IpAddr),
    /// ATYP 3.
    Domain(String),
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocksRequest {
    /// CMD (1 = CONNECT).
    pub cmd: u8,
    /// Destination.
    pub addr: SocksAddr,
    /// Destination port.
    pub port: u16,
}

/// Parse `05 CMD 00 ATYP ADDR PORT`; `Ok(None)` = need more bytes.
pub fn parse_request(buf: &[u8]) -> Result<Option<(SocksRequest, usize)>, SocksError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != 5 {
        return Err(SocksError::BadVersion);
    }
    if buf.len() < 4 {
        return Ok(None);
    }
    let cmd = buf[1];
    let (addr_len, start) = match buf[3] {
        1 => (4usize, 4usize),
        4 => (16, 4),
        3 => match buf.get(4) {
            None => return Ok(None),
            Some(0) => return Err(SocksError::BadAddress),
            Some(&n) => (n as usize, 5),
        },
        _ => return Err(SocksError::BadAddress),
    };
    let end = start + addr_len + 2;
    if buf.len() < end {
        return Ok(None);
    }
    let a = &buf[start..start + addr_len];
    let addr = match buf[3] {
        1 => SocksAddr::Ip(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
        4 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(a);
            SocksAddr::Ip(IpAddr::V6(Ipv6Addr::from(o)))
        }
        _ => SocksAddr::Domain(String::from_utf8(a.to_vec()).map_err(|_| SocksError::BadAddress)?),
    };
    let port = u16::from_be_bytes([buf[end - 2], buf[end - 1]]);
    Ok(Some((SocksRequest { cmd, addr, port }, end)))
}

type Parser<T> = fn(&[u8]) -> Result<Option<(T, usize)>, SocksError>;

/// Read until `parse` yields a message (or fails / EOF).
async fn read_msg<R: AsyncRead + Unpin, T>(
    r: &mut R,
    buf: &mut Vec<u8>,
    parse: Parser<T>,
) -> Option<Result<T, SocksError>> {
    loop {
        match parse(buf) {
            Ok(Some((v, used))) => {
                buf.drain(..used);
                return Some(Ok(v));
            }
            Err(e) => return Some(Err(e)),
            Ok(None) => {}
        }
        if buf.len() > 1024 {
            return None;
        }
        let mut chunk = [0u8; 512];
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

pub(crate) async fn serve(mut s: TcpStream, shared: Arc<Shared>, conn: ConnGuard) {
    let head = shared.cfg.head_timeout;
    let Ok(Some((attributed, req))) = tokio::time::timeout(head, handshake(&mut s, &shared)).await
    else {
        let _ = s.shutdown().await;
        return;
    };
    // Attributed: the connection leaves the unauthenticated budget for a place under the
    // overall cap (admission.rs), or is answered "general failure" when there is none.
    if attributed.is_ok() && !conn.authenticated() {
        let _ = s.write_all(&socks_reply_frame(0x01)).await;
        let _ = s.shutdown().await;
        return;
    }
    let host = match &req.addr {
        SocksAddr::Ip(ip) => normalize_host(&ip.to_string()),
        SocksAddr::Domain(d) => normalize_host(d),
    };
    let target = Target {
        base: Arc::new(RecordBase {
            lane: Lane::Socks,
            phase: "socks",
            method: None,
            path: None,
            host,
            port: req.port,
            is_intercepted: false,
        }),
        check_port: Some(req.port),
        route: None,
        request_phase: Some(Phase::Socks),
        response_phase: None,
    };
    let flow = SocksFlow {
        stream: s,
        attributed: Some(attributed),
        shared: shared.clone(),
    };
    phases::run(&shared, target, flow).await
}

/// A SOCKS5 CONNECT after the handshake: refusals are REP codes, the relay is TCP to TCP.
struct SocksFlow {
    stream: TcpStream,
    /// What the handshake's RFC 1929 username attributed to.
    attributed: Option<Attributed>,
    shared: Arc<Shared>,
}

impl Framing for SocksFlow {
    type Answer = ();
    type Upstream = TcpStream;

    async fn attribute(&mut self) -> Result<Principal, Denial> {
        self.attributed
            .take()
            .unwrap_or_else(|| Err(Denial::auth(reason::MISSING_TOKEN)))
    }

    async fn connect(&mut self, _: &Target, cleared: &Cleared) -> Result<TcpStream, Denial> {
        let up = &self.shared.up;
        crate::dial::connect(up.dialer.as_ref(), up.connect_timeout, cleared.addr).await
    }

    async fn relay(mut self, upstream: TcpStream, cleared: Cleared) {
        if self
            .stream
            .write_all(&socks_reply_frame(0x00))
            .await
            .is_err()
        {
            return;
        }
        let record = cleared.record;
        // a SOCKS connection may run for hours: reported once it has lasted a second, and
        // with its bytes at the end
        let relay = crate::relay::relay_tcp(
            self.stream,
            &[],
            upstream,
            self.shared.cfg.idle_timeout,
            &record.up,
            &record.down,
        );
        if let Err(e) = crate::record::open_when_long(&record, relay).await {
            tracing::debug!(error = %e, "socks tunnel ended with an error");
        }
    }

    async fn refuse(mut self, _: Step, d: Denial) {
        let _ = self
            .stream
            .write_all(&socks_reply_frame(d.socks_reply()))
            .await;
    }
}

type Attributed = Result<Principal, Denial>;

/// Greeting, optional RFC 1929 auth and the request. `None` = connection
/// already answered/closed.
async fn handshake(s: &mut TcpStream, shared: &Shared) -> Option<(Attributed, SocksRequest)> {
    let mut buf = Vec::new();
    let methods = read_msg(s, &mut buf, parse_greeting).await?.ok()?;
    let principal: Attributed = if methods.contains(&0x02) {
        s.write_all(&[0x05, 0x02]).await.ok()?;
        let user = read_msg(s, &mut buf, parse_auth).await?.ok()?;
        match authorize(shared.svc.attribution.as_ref(), Some(&user)).await {
            Ok(p) => {
                s.write_all(&[0x01, 0x00]).await.ok()?;
                Ok(p)
            }
            Err(d) if d.class == DenyClass::Auth => {
                let _ = s.write_all(&[0x01, 0x01]).await;
                return None;
            }
            Err(d) => {
                s.write_all(&[0x01, 0x00]).await.ok()?;
                Err(d)
            }
        }
    } else if methods.contains(&0x00) {
        s.write_all(&[0x05, 0x00]).await.ok()?;
        tracing::debug!(
            "socks5 client without credentials: {}",
            reason::MISSING_TOKEN
        );
        Err(Denial::auth(reason::MISSING_TOKEN))
    } else {
        let _ = s.write_all(&[0x05, 0xff]).await;
        return None;
    };
    match read_msg(s, &mut buf, parse_request).await? {
        Ok(req) if req.cmd == 1 => Some((principal, req)),
        Ok(_) => {
            let _ = s.write_all(&socks_reply_frame(0x07)).await;
            None
        }
        Err(SocksError::BadAddress) => {
            let _ = s.write_all(&socks_reply_frame(0x08)).await;
            None
        }
        Err(SocksError::BadVersion) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_parses_incrementally() {
        assert_eq!(parse_greeting(&[5]), Ok(None));
        assert_eq!(parse_greeting(&[5, 2, 0]), Ok(None));
        assert_eq!(parse_greeting(&[5, 2, 0, 2, 9]), Ok(Some((vec![0, 2], 4))));
        assert_eq!(parse_greeting(&[4, 1]), Err(SocksError::BadVersion));
    }

    #[test]
    fn auth_yields_the_username_as_token() {
        let mut m = vec![1, 3];
        m.extend_from_slice(b"tok");
        m.push(2);
        m.extend_from_slice(b"pw");
        assert_eq!(parse_auth(&m), Ok(Some(("tok".into(), m.len()))));
        assert_eq!(parse_auth(&m[..4]), Ok(None));
    }

    #[test]
    fn requests_parse_every_address_type() {
        assert_eq!(
            parse_request(&[5, 1, 0, 1, 127, 0, 0, 1, 0, 80])
                .unwrap()
                .unwrap()
                .0,
            SocksRequest {
                cmd: 1,
                addr: SocksAddr::Ip("127.0.0.1".parse().unwrap()),
                port: 80
            }
        );
        let mut v6 = vec![5, 1, 0, 4];
        v6.extend_from_slice(&"::1".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&[1, 187]);
        assert_eq!(parse_request(&v6).unwrap().unwrap().0.port, 443);
        let mut d = vec![5, 1, 0, 3, 9];
        d.extend_from_slice(b"localhost");
        d.extend_from_slice(&[0, 80]);
        assert_eq!(
            parse_request(&d).unwrap().unwrap().0.addr,
            SocksAddr::Domain("localhost".into())
        );
        assert_eq!(parse_request(&d[..8]), Ok(None));
    }

    #[test]
    fn unknown_address_type_and_empty_name_are_bad_addresses() {
        assert_eq!(
            parse_request(&[5, 1, 0, 5, 0, 0]),
            Err(SocksError::BadAddress)
        );
        assert_eq!(
            parse_request(&[5, 1, 0, 3, 0, 0, 80]),
            Err(SocksError::BadAddress)
        );
        assert_eq!(parse_request(&[4, 1, 0, 1]), Err(SocksError::BadVersion));
    }

    #[test]
    fn parsers_never_panic_or_overrun_on_arbitrary_bytes() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..20_000 {
            let len = round % 40;
            let buf: Vec<u8> = (0..len)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // bias the first bytes toward valid versions to reach deeper branches
                    if i == 0 && round % 2 == 0 {
                        5
                    } else {
                        (x >> 24) as u8
                    }
                })
                .collect();
            if let Ok(Some((_, used))) = parse_greeting(&buf) {
                assert!(used <= buf.len());
            }
            if let Ok(Some((_, used))) = parse_auth(&buf) {
                assert!(used <= buf.len());
            }
            if let Ok(Some((_, used))) = parse_request(&buf) {
                assert!(used <= buf.len());
            }
        }
    }
}
