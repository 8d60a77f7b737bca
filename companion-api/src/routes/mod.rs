//! The route table. Each file holds one area's handlers.

mod events;
mod extras;
mod health;
mod human_input;
mod learn;
mod mcp;
mod parity_files;
mod parity_machine;
mod parity_sessions;
mod path;
mod providers;
mod sessions;
mod turns;

use crate::error::ApiError;
use crate::AppState;
use axum::routing::{delete, get, patch, post};
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
        .route(
            "/v1/sessions/{sid}/egress/proposal",
            get(learn::session_proposal),
        )
        .route(
            "/v1/sessions/{sid}/egress/proposal/apply",
            post(learn::apply),
        )
        .route(
            "/v1/sessions/{sid}/egress/proposal/review",
            post(learn::review),
        )
        .route(
            "/v1/sessions/{sid}/egress/mode",
            get(learn::mode).put(learn::set_mode),
        )
        .route("/v1/sessions/{sid}/egress/suggested", get(learn::suggested))
        .route("/v1/egress/proposal", get(learn::project_proposal))
        .route("/v1/egress/policy-changes", get(learn::changes))
        .route("/v1/sessions/{sid}/artifacts", get(parity_files::artifacts))
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
        .route("/v1/router", get(parity_machine::router))
        .route("/v1/settings", get(parity_machine::settings))
        .route("/v1/settings/{id}", get(parity_machine::setting))
        .route("/v1/devices", get(parity_machine::devices))
        .route("/v1/fs", get(extras::fs))
        .route("/v1/mcp/servers", get(mcp::list).post(mcp::save))
        .route("/v1/mcp/servers/actions/test", post(mcp::test))
        .route("/v1/mcp/servers/{name}", axum::routing::delete(mcp::delete))
        .route("/v1/mcp/servers/{name}/actions/enable", post(mcp::enable))
        .route("/v1/mcp/servers/{name}/actions/kill", post(mcp::kill))
        .route("/v1/mcp/servers/{name}/actions/start", post(mcp::start))
        .route("/v1/mcp/servers/{name}/auth/{step}", post(mcp::auth))
        .route("/v1/providers", get(providers::list).post(providers::add))
        .route("/v1/providers/{id}", delete(providers::remove))
        .route("/v1/providers/{id}/status", get(providers::status))
        .route("/v1/providers/{id}/limits", get(providers::limits))
        .route("/v1/providers/{id}/auth/start", post(providers::auth_start))
        .route(
            "/v1/providers/{id}/auth/complete",
            post(providers::auth_complete),
        )
        .route("/v1/providers/{id}/auth/poll", post(providers::auth_poll))
        .route(
            "/v1/providers/{id}/auth/cancel",
            post(providers::auth_cancel),
        )
        .route("/v1/provider-presets", get(providers::presets))
        // Companion parity (the app's calls beyond the core flow).
        .route("/v1/sessions/{sid}", patch(parity_sessions::patch_session))
        .route("/v1/sessions/actions/search", get(parity_sessions::search))
        .route("/v1/sessions/{sid}/usage", get(parity_sessions::usage))
        .route(
            "/v1/sessions/{sid}/transcript.md",
            get(parity_sessions::transcript_md),
        )
        .route("/v1/sessions/{sid}/suggest", get(parity_sessions::suggest))
        .route(
            "/v1/sessions/{sid}/model",
            patch(parity_sessions::set_model),
        )
        .route(
            "/v1/sessions/{sid}/forks",
            get(parity_sessions::fork_points).post(parity_sessions::fork),
        )
        .route(
            "/v1/sessions/{sid}/workspace/drafts",
            get(parity_sessions::drafts).post(parity_sessions::create_draft),
        )
        .route(
            "/v1/sessions/{sid}/workspace/drafts/{wid}",
            delete(parity_sessions::abandon_draft),
        )
        .route(
            "/v1/sessions/{sid}/workspace/resume",
            post(parity_sessions::resume_draft),
        )
        .route(
            "/v1/sessions/{sid}/workspace/stash",
            post(parity_sessions::stash_draft),
        )
        .route(
            "/v1/sessions/{sid}/iterations/{iid}/attachments",
            get(parity_files::iteration_list).post(parity_files::iteration_save),
        )
        .route(
            "/v1/sessions/{sid}/iterations/{iid}/attachments/{idx}",
            get(parity_files::iteration_bytes),
        )
        .route("/v1/fs/actions/mkdir", post(parity_files::mkdir))
        .route("/v1/router", patch(parity_machine::patch_router))
        .route("/v1/settings", post(parity_machine::set_setting))
        .route("/v1/devices", post(parity_machine::register_device))
        .route(
            "/v1/devices/{token}",
            delete(parity_machine::unregister_device),
        )
        .route("/v1/projects/{pid}", delete(parity_machine::delete_project))
        .route(
            "/v1/voice/model",
            get(parity_machine::voice_model).post(parity_machine::voice_model_start),
        )
        .route(
            "/v1/speech/model",
            get(parity_machine::speech_model).post(parity_machine::speech_model_start),
        )
        .route(
            "/v1/speech/voices",
            get(parity_machine::speech_voices).post(parity_machine::speech_unavailable),
        )
        .route(
            "/v1/speech/voices/{id}",
            delete(parity_machine::speech_voice_delete),
        )
        .route(
            "/v1/sessions/{sid}/speech",
            post(parity_machine::session_speech),
        )
        .route(
            "/v1/sessions/{sid}/speech/jobs/{jid}",
            get(parity_machine::no_job).delete(parity_machine::no_job),
        )
        .route(
            "/v1/sessions/{sid}/speech/jobs/{jid}/audio",
            get(parity_machine::no_job),
        )
        .route(
            "/v1/sessions/{sid}/speech/jobs/{jid}/events",
            get(parity_machine::no_job),
        )
        .route(
            "/v1/sessions/{sid}/voice",
            post(parity_machine::session_voice),
        )
        .route(
            "/v1/sessions/{sid}/voice/jobs/{jid}",
            get(parity_machine::no_job).delete(parity_machine::no_job),
        )
        .route(
            "/v1/sessions/{sid}/voice/jobs/{jid}/events",
            get(parity_machine::no_job),
        )
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
