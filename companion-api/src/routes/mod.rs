//! The route table (§3). Each file holds one area's handlers.

mod events;
mod extras;
mod health;
mod human_input;
mod mcp;
mod path;
mod sessions;
mod turns;

use crate::error::ApiError;
use crate::AppState;
use axum::routing::{get, post};
use axum::Router;
use std::collections::HashMap;

pub type Q = axum::extract::Query<HashMap<String, String>>;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::healthz))
        .route("/v1/capabilities", get(health::capabilities))
        .route("/v1/admin/status", get(health::admin_status))
        .route("/v1/admin/stop", post(health::admin_stop))
        .route("/metrics", get(health::metrics))
        .route("/v1/sessions", get(sessions::list).post(sessions::create))
        .route(
            "/v1/sessions/{sid}",
            get(sessions::get_one).delete(sessions::delete),
        )
        .route("/v1/sessions/{sid}/release", post(sessions::release))
        .route("/v1/sessions/{sid}/transcript", get(sessions::transcript))
        .route("/v1/sessions/{sid}/model", get(sessions::model))
        .route("/v1/sessions/{sid}/slashes", get(sessions::slashes))
        .route("/v1/sessions/{sid}/egress", get(sessions::egress))
        .route("/v1/sessions/{sid}/artifacts", get(extras::artifacts))
        .route(
            "/v1/sessions/{sid}/turns",
            get(turns::list).post(turns::submit),
        )
        .route(
            "/v1/sessions/{sid}/turns/{tid}",
            get(turns::get_one).patch(turns::edit).delete(turns::delete),
        )
        .route("/v1/sessions/{sid}/turns/{tid}/cancel", post(turns::cancel))
        .route("/v1/sessions/{sid}/turns/{tid}/trace", get(turns::trace))
        .route(
            "/v1/sessions/{sid}/turns/{tid}/attachments",
            get(turns::attachments),
        )
        .route(
            "/v1/sessions/{sid}/cancel-current",
            post(turns::cancel_current),
        )
        .route("/v1/sessions/{sid}/resume-queue", post(turns::resume_queue))
        .route("/v1/sessions/{sid}/drain-queue", post(turns::drain_queue))
        .route("/v1/sessions/{sid}/events", get(events::session_stream))
        .route("/v1/events", get(events::multiplexed))
        .route("/v1/sessions/{sid}/events-since", get(events::since))
        .route("/v1/sessions/{sid}/seq", get(events::seq))
        .route("/v1/sessions/{sid}/human-input", get(human_input::list))
        .route(
            "/v1/sessions/{sid}/human-input/live",
            get(human_input::live_list),
        )
        .route(
            "/v1/sessions/{sid}/human-input/live/{vid}/log/{nid}",
            get(human_input::live_log),
        )
        .route(
            "/v1/sessions/{sid}/human-input/live/{vid}/actions/focus",
            post(human_input::live_focus),
        )
        .route(
            "/v1/sessions/{sid}/human-input/live/{vid}/actions/interrupt",
            post(human_input::live_interrupt),
        )
        .route(
            "/v1/sessions/{sid}/human-input/{rid}/actions/submit",
            post(human_input::submit),
        )
        .route(
            "/v1/sessions/{sid}/human-input/{rid}/actions/cancel",
            post(human_input::cancel),
        )
        .route("/v1/extensions", get(extras::extensions))
        .route("/v1/extensions/reload", post(extras::reload_extensions))
        .route("/v1/sandbox/env", post(extras::sandbox_env))
        .route("/v1/router", get(extras::router))
        .route("/v1/settings", get(extras::settings))
        .route("/v1/settings/{id}", get(extras::setting))
        .route("/v1/devices", get(extras::devices))
        .route("/v1/fs", get(extras::fs))
        .route("/v1/mcp/servers", get(mcp::list).post(mcp::save))
        .route("/v1/mcp/servers/actions/test", post(mcp::test))
        .route("/v1/mcp/servers/{name}", axum::routing::delete(mcp::delete))
        .route("/v1/mcp/servers/{name}/actions/enable", post(mcp::enable))
        .route("/v1/mcp/servers/{name}/actions/kill", post(mcp::kill))
        .route("/v1/mcp/servers/{name}/actions/start", post(mcp::start))
        .route("/v1/mcp/servers/{name}/auth/{step}", post(mcp::auth))
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
