//! What a session's turns produced: the artifact list and each iteration's attachments
//! (bytes and saved revisions).

use super::path::Path;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::records::NewRevision;
use crate::AppState;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

/// Every route of this resource, each path once.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions/{sid}/artifacts", get(artifacts))
        .route(
            "/v1/sessions/{sid}/iterations/{iid}/attachments",
            get(iteration_list).post(iteration_save),
        )
        .route(
            "/v1/sessions/{sid}/iterations/{iid}/attachments/{idx}",
            get(iteration_bytes),
        )
}

/// Largest revision a person may save (the turn attachment cap).
pub const MAX_REVISION_BYTES: usize = 26_214_400;

pub async fn artifacts(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<Response> {
    Ok(Json(st.areas.turns.artifacts(&sid).await?).into_response())
}

pub async fn iteration_list(
    State(st): State<AppState>,
    Path((sid, iid)): Path<(String, String)>,
) -> ApiResult<Response> {
    Ok(Json(st.areas.turns.iteration_attachments(&sid, &iid).await?).into_response())
}

pub async fn iteration_bytes(
    State(st): State<AppState>,
    Path((sid, iid, idx)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let index: i64 = idx.parse().map_err(|_| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "attachment-not-found",
            format!("no attachment {idx:?}: the index is a number"),
        )
    })?;
    let stored = st
        .areas
        .turns
        .iteration_attachment_bytes(&sid, &iid, index)
        .await?;
    let ct = HeaderValue::from_str(&stored.media_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let disposition = HeaderValue::from_str(&format!(
        "inline; filename=\"{}\"",
        stored
            .filename
            .rsplit('/')
            .next()
            .unwrap_or("file")
            .replace(['"', '\\'], "_")
    ))
    .unwrap_or(HeaderValue::from_static("inline"));
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, ct),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=31536000, immutable"),
            ),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        stored.bytes,
    )
        .into_response())
}

pub async fn iteration_save(
    State(st): State<AppState>,
    Path((sid, iid)): Path<(String, String)>,
    body: JsonBody,
) -> ApiResult<Response> {
    let bad = |m: String| ApiError::bad_request("invalid-attachment", m);
    let no_filename = || bad("filename must be a non-blank string".into());
    let no_base64 = || bad("base64 must be a string".into());
    let b: SaveRevision = super::record(body).map_err(|e| match e.member.as_deref() {
        Some("filename") => no_filename(),
        Some("base64") => no_base64(),
        _ => bad(format!("invalid body: {}", e.message)),
    })?;
    let filename = b
        .filename
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.len() <= 1024)
        .ok_or_else(no_filename)?;
    let raw = b.base64.ok_or_else(no_base64)?;
    let decoded = crate::upload::decode(&raw, b.media_type.as_deref())
        .map_err(|e| bad(format!("the upload is not usable: {e}")))?;
    if decoded.bytes.len() > MAX_REVISION_BYTES {
        return Err(bad(format!(
            "the upload exceeds {MAX_REVISION_BYTES} bytes"
        )));
    }
    let media_type = decoded
        .media_type
        .unwrap_or_else(|| "application/octet-stream".into());
    let rev = NewRevision {
        filename,
        media_type,
        bytes: decoded.bytes,
    };
    let saved = st.areas.turns.save_revision(&sid, &iid, rev).await?;
    Ok((StatusCode::CREATED, Json(saved)).into_response())
}

/// `POST …/iterations/:iteration_id/attachments {filename, base64, media_type?}`.
#[derive(serde::Deserialize)]
struct SaveRevision {
    filename: Option<String>,
    base64: Option<String>,
    media_type: Option<String>,
}
