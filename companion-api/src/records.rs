//! Typed wire records of the Companion routes added for the app's parity (search, usage,
//! file suggestions, attachments and artifacts, devices, settings, router, projects, forks).
//! Field names are the wire's (snake_case); the app's TypeScript types are the contract.

use serde::{Deserialize, Serialize};

/// `PATCH /v1/sessions/:sid` — the fields a client may change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionPatch {
    pub title: Option<String>,
    pub is_favorite: Option<bool>,
}

/// Which side of a turn a search hit landed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HitSide {
    Title,
    Request,
    Reply,
    Thinking,
}

impl HitSide {
    /// The relevance band: 0 title, 1 the user's words, 2 the answer, 3 the thinking.
    pub fn band(self) -> u8 {
        match self {
            HitSide::Title => 0,
            HitSide::Request => 1,
            HitSide::Reply => 2,
            HitSide::Thinking => 3,
        }
    }
}

/// One search hit inside a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub side: HitSide,
    pub snippet: String,
    /// When the hit's turn (or the session, for a title) was created, epoch ms.
    pub at: Option<i64>,
    /// The gateway turn id (absent for a title hit).
    pub turn_id: Option<String>,
    /// 1-based position of the turn in the session (absent for a title hit).
    pub turn: Option<i64>,
}

/// One matching session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMatch {
    pub session_id: String,
    pub rank: u8,
    pub is_in_title: bool,
    pub is_in_request: bool,
    pub is_in_reply: bool,
    pub is_in_thinking: bool,
    pub request_snippet: Option<String>,
    pub reply_snippet: Option<String>,
    pub hits: Vec<SearchHit>,
}

/// `GET /v1/sessions/actions/search`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchResults {
    pub session_ids: Vec<String>,
    pub matches: Vec<SessionMatch>,
}

/// Tokens and time of one turn, as the provider reported them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnUsage {
    pub turn_id: String,
    pub turn: i64,
    pub status: String,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub iteration_count: u64,
    pub tool_call_count: u64,
    pub input_tokens: u64,
    pub input_regular_tokens: u64,
    pub input_cache_write_tokens: u64,
    pub input_cache_read_tokens: u64,
    pub output_tokens: u64,
    pub output_reasoning_tokens: u64,
    /// `null`: the two wire dialects spoken here report tokens, not prices.
    pub cost_usd: Option<f64>,
    pub duration_ms: Option<i64>,
    pub created_at: i64,
    /// The turn's last model request: its estimated tokens and the model's context window.
    #[serde(default)]
    pub context_tokens: Option<u64>,
    #[serde(default)]
    pub context_window: Option<u64>,
}

/// `GET /v1/sessions/:sid/usage` — the whole-life rollup plus the per-turn rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionUsage {
    pub turn_count: u64,
    pub iteration_count: u64,
    pub tool_call_count: u64,
    pub fold_count: u64,
    pub input_tokens: u64,
    pub input_regular_tokens: u64,
    pub input_cache_write_tokens: u64,
    pub input_cache_read_tokens: u64,
    pub output_tokens: u64,
    pub output_reasoning_tokens: u64,
    pub cache_hit_rate: f64,
    pub cost_usd: Option<f64>,
    pub duration_ms: i64,
    pub first_turn_at: Option<i64>,
    pub last_turn_at: Option<i64>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// How full the model's context window is: the newest model turn's last request
    /// against its window (0–1), with both numbers.
    #[serde(default)]
    pub context_utilization: Option<f64>,
    #[serde(default)]
    pub context_tokens: Option<u64>,
    #[serde(default)]
    pub context_window: Option<u64>,
    pub turns: Vec<TurnUsage>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageAnswer {
    pub usage: Option<SessionUsage>,
}

/// One ranked file of `GET …/suggest?kind=file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSuggestion {
    /// Path relative to the session's workspace.
    pub name: String,
    pub size: String,
    pub age: String,
    /// Git status letter (`M`, `A`, `?`, …) or empty.
    pub status: String,
}

/// A folder, as `GET /v1/fs` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrowseEntry {
    pub name: String,
    pub path: String,
    pub entry_count: u64,
    pub is_repo: bool,
    pub branch: Option<String>,
}

/// A session's model pin (`{provider, model}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelPref {
    pub provider: String,
    pub model: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelAnswer {
    pub model: Option<ModelPref>,
}

/// `PATCH /v1/router` body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RouterPatch {
    /// `primary` (default) or `fallback`.
    pub role: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
}

/// `PATCH /v1/router` answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouterDefaults {
    pub default_provider: Option<String>,
    pub default_model: Option<String>,
    pub fallback_provider: Option<String>,
    pub fallback_model: Option<String>,
}

/// A provider's credential state as the app paints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderStatus {
    pub is_authenticated: bool,
    /// `verified`, `rejected`, `degraded` or `unverified`.
    pub auth_state: String,
    pub detail: Option<String>,
    pub label: Option<String>,
    /// Where the credential came from: `env-var`, `config`, …
    pub source: Option<String>,
    pub error: Option<String>,
}

