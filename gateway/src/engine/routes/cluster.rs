//! The cluster's HTTP hop as a middleware (docs/decisions.md, C4): requests about a session
//! homed on another node are carried there by `crate::cluster`; this adapter names the node
//! on every answer and maps what the hop could not do to the Companion API's errors.

use crate::cluster::{route, Cluster, ForwardError, NODE_HEADER};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use vis_companion_api::ApiError;

/// The middleware of a cluster node's router.
pub async fn forward(State(cluster): State<Arc<Cluster>>, req: Request, next: Next) -> Response {
    let mut resp = match route(&cluster, req, next).await {
        Ok(resp) => resp,
        Err(e) => api_error(e).into_response(),
    };
    if !resp.headers().contains_key(NODE_HEADER) {
        if let Ok(v) = HeaderValue::from_str(cluster.node().as_str()) {
            resp.headers_mut().insert(NODE_HEADER, v);
        }
    }
    resp
}

/// 503 with a retry hint when the session's node cannot answer now.
fn api_error(e: ForwardError) -> ApiError {
    match e {
        ForwardError::Database(message) => ApiError::engine(message),
        ForwardError::Unavailable { sid, message } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "session_node_unavailable",
            message,
        )
        .with("session_id", sid)
        .with("retry_after_s", 2),
    }
}
