//! The data each [`Event`](super::Event) carries: the members of its JSON object.

use crate::wire::TurnStatus;
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnQueued {
    pub turn_id: String,
    pub request: String,
    pub request_preview: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_request: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnQueuedUpdated {
    pub turn_id: String,
    pub request: String,
    pub request_preview: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnQueuedDeleted {
    pub turn_id: String,
    /// With `reason`, when a cancel cleared the queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnRef {
    pub turn_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnStarted {
    pub turn_id: String,
    /// What the person typed (the display request when there is one).
    pub request: String,
    pub display_request: Option<String>,
    pub started_at: i64,
    /// Only `true`, when the turn came off the queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_queued: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<Value>>,
}

/// A turn's terminal event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnSettled {
    pub turn_id: String,
    pub status: TurnStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Completed: the prose and speech blocks; failed: every block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Value>>,
    /// Failed only (present, possibly `null`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Option<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextUpdated {
    pub turn_id: String,
    pub utilization: Option<f64>,
}

/// A compaction: the summary that replaces the session's older part in later requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextCompacted {
    pub turn_id: String,
    /// `auto` (the request would have passed the threshold), `manual` (`/compact`) or
    /// `overflow` (the provider refused a request as too long).
    pub trigger: String,
    pub summary: String,
    /// Settled turns the summary replaces (the session's older part).
    pub folded_turns: usize,
    /// Estimated tokens of the request before and after.
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// The model's context window.
    pub window: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueuePaused {
    pub reason: String,
    /// Turns held in the queue.
    pub held: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueResumed {
    pub is_auto: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TitleUpdated {
    /// Set on the copies sent to the other sessions' streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub titled_session_id: Option<String>,
    pub title: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FavoriteUpdated {
    pub favorite_rank: Option<i64>,
    pub is_favorite: bool,
    /// Set on the copies sent to the other sessions' streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub favorite_session_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelUpdated {
    pub provider: String,
    pub model: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockStartedData {
    pub turn_id: String,
    /// The content block as it starts (empty text).
    pub block: Value,
    pub iteration: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockDelta {
    pub turn_id: String,
    pub block_id: String,
    pub field: String,
    pub text: String,
    pub cumulative: String,
    pub iteration: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockCompleted {
    pub turn_id: String,
    pub block_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockPreview {
    pub turn_id: String,
    pub block_id: String,
    pub code: String,
    pub display_code: String,
    pub op: String,
    pub tool_call_id: String,
    pub iteration: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IterationErrorData {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    pub status: Option<u16>,
    pub cause_class: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IterationError {
    pub turn_id: String,
    pub iteration: usize,
    pub error: String,
    pub thinking: String,
    pub error_data: IterationErrorData,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IterationCompleted {
    pub turn_id: String,
    pub iteration: usize,
    pub done: bool,
    pub thinking: String,
    pub assistant_prose: String,
    /// Files the iteration produced.
    pub attachments: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderRetry {
    pub turn_id: String,
    pub iteration: usize,
    pub attempt: u32,
    pub max_retries: u32,
    pub delay_ms: u64,
    pub error: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderFallback {
    pub turn_id: String,
    pub detail: String,
    pub provider: String,
    pub model: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlashChunk {
    pub turn_id: String,
    pub iteration: usize,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HumanInputRequest {
    /// The form as the request list shows it.
    pub request: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HumanInputClose {
    pub request_id: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveOpen {
    pub view_id: String,
    pub view: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LivePatchOps {
    pub view_id: String,
    pub seq: u64,
    pub ops: Vec<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LivePatch {
    pub view_id: String,
    pub first_seq: u64,
    pub patch: LivePatchOps,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveClose {
    pub view_id: String,
    pub result: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notification {
    pub id: String,
    pub text: String,
    pub level: String,
    pub created_at: i64,
    /// When the app stops showing it, epoch ms.
    pub until: i64,
    pub extension: String,
}

/// A provider was added, replaced, removed or signed in from a client (never a key).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProvidersUpdated {
    /// `added`, `replaced`, `removed` or `signed-in`.
    pub change: String,
    pub provider_id: String,
}

/// An MCP server was saved, enabled, disabled, removed, started, killed, signed in or out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpServersUpdated {
    pub change: String,
    pub server: String,
}

/// The session moved into, out of or between drafts, or applied one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkspaceUpdated {
    pub session_id: String,
    /// `created`, `applied`, `stashed`, `resumed` or `abandoned`.
    pub action: String,
    pub workspace: crate::records::SessionWorkspace,
    pub draft: Option<crate::records::WorkspaceDraft>,
}

/// A new session was forked from this one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forked {
    pub session_id: String,
    pub fork_session_id: String,
    pub through_turn_id: String,
    pub created_at: i64,
}
