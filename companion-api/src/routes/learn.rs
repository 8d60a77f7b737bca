//! Learn mode (docs/decisions.md, L1): proposals, their review and application, the
//! session's mode switch, the suggested additions, and the changes applied.

use super::path::Path;
use super::typed;
use super::Q;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::learn::*;
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Json;
use std::sync::Arc;

/// Every route of this resource, each path once.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/sessions/{sid}/egress/proposal", get(session_proposal))
        .route("/v1/sessions/{sid}/egress/proposal/apply", post(apply))
        .route("/v1/sessions/{sid}/egress/proposal/review", post(review))
        .route("/v1/sessions/{sid}/egress/mode", get(mode).put(set_mode))
        .route("/v1/sessions/{sid}/egress/suggested", get(suggested))
        .route("/v1/egress/proposal", get(project_proposal))
        .route("/v1/egress/policy-changes", get(changes))
}

fn api(st: &AppState) -> ApiResult<Arc<dyn LearnApi>> {
    st.areas.learn.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "learn-unavailable",
            "learn mode is not available on this gateway",
        )
    })
}

/// `?scope=project` (the session's whole project) or `?scope=session` (the default).
fn project_scope(q: &Q) -> ApiResult<bool> {
    match q.get("scope").map(String::as_str) {
        None | Some("session") => Ok(false),
        Some("project") => Ok(true),
        Some(other) => Err(ApiError::bad_request(
            "invalid-request",
            format!("scope must be \"session\" or \"project\", not {other:?}"),
        )),
    }
}

pub async fn session_proposal(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
) -> ApiResult<Json<EgressProposal>> {
    let project = project_scope(&q)?;
    Ok(Json(api(&st)?.session_proposal(&sid, project).await?))
}

pub async fn project_proposal(State(st): State<AppState>, q: Q) -> ApiResult<Json<EgressProposal>> {
    Ok(Json(
        api(&st)?.project_proposal(q.get("root").cloned()).await?,
    ))
}

pub async fn apply(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<PolicyChange>> {
    let req: ApplyProposal = typed(body)?;
    Ok(Json(api(&st)?.apply(&sid, req).await?))
}

pub async fn review(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<ReviewOpened>> {
    Ok(Json(api(&st)?.review(&sid).await?))
}

pub async fn mode(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<EgressMode>> {
    Ok(Json(api(&st)?.mode(&sid).await?))
}

pub async fn set_mode(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<EgressMode>> {
    if body.0.get("mode").is_none() {
        return Err(ApiError::bad_request(
            "invalid-request",
            "the body needs `mode`: \"learn\", \"enforce\" or null",
        ));
    }
    let req: SetEgressMode = typed(body)?;
    Ok(Json(api(&st)?.set_mode(&sid, req).await?))
}

pub async fn suggested(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
) -> ApiResult<Json<SuggestedAdditions>> {
    let project = project_scope(&q)?;
    Ok(Json(api(&st)?.suggested(&sid, project).await?))
}

pub async fn changes(State(st): State<AppState>, q: Q) -> ApiResult<Json<PolicyChanges>> {
    Ok(Json(api(&st)?.changes(q.get("root").cloned()).await?))
}
