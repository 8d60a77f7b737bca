//! The Companion API's `Engine` trait, implemented over the gateway.

use super::companion::store_err;
use super::views::live_of;
use super::Gateway;
use crate::store::rows;
use async_trait::async_trait;
use axum::http::StatusCode;
use serde_json::{Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use vis_companion_api::records::*;
use vis_companion_api::wire::*;
use vis_companion_api::{
    ApiError, ApiResult, CreateSession, Cursor, Engine, SessionListQuery, Stats, SubmitTurn,
    Subscription,
};

/// The gateway as the HTTP layer sees it.
#[derive(Clone)]
pub struct Api(pub Arc<Gateway>);

fn human_input_not_found(rid: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "human-input-not-found",
        format!("no pending request {rid}"),
    )
    .with("request_id", rid)
}

fn live_view_not_found(vid: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "live-view-not-found",
        format!("no live view {vid}"),
    )
    .with("view_id", vid)
}

/// Human-input errors as API errors (`id`: the request or view id of the route).
fn hi_error(e: super::human_input::HiError, id: &str) -> ApiError {
    use super::human_input::HiError;
    match e {
        HiError::RequestNotFound => human_input_not_found(id),
        HiError::ViewNotFound => live_view_not_found(id),
        HiError::NotCancellable => ApiError::new(
            StatusCode::CONFLICT,
            "human-input-not-cancellable",
            format!("request {id} cannot be cancelled"),
        )
        .with("request_id", id),
        HiError::InvalidFocus(m) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid-live-focus", m).with("view_id", id)
        }
    }
}

#[async_trait]
impl Engine for Api {
    fn mcp(&self) -> Option<Arc<dyn vis_companion_api::mcp::McpApi>> {
        Some(Arc::new(super::routes::mcp::McpRoutes(self.0.clone())))
    }

    fn learn(&self) -> Option<Arc<dyn vis_companion_api::learn::LearnApi>> {
        Some(Arc::new(super::routes::learn::LearnRoutes(self.0.clone())))
    }

    fn providers(&self) -> Option<Arc<dyn vis_companion_api::providers::ProvidersApi>> {
        Some(Arc::new(super::routes::providers::ProviderRoutes(
            self.0.clone(),
        )))
    }

    fn metric_families(&self) -> Vec<vis_companion_api::metrics::Family> {
        crate::metrics::families()
    }

    async fn replay_events_retained(&self) -> u64 {
        self.0
            .store
            .call(rows::count_events)
            .await
            .unwrap_or(0)
            .max(0) as u64
    }

    async fn stats(&self) -> Stats {
        let g = &self.0;
        let loaded = g.sessions.all();
        let (mut running, mut queued) = (0, 0);
        for (_, s) in &loaded {
            let l = live_of(&s.lock());
            running += l.running.is_some() as u64;
            queued += l.queued as u64;
        }
        Stats {
            sessions_tracked: loaded.len() as u64,
            turns_running: running,
            turns_executing: g.counters.executing.load(Ordering::Relaxed).max(0) as u64,
            turns_queued: queued,
            turns_total: g.counters.turns_total.load(Ordering::Relaxed),
            turns_failed_total: g.counters.turns_failed.load(Ordering::Relaxed),
            turn_duration_ms_total: g.counters.duration_ms.load(Ordering::Relaxed),
            tokens_input: g.counters.tokens_in.load(Ordering::Relaxed),
            tokens_output: g.counters.tokens_out.load(Ordering::Relaxed),
            concurrency_limit: g.concurrency as u64,
            db: Some(g.store.path().display().to_string()),
        }
    }

    async fn create_session(&self, req: CreateSession) -> ApiResult<SessionCreated> {
        self.0.create_session(req).await
    }

    async fn list_sessions(&self, q: SessionListQuery) -> ApiResult<SessionList> {
        self.0.list_sessions(q).await
    }

    async fn get_session(&self, sid: &str, include_queued: bool) -> ApiResult<SessionRecord> {
        let shared = self.0.sessions.get(sid).await?;
        let st = shared.lock();
        let mut soul = self.0.soul(&st.row, &live_of(&st));
        if include_queued {
            soul.queued_turns = Some(st.queue.iter().map(|q| q.record()).collect());
        }
        Ok(soul)
    }

