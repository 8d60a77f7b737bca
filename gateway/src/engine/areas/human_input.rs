//! The human-input area of the Companion boundary: forms a turn waits on and live views.

use super::GatewayAreas;
use async_trait::async_trait;
use axum::http::StatusCode;
use serde_json::{Map, Value};
use vis_companion_api::wire::*;
use vis_companion_api::{ApiError, ApiResult, HumanInputApi};

fn human_input_not_found(rid: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "human-input-not-found",
        format!("no pending request {rid}"),
    )
    .with("request_id", rid)
}

fn live_view_not_found(vid: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "live-view-not-found",
        format!("no live view {vid}"),
    )
    .with("view_id", vid)
}

/// Human-input errors as API errors (`id`: the request or view id of the route).
fn hi_error(e: crate::human_input::HiError, id: &str) -> ApiError {
    use crate::human_input::HiError;
    match e {
        HiError::RequestNotFound => human_input_not_found(id),
        HiError::ViewNotFound => live_view_not_found(id),
        HiError::NotCancellable => ApiError::new(
            StatusCode::CONFLICT,
            "human-input-not-cancellable",
            format!("request {id} cannot be cancelled"),
        )
        .with("request_id", id),
        HiError::InvalidFocus(m) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid-live-focus", m).with("view_id", id)
        }
    }
}

#[async_trait]
impl HumanInputApi for GatewayAreas {
    async fn list(&self, sid: &str) -> ApiResult<HumanInputList> {
        self.0.sessions.get(sid).await?;
        Ok(self.0.human_input.list(sid))
    }

    async fn submit(
        &self,
        sid: &str,
        rid: &str,
        values: Map<String, Value>,
    ) -> ApiResult<HumanInputSubmitted> {
        self.0.sessions.get(sid).await?;
        self.0
            .human_input
            .submit(sid, rid, values)
            .await
            .map_err(|e| hi_error(e, rid))
    }

    async fn cancel(&self, sid: &str, rid: &str) -> ApiResult<HumanInputCancelled> {
        self.0.sessions.get(sid).await?;
        self.0
            .human_input
            .cancel(sid, rid)
            .map_err(|e| hi_error(e, rid))
    }

    async fn live_views(&self, sid: &str) -> ApiResult<LiveViews> {
        self.0.sessions.get(sid).await?;
        Ok(self.0.human_input.live_views(sid))
    }

    async fn live_log(
        &self,
        sid: &str,
        vid: &str,
        nid: &str,
        from: usize,
        limit: usize,
    ) -> ApiResult<LiveLog> {
        if uuid::Uuid::parse_str(vid).is_err() {
            return Err(live_view_not_found(vid));
        }
        self.0
            .human_input
            .live_log(sid, vid, nid, from, limit)
            .map_err(|e| hi_error(e, vid))
    }

    async fn live_focus(&self, sid: &str, vid: &str, body: Value) -> ApiResult<LiveFocused> {
        if uuid::Uuid::parse_str(vid).is_err() {
            return Err(live_view_not_found(vid));
        }
        self.0
            .human_input
            .live_focus(sid, vid, &body)
            .map_err(|e| hi_error(e, vid))
    }

    async fn live_interrupt(
        &self,
        sid: &str,
        vid: &str,
        note: Option<String>,
    ) -> ApiResult<LiveInterrupted> {
        if uuid::Uuid::parse_str(vid).is_err() {
            return Err(live_view_not_found(vid));
        }
        self.0
            .human_input
            .live_interrupt(sid, vid, note)
            .map_err(|e| hi_error(e, vid))
    }
}
