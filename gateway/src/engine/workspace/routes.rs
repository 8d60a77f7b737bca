//! The answers of the Companion's draft routes (`…/workspace/drafts`, `…/resume`,
//! `…/stash`, `…/abandon`): they refuse while a turn runs or waits, and switch without a
//! separate step (the session's current draft is stashed first).

use super::{api_error, draft_item, Workspaces};
use crate::drafts::service::Target;
use std::path::Path;
use vis_companion_api::records::{WorkspaceChange, WorkspaceDraft};
use vis_companion_api::{ApiError, ApiResult};

impl Workspaces {
    /// Refuses a route's workspace change while a turn runs or waits (its tools would
    /// change folders under it).
    fn ensure_idle(&self, sid: &str) -> ApiResult<()> {
        if let Some(s) = self.sessions.loaded(sid) {
            let st = s.lock();
            if st.running.is_some() || !st.queue.is_empty() {
                return Err(ApiError::conflict(
                    "session-busy",
                    "the session has a running or queued turn: change its workspace when it is idle",
                ));
            }
        }
        Ok(())
    }

    /// The drafts of the session's repository (`GET …/workspace/drafts`).
    pub async fn route_drafts(&self, sid: &str) -> ApiResult<Vec<WorkspaceDraft>> {
        let trunk = self.trunk(sid).await?;
        let current = self.drafts.current(sid).map(|d| d.workspace_id);
        let list = self
            .drafts
            .list(Path::new(&trunk))
            .await
            .map_err(api_error)?;
        Ok(list
            .iter()
            .map(|d| draft_item(d, current.as_deref()))
            .collect())
    }

    /// Parks the session's current draft, if any (the routes switch without a separate step).
    async fn park(&self, sid: &str) -> ApiResult<()> {
        if self.drafts.current(sid).is_some() {
            self.stash(sid).await.map_err(api_error)?;
        }
        Ok(())
    }

    /// Creates a draft and moves the session into it (`POST …/workspace/drafts`).
    pub async fn route_create(
        &self,
        sid: &str,
        label: &str,
        clean: bool,
    ) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        crate::drafts::check_label(label).map_err(api_error)?;
        self.park(sid).await?;
        self.create(sid, label, clean).await.map_err(api_error)
    }

    /// Moves the session into a parked draft; already there is not an error
    /// (`POST …/workspace/resume`).
    pub async fn route_resume(&self, sid: &str, id: &str) -> ApiResult<WorkspaceChange> {
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
        self.resume(sid, Target::Id(id.to_string()))
            .await
            .map_err(api_error)
    }

    /// Parks the session's draft; on trunk it is a no-op (`POST …/workspace/stash`).
    pub async fn route_stash(&self, sid: &str) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        let trunk = self.trunk(sid).await?;
        if self.drafts.current(sid).is_none() {
            return Ok(WorkspaceChange {
                workspace: self.view(sid, &trunk),
                draft: None,
            });
        }
        self.stash(sid).await.map_err(api_error)
    }

    /// Removes a draft for good (`DELETE …/workspace/drafts/:workspace_id`).
    pub async fn route_abandon(
        &self,
        sid: &str,
        id: &str,
        reason: Option<String>,
    ) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        self.abandon(sid, Some(id), reason.as_deref())
            .await
            .map_err(api_error)
    }
}
