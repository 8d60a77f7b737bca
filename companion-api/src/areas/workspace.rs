//! Where a session works: its drafts, the files it can mention, and the folders a person
//! browses to start a session.

use crate::error::ApiResult;
use crate::records::*;

use async_trait::async_trait;
use serde::Serialize;

/// A folder listing (`GET /v1/fs`): sub-folders only, no dot-folders.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FolderListing {
    pub path: String,
    pub parent: Option<String>,
    pub home: String,
    pub is_truncated: bool,
    pub entries: Vec<BrowseEntry>,
}

/// One draft with what it holds on disk (`GET …/workspace/draft-sizes`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DraftSize {
    pub workspace_id: String,
    pub label: String,
    pub is_current: bool,
    /// Bytes of the regular files under the draft's folder (symbolic links not followed).
    pub bytes: u64,
    pub files: u64,
}

/// The drafts of a session's repository with their sizes, largest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DraftSizes {
    pub drafts: Vec<DraftSize>,
    pub total_bytes: u64,
}

#[async_trait]
pub trait WorkspaceApi: Send + Sync + 'static {
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
    /// Ranked files of the session's workspace matching `q` (at most 20).
    async fn suggest_files(&self, sid: &str, q: &str) -> ApiResult<Vec<FileSuggestion>>;
    /// The drafts of the session's repository with their sizes on disk. (A new method has a
    /// default answer, so every other implementation and fake keeps compiling.)
    async fn draft_sizes(&self, sid: &str) -> ApiResult<DraftSizes> {
        Err(crate::ApiError::new(
            axum::http::StatusCode::NOT_IMPLEMENTED,
            "not-implemented",
            format!("draft sizes are not available for session {sid} on this gateway"),
        ))
    }
    /// The sub-folders of `path` (default: the gateway user's home), at most 400.
    async fn folders(&self, path: Option<String>) -> ApiResult<FolderListing>;
    /// Makes the folder `name` in `path` (absolute or `~…`).
    async fn make_folder(&self, path: &str, name: &str) -> ApiResult<BrowseEntry>;
}