    async fn delete_session(&self, sid: &str) -> ApiResult<()> {
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

    async fn submit_turn(&self, sid: &str, req: SubmitTurn) -> ApiResult<(bool, TurnRecord)> {
        self.0.submit(sid, req).await
    }

    async fn list_turns(&self, sid: &str, queued_only: bool) -> ApiResult<TurnList> {
        if queued_only {
            let shared = self.0.sessions.get(sid).await?;
            let st = shared.lock();
            let turns = st.queue.iter().map(|q| q.record()).collect();
            return Ok(TurnList { turns });
        }
        let turns = self.0.sessions.turns(sid).await?;
        Ok(TurnList {
            turns: turns.iter().map(|t| t.record()).collect(),
        })
    }

    async fn get_turn(&self, sid: &str, tid: &str) -> ApiResult<TurnRecord> {
        self.0.turn_record(sid, tid).await
    }

    async fn turn_attachments(&self, sid: &str, tid: &str) -> ApiResult<TurnAttachments> {
        let t = self.0.sessions.turn(sid, tid).await?;
        Ok(TurnAttachments {
            attachments: t.attachments,
        })
    }

    async fn edit_turn(
        &self,
        sid: &str,
        tid: &str,
        request: Option<Value>,
    ) -> ApiResult<TurnRecord> {
        self.0.edit(sid, tid, request).await
    }

    async fn delete_turn(&self, sid: &str, tid: &str) -> ApiResult<()> {
        self.0.delete_queued(sid, tid).await
    }

    async fn cancel_turn(&self, sid: &str, tid: &str) -> ApiResult<()> {
        self.0.cancel(sid, tid).await
    }

    async fn cancel_current(&self, sid: &str, key: Option<String>) -> ApiResult<String> {
        self.0.cancel_current(sid, key).await
    }

    async fn resume_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>> {
        self.0.resume_queue(sid).await
    }

    async fn drain_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>> {
        self.0.drain_queue(sid).await
    }

    async fn trace(&self, sid: &str, engine_tid: &str) -> ApiResult<Trace> {
        if uuid::Uuid::parse_str(sid).is_err() {
            return Err(ApiError::session_not_found(sid));
        }
        let turns = self.0.sessions.turns(sid).await.unwrap_or_default();
        let iterations = turns
            .into_iter()
            .find(|t| t.tid == engine_tid || t.engine_turn_id == engine_tid)
            .map(|t| t.iterations)
            .unwrap_or_default();
        Ok(Trace { iterations })
    }

    async fn subscribe(
        &self,
        sid: &str,
        cursor: Cursor,
        kick: CancellationToken,
    ) -> ApiResult<Subscription> {
        let shared = self.0.sessions.get(sid).await?;
        let running = shared
            .lock()
            .running
            .as_ref()
            .map(|r| (r.turn.tid.clone(), r.started_seq));
        self.0
            .bus
            .try_subscribe(sid, cursor.0, running, kick)
            .await
            .map_err(store_err)?
            .ok_or_else(|| ApiError::session_not_found(sid))
    }

    async fn events_since(&self, sid: &str, cursor: i64) -> ApiResult<Vec<JournalEntry>> {
        if self.0.sessions.get(sid).await.is_err() {
            return if uuid::Uuid::parse_str(sid).is_ok() {
                Ok(vec![])
            } else {
                Err(ApiError::session_not_found(sid))
            };
        }
        Ok(self.0.bus.since(sid, cursor).await)
    }

    async fn seq(&self, sid: &str) -> ApiResult<i64> {
        // 404 only for an unparsable sid; a valid unknown one has seen nothing yet.
        if self.0.sessions.get(sid).await.is_err() {
            return if uuid::Uuid::parse_str(sid).is_ok() {
                Ok(0)
            } else {
                Err(ApiError::session_not_found(sid))
            };
        }
        self.0
            .bus
            .durable_high_water(sid)
            .ok_or_else(|| ApiError::session_not_found(sid))
    }

    async fn human_input(&self, sid: &str) -> ApiResult<HumanInputList> {
        self.0.sessions.get(sid).await?;
        Ok(self.0.human_input.list(sid))
    }

    async fn human_input_submit(
        &self,
        sid: &str,
        rid: &str,
        values: Map<String, Value>,
    ) -> ApiResult<HumanInputSubmitted> {
        self.0.sessions.get(sid).await?;
        self.0
            .human_input
            .submit(sid, rid, values)
            .await
            .map_err(|e| hi_error(e, rid))
    }

    async fn human_input_cancel(&self, sid: &str, rid: &str) -> ApiResult<HumanInputCancelled> {
        self.0.sessions.get(sid).await?;
        self.0
            .human_input
            .cancel(sid, rid)
            .map_err(|e| hi_error(e, rid))
    }

    async fn live_views(&self, sid: &str) -> ApiResult<LiveViews> {
        self.0.sessions.get(sid).await?;
        Ok(self.0.human_input.live_views(sid))
    }

    async fn live_log(
        &self,
        sid: &str,
        vid: &str,
        nid: &str,
        from: usize,
        limit: usize,
    ) -> ApiResult<LiveLog> {
        if uuid::Uuid::parse_str(vid).is_err() {
            return Err(live_view_not_found(vid));
        }
        self.0
            .human_input
            .live_log(sid, vid, nid, from, limit)
            .map_err(|e| hi_error(e, vid))
    }

    async fn live_focus(&self, sid: &str, vid: &str, body: Value) -> ApiResult<LiveFocused> {
        if uuid::Uuid::parse_str(vid).is_err() {
            return Err(live_view_not_found(vid));
        }
        self.0
            .human_input
            .live_focus(sid, vid, &body)
            .map_err(|e| hi_error(e, vid))
    }

    async fn live_interrupt(
        &self,
        sid: &str,
        vid: &str,
        note: Option<String>,
    ) -> ApiResult<LiveInterrupted> {
        if uuid::Uuid::parse_str(vid).is_err() {
            return Err(live_view_not_found(vid));
        }
        self.0
            .human_input
            .live_interrupt(sid, vid, note)
            .map_err(|e| hi_error(e, vid))
    }

    async fn slashes(&self, sid: &str) -> ApiResult<SlashPalette> {
        let shared = self.0.sessions.get(sid).await?;
        let root = std::path::PathBuf::from(shared.lock().row.root.clone());
        Ok(self.0.slash.palette(&root).await)
    }

    async fn egress(&self, sid: &str, limit: usize, before: Option<i64>) -> ApiResult<EgressPage> {
        self.0.sessions.get(sid).await?;
        self.0.egress.page(sid, limit, before).await
    }

    async fn extensions(&self, root: Option<String>) -> ApiResult<ExtensionsListing> {
        let root = root
            .filter(|r| !r.trim().is_empty())
            .map(std::path::PathBuf::from);
        Ok(self.0.extensions.catalog().list(root.as_deref()).await)
    }

    async fn reload_extensions(&self, root: Option<String>) -> ApiResult<ReloadAnswer> {
        let root = root
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| self.0.default_root.clone());
        if !root.is_dir() {
            return Err(ApiError::bad_request(
                "invalid-request",
                format!("root {} is not a directory", root.display()),
            ));
        }
        let (status, title) = match self.0.slash.reload(&root).await {
            Ok(t) => (ReloadStatus::Ok, t),
            Err(t) => (ReloadStatus::Error, t),
        };
        let extensions = self.0.extensions.catalog().list(Some(&root)).await;
        Ok(ReloadAnswer {
            status,
            title,
            extensions,
        })
    }

