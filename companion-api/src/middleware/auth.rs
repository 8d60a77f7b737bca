//! The token gate (401): `Authorization: Bearer` or `X-Vis-Gateway-Secret`, constant-time.

use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// Paths open without a token.
pub fn is_open(path: &str) -> bool {
    path == "/healthz" || path.starts_with("/docs")
}

/// The token a request carries, trimmed.
pub fn presented_token(h: &HeaderMap) -> Option<String> {
    if let Some(v) = h.get("authorization").and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer ") {
            return Some(v[7..].trim().to_string());
        }
    }
    h.get("x-vis-gateway-secret")
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
}

pub fn token_matches(expected: &str, presented: &str) -> bool {
    !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(presented.as_bytes()))
}

pub async fn layer(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !state.cfg.require_token || is_open(req.uri().path()) {
        return next.run(req).await;
    }
    let ok = presented_token(req.headers()).is_some_and(|t| token_matches(&state.cfg.token, &t));
    if !ok {
        return ApiError::unauthorized().into_response();
    }
    next.run(req).await
}
