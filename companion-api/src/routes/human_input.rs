//! Human-input forms and live views.

use super::path::Path;
use super::{int_param, Q};
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::wire::*;
use crate::AppState;
use axum::extract::State;
use axum::routing::{get, post};
use axum::Json;
use serde_json::{Map, Value};

/// Every route of this resource, each path once.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/sessions/{sid}/human-input", get(list))
        .route("/v1/sessions/{sid}/human-input/live", get(live_list))
        .route(
            "/v1/sessions/{sid}/human-input/live/{vid}/log/{nid}",
            get(live_log),
        )
        .route(
            "/v1/sessions/{sid}/human-input/live/{vid}/actions/focus",
            post(live_focus),
        )
        .route(
            "/v1/sessions/{sid}/human-input/live/{vid}/actions/interrupt",
            post(live_interrupt),
        )
        .route(
            "/v1/sessions/{sid}/human-input/{rid}/actions/submit",
            post(submit),
        )
        .route(
            "/v1/sessions/{sid}/human-input/{rid}/actions/cancel",
            post(cancel),
        )
}

pub async fn list(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<HumanInputList>> {
    Ok(Json(st.areas.human_input.list(&sid).await?))
}

pub async fn submit(
    State(st): State<AppState>,
    Path((sid, rid)): Path<(String, String)>,
    body: JsonBody,
) -> ApiResult<Json<HumanInputSubmitted>> {
    let b: SubmitValues = super::record(body)
        .map_err(|_| ApiError::bad_request("bad-request", "values must be an object"))?;
    Ok(Json(
        st.areas.human_input.submit(&sid, &rid, b.values).await?,
    ))
}

pub async fn cancel(
    State(st): State<AppState>,
    Path((sid, rid)): Path<(String, String)>,
) -> ApiResult<Json<HumanInputCancelled>> {
    Ok(Json(st.areas.human_input.cancel(&sid, &rid).await?))
}

pub async fn live_list(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<LiveViews>> {
    Ok(Json(st.areas.human_input.live_views(&sid).await?))
}

pub async fn live_log(
    State(st): State<AppState>,
    Path((sid, vid, nid)): Path<(String, String, String)>,
    q: Q,
) -> ApiResult<Json<LiveLog>> {
    let bad = || ApiError::bad_request("invalid-window", "from and limit must be integers");
    let from = int_param(&q, "from")
        .map_err(|_| bad())?
        .unwrap_or(0)
        .max(0) as usize;
    let limit = int_param(&q, "limit")
        .map_err(|_| bad())?
        .unwrap_or(2000)
        .clamp(0, 2000) as usize;
    Ok(Json(
        st.areas
            .human_input
            .live_log(&sid, &vid, &nid, from, limit)
            .await?,
    ))
}

pub async fn live_focus(
    State(st): State<AppState>,
    Path((sid, vid)): Path<(String, String)>,
    body: JsonBody,
) -> ApiResult<Json<LiveFocused>> {
    Ok(Json(
        st.areas.human_input.live_focus(&sid, &vid, body.0).await?,
    ))
}

pub async fn live_interrupt(
    State(st): State<AppState>,
    Path((sid, vid)): Path<(String, String)>,
    body: JsonBody,
) -> ApiResult<Json<LiveInterrupted>> {
    let b: Interrupt = super::typed_or_default(body, |_| None)?;
    let note = b.note.map(|n| n.chars().take(500).collect());
    Ok(Json(
        st.areas
            .human_input
            .live_interrupt(&sid, &vid, note)
            .await?,
    ))
}

/// `POST …/human-input/:request_id/actions/submit`.
#[derive(serde::Deserialize)]
struct SubmitValues {
    values: Map<String, Value>,
}

/// `POST …/live-views/:view_id/interrupt {note?}`.
#[derive(Default, serde::Deserialize)]
struct Interrupt {
    note: Option<String>,
}
