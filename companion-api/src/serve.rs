//! Serving the router: one task per connection, each with a kill switch.

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Request extension: cancelling it drops the connection at once (used for slow SSE
/// subscribers, whose sockets may be blocked on a full send buffer).
#[derive(Clone)]
pub struct ConnKill(pub CancellationToken);

/// `/v1/sessions/` is routed as `/v1/sessions` (stripping the slash is acceptable).
fn strip_trailing_slash<B>(req: &mut Request<B>) {
    let path = req.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
        let pq = match req.uri().query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_string(),
        };
        let mut parts = req.uri().clone().into_parts();
        if let Ok(p) = pq.parse() {
            parts.path_and_query = Some(p);
            if let Ok(uri) = axum::http::Uri::from_parts(parts) {
                *req.uri_mut() = uri;
            }
        }
    }
}

/// Serves `app` on `listener` until `shutdown` fires; open connections are dropped then.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let (stream, _peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors and similar: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let kill = shutdown.child_token();
        let router = app.clone();
        let conn_kill = kill.clone();
        let task = tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnKill(conn_kill.clone()));
                strip_trailing_slash(&mut req);
                router.clone().oneshot(req.map(axum::body::Body::new))
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .keep_alive(true);
            let conn = builder
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
        // The kill switch aborts the connection task from the outside (dropping the socket
        // even when it is blocked on a full send buffer), so the connection itself never
        // polls the token: a long-lived SSE connection is woken once per frame, and that
        // wake-up stays as cheap as possible. Ending the connection fires the switch too,
        // which ends this watcher.
        let abort = task.abort_handle();
        tokio::spawn(async move {
            tokio::select! {
                _ = kill.cancelled() => abort.abort(),
                _ = task => kill.cancel(),
            }
        });
    }
}
