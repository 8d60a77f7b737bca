//! The route table: one module per resource, each with its `routes()` (every path it serves,
//! registered once), merged here.

mod events;
mod health;
mod human_input;
mod iterations;
mod learn;
mod machine;
mod mcp;
mod path;
mod providers;
mod sessions;
mod speech;
mod turns;
mod workspace;

use crate::error::{ApiError, ApiResult};
use crate::AppState;
use axum::Router;
use std::collections::HashMap;

pub type Q = axum::extract::Query<HashMap<String, String>>;

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(health::routes())
        .merge(sessions::routes())
        .merge(turns::routes())
        .merge(iterations::routes())
        .merge(events::routes())
        .merge(human_input::routes())
        .merge(workspace::routes())
        .merge(machine::routes())
        .merge(learn::routes())
        .merge(mcp::routes())
        .merge(providers::routes())
        .merge(speech::routes())
        .fallback(|| async { ApiError::not_found_route() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .with_state(state)
}

/// A 400 `invalid-request` with `message`.
pub fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid-request", message)
}

/// The body as an object, or a 400 naming what was expected.
pub fn object(
    body: &crate::body::JsonBody,
    what: &str,
) -> ApiResult<serde_json::Map<String, serde_json::Value>> {
    match &body.0 {
        serde_json::Value::Object(m) => Ok(m.clone()),
        _ => Err(invalid(format!("the body must be a JSON object {what}"))),
    }
}

/// Parses an optional integer query parameter; `Err(())` when present but not an integer.
pub fn int_param(q: &HashMap<String, String>, key: &str) -> Result<Option<i64>, ()> {
    match q.get(key).map(|s| s.trim()) {
        None | Some("") => Ok(None),
        Some(s) => s.parse::<i64>().map(Some).map_err(|_| ()),
    }
}
