//! The Companion API's `Engine` trait, implemented over the gateway.

use super::views::live_of;
use super::{now_ms, Gateway};
use crate::store::rows::{self, SessionRow};
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

fn store_err(e: crate::store::StoreError) -> ApiError {
    ApiError::engine(e.to_string())
}

#[async_trait]
impl Engine for Api {
    fn mcp(&self) -> Option<Arc<dyn vis_companion_api::mcp::McpApi>> {
        Some(Arc::new(crate::mcp::routes::McpRoutes(self.0.clone())))
    }

    fn providers(&self) -> Option<Arc<dyn vis_companion_api::providers::ProvidersApi>> {
        Some(Arc::new(crate::provider_admin::routes::ProviderRoutes(
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
        let g = &self.0;
        let root = match req.root.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
            None => g.default_root.clone(),
            Some(r) => {
                let p = std::path::PathBuf::from(r);
                if !p.is_dir() {
                    return Err(ApiError::bad_request(
                        "invalid-request",
                        format!("root {r} is not a directory"),
                    ));
                }
                p
            }
        };
        let (home, project) = (g.home.dir.clone(), root.clone());
        tokio::task::spawn_blocking(move || crate::config::load(&home, &project))
            .await
            .map_err(|e| ApiError::engine(e.to_string()))?
            .map_err(|e| ApiError::bad_request("invalid-config", e.to_string()))?;
        let now = now_ms();
        let row = SessionRow {
            id: uuid::Uuid::new_v4().to_string(),
            channel: req
                .channel
                .filter(|c| !c.trim().is_empty())
                .unwrap_or_else(|| "api".into()),
            title: req.title.filter(|t| !t.trim().is_empty()),
            external_id: req.external_id,
            workspace_id: req.workspace_id,
            root: root.to_string_lossy().to_string(),
            created_at: now,
            last_active_at: now,
            last_status: "idle".into(),
            ..Default::default()
        };
        let r = row.clone();
        g.store
            .call(move |c| rows::put_session(c, &r))
            .await
            .map_err(store_err)?;
        g.sessions.get(&row.id).await?;
        tracing::info!(session = %row.id, channel = %row.channel, root = %row.root, "session created");
        Ok(SessionCreated {
            id: row.id,
            channel: row.channel,
            title: row.title,
            external_id: row.external_id,
            workspace_id: row.workspace_id,
        })
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

    async fn delete_session(&self, sid: &str) {
        let g = &self.0;
        // Cancel a running turn first and give it a moment to land its terminal.
        if let Ok(shared) = g.sessions.get(sid).await {
            if let Some(r) = &shared.lock().running {
                r.cancel.cancel();
            }
            for _ in 0..100 {
                if shared.lock().running.is_none() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        g.sessions.forget(sid);
        if let Some(sb) = g.sandbox.get() {
            sb.tokens.revoke(sid);
        }
        g.model_sandboxes.stop(sid);
        // Its draft stays, parked: another session of the repository can resume it.
        g.drafts.release(sid).await;
        g.mcp.stop_session(sid).await;
        g.extensions.sessions().stop(sid).await;
        let id = sid.to_string();
        let _ = g.store.call(move |c| rows::delete_session(c, &id)).await;
        tracing::info!(session = sid, "session deleted");
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
        let turns = self.0.all_turns(sid).await?;
        Ok(TurnList {
            turns: turns.iter().map(|t| t.record()).collect(),
        })
    }

    async fn get_turn(&self, sid: &str, tid: &str) -> ApiResult<TurnRecord> {
        self.0.turn_record(sid, tid).await
    }

    async fn turn_attachments(&self, sid: &str, tid: &str) -> ApiResult<TurnAttachments> {
        let t = self.0.turn(sid, tid).await?;
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
        let turns = self.0.all_turns(sid).await.unwrap_or_default();
        let iterations = turns
            .into_iter()
            .find(|t| t.engine_turn_id == engine_tid)
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
        Ok(self.0.slash_palette(&root).await)
    }

    async fn egress(&self, sid: &str, limit: usize, before: Option<i64>) -> ApiResult<EgressPage> {
        self.0.sessions.get(sid).await?;
        self.0.egress.page(sid, limit, before).await
    }

    async fn extensions(&self, root: Option<String>) -> ApiResult<ExtensionsListing> {
        let root = root
            .filter(|r| !r.trim().is_empty())
            .map(std::path::PathBuf::from);
        self.0.extensions_listing(root.as_deref()).await
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
        let (status, title) = match self.0.reload_all(&root).await {
            Ok(t) => (ReloadStatus::Ok, t),
            Err(t) => (ReloadStatus::Error, t),
        };
        let extensions = self.0.extensions_listing(Some(&root)).await?;
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
    ) -> ApiResult<SandboxEnv> {
        let g = &self.0;
        let Some(sandbox) = g.sandbox.get() else {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "sandbox-unavailable",
                "the egress proxy is not running",
            ));
        };
        let sid = match session_id {
            Some(sid) => sid,
            None => {
                let created = self
                    .create_session(CreateSession {
                        channel: Some("cli".into()),
                        root,
                        title,
                        ..Default::default()
                    })
                    .await?;
                created.id
            }
        };
        let shared = g.sessions.get(&sid).await?;
        let root = g.work_root(&sid, &shared.lock().row.root);
        let cfg = g
            .project_config(&root)
            .await
            .map_err(|e| ApiError::bad_request("invalid-config", e))?;
        // The project's filters decide the child's first request (also without a turn).
        g.extensions.catalog().ensure_project(Some(&root)).await;
        let env = sandbox.child_env(&sid, &root, &cfg);
        // `jail.enabled: true`: the caller must run `argv_prefix + command` (fail closed).
        let jail = sandbox
            .jail_prefix(&root, &cfg)
            .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "jail-unavailable", e))?
            .map(|argv_prefix| JailPrefix { argv_prefix });
        tracing::info!(session = %sid, root = %root.display(), jailed = jail.is_some(), "exec: child environment handed out");
        Ok(SandboxEnv {
            session_id: sid,
            cwd: root.to_string_lossy().into_owned(),
            env,
            proxy_port: sandbox.port(),
            jail,
        })
    }

    async fn patch_session(&self, sid: &str, patch: SessionPatch) -> ApiResult<()> {
        self.0.patch_session(sid, patch).await
    }

    async fn search_sessions(&self, q: &str) -> ApiResult<SearchResults> {
        self.0.search_sessions(q).await
    }

    async fn session_usage(&self, sid: &str) -> ApiResult<UsageAnswer> {
        self.0.session_usage(sid).await
    }

    async fn transcript_markdown(&self, sid: &str) -> ApiResult<String> {
        self.0.transcript_markdown(sid).await
    }

    async fn suggest_files(&self, sid: &str, q: &str) -> ApiResult<Vec<FileSuggestion>> {
        self.0.suggest_files(sid, q).await
    }

    async fn set_session_model(
        &self,
        sid: &str,
        pref: Option<ModelPref>,
    ) -> ApiResult<ModelAnswer> {
        self.0.set_session_model(sid, pref).await
    }

    async fn router_status(&self) -> ApiResult<RouterAnswer> {
        self.0.router_status().await
    }

    async fn patch_router(&self, patch: RouterPatch) -> ApiResult<RouterDefaults> {
        self.0.patch_router(patch).await
    }

    async fn settings(&self) -> ApiResult<SettingsAnswer> {
        self.0.settings_answer().await
    }

    async fn setting(&self, id: &str) -> ApiResult<Toggle> {
        self.0.setting(id).await
    }

    async fn set_setting(&self, id: &str, action: SettingAction) -> ApiResult<Toggle> {
        self.0.set_setting(id, action).await
    }

    async fn artifacts(&self, sid: &str) -> ApiResult<ArtifactList> {
        self.0.artifacts(sid).await
    }

    async fn iteration_attachments(&self, sid: &str, iid: &str) -> ApiResult<IterationAttachments> {
        self.0.iteration_attachments(sid, iid).await
    }

    async fn iteration_attachment_bytes(
        &self,
        sid: &str,
        iid: &str,
        index: i64,
    ) -> ApiResult<StoredBytes> {
        self.0.iteration_attachment_bytes(sid, iid, index).await
    }

    async fn save_revision(
        &self,
        sid: &str,
        iid: &str,
        rev: NewRevision,
    ) -> ApiResult<IterationAttachment> {
        self.0.save_revision(sid, iid, rev).await
    }

    async fn devices(&self) -> ApiResult<DevicesAnswer> {
        self.0.devices().await
    }

    async fn register_device(&self, input: DeviceInput) -> ApiResult<DeviceRegistered> {
        self.0.register_device(input).await
    }

    async fn unregister_device(&self, token: &str) -> ApiResult<bool> {
        self.0.unregister_device(token).await
    }

    async fn push_status(&self) -> PushStatus {
        self.0.push_status().await
    }

    async fn delete_project(&self, pid: &str, recursive: bool) -> ApiResult<ProjectDeleted> {
        self.0.delete_project(self, pid, recursive).await
    }

    async fn fork_points(&self, sid: &str) -> ApiResult<ForkPoints> {
        self.0.fork_points(sid).await
    }

    async fn fork_session(&self, sid: &str, req: ForkRequest) -> ApiResult<String> {
        self.0.fork_session(self, sid, req).await
    }

    async fn drafts(&self, sid: &str) -> ApiResult<Vec<WorkspaceDraft>> {
        self.0.route_drafts(sid).await
    }

    async fn create_draft(
        &self,
        sid: &str,
        label: &str,
        clean: bool,
    ) -> ApiResult<WorkspaceChange> {
        self.0.route_create_draft(sid, label, clean).await
    }

    async fn resume_draft(&self, sid: &str, workspace_id: &str) -> ApiResult<WorkspaceChange> {
        self.0.route_resume_draft(sid, workspace_id).await
    }

    async fn stash_draft(&self, sid: &str) -> ApiResult<WorkspaceChange> {
        self.0.route_stash_draft(sid).await
    }

    async fn abandon_draft(
        &self,
        sid: &str,
        workspace_id: &str,
        reason: Option<String>,
    ) -> ApiResult<WorkspaceChange> {
        self.0.route_abandon_draft(sid, workspace_id, reason).await
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
