//! Machine-level routes of the app: router status and defaults, settings toggles, push
//! devices, project deletion, and the speech/voice routes (no engine here: honest empty
//! shapes and clear refusals, never a 404 for the route itself).

use super::path::Path;
use super::Q;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::records::{DeviceInput, RouterPatch, SettingAction};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

pub async fn router(State(st): State<AppState>) -> ApiResult<Response> {
    Ok(Json(st.engine.router_status().await?).into_response())
}

pub async fn patch_router(State(st): State<AppState>, body: JsonBody) -> ApiResult<Response> {
    if !body.0.is_object() {
        return Err(ApiError::bad_request(
            "invalid-request",
            "the body must be {provider, model, role?}",
        ));
    }
    let patch: RouterPatch = serde_json::from_value(body.0.clone()).map_err(|e| {
        ApiError::bad_request(
            "invalid-request",
            format!("provider, model and role must be strings: {e}"),
        )
    })?;
    Ok(Json(st.engine.patch_router(patch).await?).into_response())
}

pub async fn settings(State(st): State<AppState>) -> ApiResult<Response> {
    Ok(Json(st.engine.settings().await?).into_response())
}

pub async fn setting(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    Ok(Json(st.engine.setting(&id).await?).into_response())
}

pub async fn set_setting(State(st): State<AppState>, body: JsonBody) -> ApiResult<Response> {
    let bad = |m: &str| ApiError::bad_request("invalid-request", m.to_string());
    let id = body
        .0
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| bad("id must be a setting id"))?;
    let action = match body.0.get("action").and_then(Value::as_str) {
        Some("toggle") => SettingAction::Toggle,
        Some("cycle") => SettingAction::Cycle,
        Some("value") => match body.0.get("value") {
            Some(Value::String(v)) => SettingAction::Value(v.clone()),
            Some(Value::Bool(b)) => SettingAction::Value(b.to_string()),
            _ => return Err(bad("action value needs a string value")),
        },
        _ => return Err(bad("action must be toggle, cycle or value")),
    };
    Ok(Json(st.engine.set_setting(id.trim(), action).await?).into_response())
}

pub async fn devices(State(st): State<AppState>) -> ApiResult<Response> {
    Ok(Json(st.engine.devices().await?).into_response())
}

pub async fn register_device(State(st): State<AppState>, body: JsonBody) -> ApiResult<Response> {
    if !body.0.is_object() {
        return Err(ApiError::bad_request(
            "invalid-request",
            "token or grant is required",
        ));
    }
    let input: DeviceInput = serde_json::from_value(body.0.clone()).map_err(|e| {
        ApiError::bad_request(
            "invalid-request",
            format!("device fields must be strings: {e}"),
        )
    })?;
    Ok(Json(st.engine.register_device(input).await?).into_response())
}

pub async fn unregister_device(
    State(st): State<AppState>,
    Path(token): Path<String>,
) -> ApiResult<Response> {
    let removed = st.engine.unregister_device(&token).await?;
    Ok(Json(json!({ "is_removed": removed })).into_response())
}

pub async fn delete_project(
    State(st): State<AppState>,
    Path(pid): Path<String>,
    q: Q,
) -> ApiResult<Response> {
    let recursive = q
        .get("is_recursive")
        .is_some_and(|v| matches!(v.as_str(), "true" | "1"));
    let done = st.engine.delete_project(&pid, recursive).await?;
    if recursive {
        Ok(Json(done).into_response())
    } else {
        Ok(StatusCode::NO_CONTENT.into_response())
    }
}

// ── Speech and voice: no engine on this gateway ─────────────────────────

const NO_VOICE: &str = "no voice transcription engine is configured on this gateway";
const NO_SPEECH: &str = "no speech synthesis engine is configured on this gateway";

/// The string-`error` body these routes use (the app reads it as a plain message).
fn refusal(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"error": message, "reasons": []}))).into_response()
}

pub async fn voice_model() -> Json<Value> {
    Json(json!({"status": "unavailable", "error": NO_VOICE}))
}

pub async fn speech_model() -> Json<Value> {
    Json(json!({"status": "unavailable", "error": NO_SPEECH}))
}

pub async fn voice_model_start() -> Response {
    refusal(StatusCode::NOT_IMPLEMENTED, NO_VOICE)
}

pub async fn speech_model_start() -> Response {
    refusal(StatusCode::NOT_IMPLEMENTED, NO_SPEECH)
}

pub async fn speech_voices() -> Json<Value> {
    Json(json!({
        "engine": {"id": "none", "label": "No speech engine", "is_default": true,
                   "is_voice_import": false, "voices": []},
        "voices": [],
    }))
}

/// Voice import and synthesis: the body (a recording, a line of text) is read and dropped.
pub async fn speech_unavailable(_body: JsonBody) -> Response {
    refusal(StatusCode::NOT_IMPLEMENTED, NO_SPEECH)
}

pub async fn speech_voice_delete(Path(id): Path<String>) -> Response {
    refusal(
        StatusCode::NOT_FOUND,
        &format!("no voice {id}: {NO_SPEECH}, so it holds no voices"),
    )
}

/// `POST /v1/sessions/:sid/speech` and `…/voice`: the session must exist, then 501.
pub async fn session_speech(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    _body: JsonBody,
) -> ApiResult<Response> {
    st.engine.get_session(&sid, false).await?;
    Ok(refusal(StatusCode::NOT_IMPLEMENTED, NO_SPEECH))
}

pub async fn session_voice(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    _body: JsonBody,
) -> ApiResult<Response> {
    st.engine.get_session(&sid, false).await?;
    Ok(refusal(StatusCode::NOT_IMPLEMENTED, NO_VOICE))
}

/// Any job route: no engine ever made a job here.
pub async fn no_job(Path((_sid, jid)): Path<(String, String)>) -> Response {
    refusal(
        StatusCode::NOT_FOUND,
        &format!("no job {jid}: this gateway has no speech or voice engine, so it runs no jobs"),
    )
}
