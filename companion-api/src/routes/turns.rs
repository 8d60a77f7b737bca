//! Turn routes: submit, list, read, edit, delete, cancel, the queue, trace.

use super::path::Path;
use super::Q;
use crate::areas::SubmitTurn;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::wire::{Trace, TurnAttachments, TurnList, TurnRecord};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde_json::{json, Value};

/// Every route of this resource, each path once.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/sessions/{sid}/turns", get(list).post(submit))
        .route(
            "/v1/sessions/{sid}/turns/{tid}",
            get(get_one).patch(edit).delete(delete),
        )
        .route("/v1/sessions/{sid}/turns/{tid}/cancel", post(cancel))
        .route("/v1/sessions/{sid}/turns/{tid}/trace", get(trace))
        .route(
            "/v1/sessions/{sid}/turns/{tid}/attachments",
            get(attachments),
        )
        .route("/v1/sessions/{sid}/cancel-current", post(cancel_current))
        .route("/v1/sessions/{sid}/resume-queue", post(resume_queue))
        .route("/v1/sessions/{sid}/drain-queue", post(drain_queue))
}

pub async fn submit(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let req: SubmitTurn = super::typed_or_default(body, |_| None)?;
    let blank = !matches!(&req.request, Some(Value::String(s)) if !s.trim().is_empty());
    if blank {
        return Err(ApiError::bad_request(
            "invalid-request",
            "request must be a non-blank string",
        ));
    }
    if req
        .extra_body
        .as_ref()
        .is_some_and(|v| !v.is_object() && !v.is_null())
    {
        return Err(ApiError::bad_request(
            "invalid-request",
            "extra_body must be a JSON object (members added to the provider request)",
        ));
    }
    let (replay, rec) = st.areas.turns.submit(&sid, req).await?;
    let code = if replay {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((code, Json(rec)).into_response())
}

pub async fn list(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
) -> ApiResult<Json<TurnList>> {
    let queued = q.get("status").is_some_and(|s| s == "queued");
    Ok(Json(st.areas.turns.list(&sid, queued).await?))
}

pub async fn get_one(
    State(st): State<AppState>,
    Path((sid, tid)): Path<(String, String)>,
) -> ApiResult<Json<TurnRecord>> {
    Ok(Json(st.areas.turns.get(&sid, &tid).await?))
}

pub async fn attachments(
    State(st): State<AppState>,
    Path((sid, tid)): Path<(String, String)>,
) -> ApiResult<Json<TurnAttachments>> {
    Ok(Json(st.areas.turns.attachments(&sid, &tid).await?))
}

pub async fn edit(
    State(st): State<AppState>,
    Path((sid, tid)): Path<(String, String)>,
    body: JsonBody,
) -> ApiResult<Json<TurnRecord>> {
    let b: EditTurn = super::typed_or_default(body, |_| None)?;
    Ok(Json(st.areas.turns.edit(&sid, &tid, b.request).await?))
}

pub async fn delete(
    State(st): State<AppState>,
    Path((sid, tid)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    st.areas.turns.delete(&sid, &tid).await?;
    Ok(Json(json!({"status": "deleted"})))
}

pub async fn cancel(
    State(st): State<AppState>,
    Path((sid, tid)): Path<(String, String)>,
) -> ApiResult<Response> {
    st.areas.turns.cancel(&sid, &tid).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"status": "cancelling"}))).into_response())
}

pub async fn cancel_current(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let b: CancelCurrent = super::typed_or_default(body, |_| None)?;
    let tid = st
        .areas
        .turns
        .cancel_current(&sid, b.idempotency_key)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"status": "cancelling", "turn_id": tid})),
    )
        .into_response())
}

pub async fn resume_queue(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"turn": st.areas.turns.resume_queue(&sid).await?}),
    ))
}

pub async fn drain_queue(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"turn": st.areas.turns.drain_queue(&sid).await?}),
    ))
}

pub async fn trace(
    State(st): State<AppState>,
    Path((sid, tid)): Path<(String, String)>,
) -> ApiResult<Json<Trace>> {
    Ok(Json(st.areas.turns.trace(&sid, &tid).await?))
}

/// `PATCH …/turns/:turn_id {request}` (the engine says what a usable request is).
#[derive(Default, serde::Deserialize)]
struct EditTurn {
    request: Option<Value>,
}

/// `POST …/cancel-current {idempotency_key}`.
#[derive(Default, serde::Deserialize)]
struct CancelCurrent {
    idempotency_key: Option<String>,
}
