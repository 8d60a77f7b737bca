//! Speech and voice: this gateway has no engine for either, so the routes answer honest
//! empty shapes and clear refusals (never a 404 for the route itself).

use super::path::Path;
use crate::body::JsonBody;
use crate::error::ApiResult;
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// Every route of this resource, each path once.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/voice/model", get(voice_model).post(voice_model_start))
        .route(
            "/v1/speech/model",
            get(speech_model).post(speech_model_start),
        )
        .route(
            "/v1/speech/voices",
            get(speech_voices).post(speech_unavailable),
        )
        .route("/v1/speech/voices/{id}", delete(speech_voice_delete))
        .route("/v1/sessions/{sid}/speech", post(session_speech))
        .route(
            "/v1/sessions/{sid}/speech/jobs/{jid}",
            get(no_job).delete(no_job),
        )
        .route("/v1/sessions/{sid}/speech/jobs/{jid}/audio", get(no_job))
        .route("/v1/sessions/{sid}/speech/jobs/{jid}/events", get(no_job))
        .route("/v1/sessions/{sid}/voice", post(session_voice))
        .route(
            "/v1/sessions/{sid}/voice/jobs/{jid}",
            get(no_job).delete(no_job),
        )
        .route("/v1/sessions/{sid}/voice/jobs/{jid}/events", get(no_job))
}

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
    st.areas.sessions.get(&sid, false).await?;
    Ok(refusal(StatusCode::NOT_IMPLEMENTED, NO_SPEECH))
}

pub async fn session_voice(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    _body: JsonBody,
) -> ApiResult<Response> {
    st.areas.sessions.get(&sid, false).await?;
    Ok(refusal(StatusCode::NOT_IMPLEMENTED, NO_VOICE))
}

/// Any job route: no engine ever made a job here.
pub async fn no_job(Path((_sid, jid)): Path<(String, String)>) -> Response {
    refusal(
        StatusCode::NOT_FOUND,
        &format!("no job {jid}: this gateway has no speech or voice engine, so it runs no jobs"),
    )
}