    async fn sandbox_env(
        &self,
        session_id: Option<String>,
        root: Option<String>,
        title: Option<String>,
        command: Option<String>,
    ) -> ApiResult<SandboxEnv> {
        self.0.sandbox_env(session_id, root, title, command).await
    }

    async fn patch_session(&self, sid: &str, patch: SessionPatch) -> ApiResult<()> {
        self.0.patch_session(sid, patch).await
    }

    async fn search_sessions(&self, q: &str) -> ApiResult<SearchResults> {
        self.0.companion.search().sessions(q).await
    }

    async fn session_usage(&self, sid: &str) -> ApiResult<UsageAnswer> {
        self.0.companion.usage().of_session(sid).await
    }

    async fn transcript_markdown(&self, sid: &str) -> ApiResult<String> {
        self.0.companion.usage().markdown(sid).await
    }

    async fn suggest_files(&self, sid: &str, q: &str) -> ApiResult<Vec<FileSuggestion>> {
        let gw = &self.0;
        let root = gw
            .workspaces
            .work_root(sid, &gw.sessions.get(sid).await?.lock().row.root);
        gw.companion.files().suggest(root, q).await
    }

    async fn set_session_model(
        &self,
        sid: &str,
        pref: Option<ModelPref>,
    ) -> ApiResult<ModelAnswer> {
        self.0.set_session_model(sid, pref).await
    }

