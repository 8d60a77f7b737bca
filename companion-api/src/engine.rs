//! The trait the HTTP surface calls. The gateway implements it; tests may too.
//!
//! Answers are the typed records of `wire` and `records` (the engine fills them); the HTTP
//! layer owns status codes, headers, ETags and SSE framing.

use crate::error::ApiResult;
use crate::records::*;
use crate::wire::*;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use crate::live::Frame;

/// What `subscription.ready` says.
#[derive(Debug, Clone)]
pub struct Ready {
    pub cursor: i64,
    pub current_turn_id: Option<String>,
    pub is_live: bool,
}

/// An atomic subscription: replay captured together with the live registration.
pub struct Subscription {
    pub session_id: String,
    pub ready: Ready,
    /// `(from, to)` when the cursor is older than what is retained.
    pub gap: Option<(i64, i64)>,
    pub replay: Vec<Frame>,
    /// The pages of the replay after `replay`, read as the client takes them (`None`: the
    /// replay is complete).
    pub rest: Option<Box<dyn crate::replay::ReplayRest>>,
    pub live: crate::live::LiveRx,
}

/// A requested cursor (`None` = not given, treated as 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor(pub i64);

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CreateSession {
    pub channel: Option<String>,
    pub title: Option<String>,
    pub external_id: Option<String>,
    pub workspace_id: Option<String>,
    pub root: Option<String>,
}

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

#[derive(Debug, Clone, Default)]
pub struct SessionListQuery {
    pub limit: Option<usize>,
    pub after: Option<(i64, i64, String)>,
    pub root: Option<String>,
    pub dirty: Vec<String>,
    /// Only this channel's sessions (`?channel=`); the gateway's internal channel is
    /// listed only when named.
    pub channel: Option<String>,
}

/// Figures for `/v1/admin/status`, `/healthz` and `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub sessions_tracked: u64,
    pub turns_running: u64,
    pub turns_executing: u64,
    pub turns_queued: u64,
    pub turns_total: u64,
    pub turns_failed_total: u64,
    pub turn_duration_ms_total: u64,
    pub tokens_input: u64,
    pub tokens_output: u64,
    pub concurrency_limit: u64,
    pub db: Option<String>,
}

