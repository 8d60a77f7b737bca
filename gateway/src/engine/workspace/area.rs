//! The workspace area of the Companion boundary: the draft routes (`…/workspace/drafts`,
//! `…/resume`, `…/stash`, `…/abandon`), which refuse while a turn runs or waits and switch
//! without a separate step (the session's current draft is stashed first); `@file`
//! suggestions; and the folder browser. The one place where the workspace job's errors and
//! the draft errors become statuses and bodies.

use super::error::{WorkspaceError, WorkspaceResult};
use super::{draft_item, Workspaces};
use crate::drafts::service::Target;
use crate::drafts::{Draft, DraftError};
use async_trait::async_trait;
use axum::http::StatusCode;
use serde_json::json;
use std::path::Path;
use vis_companion_api::records::{BrowseEntry, FileSuggestion, WorkspaceChange, WorkspaceDraft};
use vis_companion_api::{ApiError, ApiResult, DraftSize, DraftSizes, FolderListing, WorkspaceApi};

impl Workspaces {
    /// Refuses a route's workspace change while a turn runs or waits (its tools would
    /// change folders under it).
    fn ensure_idle(&self, sid: &str) -> WorkspaceResult<()> {
        if let Some(s) = self.sessions.loaded(sid) {
            let st = s.lock();
            if st.running.is_some() || !st.queue.is_empty() {
                return Err(WorkspaceError::Busy);
            }
        }
        Ok(())
    }

    /// The drafts of the session's repository and the id of the one the session is in.
    async fn listed(&self, sid: &str) -> WorkspaceResult<(Vec<Draft>, Option<String>)> {
        let trunk = self.trunk(sid).await?;
        let current = self.drafts.current(sid).map(|d| d.workspace_id);
        let list = self.drafts.list(Path::new(&trunk)).await?;
        Ok((list, current))
    }

    /// Parks the session's current draft, if any (the routes switch without a separate step).
    async fn park(&self, sid: &str) -> WorkspaceResult<()> {
        if self.drafts.current(sid).is_some() {
            self.stash(sid).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl WorkspaceApi for Workspaces {
    /// The drafts of the session's repository (`GET …/workspace/drafts`).
    async fn drafts(&self, sid: &str) -> ApiResult<Vec<WorkspaceDraft>> {
        let (list, current) = self.listed(sid).await?;
        Ok(list
            .iter()
            .map(|d| draft_item(d, current.as_deref()))
            .collect())
    }

    /// Creates a draft and moves the session into it (`POST …/workspace/drafts`).
    async fn create_draft(
        &self,
        sid: &str,
        label: &str,
        clean: bool,
    ) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        crate::drafts::check_label(label)?;
        self.park(sid).await?;
        Ok(self.create(sid, label, clean).await?)
    }

    /// Moves the session into a parked draft; already there is not an error
    /// (`POST …/workspace/resume`).
    async fn resume_draft(&self, sid: &str, id: &str) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        if self
            .drafts
            .current(sid)
            .is_some_and(|d| d.workspace_id == id)
        {
            let trunk = self.trunk(sid).await?;
            let d = self.drafts.current(sid);
            return Ok(WorkspaceChange {
                workspace: self.view(sid, &trunk),
                draft: d.map(|d| draft_item(&d, Some(id))),
            });
        }
        self.park(sid).await?;
        Ok(self.resume(sid, Target::Id(id.to_string())).await?)
    }

    /// Parks the session's draft; on trunk it is a no-op (`POST …/workspace/stash`).
    async fn stash_draft(&self, sid: &str) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        let trunk = self.trunk(sid).await?;
        if self.drafts.current(sid).is_none() {
            return Ok(WorkspaceChange {
                workspace: self.view(sid, &trunk),
                draft: None,
            });
        }
        Ok(self.stash(sid).await?)
    }

