//! The session side of drafts: where a session's tools run, the `/draft` slash command,
//! the draft functions of the model's tools, the Companion routes' answers, the op hooks
//! and the one function that publishes workspace changes.

use super::Gateway;
use crate::drafts::service::{Applied, Target};
use crate::drafts::{Draft, DraftError, Hooks};
use crate::extensions::{ExtensionHost, SessionCtx};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use vis_companion_api::events::{Event, WorkspaceUpdated};
use vis_companion_api::records::{SessionWorkspace, WorkspaceChange, WorkspaceDraft};
use vis_companion_api::{ApiError, ApiResult};

/// The extensions' op hooks of one session.
pub struct SessionHooks {
    host: ExtensionHost,
    session: SessionCtx,
}

#[async_trait::async_trait]
impl Hooks for SessionHooks {
    async fn before(&self, op: &str, args: &Value) -> Result<(), String> {
        self.host
            .tools()
            .before_hooks(&self.session, op, std::slice::from_ref(args))
            .await
            .map_err(|e| e.message)
    }
    async fn after(&self, op: &str, args: &Value, result: &str) {
        self.host
            .tools()
            .after_hooks(&self.session, op, std::slice::from_ref(args), result)
            .await
    }
}

pub fn api_error(e: DraftError) -> ApiError {
    let status = axum::http::StatusCode::from_u16(e.status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut err = ApiError::new(status, e.kind, e.message);
    if !e.files.is_empty() {
        err = err.with("files", json!(e.files));
    }
    err
}

fn label_of(root: &str) -> String {
    Path::new(root)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| root.to_string())
}

/// The nearest folder holding `.git` (trunk's `repo_root`).
pub fn repo_root_of(root: &str) -> Option<String> {
    let mut p = Path::new(root);
    loop {
        if p.join(".git").exists() {
            return Some(p.to_string_lossy().into_owned());
        }
        p = p.parent()?;
    }
}

/// A draft as the Companion lists it.
pub fn draft_item(d: &Draft, current: Option<&str>) -> WorkspaceDraft {
    WorkspaceDraft {
        workspace_id: d.workspace_id.clone(),
        label: d.label.clone(),
        root: d.root.to_string_lossy().into_owned(),
        repo_root: d.repo_root.to_string_lossy().into_owned(),
        fork_ms: d.fork_ms,
        is_current: current == Some(d.workspace_id.as_str()),
        backend: d.backend.as_str().into(),
        branch: d.branch.clone(),
    }
}

/// What a step of the draft lifecycle did, for the event and the answers.
#[derive(Clone, Copy)]
enum Action {
    Created,
    Applied,
    Stashed,
    Resumed,
    Abandoned,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Applied => "applied",
            Action::Stashed => "stashed",
            Action::Resumed => "resumed",
            Action::Abandoned => "abandoned",
        }
    }
}

impl Gateway {
    /// THE place a session's working root is resolved: its draft's root while it is in
    /// one, else its real folder. Shell, sandbox children, the model's runtime, file tools
    /// and extension sessions all start from here.
    pub fn work_root(&self, sid: &str, trunk: &str) -> PathBuf {
        self.drafts
            .root_of(sid)
            .unwrap_or_else(|| PathBuf::from(trunk))
    }

    /// The session view's `workspace` object.
    pub fn workspace_view(&self, sid: &str, trunk: &str) -> SessionWorkspace {
        match self.drafts.current(sid) {
            Some(d) => SessionWorkspace {
                root: d.root.to_string_lossy().into_owned(),
                repo_root: Some(d.repo_root.to_string_lossy().into_owned()),
                label: d.label.clone(),
                fork_ms: Some(d.fork_ms),
                is_draft: true,
                workspace_id: Some(d.workspace_id),
            },
            None => SessionWorkspace {
                root: trunk.to_string(),
                repo_root: repo_root_of(trunk),
                label: label_of(trunk),
                fork_ms: None,
                is_draft: false,
                workspace_id: None,
            },
        }
    }

    async fn trunk(&self, sid: &str) -> ApiResult<String> {
        Ok(self.sessions.get(sid).await?.lock().row.root.clone())
    }

    fn hooks(&self, sid: &str, trunk: &str) -> SessionHooks {
        SessionHooks {
            host: self.extensions.clone(),
            session: self.session_in(sid, Path::new(trunk)),
        }
    }

