//! The sessions area of the Companion boundary, on the turn engine.

use super::TurnEngine;
use crate::engine::views::live_of;
use async_trait::async_trait;
use vis_companion_api::records::*;
use vis_companion_api::wire::*;
use vis_companion_api::{ApiError, ApiResult, CreateSession, SessionListQuery, SessionsApi};

#[async_trait]
impl SessionsApi for TurnEngine {
    async fn create(&self, req: CreateSession) -> ApiResult<SessionCreated> {
        self.0.create_session(req).await
    }

    async fn list(&self, q: SessionListQuery) -> ApiResult<SessionList> {
        self.0.list_sessions(q).await
    }

    async fn get(&self, sid: &str, include_queued: bool) -> ApiResult<SessionRecord> {
        let shared = self.0.sessions.get(sid).await?;
        let st = shared.lock();
        let mut soul = self.0.soul(&st.row, &live_of(&st));
        if include_queued {
            soul.queued_turns = Some(st.queue.iter().map(|q| q.record()).collect());
        }
        Ok(soul)
    }

    async fn delete(&self, sid: &str) -> ApiResult<()> {
        // An unknown id is a 404 (the lookup's error), not a silent 204.
        self.0.sessions.get(sid).await?;
        self.0.delete_session(sid).await;
        Ok(())
    }

    async fn transcript(
        &self,
        sid: &str,
        limit: Option<usize>,
        offset: Option<usize>,
    ) -> ApiResult<Transcript> {
        if uuid::Uuid::parse_str(sid).is_err() {
            return Err(ApiError::session_not_found(sid));
        }
        self.0.transcript(sid, limit, offset).await
    }

    async fn model(&self, sid: &str) -> ApiResult<SessionModel> {
        let shared = self.0.sessions.get(sid).await?;
        let model = shared.lock().row.model_pref.clone();
        Ok(SessionModel { model })
    }

    async fn slashes(&self, sid: &str) -> ApiResult<SlashPalette> {
        let shared = self.0.sessions.get(sid).await?;
        let root = std::path::PathBuf::from(shared.lock().row.root.clone());
        Ok(self.0.slash.palette(&root).await)
    }

    async fn patch(&self, sid: &str, patch: SessionPatch) -> ApiResult<()> {
        self.0.patch_session(sid, patch).await
    }

    async fn search(&self, q: &str) -> ApiResult<SearchResults> {
        self.0.companion.search().sessions(q).await
    }

    async fn usage(&self, sid: &str) -> ApiResult<UsageAnswer> {
        self.0.companion.usage().of_session(sid).await
    }

    async fn transcript_markdown(&self, sid: &str) -> ApiResult<String> {
        self.0.companion.usage().markdown(sid).await
    }

    async fn set_model(&self, sid: &str, pref: Option<ModelPref>) -> ApiResult<ModelAnswer> {
        self.0.set_session_model(sid, pref).await
    }

    async fn delete_project(&self, pid: &str, recursive: bool) -> ApiResult<ProjectDeleted> {
        self.0.delete_project(pid, recursive).await
    }

    async fn fork_points(&self, sid: &str) -> ApiResult<ForkPoints> {
        self.0.fork_points(sid).await
    }

    async fn fork(&self, sid: &str, req: ForkRequest) -> ApiResult<String> {
        self.0.fork_session(sid, req).await
    }
}
