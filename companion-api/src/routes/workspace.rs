//! Where a session works: its drafts (`…/workspace/…`), `@file` suggestions, and the folder
//! browser (`/v1/fs`) a person uses to pick a project.

use super::path::Path;
use super::sessions::MAX_QUERY_CHARS;
use super::Q;
use super::{invalid, typed, typed_object};
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

/// Every route of this resource, each path once.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/sessions/{sid}/workspace/drafts",
            get(drafts).post(create_draft),
        )
        .route(
            "/v1/sessions/{sid}/workspace/drafts/{wid}",
            delete(abandon_draft),
        )
        .route("/v1/sessions/{sid}/workspace/draft-sizes", get(draft_sizes))
        .route("/v1/sessions/{sid}/workspace/resume", post(resume_draft))
        .route("/v1/sessions/{sid}/workspace/stash", post(stash_draft))
        .route("/v1/sessions/{sid}/suggest", get(suggest))
        .route("/v1/fs", get(folders))
        .route("/v1/fs/actions/mkdir", post(mkdir))
}

pub async fn suggest(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
) -> ApiResult<Response> {
    let kind = q.get("kind").map(String::as_str).unwrap_or("file");
    if kind != "file" {
        return Err(ApiError::bad_request(
            "invalid-kind",
            format!("unknown suggestion kind {kind:?}; known: file"),
        ));
    }
    let text = q.get("q").map(String::as_str).unwrap_or("");
    if text.chars().count() > MAX_QUERY_CHARS {
        return Err(ApiError::bad_request(
            "invalid-query",
            format!("q must be at most {MAX_QUERY_CHARS} characters"),
        ));
    }
    Ok(Json(st.areas.workspace.suggest_files(&sid, text).await?).into_response())
}

/// `GET …/workspace/drafts`: the drafts of the session's repository, across sessions.
pub async fn drafts(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<Response> {
    let drafts = st.areas.workspace.drafts(&sid).await?;
    Ok(Json(json!({ "drafts": drafts })).into_response())
}

/// `POST …/workspace/drafts {label, clean?}`: a new draft, entered.
pub async fn create_draft(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let b: CreateDraft = typed_object(body, "{label, clean?}")?;
    let clean = b.clean.unwrap_or(false);
    let changed = st
        .areas
        .workspace
        .create_draft(&sid, &b.label, clean)
        .await?;
    Ok((StatusCode::CREATED, Json(changed)).into_response())
}

/// `POST …/workspace/resume {workspace_id}`.
pub async fn resume_draft(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let b: ResumeDraft = typed_object(body, "{workspace_id}")?;
    let id = b.workspace_id.trim();
    if id.is_empty() {
        return Err(invalid(
            "workspace_id is required (a draft's id from the list)",
        ));
    }
    Ok(Json(st.areas.workspace.resume_draft(&sid, id).await?).into_response())
}

/// `POST …/workspace/stash {}`.
pub async fn stash_draft(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Response> {
    Ok(Json(st.areas.workspace.stash_draft(&sid).await?).into_response())
}

/// `DELETE …/workspace/drafts/:workspace_id {reason?}`.
pub async fn abandon_draft(
    State(st): State<AppState>,
    Path((sid, id)): Path<(String, String)>,
    body: JsonBody,
) -> ApiResult<Response> {
    // No body (or not an object) is no reason.
    let reason = match body.0 {
        Value::Object(_) => typed::<AbandonDraft>(body)?.reason,
        _ => None,
    };
    Ok(Json(st.areas.workspace.abandon_draft(&sid, &id, reason).await?).into_response())
}

/// `GET /v1/fs?path=`: the sub-folders of `path` (default: home).
pub async fn folders(State(st): State<AppState>, q: Q) -> ApiResult<Response> {
    let path = q.get("path").filter(|p| !p.trim().is_empty()).cloned();
    Ok(Json(st.areas.workspace.folders(path).await?).into_response())
}

/// `POST /v1/fs/actions/mkdir {path, name}`.
pub async fn mkdir(State(st): State<AppState>, body: JsonBody) -> ApiResult<Response> {
    let b: MakeFolder = typed_object(body, "{path, name}")?;
    let made = st.areas.workspace.make_folder(&b.path, &b.name).await?;
    Ok((StatusCode::CREATED, Json(made)).into_response())
}

/// `GET …/workspace/draft-sizes`: each draft with its size on disk.
pub async fn draft_sizes(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Response> {
    Ok(Json(st.areas.workspace.draft_sizes(&sid).await?).into_response())
}

/// `POST …/workspace/drafts`.
#[derive(Deserialize)]
struct CreateDraft {
    label: String,
    clean: Option<bool>,
}

/// `POST …/workspace/resume`.
#[derive(Deserialize)]
struct ResumeDraft {
    workspace_id: String,
}

/// `DELETE …/workspace/drafts/:workspace_id`.
#[derive(Deserialize)]
struct AbandonDraft {
    reason: Option<String>,
}

/// `POST /v1/fs/actions/mkdir`.
#[derive(Deserialize)]
struct MakeFolder {
    path: String,
    name: String,
}