    /// Removes a draft for good (`DELETE …/workspace/drafts/:workspace_id`).
    async fn abandon_draft(
        &self,
        sid: &str,
        id: &str,
        reason: Option<String>,
    ) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        Ok(self.abandon(sid, Some(id), reason.as_deref()).await?)
    }

    async fn suggest_files(&self, sid: &str, q: &str) -> ApiResult<Vec<FileSuggestion>> {
        let root = self.work_root(sid, &self.sessions.get(sid).await?.lock().row.root);
        Ok(self.files.suggest(root, q).await?)
    }

    async fn draft_sizes(&self, sid: &str) -> ApiResult<DraftSizes> {
        let (list, current) = self.listed(sid).await?;
        let mut drafts = tokio::task::spawn_blocking(move || {
            list.into_iter()
                .map(|d| {
                    let (bytes, files) = size_on_disk(&d.dir);
                    DraftSize {
                        is_current: current.as_deref() == Some(d.workspace_id.as_str()),
                        workspace_id: d.workspace_id,
                        label: d.label,
                        bytes,
                        files,
                    }
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| WorkspaceError::Internal(e.to_string()))?;
        drafts.sort_by_key(|d| std::cmp::Reverse(d.bytes));
        let total_bytes = drafts.iter().map(|d| d.bytes).sum();
        Ok(DraftSizes {
            drafts,
            total_bytes,
        })
    }

    async fn folders(&self, path: Option<String>) -> ApiResult<FolderListing> {
        Ok(super::folders::list(path).await?)
    }

    async fn make_folder(&self, path: &str, name: &str) -> ApiResult<BrowseEntry> {
        Ok(super::folders::make(path, name).await?)
    }
}

/// A workspace refusal on the wire.
impl From<WorkspaceError> for ApiError {
    fn from(e: WorkspaceError) -> ApiError {
        let message = e.to_string();
        match e {
            WorkspaceError::Busy => ApiError::conflict("session-busy", message),
            WorkspaceError::Session(e) => e.into(),
            WorkspaceError::Draft(e) => e.into(),
            WorkspaceError::Unlistable { .. } | WorkspaceError::BadPath(_) => {
                ApiError::bad_request("invalid-path", message)
            }
            WorkspaceError::BadName { .. } => ApiError::bad_request("invalid-name", message),
            WorkspaceError::NotADirectory { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "path-not-found", message)
            }
            WorkspaceError::AlreadyExists { .. } => ApiError::conflict("already-exists", message),
            WorkspaceError::MkdirRefused { .. } => {
                ApiError::new(StatusCode::FORBIDDEN, "mkdir-failed", message)
            }
            WorkspaceError::Internal(m) => ApiError::engine(m),
        }
    }
}

/// A draft refusal on the wire (also for the draft a fork opens).
impl From<DraftError> for ApiError {
    fn from(e: DraftError) -> ApiError {
        let message = e.to_string();
        let (status, kind) = match &e {
            DraftError::BadLabel(_) => (StatusCode::BAD_REQUEST, "invalid-draft-label"),
            DraftError::NotFound(_) => (StatusCode::NOT_FOUND, "draft-not-found"),
            DraftError::OnTrunk(_) => (StatusCode::CONFLICT, "on-trunk"),
            DraftError::AlreadyInDraft(_) => (StatusCode::CONFLICT, "already-in-draft"),
            DraftError::Exists(_) => (StatusCode::CONFLICT, "draft-exists"),
            DraftError::NotActive(_) => (StatusCode::CONFLICT, "draft-not-active"),
            DraftError::OtherRepo(_) => (StatusCode::CONFLICT, "draft-other-repo"),
            DraftError::InUse(_) => (StatusCode::CONFLICT, "draft-in-use"),
            DraftError::Conflict { .. } => (StatusCode::CONFLICT, "draft-conflict"),
            DraftError::Blocked(_) => (StatusCode::FORBIDDEN, "blocked-by-hook"),
            DraftError::Declined(_) => (StatusCode::FORBIDDEN, "declined-by-user"),
            DraftError::Unavailable(_) => (StatusCode::CONFLICT, "drafts-unavailable"),
            DraftError::Failed(_) => (StatusCode::INTERNAL_SERVER_ERROR, "draft-failed"),
        };
        let err = ApiError::new(status, kind, message);
        match e {
            DraftError::Conflict { files, .. } if !files.is_empty() => {
                err.with("files", json!(files))
            }
            _ => err,
        }
    }
}

/// Bytes and count of the regular files under `dir` (links not followed; unreadable entries
/// skipped).
fn size_on_disk(dir: &Path) -> (u64, u64) {
    let (mut bytes, mut files) = (0, 0);
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                todo.push(e.path());
            } else if meta.is_file() {
                bytes += meta.len();
                files += 1;
            }
        }
    }
    (bytes, files)
}
