//! A fake engine for the route tests: one known session with one known turn, canned
//! records, and the errors the real gateway gives for anything else. It records the
//! arguments the routes pass, so a test can check what a route parsed.

use async_trait::async_trait;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;
use vis_companion_api::records::*;
use vis_companion_api::wire::*;
use vis_companion_api::{
    live, ApiError, ApiResult, CreateSession, Cursor, Engine, Ready, SessionListQuery, Stats,
    SubmitTurn, Subscription,
};

pub const SID: &str = "11111111-1111-4111-8111-111111111111";
pub const TID: &str = "22222222-2222-4222-8222-222222222222";
pub const ENGINE_TID: &str = "33333333-3333-4333-8333-333333333333";
pub const RID: &str = "request-1";
pub const VID: &str = "44444444-4444-4444-8444-444444444444";

/// The calls a route made, as short text (a std mutex: never held across an await).
#[derive(Default)]
pub struct Calls(std::sync::Mutex<Vec<String>>);

impl Calls {
    pub fn push(&self, call: String) {
        if let Ok(mut v) = self.0.lock() {
            v.push(call);
        }
    }
    pub fn all(&self) -> Vec<String> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

#[derive(Default)]
pub struct FakeEngine {
    pub calls: Calls,
}

fn known(sid: &str) -> ApiResult<()> {
    if sid == SID {
        Ok(())
    } else {
        Err(ApiError::session_not_found(sid))
    }
}

fn turn_known(sid: &str, tid: &str) -> ApiResult<()> {
    known(sid)?;
    if tid == TID {
        Ok(())
    } else {
        Err(ApiError::turn_not_found(tid))
    }
}

pub fn session() -> SessionRecord {
    SessionRecord {
        id: SID.into(),
        channel: "api".into(),
        title: Some("fake".into()),
        project_id: "p".into(),
        project_name: "root".into(),
        server_time_ms: 1,
        ..Default::default()
    }
}

pub fn turn() -> TurnRecord {
    TurnRecord {
        id: TID.into(),
        turn_id: TID.into(),
        session_id: SID.into(),
        role: "assistant".into(),
        status: TurnStatus::Completed,
        request: "hello".into(),
        request_preview: "hello".into(),
        outcome: Some(TurnOutcome {
            engine_turn_id: ENGINE_TID.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn toggle(id: &str) -> Toggle {
    Toggle {
        id: id.into(),
        label: id.into(),
        kind: "boolean".into(),
        description: None,
        enabled: Some(true),
        value: None,
        choices: None,
    }
}

fn push_status() -> PushStatus {
    let off = PushChannel {
        is_available: false,
        missing: vec![],
    };
    PushStatus {
        is_available: false,
        provider: "none".into(),
        is_delivered: false,
        detail: "no push here".into(),
        missing: vec![],
        apns: off.clone(),
        fcm: off.clone(),
        web_push: off.clone(),
        relay: off,
        devices: 0,
    }
}

fn attachment(iid: &str) -> IterationAttachment {
    IterationAttachment {
        index: 0,
        iteration_id: iid.into(),
        tool_call_id: None,
        kind: "file".into(),
        media_type: "text/plain".into(),
        filename: "a.txt".into(),
        version: 1,
        size: 2,
        turn: Some(1),
    }
}

#[async_trait]
impl Engine for FakeEngine {
    async fn stats(&self) -> Stats {
        Stats::default()
    }

    async fn create_session(&self, req: CreateSession) -> ApiResult<SessionCreated> {
        self.calls.push(format!("create_session {:?}", req.title));
        Ok(SessionCreated {
            id: SID.into(),
            channel: req.channel.unwrap_or_else(|| "api".into()),
            title: req.title,
            external_id: None,
            workspace_id: None,
        })
    }

    async fn list_sessions(&self, q: SessionListQuery) -> ApiResult<SessionList> {
        self.calls
            .push(format!("list_sessions {:?} {:?}", q.limit, q.after));
        Ok(SessionList {
            sessions: vec![session()],
            total: 1,
            limit: q.limit,
            ..Default::default()
        })
    }

    async fn get_session(&self, sid: &str, include_queued: bool) -> ApiResult<SessionRecord> {
        known(sid)?;
        Ok(SessionRecord {
            queued_turns: include_queued.then(Vec::new),
            ..session()
        })
    }

    async fn delete_session(&self, sid: &str) -> ApiResult<()> {
        self.calls.push(format!("delete_session {sid}"));
        Ok(())
    }

    async fn transcript(
        &self,
        sid: &str,
        limit: Option<usize>,
        offset: Option<usize>,
    ) -> ApiResult<Transcript> {
        known(sid)?;
        self.calls.push(format!("transcript {limit:?} {offset:?}"));
        Ok(Transcript {
            turns: vec![TranscriptRow {
                id: ENGINE_TID.into(),
                user_request: "hello".into(),
                status: "success".into(),
                ..Default::default()
            }],
            total: 1,
            offset: 0,
            has_more: false,
        })
    }

    async fn model(&self, sid: &str) -> ApiResult<SessionModel> {
        known(sid)?;
        Ok(SessionModel { model: None })
    }

    async fn submit_turn(&self, sid: &str, req: SubmitTurn) -> ApiResult<(bool, TurnRecord)> {
        known(sid)?;
        let replay = req.idempotency_key.as_deref() == Some("seen");
        Ok((replay, turn()))
    }

    async fn list_turns(&self, sid: &str, queued_only: bool) -> ApiResult<TurnList> {
        known(sid)?;
        let turns = if queued_only { vec![] } else { vec![turn()] };
        Ok(TurnList { turns })
    }

    async fn get_turn(&self, sid: &str, tid: &str) -> ApiResult<TurnRecord> {
        turn_known(sid, tid)?;
        Ok(turn())
    }

    async fn turn_attachments(&self, sid: &str, tid: &str) -> ApiResult<TurnAttachments> {
        turn_known(sid, tid)?;
        Ok(TurnAttachments {
            attachments: vec![json!({"filename": "a.txt", "base64": "aGk="})],
        })
    }

    async fn edit_turn(
        &self,
        sid: &str,
        tid: &str,
        request: Option<Value>,
    ) -> ApiResult<TurnRecord> {
        turn_known(sid, tid)?;
        match request {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(TurnRecord {
                request: s,
                ..turn()
            }),
            _ => Err(ApiError::conflict(
                "invalid-request",
                "request must be a non-blank string",
            )),
        }
    }

    async fn delete_turn(&self, sid: &str, tid: &str) -> ApiResult<()> {
        turn_known(sid, tid)
    }

    async fn cancel_turn(&self, sid: &str, tid: &str) -> ApiResult<()> {
        turn_known(sid, tid)
    }

    async fn cancel_current(&self, sid: &str, _key: Option<String>) -> ApiResult<String> {
        known(sid)?;
        Ok(TID.into())
    }

    async fn resume_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>> {
        known(sid)?;
        Ok(Some(turn()))
    }

    async fn drain_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>> {
        known(sid)?;
        Ok(None)
    }

    async fn trace(&self, sid: &str, _engine_tid: &str) -> ApiResult<Trace> {
        known(sid)?;
        Ok(Trace {
            iterations: vec![json!({"id": "i1"})],
        })
    }

    async fn subscribe(
        &self,
        sid: &str,
        cursor: Cursor,
        _kick: CancellationToken,
    ) -> ApiResult<Subscription> {
        known(sid)?;
        let (_tx, rx) = live::channel(8);
        Ok(Subscription {
            session_id: sid.into(),
            ready: Ready {
                cursor: cursor.0.max(0),
                current_turn_id: None,
                is_live: false,
            },
            gap: None,
            replay: vec![],
            rest: None,
            live: rx,
        })
    }

    async fn events_since(&self, sid: &str, cursor: i64) -> ApiResult<Vec<JournalEntry>> {
        known(sid)?;
        let stored = r#"{"type":"turn.started","seq":2,"turn_id":"t"}"#.to_string();
        let event = StoredJson::parse(stored).map(JournalEntry::Event);
        let gap = JournalEntry::Gap(StreamGap {
            kind: "stream.gap".into(),
            session_id: sid.into(),
            from: cursor + 1,
            to: 1,
        });
        Ok([Some(gap), event].into_iter().flatten().collect())
    }

    async fn seq(&self, sid: &str) -> ApiResult<i64> {
        known(sid)?;
        Ok(7)
    }

    async fn human_input(&self, sid: &str) -> ApiResult<HumanInputList> {
        known(sid)?;
        Ok(HumanInputList {
            requests: vec![json!({"id": RID, "title": "Name?"})],
        })
    }

    async fn human_input_submit(
        &self,
        sid: &str,
        rid: &str,
        values: Map<String, Value>,
    ) -> ApiResult<HumanInputSubmitted> {
        known(sid)?;
        if rid != RID {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "human-input-not-found",
                format!("no pending request {rid}"),
            ));
        }
        let mut errors = Map::new();
        if !values.contains_key("name") {
            errors.insert("name".into(), json!("is required"));
        }
        Ok(HumanInputSubmitted {
            is_accepted: errors.is_empty(),
            request_id: rid.into(),
            reason: None,
            errors: (!errors.is_empty()).then_some(errors),
        })
    }

    async fn human_input_cancel(&self, sid: &str, rid: &str) -> ApiResult<HumanInputCancelled> {
        known(sid)?;
        Ok(HumanInputCancelled {
            is_cancelled: rid == RID,
            request_id: rid.into(),
        })
    }

    async fn live_views(&self, sid: &str) -> ApiResult<LiveViews> {
        known(sid)?;
        Ok(LiveViews { views: vec![] })
    }

    async fn live_log(
        &self,
        sid: &str,
        vid: &str,
        nid: &str,
        from: usize,
        limit: usize,
    ) -> ApiResult<LiveLog> {
        known(sid)?;
        self.calls.push(format!("live_log {vid} {from} {limit}"));
        Ok(LiveLog {
            node_id: nid.into(),
            from,
            total: 0,
            lines: vec![],
        })
    }

    async fn live_focus(&self, sid: &str, vid: &str, body: Value) -> ApiResult<LiveFocused> {
        known(sid)?;
        Ok(LiveFocused {
            focused_ids: vec![],
            node_id: body["node_id"].as_str().unwrap_or_default().into(),
            view_id: vid.into(),
        })
    }

    async fn live_interrupt(
        &self,
        sid: &str,
        vid: &str,
        note: Option<String>,
    ) -> ApiResult<LiveInterrupted> {
        known(sid)?;
        self.calls.push(format!("live_interrupt {note:?}"));
        Ok(LiveInterrupted {
            is_interrupted: true,
            view_id: vid.into(),
        })
    }

    async fn slashes(&self, sid: &str) -> ApiResult<SlashPalette> {
        known(sid)?;
        Ok(SlashPalette {
            commands: vec![SlashCommand {
                name: "/help".into(),
                doc: "Show help".into(),
            }],
        })
    }

    async fn egress(&self, sid: &str, limit: usize, before: Option<i64>) -> ApiResult<EgressPage> {
        known(sid)?;
        self.calls.push(format!("egress {limit} {before:?}"));
        let decision = StoredJson::parse(r#"{"id":"e1","decision":"deny"}"#.to_string());
        Ok(EgressPage {
            decisions: decision.into_iter().collect(),
            has_more: false,
            next_before: None,
        })
    }

    async fn extensions(&self, _root: Option<String>) -> ApiResult<ExtensionsListing> {
        Ok(ExtensionsListing::default())
    }

    async fn reload_extensions(&self, root: Option<String>) -> ApiResult<ReloadAnswer> {
        self.calls.push(format!("reload {root:?}"));
        Ok(ReloadAnswer {
            status: ReloadStatus::Ok,
            title: "Reloaded".into(),
            extensions: ExtensionsListing::default(),
        })
    }

    async fn sandbox_env(
        &self,
        session_id: Option<String>,
        _root: Option<String>,
        _title: Option<String>,
        _command: Option<String>,
    ) -> ApiResult<SandboxEnv> {
        Ok(SandboxEnv {
            session_id: session_id.unwrap_or_else(|| SID.into()),
            cwd: "/w".into(),
            proxy_port: 1,
            ..Default::default()
        })
    }

    fn request_stop(&self) {
        self.calls.push("request_stop".into());
    }

    async fn patch_session(&self, sid: &str, patch: SessionPatch) -> ApiResult<()> {
        known(sid)?;
        self.calls.push(format!("patch_session {:?}", patch.title));
        Ok(())
    }

    async fn search_sessions(&self, _q: &str) -> ApiResult<SearchResults> {
        Ok(SearchResults::default())
    }

    async fn session_usage(&self, sid: &str) -> ApiResult<UsageAnswer> {
        known(sid)?;
        Ok(UsageAnswer { usage: None })
    }

    async fn transcript_markdown(&self, sid: &str) -> ApiResult<String> {
        known(sid)?;
        Ok("# fake\n".into())
    }

    async fn suggest_files(&self, sid: &str, _q: &str) -> ApiResult<Vec<FileSuggestion>> {
        known(sid)?;
        Ok(vec![])
    }

    async fn set_session_model(
        &self,
        sid: &str,
        pref: Option<ModelPref>,
    ) -> ApiResult<ModelAnswer> {
        known(sid)?;
        Ok(ModelAnswer { model: pref })
    }

    async fn router_status(&self) -> ApiResult<RouterAnswer> {
        Ok(RouterAnswer::default())
    }

    async fn patch_router(&self, patch: RouterPatch) -> ApiResult<RouterDefaults> {
        Ok(RouterDefaults {
            default_provider: patch.provider,
            default_model: patch.model,
            ..Default::default()
        })
    }

    async fn settings(&self) -> ApiResult<SettingsAnswer> {
        Ok(SettingsAnswer::default())
    }

    async fn setting(&self, id: &str) -> ApiResult<Toggle> {
        Ok(toggle(id))
    }

    async fn set_setting(&self, id: &str, _action: SettingAction) -> ApiResult<Toggle> {
        Ok(toggle(id))
    }

    async fn artifacts(&self, sid: &str) -> ApiResult<ArtifactList> {
        known(sid)?;
        Ok(ArtifactList::default())
    }

    async fn iteration_attachments(&self, sid: &str, iid: &str) -> ApiResult<IterationAttachments> {
        known(sid)?;
        Ok(IterationAttachments {
            attachments: vec![attachment(iid)],
        })
    }

    async fn iteration_attachment_bytes(
        &self,
        sid: &str,
        _iid: &str,
        _index: i64,
    ) -> ApiResult<StoredBytes> {
        known(sid)?;
        Ok(StoredBytes {
            media_type: "text/plain".into(),
            filename: "a.txt".into(),
            bytes: b"hi".to_vec(),
        })
    }

    async fn save_revision(
        &self,
        sid: &str,
        iid: &str,
        _rev: NewRevision,
    ) -> ApiResult<IterationAttachment> {
        known(sid)?;
        Ok(attachment(iid))
    }

    async fn devices(&self) -> ApiResult<DevicesAnswer> {
        Ok(DevicesAnswer {
            devices: vec![],
            push: push_status(),
        })
    }

    async fn register_device(&self, _input: DeviceInput) -> ApiResult<DeviceRegistered> {
        Err(ApiError::bad_request("invalid-request", "no push here"))
    }

    async fn unregister_device(&self, _token: &str) -> ApiResult<bool> {
        Ok(false)
    }

    async fn push_status(&self) -> PushStatus {
        push_status()
    }

    async fn delete_project(&self, pid: &str, _recursive: bool) -> ApiResult<ProjectDeleted> {
        Ok(ProjectDeleted {
            project_id: pid.into(),
            ..Default::default()
        })
    }

    async fn fork_points(&self, sid: &str) -> ApiResult<ForkPoints> {
        known(sid)?;
        Ok(ForkPoints::default())
    }

    async fn fork_session(&self, sid: &str, _req: ForkRequest) -> ApiResult<String> {
        known(sid)?;
        Ok(SID.into())
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
}

const DRAFT: &str = "w-fake";

fn draft(is_current: bool) -> WorkspaceDraft {
    WorkspaceDraft {
        workspace_id: DRAFT.into(),
        label: "try".into(),
        root: "/drafts/try".into(),
        repo_root: "/repo".into(),
        fork_ms: 1,
        is_current,
        backend: "git".into(),
        branch: Some("vis-draft/try".into()),
    }
}

fn workspace(d: Option<&WorkspaceDraft>) -> SessionWorkspace {
    match d {
        Some(d) => SessionWorkspace {
            root: d.root.clone(),
            repo_root: Some(d.repo_root.clone()),
            label: d.label.clone(),
            fork_ms: Some(d.fork_ms),
            is_draft: true,
            workspace_id: Some(d.workspace_id.clone()),
        },
        None => SessionWorkspace {
            root: "/repo".into(),
            repo_root: Some("/repo".into()),
            label: "repo".into(),
            fork_ms: None,
            is_draft: false,
            workspace_id: None,
        },
    }
}
