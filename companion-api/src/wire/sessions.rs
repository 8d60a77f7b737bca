//! Sessions: the created answer, the session record ("Soul"), the list and its overview, the
//! transcript.

use super::turns::TurnRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/sessions` answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionCreated {
    pub id: String,
    pub channel: String,
    pub title: Option<String>,
    pub external_id: Option<String>,
    pub workspace_id: Option<String>,
}

/// Where a session stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    #[default]
    Idle,
    Running,
    Suspended,
}

/// One session as `GET /v1/sessions/:sid` and the session list show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: String,
    pub channel: String,
    pub title: Option<String>,
    pub external_id: Option<String>,
    pub owner_id: Option<String>,
    /// The model a new turn would use.
    pub model: Option<String>,
    pub created_at: i64,
    pub modified_at: Option<i64>,
    pub last_active_at: i64,
    pub turn_count: i64,
    pub project_id: String,
    pub project_name: String,
    pub project_position: Option<i64>,
    pub favorite_rank: Option<i64>,
    pub status: SessionStatus,
    pub live: bool,
    pub is_awaiting_input: bool,
    pub current_turn_id: Option<String>,
    pub server_time_ms: i64,
    /// The session's pinned provider and model, as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_pref: Option<Value>,
    /// Preview of the running turn's request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_request: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_started_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_request: Option<String>,
    /// Where the session's tools run: its real folder (trunk) or a draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<crate::records::SessionWorkspace>,
    /// With `?include=queued` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_turns: Option<Vec<TurnRecord>>,
}

/// One project of the session list's overview.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectOverview {
    pub root: String,
    pub project_id: String,
    pub name: String,
    pub session_count: usize,
    pub live_count: usize,
    pub awaiting_count: usize,
    pub last_activity_ms: i64,
}

/// Counts over every listed session (first page only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub projects: Vec<ProjectOverview>,
    pub project_count: usize,
    pub session_count: usize,
    pub live_count: usize,
    pub awaiting_count: usize,
    pub server_time_ms: i64,
}

/// `GET /v1/sessions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionList {
    pub sessions: Vec<SessionRecord>,
    /// Always empty here: no session waits on the phone in a list sense.
    pub awaiting: Vec<String>,
    pub root: Option<String>,
    pub total: usize,
    pub limit: Option<usize>,
    pub after: Option<String>,
    pub next_cursor: Option<String>,
    pub has_more: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overview: Option<Overview>,
}

/// `GET /v1/sessions/:sid/model`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionModel {
    /// The stored pin, as stored.
    pub model: Option<Value>,
}

/// One turn of the transcript, under its engine id, with the engine's raw status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TranscriptRow {
    pub id: String,
    pub user_request: String,
    /// `running`, `success`, `error` or `interrupted`.
    pub status: String,
    pub content: Vec<Value>,
    pub iterations: Vec<Value>,
    pub created_at: i64,
    pub duration_ms: Option<i64>,
    pub iteration_count: usize,
    pub input_tokens: u64,
    pub input_regular_tokens: u64,
    pub input_cache_write_tokens: u64,
    pub input_cache_read_tokens: u64,
    pub output_tokens: u64,
    pub output_reasoning_tokens: u64,
    pub total_cost: f64,
    pub model: Option<String>,
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Value>,
}

/// `GET /v1/sessions/:sid/transcript`: a window of rows, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    pub turns: Vec<TranscriptRow>,
    pub total: usize,
    pub offset: usize,
    pub has_more: bool,
}
