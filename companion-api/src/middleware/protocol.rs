//! The protocol version gate (426), run before auth.

use crate::protocol::{incompatible_body, verdict, ClientInfo, Reason};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// Paths that answer whatever the client's protocol. `/metrics` is exempt too (scrapers
/// rarely send protocol headers; recorded in ARCHITECTURE.md), but still needs the token.
pub fn is_exempt(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/readyz" | "/v1/capabilities" | "/metrics"
    ) || path.starts_with("/docs")
}

pub async fn layer(req: Request, next: Next) -> Response {
    if is_exempt(req.uri().path()) {
        return next.run(req).await;
    }
    let client = ClientInfo::from_headers(req.headers());
    if verdict(&client) != Reason::Ok {
        return (
            StatusCode::UPGRADE_REQUIRED,
            Json(incompatible_body(&client)),
        )
            .into_response();
    }
    next.run(req).await
}
