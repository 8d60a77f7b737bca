//! Plain HTTP lane: the HTTP/1.1 relay ([`relay`]) for the absolute-form requests it takes
//! exactly, and from the first one it does not, a hyper HTTP/1.1 server with keep-alive;
//! every request is attributed and decided on its own, nothing inherited from the
//! connection's first request (docs/decisions.md, P1). CONNECT requests and provider routes
//! go to their lanes.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;

use crate::attribution::token_from_headers;
use crate::body::ProxyBody;
use crate::conn_pool::ConnPool;
use crate::deny::{reason, Denial};
use crate::h1_watch::{RequestWatch, Signal, Watched};
use crate::lanes::forward::{forward, Upstream, Who};
use crate::lanes::target::head_size;
use crate::phases::Target;
use crate::policy::normalize_host;
use crate::prefixed::Prefixed;
use crate::state::{ConnGuard, Shared};

mod relay;

pub(crate) async fn serve(stream: TcpStream, shared: Arc<Shared>, conn: ConnGuard) {
    // Absolute-form requests the relay takes exactly go through it; from the first request
    // it does not take, the HTTP server serves the connection.
    let Some((read, stream)) = relay::serve(&shared, &conn, stream).await else {
        return;
    };
    let stream = Prefixed::new(read, stream);
    // This connection's upstream connections, driven in this task.
    let local = Arc::new(ConnPool::default());
    // The watch on the request framing hyper reads (an absurd chunk size: 400 at once).
    let signal = Arc::new(Signal::default());
    let max_buf = shared.cfg.max_header_bytes.max(8192);
    let stream = Watched::new(stream, signal.clone(), max_buf);
    let (svc_shared, svc_local) = (shared.clone(), local.clone());
    let svc = service_fn(move |req| {
        let s = svc_shared.clone();
        let l = svc_local.clone();
        let c = conn.clone();
        let w = signal.next_request();
        async move { Ok::<_, Infallible>(handle(s, l, c, w, req).await) }
    });
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(shared.cfg.head_timeout)
        .max_buf_size(max_buf)
        .keep_alive(true)
        .auto_date_header(false);
    let conn = b
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades();
    if let Err(e) = local.run(&shared.up, conn).await {
        tracing::debug!(error = %e, "proxy client connection ended with an error");
    }
}

/// A provider route addressed to this proxy (origin form, or absolute form
/// naming the proxy's own loopback address).
fn provider_route(shared: &Shared, uri: &http::Uri) -> Option<crate::lanes::provider::Route> {
    let pq = uri.path_and_query()?.as_str();
    if uri.scheme().is_some() {
        // cheap test first: most absolute-form requests name another port
        if uri.port_u16() != Some(shared.own_port) {
            return None;
        }
        let host = normalize_host(uri.host()?);
        let own = matches!(host.as_str(), "127.0.0.1" | "localhost" | "::1");
        if !own || uri.port_u16() != Some(shared.own_port) {
            return None;
        }
    }
    crate::lanes::provider::parse_route(pq)
}

/// The first request of a connection that carries a token the host knows moves the
/// connection under the overall cap (`admission.rs`); a 503 when the cap is full. A request
/// without a known token goes on unadmitted (and is refused by the attribution step).
async fn admit(
    shared: &Shared,
    conn: &ConnGuard,
    req: &Request<Incoming>,
) -> Option<Response<ProxyBody>> {
    let token = token_from_headers(req.headers())
        .or_else(|| provider_route(shared, req.uri()).map(|r| r.token));
    let attribution = shared.svc.attribution.as_ref();
    if crate::attribution::authorize(attribution, token.as_deref())
        .await
        .is_err()
        || conn.authenticated()
    {
        return None;
    }
    let mut resp = Response::new(crate::body::full(bytes::Bytes::from_static(
        b"proxy busy: too many connections, retry later\n",
    )));
    *resp.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    let h = resp.headers_mut();
    h.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    h.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    Some(resp)
}

async fn handle(
    shared: Arc<Shared>,
    local: Arc<ConnPool>,
    conn: ConnGuard,
    watch: RequestWatch,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    if head_size(&req) > shared.cfg.max_header_bytes {
        return Denial::head_too_large().to_response();
    }
    if !conn.is_authenticated() {
        if let Some(busy) = admit(&shared, &conn, &req).await {
            return busy;
        }
    }
    if req.method() == Method::CONNECT {
        return crate::lanes::connect::handle(shared, conn, req).await;
    }
    let uri = req.uri().clone();
    if let Some(route) = provider_route(&shared, &uri) {
        return crate::lanes::provider::handle(shared, route, conn, watch, req).await;
    }
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Denial::bad_request("https:// URLs must be sent through CONNECT").to_response()
        }
        _ => return Denial::bad_request(reason::MALFORMED).to_response(),
    }
    let host = match uri.host() {
        Some(h) if !h.trim().is_empty() => normalize_host(h),
        _ => return Denial::bad_request(reason::MALFORMED).to_response(),
    };
    // a port that is not one is refused, not read as the default
    let authority = uri.authority().map_or("", |a| a.as_str());
    let Some(port) = crate::lanes::target::authority_port(authority, 80) else {
        return Denial::bad_request(reason::MALFORMED).to_response();
    };
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let target = Target::http(req.method().as_str(), path, host, port, Some(port));
    let who = Who::Token(token_from_headers(req.headers()));
    let upstream = Upstream::Plain { local: Some(local) };
    forward(&shared, target, who, req, upstream, Some(conn), Some(watch)).await
}
