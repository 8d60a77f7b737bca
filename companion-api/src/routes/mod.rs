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

use crate::error::ApiError;
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

/// Parses an optional integer query parameter; `Err(())` when present but not an integer.
pub fn int_param(q: &HashMap<String, String>, key: &str) -> Result<Option<i64>, ()> {
    match q.get(key).map(|s| s.trim()) {
        None | Some("") => Ok(None),
        Some(s) => s.parse::<i64>().map(Some).map_err(|_| ()),
    }
}
