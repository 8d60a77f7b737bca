//! Sessions: create, list, read, change, delete, search, fork, and what a session holds.

use crate::error::ApiResult;
use crate::records::*;
use crate::wire::*;
use async_trait::async_trait;
use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CreateSession {
    pub channel: Option<String>,
    pub title: Option<String>,
    pub external_id: Option<String>,
    pub workspace_id: Option<String>,
    pub root: Option<String>,
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

#[async_trait]
pub trait SessionsApi: Send + Sync + 'static {
    async fn create(&self, req: CreateSession) -> ApiResult<SessionCreated>;
    async fn list(&self, q: SessionListQuery) -> ApiResult<SessionList>;
    async fn get(&self, sid: &str, include_queued: bool) -> ApiResult<SessionRecord>;
    /// Deletes a session; an unknown id is a 404 `session-not-found`.
    async fn delete(&self, sid: &str) -> ApiResult<()>;
    /// Rename and/or (un)star, with the events other clients need.
    async fn patch(&self, sid: &str, patch: SessionPatch) -> ApiResult<()>;
    /// Full-text search over titles and transcripts.
    async fn search(&self, q: &str) -> ApiResult<SearchResults>;
    async fn transcript(
        &self,
        sid: &str,
        limit: Option<usize>,
        offset: Option<usize>,
    ) -> ApiResult<Transcript>;
    /// The session as a Markdown document a person would want to read.
    async fn transcript_markdown(&self, sid: &str) -> ApiResult<String>;
    async fn usage(&self, sid: &str) -> ApiResult<UsageAnswer>;
    async fn model(&self, sid: &str) -> ApiResult<SessionModel>;
    /// Pins (or with `None`, clears) the session's provider and model.
    async fn set_model(&self, sid: &str, pref: Option<ModelPref>) -> ApiResult<ModelAnswer>;
    /// The slash commands the session's composer offers.
    async fn slashes(&self, sid: &str) -> ApiResult<SlashPalette>;
    async fn fork_points(&self, sid: &str) -> ApiResult<ForkPoints>;
    /// Copies the session through `req.through_turn_id` (all turns when `None`) into a new
    /// session, in a new draft when `req.draft_label` is set; returns its id.
    async fn fork(&self, sid: &str, req: ForkRequest) -> ApiResult<String>;
    /// Deletes a project's sessions (and with `recursive`, what they hold).
    async fn delete_project(&self, pid: &str, recursive: bool) -> ApiResult<ProjectDeleted>;
}