    /// Publishes a workspace change on the session's stream and restarts the session's
    /// model runtime, whose working folder is the old root.
    fn workspace_changed(
        &self,
        sid: &str,
        trunk: &str,
        action: Action,
        d: &Draft,
    ) -> WorkspaceChange {
        self.model_sandboxes.stop(sid);
        let change = WorkspaceChange {
            workspace: self.workspace_view(sid, trunk),
            draft: Some(draft_item(
                d,
                self.drafts.current(sid).map(|c| c.workspace_id).as_deref(),
            )),
        };
        self.publish_workspace_event(
            sid,
            Event::SessionWorkspaceUpdated(WorkspaceUpdated {
                session_id: sid.to_string(),
                action: action.as_str().to_string(),
                workspace: change.workspace.clone(),
                draft: change.draft.clone(),
            }),
        );
        change
    }

    /// The one place draft and fork changes go onto a session's stream:
    /// `session.workspace_updated {action, workspace, draft}` and `session.forked
    /// {fork_session_id, through_turn_id}`.
    pub fn publish_workspace_event(&self, sid: &str, event: Event) {
        self.bus.publish(sid, event);
    }

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

    pub async fn draft_create(
        &self,
        sid: &str,
        label: &str,
        clean: bool,
    ) -> Result<WorkspaceChange, DraftError> {
        let trunk = self.trunk(sid).await.map_err(from_api)?;
        let hooks = self.hooks(sid, &trunk);
        let d = self
            .drafts
            .create(sid, Path::new(&trunk), label, clean, &hooks)
            .await?;
        Ok(self.workspace_changed(sid, &trunk, Action::Created, &d))
    }

    pub async fn draft_apply(
        &self,
        sid: &str,
        message: Option<&str>,
    ) -> Result<(WorkspaceChange, Applied), DraftError> {
        let trunk = self.trunk(sid).await.map_err(from_api)?;
        let hooks = self.hooks(sid, &trunk);
        let applied = self.drafts.apply(sid, message, &hooks).await?;
        let change = self.workspace_changed(sid, &trunk, Action::Applied, &applied.draft);
        Ok((change, applied))
    }

    pub async fn draft_stash(&self, sid: &str) -> Result<WorkspaceChange, DraftError> {
        let trunk = self.trunk(sid).await.map_err(from_api)?;
        let d = self.drafts.stash(sid).await?;
        Ok(self.workspace_changed(sid, &trunk, Action::Stashed, &d))
    }

    pub async fn draft_resume(
        &self,
        sid: &str,
        target: Target,
    ) -> Result<WorkspaceChange, DraftError> {
        let trunk = self.trunk(sid).await.map_err(from_api)?;
        let d = self.drafts.resume(sid, Path::new(&trunk), target).await?;
        Ok(self.workspace_changed(sid, &trunk, Action::Resumed, &d))
    }

    pub async fn draft_abandon(
        &self,
        sid: &str,
        id: Option<&str>,
        reason: Option<&str>,
    ) -> Result<WorkspaceChange, DraftError> {
        let trunk = self.trunk(sid).await.map_err(from_api)?;
        let hooks = self.hooks(sid, &trunk);
        let d = self
            .drafts
            .abandon(sid, Path::new(&trunk), id, reason, &hooks)
            .await?;
        Ok(self.workspace_changed(sid, &trunk, Action::Abandoned, &d))
    }

