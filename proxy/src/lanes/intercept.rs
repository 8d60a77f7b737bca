//! HTTPS interception (§6.3, decision P5): TLS server with a leaf for the
//! SNI (CONNECT host as fallback), HTTP/1.1 + h2 inside, every inner request
//! decided on its own, upstream TLS to the address validated at CONNECT.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{header, Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::LazyConfigAcceptor;

use crate::body::ProxyBody;
use crate::conn_pool::{ConnPool, Key};
use crate::deny::{reason, Denial};
use crate::engine::Shared;
use crate::lanes::connect::parse_authority;
use crate::lanes::forward::{forward, Job, TunnelUpstream, Upstream};
use crate::record::RecordBase;
use crate::traits::{Lane, Phase, Principal};
use crate::upstream::TunnelTlsConnector;

struct Tunnel {
    shared: Arc<Shared>,
    principal: Principal,
    host: String,
    port: u16,
    up: Arc<TunnelUpstream>,
}

pub(crate) async fn run<IO>(
    shared: Arc<Shared>,
    principal: Principal,
    host: String,
    port: u16,
    addr: SocketAddr,
    io: IO,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let head_timeout = shared.cfg.head_timeout;
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
    let Ok(Ok(start)) = tokio::time::timeout(head_timeout, acceptor).await else {
        return;
    };
    let name = start
        .client_hello()
        .server_name()
        .map(str::to_string)
        .unwrap_or_else(|| host.clone());
    let cfg = match shared.ca.server_config(&name) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "could not mint an interception leaf");
            return;
        }
    };
    let Ok(Ok(tls)) = tokio::time::timeout(head_timeout, start.into_stream(cfg)).await else {
        return; // client refused our certificate: silent close
    };
    let server_name = match ServerName::try_from(host.clone()) {
        Ok(n) => n,
        Err(_) => return,
    };
    let connector = TunnelTlsConnector {
        dialer: shared.svc.dialer.clone(),
        timeout: shared.cfg.connect_timeout,
        addr,
        name: server_name.clone(),
        tls: shared.upstream_tls.clone(),
    };
    let authority = if port == 443 {
        bracketed(&host)
    } else {
        format!("{}:{}", bracketed(&host), port)
    };
    let up = Arc::new(TunnelUpstream {
        local: ConnPool::default(),
        key: Key::Tls(addr, server_name),
        authority,
        client: Client::builder(TokioExecutor::new()).build(connector),
    });
    let tunnel = Arc::new(Tunnel {
        shared: shared.clone(),
        principal,
        host,
        port,
        up: up.clone(),
    });
    let svc = service_fn(move |req| {
        let t = tunnel.clone();
        async move { Ok::<_, Infallible>(inner(t, req).await) }
    });
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(shared.cfg.max_header_bytes.max(8192));
    // The tunnel's upstream connections are driven in this task.
    let conn = b.serve_connection_with_upgrades(TokioIo::new(tls), svc);
    if let Err(e) = up.local.run(&shared, conn).await {
        tracing::debug!(error = %e, "intercepted connection ended with an error");
    }
}

/// Does the inner request's `Host` / `:authority` name the CONNECT target?
fn authority_matches(req: &Request<Incoming>, host: &str, port: u16) -> bool {
    let given = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        });
    let Some(given) = given else {
        return false;
    };
    let explicit_port = given
        .trim()
        .rsplit_once(':')
        .map(|(h, _)| !h.is_empty() && (!h.contains(':') || h.ends_with(']')));
    match parse_authority(&given) {
        Some((h, p)) => h == host && (explicit_port != Some(true) || p == port),
        None => false,
    }
}

async fn inner(t: Arc<Tunnel>, req: Request<Incoming>) -> Response<ProxyBody> {
    if crate::lanes::http::head_size(&req) > t.shared.cfg.max_header_bytes {
        return Denial::head_too_large().to_response();
    }
    if req.method() == Method::CONNECT {
        return Denial::bad_request("nested CONNECT is not allowed inside an intercepted tunnel")
            .to_response();
    }
    if !authority_matches(&req, &t.host, t.port) {
        return Denial::bad_request(format!("Host does not match the CONNECT target {}", t.host))
            .to_response();
    }
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    if !path.starts_with('/') {
        return Denial::bad_request(reason::MALFORMED).to_response();
    }
    let job = Job {
        base: RecordBase {
            lane: Lane::Https,
            phase: "https",
            method: Some(req.method().as_str().to_string()),
            path: Some(path),
            host: t.host.clone(),
            port: t.port,
            is_intercepted: true,
        },
        principal: t.principal.clone(),
        req_phase: Phase::Https,
        resp_phase: Phase::HttpsResponse,
        check_port: None,
        upstream: Upstream::Tunnel(t.up.clone()),
        route: None,
    };
    forward(t.shared.clone(), job, req).await
}

fn bracketed(h: &str) -> String {
    if h.contains(':') {
        format!("[{h}]")
    } else {
        h.to_string()
    }
}
