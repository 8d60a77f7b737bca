//! The fake workspace area.

use super::*;

#[async_trait]
impl WorkspaceApi for FakeEngine {
    async fn suggest_files(&self, sid: &str, _q: &str) -> ApiResult<Vec<FileSuggestion>> {
        known(sid)?;
        Ok(vec![])
    }

    async fn drafts(&self, sid: &str) -> ApiResult<Vec<WorkspaceDraft>> {
        known(sid)?;
        Ok(vec![draft(true)])
    }

    async fn create_draft(
        &self,
        sid: &str,
        label: &str,
        _clean: bool,
    ) -> ApiResult<WorkspaceChange> {
        known(sid)?;
        let mut d = draft(true);
        d.label = label.into();
        Ok(WorkspaceChange {
            workspace: workspace(Some(&d)),
            draft: Some(d),
        })
    }

    async fn resume_draft(&self, sid: &str, workspace_id: &str) -> ApiResult<WorkspaceChange> {
        known(sid)?;
        if workspace_id != DRAFT {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "draft-not-found",
                "no such draft",
            ));
        }
        let d = draft(true);
        Ok(WorkspaceChange {
            workspace: workspace(Some(&d)),
            draft: Some(d),
        })
    }

    async fn stash_draft(&self, sid: &str) -> ApiResult<WorkspaceChange> {
        known(sid)?;
        Ok(WorkspaceChange {
            workspace: workspace(None),
            draft: Some(draft(false)),
        })
    }

    async fn abandon_draft(
        &self,
        sid: &str,
        workspace_id: &str,
        _reason: Option<String>,
    ) -> ApiResult<WorkspaceChange> {
        known(sid)?;
        if workspace_id != DRAFT {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "draft-not-found",
                "no such draft",
            ));
        }
        Ok(WorkspaceChange {
            workspace: workspace(None),
            draft: Some(draft(false)),
        })
    }

    async fn folders(&self, path: Option<String>) -> ApiResult<FolderListing> {
        self.calls.push(format!("folders {path:?}"));
        Ok(FolderListing {
            path: path.unwrap_or_else(|| "/home/fake".into()),
            parent: Some("/".into()),
            home: "/home/fake".into(),
            is_truncated: false,
            entries: vec![],
        })
    }

    async fn make_folder(&self, path: &str, name: &str) -> ApiResult<BrowseEntry> {
        self.calls.push(format!("make_folder {path} {name}"));
        Ok(BrowseEntry {
            name: name.into(),
            path: format!("{path}/{name}"),
            entry_count: 0,
            is_repo: false,
            branch: None,
        })
    }
}