    // -- the Companion routes ---------------------------------------------------------

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
            self.draft_stash(sid).await.map_err(api_error)?;
        }
        Ok(())
    }

    pub async fn route_create_draft(
        &self,
        sid: &str,
        label: &str,
        clean: bool,
    ) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        crate::drafts::check_label(label).map_err(api_error)?;
        self.park(sid).await?;
        self.draft_create(sid, label, clean)
            .await
            .map_err(api_error)
    }

    pub async fn route_resume_draft(&self, sid: &str, id: &str) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        if self
            .drafts
            .current(sid)
            .is_some_and(|d| d.workspace_id == id)
        {
            let trunk = self.trunk(sid).await?;
            let d = self.drafts.current(sid);
            return Ok(WorkspaceChange {
                workspace: self.workspace_view(sid, &trunk),
                draft: d.map(|d| draft_item(&d, Some(id))),
            });
        }
        self.park(sid).await?;
        self.draft_resume(sid, Target::Id(id.to_string()))
            .await
            .map_err(api_error)
    }

    pub async fn route_stash_draft(&self, sid: &str) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        let trunk = self.trunk(sid).await?;
        if self.drafts.current(sid).is_none() {
            return Ok(WorkspaceChange {
                workspace: self.workspace_view(sid, &trunk),
                draft: None,
            });
        }
        self.draft_stash(sid).await.map_err(api_error)
    }

    pub async fn route_abandon_draft(
        &self,
        sid: &str,
        id: &str,
        reason: Option<String>,
    ) -> ApiResult<WorkspaceChange> {
        self.ensure_idle(sid)?;
        self.draft_abandon(sid, Some(id), reason.as_deref())
            .await
            .map_err(api_error)
    }

    // -- `/draft` ---------------------------------------------------------------------

    /// `/draft [new NAME | clean NAME | list | apply [MESSAGE] | stash | resume NAME | abandon [REASON]]`.
    pub(super) async fn slash_draft(&self, sid: &str, args: &str) -> Result<String, String> {
        let (sub, rest) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
        let rest = rest.trim();
        let shown = |e: DraftError| e.message;
        let trunk = self.trunk(sid).await.map_err(|e| e.message)?;
        match sub {
            "" | "status" => Ok(self.draft_status(sid, &trunk).await),
            "list" => self.draft_list_text(sid, &trunk).await.map_err(shown),
            "new" | "clean" => {
                let c = self
                    .draft_create(sid, rest, sub == "clean")
                    .await
                    .map_err(shown)?;
                Ok(format!(
                    "Draft **{}** created and entered: the session now works in `{}`. \
                     Trunk is untouched until `/draft apply`.",
                    c.workspace.label, c.workspace.root
                ))
            }
            "apply" => {
                let msg = (!rest.is_empty()).then_some(rest);
                let (c, a) = self.draft_apply(sid, msg).await.map_err(shown)?;
                let what = match (&a.commit, a.files.len()) {
                    (_, 0) => "nothing had changed".to_string(),
                    (Some(sha), n) => format!(
                        "{n} file(s) merged into {} (commit {})",
                        a.draft.target_branch.clone().unwrap_or_default(),
                        &sha[..sha.len().min(12)]
                    ),
                    (None, n) => format!("{n} file(s) landed in {}", c.workspace.root),
                };
                Ok(format!(
                    "Draft **{}** applied: {what}. Back on trunk.",
                    a.draft.label
                ))
            }
            "stash" => {
                let c = self.draft_stash(sid).await.map_err(shown)?;
                let label = c.draft.map(|d| d.label).unwrap_or_default();
                Ok(format!(
                    "Draft **{label}** stashed: back on trunk. `/draft resume {label}` returns to it."
                ))
            }
            "resume" if rest.is_empty() => {
                let list = self.draft_list_text(sid, &trunk).await.map_err(shown)?;
                Err(format!("usage: /draft resume NAME\n\n{list}"))
            }
            "resume" => {
                crate::drafts::check_label(rest).map_err(shown)?;
                let c = self
                    .draft_resume(sid, Target::Label(rest.to_string()))
                    .await
                    .map_err(shown)?;
                Ok(format!(
                    "Resumed draft **{}**: the session works in `{}`.",
                    c.workspace.label, c.workspace.root
                ))
            }
            "abandon" => {
                let reason = (!rest.is_empty()).then_some(rest);
                let c = self.draft_abandon(sid, None, reason).await.map_err(shown)?;
                let label = c.draft.map(|d| d.label).unwrap_or_default();
                Ok(format!(
                    "Draft **{label}** abandoned and removed. Back on trunk."
                ))
            }
            other => Err(format!(
                "unknown /draft command {other:?}: use /draft, /draft new NAME, /draft list, \
                 /draft apply, /draft stash, /draft resume NAME or /draft abandon"
            )),
        }
    }

    async fn draft_status(&self, sid: &str, trunk: &str) -> String {
        match self.drafts.current(sid) {
            None => format!("On **trunk**: the session works in its real folder `{trunk}`."),
            Some(d) => {
                let changed = self
                    .drafts
                    .changed(&d)
                    .await
                    .map(|f| format!("{} changed file(s)", f.len()))
                    .unwrap_or_else(|e| format!("changes unknown: {e}"));
                format!(
                    "In draft **{}** ({} backend{}): the session works in `{}`; {changed}.",
                    d.label,
                    d.backend.as_str(),
                    d.branch
                        .as_ref()
                        .map(|b| format!(", branch {b}"))
                        .unwrap_or_default(),
                    d.root.display()
                )
            }
        }
    }

    async fn draft_list_text(&self, sid: &str, trunk: &str) -> Result<String, DraftError> {
        let list = self.drafts.list(Path::new(trunk)).await?;
        if list.is_empty() {
            return Ok("No drafts here: create one with `/draft new NAME`.".into());
        }
        let current = self.drafts.current(sid).map(|d| d.workspace_id);
        let mut out = String::from("Drafts, newest first:\n");
        for d in &list {
            let mark = if current.as_deref() == Some(d.workspace_id.as_str()) {
                " (current)"
            } else if d.session_id.is_some() {
                " (in use by another session)"
            } else {
                ""
            };
            out.push_str(&format!(
                "- **{}**{mark} — `{}`\n",
                d.label,
                d.root.display()
            ));
        }
        Ok(out)
    }
}

