//! The turns area of the Companion boundary, on the turn engine.

use super::GatewayAreas;
use crate::engine::lifecycle::TurnRequestError;
use async_trait::async_trait;
use serde_json::Value;
use vis_companion_api::records::*;
use vis_companion_api::wire::*;
use vis_companion_api::{ApiError, ApiResult, SubmitTurn, TurnsApi};

#[async_trait]
impl TurnsApi for GatewayAreas {
    async fn submit(&self, sid: &str, req: SubmitTurn) -> ApiResult<(bool, TurnRecord)> {
        Ok(self.0.turns.submit(sid, req).await?)
    }

    async fn list(&self, sid: &str, queued_only: bool) -> ApiResult<TurnList> {
        if queued_only {
            let shared = self.0.sessions.get(sid).await?;
            let st = shared.lock();
            let turns = st.queue.iter().map(|q| q.record()).collect();
            return Ok(TurnList { turns });
        }
        let turns = self.0.sessions.turns(sid).await?;
        Ok(TurnList {
            turns: turns.iter().map(|t| t.record()).collect(),
        })
    }

    async fn get(&self, sid: &str, tid: &str) -> ApiResult<TurnRecord> {
        Ok(self.0.turns.turn_record(sid, tid).await?)
    }

    async fn attachments(&self, sid: &str, tid: &str) -> ApiResult<TurnAttachments> {
        let t = self.0.sessions.turn(sid, tid).await?;
        Ok(TurnAttachments {
            attachments: t.attachments,
        })
    }

    async fn edit(&self, sid: &str, tid: &str, request: Option<Value>) -> ApiResult<TurnRecord> {
        Ok(self.0.turns.edit(sid, tid, request).await?)
    }

    async fn delete(&self, sid: &str, tid: &str) -> ApiResult<()> {
        Ok(self.0.turns.delete_queued(sid, tid).await?)
    }

    async fn cancel(&self, sid: &str, tid: &str) -> ApiResult<()> {
        Ok(self.0.turns.cancel(sid, tid).await?)
    }

    async fn cancel_current(&self, sid: &str, key: Option<String>) -> ApiResult<String> {
        Ok(self.0.turns.cancel_current(sid, key).await?)
    }

    async fn resume_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>> {
        Ok(self.0.turns.resume_queue(sid).await?)
    }

    async fn drain_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>> {
        Ok(self.0.turns.drain_queue(sid).await?)
    }

    async fn trace(&self, sid: &str, engine_tid: &str) -> ApiResult<Trace> {
        if uuid::Uuid::parse_str(sid).is_err() {
            return Err(ApiError::session_not_found(sid));
        }
        let turns = self.0.sessions.turns(sid).await.unwrap_or_default();
        let iterations = turns
            .into_iter()
            .find(|t| t.tid == engine_tid || t.engine_turn_id == engine_tid)
            .map(|t| t.iterations)
            .unwrap_or_default();
        Ok(Trace { iterations })
    }

    async fn artifacts(&self, sid: &str) -> ApiResult<ArtifactList> {
        Ok(self.0.companion.artifacts().list(sid).await?)
    }

    async fn iteration_attachments(&self, sid: &str, iid: &str) -> ApiResult<IterationAttachments> {
        Ok(self.0.companion.artifacts().of_iteration(sid, iid).await?)
    }

    async fn iteration_attachment_bytes(
        &self,
        sid: &str,
        iid: &str,
        index: i64,
    ) -> ApiResult<StoredBytes> {
        Ok(self.0.companion.artifacts().bytes(sid, iid, index).await?)
    }

    async fn save_revision(
        &self,
        sid: &str,
        iid: &str,
        rev: NewRevision,
    ) -> ApiResult<IterationAttachment> {
        Ok(self
            .0
            .companion
            .artifacts()
            .save_revision(sid, iid, rev)
            .await?)
    }
}

/// A refused request on a session's turns on the wire.
impl From<TurnRequestError> for ApiError {
    fn from(e: TurnRequestError) -> ApiError {
        match e {
            TurnRequestError::Turn(e) => e.into(),
            TurnRequestError::Session(e) => e.into(),
            TurnRequestError::Attachment(e) => e.into(),
        }
    }
}

/// The turn engine's refusals on the wire (one place for the turns area).
impl From<crate::engine::turn_machine::TurnError> for ApiError {
    fn from(e: crate::engine::turn_machine::TurnError) -> ApiError {
        use crate::engine::turn_machine::TurnError as E;
        let message = e.to_string();
        match e {
            E::BlankRequest => ApiError::bad_request("invalid-request", message),
            E::BlankEdit => ApiError::conflict("invalid-request", message),
            E::NoRunningTurn => ApiError::conflict("no-running-turn", message),
            E::NotOwner { tid } => ApiError::conflict("not-owner", message).with("turn_id", tid),
            E::NotRunning { tid, status } => ApiError::conflict("not-running", message)
                .with("turn_id", tid)
                .with("turn_status", status),
            E::NotQueued { tid, status } => ApiError::conflict("not-queued", message)
                .with("turn_id", tid)
                .with("turn_status", status),
        }
    }
}