    async fn router_status(&self) -> ApiResult<RouterAnswer> {
        self.0.companion.settings().router_status().await
    }

    async fn patch_router(&self, patch: RouterPatch) -> ApiResult<RouterDefaults> {
        self.0.companion.settings().patch_router(patch).await
    }

    async fn settings(&self) -> ApiResult<SettingsAnswer> {
        self.0.companion.settings().answer().await
    }

    async fn setting(&self, id: &str) -> ApiResult<Toggle> {
        self.0.companion.settings().get(id).await
    }

    async fn set_setting(&self, id: &str, action: SettingAction) -> ApiResult<Toggle> {
        self.0.companion.settings().set(id, action).await
    }

    async fn artifacts(&self, sid: &str) -> ApiResult<ArtifactList> {
        self.0.companion.artifacts().list(sid).await
    }

    async fn iteration_attachments(&self, sid: &str, iid: &str) -> ApiResult<IterationAttachments> {
        self.0.companion.artifacts().of_iteration(sid, iid).await
    }

    async fn iteration_attachment_bytes(
        &self,
        sid: &str,
        iid: &str,
        index: i64,
    ) -> ApiResult<StoredBytes> {
        self.0.companion.artifacts().bytes(sid, iid, index).await
    }

    async fn save_revision(
        &self,
        sid: &str,
        iid: &str,
        rev: NewRevision,
    ) -> ApiResult<IterationAttachment> {
        self.0
            .companion
            .artifacts()
            .save_revision(sid, iid, rev)
            .await
    }

    async fn devices(&self) -> ApiResult<DevicesAnswer> {
        self.0.companion.devices().list().await
    }

    async fn register_device(&self, input: DeviceInput) -> ApiResult<DeviceRegistered> {
        self.0.companion.devices().register(input).await
    }

    async fn unregister_device(&self, token: &str) -> ApiResult<bool> {
        self.0.companion.devices().unregister(token).await
    }

    async fn push_status(&self) -> PushStatus {
        self.0.companion.devices().status().await
    }

    async fn delete_project(&self, pid: &str, recursive: bool) -> ApiResult<ProjectDeleted> {
        self.0.delete_project(pid, recursive).await
    }

    async fn fork_points(&self, sid: &str) -> ApiResult<ForkPoints> {
        self.0.fork_points(sid).await
    }

    async fn fork_session(&self, sid: &str, req: ForkRequest) -> ApiResult<String> {
        self.0.fork_session(sid, req).await
    }

    async fn drafts(&self, sid: &str) -> ApiResult<Vec<WorkspaceDraft>> {
        self.0.workspaces.route_drafts(sid).await
    }

    async fn create_draft(
        &self,
        sid: &str,
        label: &str,
        clean: bool,
    ) -> ApiResult<WorkspaceChange> {
        self.0.workspaces.route_create(sid, label, clean).await
    }

    async fn resume_draft(&self, sid: &str, workspace_id: &str) -> ApiResult<WorkspaceChange> {
        self.0.workspaces.route_resume(sid, workspace_id).await
    }

    async fn stash_draft(&self, sid: &str) -> ApiResult<WorkspaceChange> {
        self.0.workspaces.route_stash(sid).await
    }

    async fn abandon_draft(
        &self,
        sid: &str,
        workspace_id: &str,
        reason: Option<String>,
    ) -> ApiResult<WorkspaceChange> {
        self.0
            .workspaces
            .route_abandon(sid, workspace_id, reason)
            .await
    }

    fn request_stop(&self) {
        // Stop after 25 ms, so the `{stopping:true}` answer is written first.
        let gw = self.0.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            gw.shutdown.request();
        });
    }
}