/// The gateway as seen by the HTTP layer.
#[async_trait]
pub trait Engine: Send + Sync + 'static {
    /// The MCP server registry (`/v1/mcp/servers…`), when the gateway has one.
    fn mcp(&self) -> Option<std::sync::Arc<dyn crate::mcp::McpApi>> {
        None
    }
    /// Learn mode (`/v1/…/egress/proposal`, `…/egress/mode`, …), when the gateway has it.
    fn learn(&self) -> Option<std::sync::Arc<dyn crate::learn::LearnApi>> {
        None
    }
    /// Providers managed from the phone (`/v1/providers…`), when the gateway has them.
    fn providers(&self) -> Option<std::sync::Arc<dyn crate::providers::ProvidersApi>> {
        None
    }
    /// Cheap figures (read on every `/healthz`).
    async fn stats(&self) -> Stats;
    /// Stored events across sessions (for `/metrics` only; may read the store).
    async fn replay_events_retained(&self) -> u64 {
        0
    }
    /// More `/metrics` series, owned by the engine (egress, store health).
    fn metric_families(&self) -> Vec<crate::metrics::Family> {
        Vec::new()
    }

    // Sessions
    async fn create_session(&self, req: CreateSession) -> ApiResult<SessionCreated>;
    async fn list_sessions(&self, q: SessionListQuery) -> ApiResult<SessionList>;
    async fn get_session(&self, sid: &str, include_queued: bool) -> ApiResult<SessionRecord>;
    /// Deletes a session; an unknown id is a 404 `session-not-found`.
    async fn delete_session(&self, sid: &str) -> ApiResult<()>;
    async fn transcript(
        &self,
        sid: &str,
        limit: Option<usize>,
        offset: Option<usize>,
    ) -> ApiResult<Transcript>;
    async fn model(&self, sid: &str) -> ApiResult<SessionModel>;

    // Turns
    /// `(is_replay, TurnRecord)`: a replayed idempotency key answers 200, otherwise 202.
    async fn submit_turn(&self, sid: &str, req: SubmitTurn) -> ApiResult<(bool, TurnRecord)>;
    async fn list_turns(&self, sid: &str, queued_only: bool) -> ApiResult<TurnList>;
    async fn get_turn(&self, sid: &str, tid: &str) -> ApiResult<TurnRecord>;
    async fn turn_attachments(&self, sid: &str, tid: &str) -> ApiResult<TurnAttachments>;
    async fn edit_turn(
        &self,
        sid: &str,
        tid: &str,
        request: Option<Value>,
    ) -> ApiResult<TurnRecord>;
    async fn delete_turn(&self, sid: &str, tid: &str) -> ApiResult<()>;
    async fn cancel_turn(&self, sid: &str, tid: &str) -> ApiResult<()>;
    /// Returns the cancelled turn id.
    async fn cancel_current(&self, sid: &str, idempotency_key: Option<String>)
        -> ApiResult<String>;
    async fn resume_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>>;
    async fn drain_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>>;
    async fn trace(&self, sid: &str, engine_tid: &str) -> ApiResult<Trace>;

    // Events
    /// Registers a live sink atomically with the replay capture. The engine cancels `kick`
    /// when the subscriber falls 1024 frames behind; the connection then closes.
    async fn subscribe(
        &self,
        sid: &str,
        cursor: Cursor,
        kick: CancellationToken,
    ) -> ApiResult<Subscription>;
    async fn events_since(&self, sid: &str, cursor: i64) -> ApiResult<Vec<JournalEntry>>;
    async fn seq(&self, sid: &str) -> ApiResult<i64>;

    // Human input and live views
    async fn human_input(&self, sid: &str) -> ApiResult<HumanInputList>;
    async fn human_input_submit(
        &self,
        sid: &str,
        request_id: &str,
        values: serde_json::Map<String, Value>,
    ) -> ApiResult<HumanInputSubmitted>;
    async fn human_input_cancel(
        &self,
        sid: &str,
        request_id: &str,
    ) -> ApiResult<HumanInputCancelled>;
    async fn live_views(&self, sid: &str) -> ApiResult<LiveViews>;
    async fn live_log(
        &self,
        sid: &str,
        view_id: &str,
        node_id: &str,
        from: usize,
        limit: usize,
    ) -> ApiResult<LiveLog>;
    async fn live_focus(&self, sid: &str, view_id: &str, body: Value) -> ApiResult<LiveFocused>;
    async fn live_interrupt(
        &self,
        sid: &str,
        view_id: &str,
        note: Option<String>,
    ) -> ApiResult<LiveInterrupted>;

    // Palette, egress, extensions, router
    async fn slashes(&self, sid: &str) -> ApiResult<SlashPalette>;
    async fn egress(&self, sid: &str, limit: usize, before: Option<i64>) -> ApiResult<EgressPage>;
    async fn extensions(&self, root: Option<String>) -> ApiResult<ExtensionsListing>;
    /// Reloads configuration and extensions for a project (the `/reload` slash command).
    async fn reload_extensions(&self, root: Option<String>) -> ApiResult<ReloadAnswer>;

    /// The environment and working directory for a sandbox child of a session (used by
    /// `vis-gateway exec`); creates a session for `root` (with `title`, which lists it in
    /// the Companion) when no session id is given. `command` (the program's name) is reported
    /// with every egress decision of the child.
    async fn sandbox_env(
        &self,
        session_id: Option<String>,
        root: Option<String>,
        title: Option<String>,
        command: Option<String>,
    ) -> ApiResult<SandboxEnv>;

    /// Asks the process to stop (`POST /v1/admin/stop`).
    fn request_stop(&self);

    // Companion parity: typed records (`records.rs`).
    /// `PATCH /v1/sessions/:sid`: rename and/or (un)star, with the events other clients need.
    async fn patch_session(&self, sid: &str, patch: SessionPatch) -> ApiResult<()>;
    /// Full-text search over titles and transcripts.
    async fn search_sessions(&self, q: &str) -> ApiResult<SearchResults>;
    async fn session_usage(&self, sid: &str) -> ApiResult<UsageAnswer>;
    /// The session as a Markdown document a person would want to read.
    async fn transcript_markdown(&self, sid: &str) -> ApiResult<String>;
    /// Ranked files of the session's workspace matching `q` (at most 20).
    async fn suggest_files(&self, sid: &str, q: &str) -> ApiResult<Vec<FileSuggestion>>;
    /// Pins (or with `None`, clears) the session's provider and model.
    async fn set_session_model(&self, sid: &str, pref: Option<ModelPref>)
        -> ApiResult<ModelAnswer>;
    async fn router_status(&self) -> ApiResult<RouterAnswer>;
    async fn patch_router(&self, patch: RouterPatch) -> ApiResult<RouterDefaults>;
    async fn settings(&self) -> ApiResult<SettingsAnswer>;
    async fn setting(&self, id: &str) -> ApiResult<Toggle>;
    async fn set_setting(&self, id: &str, action: SettingAction) -> ApiResult<Toggle>;
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
    async fn devices(&self) -> ApiResult<DevicesAnswer>;
    async fn register_device(&self, input: DeviceInput) -> ApiResult<DeviceRegistered>;
    /// Whether a device with this raw token was registered (and is now removed).
    async fn unregister_device(&self, token: &str) -> ApiResult<bool>;
    async fn push_status(&self) -> PushStatus;
    async fn delete_project(&self, pid: &str, recursive: bool) -> ApiResult<ProjectDeleted>;
    async fn fork_points(&self, sid: &str) -> ApiResult<ForkPoints>;
    /// Copies the session through `req.through_turn_id` (all turns when `None`) into a new
    /// session, in a new draft when `req.draft_label` is set; returns its id.
    async fn fork_session(&self, sid: &str, req: ForkRequest) -> ApiResult<String>;
    /// Active drafts of the session's repository, newest first.
    async fn drafts(&self, sid: &str) -> ApiResult<Vec<WorkspaceDraft>>;
    /// Parks any current draft, makes a new one from trunk and enters it.
    async fn create_draft(&self, sid: &str, label: &str, clean: bool)
        -> ApiResult<WorkspaceChange>;
    /// Parks any current draft, then enters `workspace_id`.
    async fn resume_draft(&self, sid: &str, workspace_id: &str) -> ApiResult<WorkspaceChange>;
    /// Returns to trunk keeping the draft (a no-op on trunk).
    async fn stash_draft(&self, sid: &str) -> ApiResult<WorkspaceChange>;
    /// Discards a current or parked draft for good.
    async fn abandon_draft(
        &self,
        sid: &str,
        workspace_id: &str,
        reason: Option<String>,
    ) -> ApiResult<WorkspaceChange>;
}
