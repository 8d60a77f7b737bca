//! The Companion HTTP + SSE surface (wire protocol 2).
//!
//! `app()` builds the router: CORS → protocol gate (426) → auth (401) → routes. Handlers
//! parse and validate the wire, call the trait of their area ([`areas`]), and shape the answer; every
//! failure is an [`ApiError`], mapped to a response in one place (`error.rs`).
//! `serve()` runs the router on a listener with a per-connection kill switch, so a slow SSE
//! subscriber can be disconnected even while its socket is not being read.

pub mod areas;
pub mod body;
pub mod error;
pub mod events;
pub mod learn;
pub mod live;
pub mod mcp;
pub mod metrics;
pub mod middleware;
pub mod protocol;
pub mod providers;
pub mod records;
pub mod replay;
mod routes;
pub mod serve;
pub mod serve_stats;
pub mod sse;
pub mod upload;
pub mod wire;

use std::sync::Arc;

use axum::Router;

pub use areas::*;
pub use error::{ApiError, ApiResult};
pub use live::Frame;
pub use serve::{serve, ConnKill};

/// Static settings of the HTTP surface.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Token gate on (any bind other than exactly 127.0.0.1, or `--require-token`).
    pub require_token: bool,
    pub token: String,
    pub host: String,
    pub port: u16,
    /// URLs a paired client may also use (Tailscale / LAN), for `/v1/capabilities`.
    pub addresses: Vec<String>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Stable gateway id (16 hex).
    pub gateway_id: String,
    pub managed: bool,
    /// Extra browser origins allowed on a bind without a token (`VIS_GATEWAY_CORS_ORIGINS`).
    pub cors_origins: Vec<String>,
}

#[derive(Clone)]
pub struct AppState {
    pub areas: Areas,
    pub cfg: Arc<ApiConfig>,
}

/// The whole Companion router with its gate pipeline.
pub fn app(areas: Areas, cfg: ApiConfig) -> Router {
    let state = AppState {
        areas,
        cfg: Arc::new(cfg),
    };
    routes::router(state.clone())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::auth::layer,
        ))
        .layer(axum::middleware::from_fn(middleware::protocol::layer))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::cors::layer,
        ))
}
