//! Turns: the turn record and the lists built from it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A turn's lifecycle state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnStatus {
    #[default]
    Queued,
    Streaming,
    Completed,
    Failed,
    Cancelled,
    Suspended,
}

/// A file sent with a turn, byte-free.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AttachmentPreview {
    pub filename: Option<Value>,
    pub media_type: Option<Value>,
    pub size: usize,
    pub size_label: String,
}

/// Token counts of a finished turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnTokens {
    pub input: u64,
    pub input_regular: u64,
    pub cache_created: u64,
    pub cached: u64,
    pub output: u64,
    pub reasoning: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnCost {
    pub total_cost: f64,
    pub model: Option<String>,
    pub provider: Option<String>,
}

/// What a finished turn adds to its record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnOutcome {
    pub engine_turn_id: String,
    pub provider: Option<String>,
    pub llm_selected: Option<String>,
    pub llm_actual: Option<String>,
    pub is_llm_fallback: bool,
    pub llm_routing_trace: Vec<Value>,
    pub tokens: TurnTokens,
    pub cost: TurnCost,
    /// Not computed here (always `null`).
    pub confidence: Option<f64>,
    /// Not computed here (always `null`).
    pub eval: Option<Value>,
    pub iteration_count: usize,
    pub duration_ms: Option<i64>,
    pub utilization: Option<f64>,
    pub error: Option<String>,
    pub completed_at: Option<i64>,
    pub is_needs_input: bool,
}

/// A turn as the turn routes answer it (inline attachment bytes left out).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub id: String,
    pub turn_id: String,
    pub session_id: String,
    /// Always `assistant`.
    pub role: String,
    pub status: TurnStatus,
    pub request: String,
    pub created_at: i64,
    pub content: Vec<Value>,
    pub request_preview: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_default: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_request: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelling_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment_previews: Option<Vec<AttachmentPreview>>,
    /// Present once the turn is terminal.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<TurnOutcome>,
}

/// `GET /v1/sessions/:sid/turns`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnList {
    pub turns: Vec<TurnRecord>,
}

/// `GET …/turns/:tid/attachments`: the files as sent (with their bytes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnAttachments {
    pub attachments: Vec<Value>,
}

/// `GET …/trace/:engine_tid`: the iterations of one turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub iterations: Vec<Value>,
}
