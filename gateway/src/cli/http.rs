//! The CLI's HTTP client for the local gateway: one request over hyper's HTTP/1.1
//! connection API on a TCP socket to the address in the home's registry.

use crate::home::Registry;
use anyhow::{anyhow, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::time::Duration;

/// How long connecting to the gateway may take.
const CONNECT: Duration = Duration::from_secs(2);

/// The address to dial for the gateway: its bind address, or loopback for a wildcard bind.
pub(super) fn dial_addr(reg: &Registry) -> String {
    let host = reg.host.trim_matches(|c| c == '[' || c == ']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) if !ip.is_unspecified() => std::net::SocketAddr::new(ip, reg.port).to_string(),
        Ok(std::net::IpAddr::V6(_)) => format!("[::1]:{}", reg.port),
        _ => format!("127.0.0.1:{}", reg.port),
    }
}

/// One request to the gateway of `reg`; answers `(status, body)`. `headers` come on top of
/// `Host`; the body, when not empty, is sent as JSON. `limit` bounds the whole exchange.
pub(super) fn call(
    reg: &Registry,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
    limit: Duration,
) -> Result<(u16, String)> {
    let addr: std::net::SocketAddr = dial_addr(reg).parse()?;
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, "127.0.0.1");
    for (name, value) in headers {
        req = req.header(*name, value.as_str());
    }
    if !body.is_empty() {
        req = req.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let req = req.body(Full::new(Bytes::from(body.to_string())))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let stream = tokio::time::timeout(CONNECT, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| anyhow!("connecting to {addr} timed out"))?
            .with_context(|| format!("cannot connect to {addr}"))?;
        let exchange = async {
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            let driver = tokio::spawn(conn);
            let resp = sender.send_request(req).await?;
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await?.to_bytes();
            driver.abort();
            anyhow::Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| anyhow!("the gateway did not answer within {} s", limit.as_secs()))?
    })
}