/// One row of `GET /v1/router`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouterProvider {
    pub id: String,
    pub label: String,
    pub base_url: Option<String>,
    pub api_style: String,
    pub models: Vec<String>,
    pub is_default: bool,
    pub default_model: Option<String>,
    pub is_fallback: bool,
    pub fallback_model: Option<String>,
    pub status: ProviderStatus,
    pub limits: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouterAnswer {
    pub providers: Vec<RouterProvider>,
}

/// One settings toggle (`type` is `boolean` or `enum`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Toggle {
    pub id: String,
    pub label: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub description: Option<String>,
    pub enabled: Option<bool>,
    pub value: Option<String>,
    pub choices: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToggleGroup {
    pub id: String,
    pub title: String,
    pub toggles: Vec<Toggle>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SettingsAnswer {
    pub groups: Vec<ToggleGroup>,
}

/// `POST /v1/settings` body.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingAction {
    Toggle,
    Cycle,
    Value(String),
}

/// A produced file (or a human's revision of one), byte-free.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationAttachment {
    pub index: i64,
    pub iteration_id: String,
    pub tool_call_id: Option<String>,
    /// `file` (written in the workspace by a tool) or `revision` (saved by a person).
    pub kind: String,
    pub media_type: String,
    pub filename: String,
    pub version: i64,
    pub size: i64,
    /// 1-based turn of the session that produced it.
    pub turn: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArtifactList {
    pub artifacts: Vec<IterationAttachment>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationAttachments {
    pub attachments: Vec<IterationAttachment>,
}

/// Raw bytes of a stored attachment.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredBytes {
    pub media_type: String,
    pub filename: String,
    pub bytes: Vec<u8>,
}

/// `POST …/iterations/:iid/attachments` body, decoded and checked by the route.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRevision {
    pub filename: String,
    pub media_type: String,
    pub bytes: Vec<u8>,
}

/// `POST /v1/devices` body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DeviceInput {
    pub token: Option<String>,
    pub grant: Option<String>,
    pub relay_url: Option<String>,
    pub platform: Option<String>,
    pub environment: Option<String>,
    pub client: Option<String>,
    pub client_version: Option<String>,
    pub label: Option<String>,
    pub bundle_id: Option<String>,
}

/// One registered device; the raw token never leaves the gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushDevice {
    pub token_preview: String,
    pub platform: Option<String>,
    pub environment: Option<String>,
    pub client: Option<String>,
    pub client_version: Option<String>,
    pub label: Option<String>,
    pub bundle_id: Option<String>,
    pub relay_url: Option<String>,
    pub is_relayed: bool,
    pub registered_at: i64,
    pub last_seen: i64,
}

/// One push channel's availability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushChannel {
    pub is_available: bool,
    pub missing: Vec<String>,
}

/// Whether this gateway can deliver a push at all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushStatus {
    pub is_available: bool,
    pub provider: String,
    pub is_delivered: bool,
    pub detail: String,
    pub missing: Vec<String>,
    pub apns: PushChannel,
    pub fcm: PushChannel,
    pub web_push: PushChannel,
    pub relay: PushChannel,
    pub devices: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DevicesAnswer {
    pub devices: Vec<PushDevice>,
    pub push: PushStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceRegistered {
    pub device: PushDevice,
    pub push: PushStatus,
}

/// `DELETE /v1/projects/:pid?is_recursive=true`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectDeleted {
    pub project_id: String,
    pub deleted_session_ids: Vec<String>,
    pub session_count: u64,
}

/// One turn a fork can be cut at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkPoint {
    pub turn_id: String,
    pub request: Option<String>,
    pub created_at: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ForkPoints {
    pub turns: Vec<ForkPoint>,
    /// The sessions forked from this one, oldest first.
    #[serde(default)]
    pub forks: Vec<ForkChild>,
}

/// One fork of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkChild {
    pub session_id: String,
    pub title: Option<String>,
    /// The last turn of the parent the fork kept.
    pub through_turn_id: Option<String>,
    pub created_at: i64,
}

/// `POST /v1/sessions/:sid/forks`: where to cut and, optionally, a new draft to start in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ForkRequest {
    pub through_turn_id: Option<String>,
    /// Label of a new draft the fork starts in (its own isolated workspace).
    pub draft_label: Option<String>,
}

/// One draft of a repository, as `GET …/workspace/drafts` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceDraft {
    pub workspace_id: String,
    pub label: String,
    pub root: String,
    pub repo_root: String,
    pub fork_ms: i64,
    pub is_current: bool,
    /// `git` (a worktree on its own branch) or `copy`.
    pub backend: String,
    pub branch: Option<String>,
}

/// Where a session's tools run: trunk (its real folder) or a draft.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionWorkspace {
    pub root: String,
    pub repo_root: Option<String>,
    pub label: String,
    pub fork_ms: Option<i64>,
    pub is_draft: bool,
    pub workspace_id: Option<String>,
}

/// The answer of a workspace change (create, resume, stash, abandon).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceChange {
    pub workspace: SessionWorkspace,
    /// The draft the change was about.
    pub draft: Option<WorkspaceDraft>,
}
