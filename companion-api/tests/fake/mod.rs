//! Fakes of the Companion areas for the route tests (one file per area): one known session with one known turn, canned
//! records, and the errors the real gateway gives for anything else. It records the
//! arguments the routes pass, so a test can check what a route parsed.

pub use async_trait::async_trait;
pub use axum::http::StatusCode;
pub use serde_json::{json, Map, Value};
pub use tokio_util::sync::CancellationToken;
pub use vis_companion_api::records::*;
pub use vis_companion_api::wire::*;
pub use vis_companion_api::{
    live, ApiError, ApiResult, Areas, CreateSession, Cursor, EventsApi, FolderListing,
    HumanInputApi, MachineApi, Ready, SessionListQuery, SessionsApi, Stats, SubmitTurn,
    Subscription, TurnsApi, WorkspaceApi,
};

mod events;
mod human_input;
mod machine;
mod sessions;
mod turns;
mod workspace;

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

/// Every area answered by `engine` (a test may swap one area for its own fake).
pub fn areas(engine: std::sync::Arc<FakeEngine>) -> Areas {
    Areas {
        sessions: engine.clone(),
        turns: engine.clone(),
        events: engine.clone(),
        human_input: engine.clone(),
        workspace: engine.clone(),
        machine: engine,
        mcp: None,
        learn: None,
        providers: None,
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
