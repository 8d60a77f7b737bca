//! The sessions area of the Companion boundary, on the turn engine.

use super::GatewayAreas;
use crate::engine::meta::MetaError;
use crate::engine::session_life::SessionLifeError;
use crate::engine::views::live_of;
use crate::records::SessionError;
use async_trait::async_trait;
use axum::http::StatusCode;
use vis_companion_api::records::*;
use vis_companion_api::wire::*;
use vis_companion_api::{ApiError, ApiResult, CreateSession, SessionListQuery, SessionsApi};

#[async_trait]
impl SessionsApi for GatewayAreas {
    async fn create(&self, req: CreateSession) -> ApiResult<SessionCreated> {
        Ok(self.0.turns.create_session(req).await?)
    }

    async fn list(&self, q: SessionListQuery) -> ApiResult<SessionList> {
        Ok(self.0.turns.list_sessions(q).await?)
    }

    async fn get(&self, sid: &str, include_queued: bool) -> ApiResult<SessionRecord> {
        let shared = self.0.sessions.get(sid).await?;
        let st = shared.lock();
        let mut soul = self.0.turns.soul(&st.row, &live_of(&st));
        if include_queued {
            soul.queued_turns = Some(st.queue.iter().map(|q| q.record()).collect());
        }
        Ok(soul)
    }

    async fn delete(&self, sid: &str) -> ApiResult<()> {
        // An unknown id is a 404 (the lookup's error), not a silent 204.
        self.0.sessions.get(sid).await?;
        self.0.turns.delete_session(sid).await;
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
        Ok(self.0.turns.transcript(sid, limit, offset).await?)
    }

    async fn model(&self, sid: &str) -> ApiResult<SessionModel> {
        let shared = self.0.sessions.get(sid).await?;
        let model = shared.lock().row.model_pref.clone();
        Ok(SessionModel { model })
    }

    async fn slashes(&self, sid: &str) -> ApiResult<SlashPalette> {
        let shared = self.0.sessions.get(sid).await?;
        let root = std::path::PathBuf::from(shared.lock().row.root.clone());
        Ok(self.0.turns.slash.palette(&root).await)
    }

    async fn patch(&self, sid: &str, patch: SessionPatch) -> ApiResult<()> {
        Ok(self.0.turns.patch_session(sid, patch).await?)
    }

    async fn search(&self, q: &str) -> ApiResult<SearchResults> {
        Ok(self.0.companion.search().sessions(q).await?)
    }

    async fn usage(&self, sid: &str) -> ApiResult<UsageAnswer> {
        Ok(self.0.companion.usage().of_session(sid).await?)
    }

    async fn transcript_markdown(&self, sid: &str) -> ApiResult<String> {
        Ok(self.0.companion.usage().markdown(sid).await?)
    }

    async fn set_model(&self, sid: &str, pref: Option<ModelPref>) -> ApiResult<ModelAnswer> {
        Ok(self.0.turns.set_session_model(sid, pref).await?)
    }

    async fn delete_project(&self, pid: &str, recursive: bool) -> ApiResult<ProjectDeleted> {
        Ok(self.0.turns.delete_project(pid, recursive).await?)
    }

    async fn fork_points(&self, sid: &str) -> ApiResult<ForkPoints> {
        Ok(self.0.turns.fork_points(sid).await?)
    }

    async fn fork(&self, sid: &str, req: ForkRequest) -> ApiResult<String> {
        Ok(self.0.turns.fork(sid, &req).await?)
    }
}

/// A session lookup's failure on the wire.
impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> ApiError {
        match e {
            SessionError::NotFound { sid } => ApiError::session_not_found(&sid),
            SessionError::TurnNotFound { tid } => ApiError::turn_not_found(&tid),
            SessionError::Store(e) => e.into(),
        }
    }
}

/// A session that could not be created or handed to `exec`, on the wire.
impl From<SessionLifeError> for ApiError {
    fn from(e: SessionLifeError) -> ApiError {
        let message = e.to_string();
        match e {
            SessionLifeError::RootNotADirectory { .. } => {
                ApiError::bad_request("invalid-request", message)
            }
            SessionLifeError::InvalidConfig(_) => ApiError::bad_request("invalid-config", message),
            SessionLifeError::SandboxUnavailable => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "sandbox-unavailable",
                message,
            ),
            SessionLifeError::JailUnavailable(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "jail-unavailable", message)
            }
            SessionLifeError::CheckFailed(_) => ApiError::engine(message),
            SessionLifeError::Session(e) => e.into(),
            SessionLifeError::Store(e) => e.into(),
        }
    }
}

/// A refused metadata change, project deletion or fork on the wire.
impl From<MetaError> for ApiError {
    fn from(e: MetaError) -> ApiError {
        let message = e.to_string();
        match e {
            MetaError::UnknownProvider { provider, .. } => {
                ApiError::bad_request("unknown-provider", message).with("provider_id", provider)
            }
            MetaError::ProjectNotFound { pid } => {
                ApiError::new(StatusCode::NOT_FOUND, "project-not-found", message)
                    .with("project_id", pid)
            }
            MetaError::NothingToFork => ApiError::conflict("no-turns", message),
            MetaError::UnknownForkTurn { tid } => {
                ApiError::conflict("unknown-turn", message).with("turn_id", tid)
            }
            MetaError::Session(e) => e.into(),
            MetaError::Store(e) => e.into(),
            MetaError::Draft(e) => e.into(),
            MetaError::Create(e) => e.into(),
        }
    }
}
