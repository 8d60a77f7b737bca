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

/// Why a body did not read as its request record: the top-level member at fault (when the
/// error is inside one) and the parser's message, which names the path (`clean: invalid
/// type: …`; an error of the whole body names none).
pub struct BodyError {
    pub member: Option<String>,
    pub message: String,
}

/// The body as the request record `T`.
pub fn record<T: serde::de::DeserializeOwned>(body: crate::body::JsonBody) -> Result<T, BodyError> {
    serde_path_to_error::deserialize(body.0).map_err(|e| BodyError {
        member: match e.path().iter().next() {
            Some(serde_path_to_error::Segment::Map { key }) => Some(key.clone()),
            _ => None,
        },
        message: e.to_string(),
    })
}

/// The body as the request record `T`, or a 400 `invalid-request` naming the field that is
/// wrong (`invalid body: clean: invalid type: …`).
pub fn typed<T: serde::de::DeserializeOwned>(body: crate::body::JsonBody) -> ApiResult<T> {
    typed_saying(body, |_| None)
}

/// [`typed`] where the route has its own sentence for a member of the wrong type:
/// `say(member)`, `None` for the general message.
pub fn typed_saying<T: serde::de::DeserializeOwned>(
    body: crate::body::JsonBody,
    say: impl Fn(&str) -> Option<String>,
) -> ApiResult<T> {
    record(body).map_err(|e| {
        let own = e.member.as_deref().and_then(say);
        invalid(own.unwrap_or_else(|| format!("invalid body: {}", e.message)))
    })
}

/// [`typed`] for a body that must be an object (else the 400 of [`object`], naming `what`).
pub fn typed_object<T: serde::de::DeserializeOwned>(
    body: crate::body::JsonBody,
    what: &str,
) -> ApiResult<T> {
    let m = object(&body, what)?;
    typed(crate::body::JsonBody(serde_json::Value::Object(m)))
}

/// [`typed_saying`] where a body that is not an object (none, `null`) stands for an empty
/// one: every member left out.
pub fn typed_or_default<T: serde::de::DeserializeOwned + Default>(
    body: crate::body::JsonBody,
    say: impl Fn(&str) -> Option<String>,
) -> ApiResult<T> {
    if !body.0.is_object() {
        return Ok(T::default());
    }
    typed_saying(body, say)
}

/// Parses an optional integer query parameter; `Err(())` when present but not an integer.
pub fn int_param(q: &HashMap<String, String>, key: &str) -> Result<Option<i64>, ()> {
    match q.get(key).map(|s| s.trim()) {
        None | Some("") => Ok(None),
        Some(s) => s.parse::<i64>().map(Some).map_err(|_| ()),
    }
}
