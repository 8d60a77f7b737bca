//! The one error type of the Companion API and the single place that maps it to a response.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

/// An error answered as `{"error": {"type", "message", ...extra}}` with a status code.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: String,
    pub message: String,
    pub extra: Map<String, Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind: kind.to_string(),
            message: message.into(),
            extra: Map::new(),
        }
    }

    /// Adds an extra snake_case field to the error object.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }

    pub fn not_found_route() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "no such route")
    }
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "method not allowed on this route",
        )
    }
    pub fn session_not_found(sid: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "session-not-found",
            format!("no session {sid}"),
        )
        .with("session_id", sid)
    }
    pub fn turn_not_found(tid: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "turn-not-found",
            format!("no turn {tid}"),
        )
        .with("turn_id", tid)
    }
    pub fn bad_request(kind: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, kind, message)
    }
    pub fn conflict(kind: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, kind, message)
    }
    pub fn engine(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "engine-error", message)
    }
    /// 507: the gateway's disk (its database) has no room for the write.
    pub fn insufficient_storage(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient-storage",
            message,
        )
    }
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or invalid bearer token",
        )
    }
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            format!("request body exceeds {limit} bytes"),
        )
    }

    pub fn body(&self) -> Value {
        let mut err = Map::new();
        err.insert("type".into(), Value::String(self.kind.clone()));
        err.insert("message".into(), Value::String(self.message.clone()));
        for (k, v) in &self.extra {
            err.entry(k.clone()).or_insert_with(|| v.clone());
        }
        json!({ "error": Value::Object(err) })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
