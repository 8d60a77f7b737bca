//! Turns: submit, read, edit, cancel, the queue, and what each iteration produced.

use crate::error::ApiResult;
use crate::records::*;
use crate::wire::*;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Attachment {
    pub filename: Option<String>,
    pub media_type: Option<String>,
    pub base64: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SubmitTurn {
    pub request: Option<Value>,
    pub display_request: Option<String>,
    pub idempotency_key: Option<String>,
    pub model: Option<String>,
    pub reasoning_default: Option<Value>,
    pub attachments: Option<Vec<Attachment>>,
    /// Members added to the provider request (a service tier, a temperature); a JSON object.
    pub extra_body: Option<Value>,
}

#[async_trait]
pub trait TurnsApi: Send + Sync + 'static {
    /// `(is_replay, TurnRecord)`: a replayed idempotency key answers 200, otherwise 202.
    async fn submit(&self, sid: &str, req: SubmitTurn) -> ApiResult<(bool, TurnRecord)>;
    async fn list(&self, sid: &str, queued_only: bool) -> ApiResult<TurnList>;
    async fn get(&self, sid: &str, tid: &str) -> ApiResult<TurnRecord>;
    async fn attachments(&self, sid: &str, tid: &str) -> ApiResult<TurnAttachments>;
    async fn edit(&self, sid: &str, tid: &str, request: Option<Value>) -> ApiResult<TurnRecord>;
    async fn delete(&self, sid: &str, tid: &str) -> ApiResult<()>;
    async fn cancel(&self, sid: &str, tid: &str) -> ApiResult<()>;
    /// Returns the cancelled turn id.
    async fn cancel_current(&self, sid: &str, idempotency_key: Option<String>)
        -> ApiResult<String>;
    async fn resume_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>>;
    async fn drain_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>>;
    async fn trace(&self, sid: &str, engine_tid: &str) -> ApiResult<Trace>;
    /// Files the session's turns produced.
    async fn artifacts(&self, sid: &str) -> ApiResult<ArtifactList>;
    async fn iteration_attachments(&self, sid: &str, iid: &str) -> ApiResult<IterationAttachments>;
    async fn iteration_attachment_bytes(
        &self,
        sid: &str,
        iid: &str,
        index: i64,
    ) -> ApiResult<StoredBytes>;
    async fn save_revision(
        &self,
        sid: &str,
        iid: &str,
        rev: NewRevision,
    ) -> ApiResult<IterationAttachment>;
}
