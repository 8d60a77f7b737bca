//! Connectors for hyper-util's pooled client. They only ever dial an
//! address that already passed the SSRF floor.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::traits::Dialer;

type BoxFut<T> = Pin<Box<dyn Future<Output = Result<T, io::Error>> + Send>>;

async fn dial_timeout(
    dialer: &dyn Dialer,
    addr: SocketAddr,
    timeout: Duration,
) -> io::Result<TcpStream> {
    match tokio::time::timeout(timeout, dialer.dial(addr)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    }
}

/// Plain-HTTP connector: the request URI's authority MUST be the validated
/// IP literal; names are refused (no second resolution can happen here).
#[derive(Clone)]
pub struct ValidatedConnector {
    /// The dialer.
    pub dialer: Arc<dyn Dialer>,
    /// Connect timeout.
    pub timeout: Duration,
}

impl tower_service::Service<Uri> for ValidatedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = io::Error;
    type Future = BoxFut<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let dialer = self.dialer.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let host = uri
                .host()
                .unwrap_or("")
                .trim_start_matches('[')
                .trim_end_matches(']');
            let ip: IpAddr = host.parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "refusing to dial an unvalidated name",
                )
            })?;
            let port = uri.port_u16().unwrap_or(80);
            Ok(TokioIo::new(
                dial_timeout(dialer.as_ref(), SocketAddr::new(ip, port), timeout).await?,
            ))
        })
    }
}

/// TLS stream that tells hyper whether h2 was negotiated.
pub struct UpstreamTls(pub TlsStream<TcpStream>);

impl Connection for UpstreamTls {
    fn connected(&self) -> Connected {
        let c = Connected::new();
        if self.0.get_ref().1.alpn_protocol() == Some(b"h2") {
            c.negotiated_h2()
        } else {
            c
        }
    }
}

impl AsyncRead for UpstreamTls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for UpstreamTls {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Connector for one intercepted tunnel: always the address validated at
/// CONNECT, TLS with SNI = the CONNECT host, hostname verified.
#[derive(Clone)]
pub struct TunnelTlsConnector {
    /// The dialer.
    pub dialer: Arc<dyn Dialer>,
    /// Connect timeout.
    pub timeout: Duration,
    /// Validated address.
    pub addr: SocketAddr,
    /// Verified server name.
    pub name: ServerName<'static>,
    /// Client config.
    pub tls: Arc<rustls::ClientConfig>,
}

impl tower_service::Service<Uri> for TunnelTlsConnector {
    type Response = TokioIo<UpstreamTls>;
    type Error = io::Error;
    type Future = BoxFut<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tls = connect_tls(
                this.dialer.as_ref(),
                this.timeout,
                this.addr,
                this.name,
                this.tls,
            )
            .await?;
            Ok(TokioIo::new(tls))
        })
    }
}

/// Dial the validated `addr` and run the TLS handshake with SNI and
/// hostname verification for `name`, each step bounded by `timeout`.
pub(crate) async fn connect_tls(
    dialer: &dyn Dialer,
    timeout: Duration,
    addr: SocketAddr,
    name: ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
) -> io::Result<UpstreamTls> {
    let tcp = dial_timeout(dialer, addr, timeout).await?;
    let _ = tcp.set_nodelay(true);
    let tls = tokio::time::timeout(
        timeout,
        tokio_rustls::TlsConnector::from(tls).connect(name, tcp),
    )
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    Ok(UpstreamTls(tls))
}

/// Find the most telling message and class in a hyper-util client error.
pub fn describe(e: &(dyn std::error::Error + 'static)) -> (crate::deny::DenyClass, String) {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut msg = e.to_string();
    while let Some(err) = cur {
        if let Some(stalled) = err.downcast_ref::<crate::body::BodyStalled>() {
            // the client's request body stalled: the client's failure, not the upstream's
            return (crate::deny::DenyClass::BodyTimeout, stalled.to_string());
        }
        if let Some(chunk) = err.downcast_ref::<crate::body::ChunkTooLarge>() {
            // the client's request body is malformed: a 400, not an upstream failure
            return (crate::deny::DenyClass::ChunkTooLarge, chunk.to_string());
        }
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return (crate::dial::classify_io(io), io.to_string());
        }
        msg = err.to_string();
        cur = err.source();
    }
    (crate::deny::DenyClass::UpstreamUnreachable, msg)
}