fn from_api(e: ApiError) -> DraftError {
    DraftError::not_found(e.message)
}

/// The draft functions of the model's tools, answered by the gateway.
pub struct ModelDrafts(pub Weak<Gateway>);

#[async_trait::async_trait]
impl crate::drafts::SessionDrafts for ModelDrafts {
    fn root(&self, sid: &str) -> Option<PathBuf> {
        self.0.upgrade()?.drafts.root_of(sid)
    }

    async fn call(
        &self,
        sid: &str,
        func: &str,
        args: &Map<String, Value>,
    ) -> Result<Value, DraftError> {
        let gw = self
            .0
            .upgrade()
            .ok_or_else(|| DraftError::failed("the gateway is stopping"))?;
        let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
        let (change, extra) = match func {
            "draft_create" => {
                let label = text("label").unwrap_or_default();
                (gw.draft_create(sid, &label, false).await?, json!({}))
            }
            "draft_approve" => {
                let (c, a) = gw.draft_apply(sid, text("message").as_deref()).await?;
                (c, json!({"files": a.files, "commit": a.commit}))
            }
            "draft_discard" => (
                gw.draft_abandon(sid, None, text("reason").as_deref())
                    .await?,
                json!({}),
            ),
            other => return Err(DraftError::failed(format!("no draft function {other}"))),
        };
        let mut out = json!({"workspace": change.workspace, "draft": change.draft,
            "cwd": change.workspace.root});
        if let (Some(o), Value::Object(e)) = (out.as_object_mut(), extra) {
            o.extend(e);
        }
        Ok(out)
    }
}

/// Handle given to the model's tools.
pub fn model_drafts(gw: &Arc<Gateway>) -> Arc<dyn crate::drafts::SessionDrafts> {
    Arc::new(ModelDrafts(Arc::downgrade(gw)))
}

/// A draft function as a tool of the `model_tools: functions` mode.
pub struct DraftTool {
    pub name: &'static str,
    pub drafts: Arc<dyn crate::drafts::SessionDrafts>,
}

#[async_trait::async_trait]
impl crate::tools::Tool for DraftTool {
    fn spec(&self) -> vis_providers::ToolSpec {
        let (description, params) = match self.name {
            "draft_create" => (
                "Create an isolated draft workspace (a copy of the project) and move this session into it; later commands and edits change only the draft until draft_approve.",
                json!({"label": {"type": "string", "description": "the draft's name: letters, digits, . _ -"}}),
            ),
            "draft_approve" => (
                "Land the current draft's changes in the real project (git: commit and merge into the branch it came from) and return to it.",
                json!({"message": {"type": "string", "description": "the commit message"}}),
            ),
            _ => (
                "Discard the current draft for good and return to the real project.",
                json!({}),
            ),
        };
        let required: Vec<&str> = if self.name == "draft_create" {
            vec!["label"]
        } else {
            vec![]
        };
        vis_providers::ToolSpec {
            name: self.name.into(),
            description: description.into(),
            parameters: json!({"type": "object", "properties": params, "required": required}),
        }
    }

    async fn call(&self, ctx: &crate::tools::ToolCtx, args: Value) -> crate::tools::ToolOutput {
        let args = match args {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        match self.drafts.call(&ctx.session_id, self.name, &args).await {
            Ok(v) => crate::tools::ToolOutput::ok(v.to_string()),
            Err(e) => crate::tools::ToolOutput::fail(e.message),
        }
    }
}
