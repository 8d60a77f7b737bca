//! Workspaces: the session side of drafts. Where a session's tools run (`work_root`, the one
//! place it is resolved), the session view's `workspace`, the steps of the draft lifecycle
//! (create, apply, stash, resume, abandon) with their op hooks, and the one function that
//! publishes workspace changes. The `/draft` command (`slash.rs`), the Companion's workspace
//! area (`area.rs`, with `@file` suggestions and the folder browser of `folders.rs`) and the draft functions of the model's tools (`model.rs`) are
//! surfaces over these steps; the extensions' op hooks are called in `hooks.rs` only.

mod area;
mod error;
mod files;
mod folders;
mod hooks;
mod model;
mod slash;

use super::sessions::Sessions;
use crate::bus::Bus;
use crate::configuration::Configuration;
use crate::drafts::service::Drafts;
use crate::drafts::service::{Applied, Target};
use crate::drafts::{Draft, DraftError};
use crate::extensions::{ExtensionHost, SessionCtx};
use crate::human_input::{Answer, HumanInput, Question};
use crate::model_sandbox::Sandboxes;
use crate::records::{SessionError, SessionResult};
use hooks::SessionHooks;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vis_companion_api::events::{Event, WorkspaceUpdated};
use vis_companion_api::records::{SessionWorkspace, WorkspaceChange, WorkspaceDraft};

/// The sessions' workspaces: which folder each session works in and how it moves between
/// trunk and its drafts.
pub struct Workspaces {
    drafts: Arc<Drafts>,
    sessions: Arc<Sessions>,
    bus: Arc<Bus>,
    /// The extensions, for the op hooks and the session context they see.
    extensions: ExtensionHost,
    /// The model's runtimes, restarted when their session changes folder.
    model_sandboxes: Arc<Sandboxes>,
    /// The project's `drafts:` settings.
    configuration: Arc<Configuration>,
    /// Where the model's `draft_approve` asks the user.
    human_input: Arc<HumanInput>,
    /// The `@file` suggestion indexes of the workspaces.
    files: files::FileSuggestions,
}

/// The services a [`Workspaces`] uses.
pub struct WorkspaceDeps {
    pub drafts: Arc<Drafts>,
    pub sessions: Arc<Sessions>,
    pub bus: Arc<Bus>,
    pub extensions: ExtensionHost,
    pub model_sandboxes: Arc<Sandboxes>,
    pub configuration: Arc<Configuration>,
    pub human_input: Arc<HumanInput>,
}

impl Workspaces {
    pub fn new(d: WorkspaceDeps) -> Workspaces {
        Workspaces {
            drafts: d.drafts,
            sessions: d.sessions,
            bus: d.bus,
            extensions: d.extensions,
            model_sandboxes: d.model_sandboxes,
            configuration: d.configuration,
            human_input: d.human_input,
            files: Default::default(),
        }
    }

    /// THE place a session's working root is resolved: its draft's root while it is in
    /// one, else its real folder. Shell, sandbox children, the model's runtime, file tools
    /// and extension sessions all start from here.
    pub fn work_root(&self, sid: &str, trunk: &str) -> PathBuf {
        self.drafts
            .root_of(sid)
            .unwrap_or_else(|| PathBuf::from(trunk))
    }

    /// The extension host's view of a session in its current workspace: the project is
    /// the real folder (`trunk`), the workspace is the draft's folder while it is in one.
    pub fn session(&self, sid: &str, trunk: &Path) -> SessionCtx {
        SessionCtx {
            id: sid.to_string(),
            project_root: Some(trunk.to_path_buf()),
            workspace_root: self.work_root(sid, &trunk.to_string_lossy()),
        }
    }

    /// The session view's `workspace` object.
    pub fn view(&self, sid: &str, trunk: &str) -> SessionWorkspace {
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

    /// The one place draft and fork changes go onto a session's stream:
    /// `session.workspace_updated {action, workspace, draft}` and `session.forked
    /// {fork_session_id, through_turn_id}`.
    pub fn publish(&self, sid: &str, event: Event) {
        self.bus.publish(sid, event);
    }

    /// A deleted session's draft stays, parked: another session of the repository can
    /// resume it.
    pub async fn release(&self, sid: &str) {
        self.drafts.release(sid).await;
    }

    async fn trunk(&self, sid: &str) -> SessionResult<String> {
        Ok(self.sessions.get(sid).await?.lock().row.root.clone())
    }

    fn hooks(&self, sid: &str, trunk: &str) -> SessionHooks {
        SessionHooks::new(self.extensions.clone(), self.session(sid, Path::new(trunk)))
    }

    /// Publishes a workspace change on the session's stream and restarts the session's
    /// model runtime, whose working folder is the old root.
    fn changed(&self, sid: &str, trunk: &str, action: Action, d: &Draft) -> WorkspaceChange {
        self.model_sandboxes.stop(sid);
        let change = WorkspaceChange {
            workspace: self.view(sid, trunk),
            draft: Some(draft_item(
                d,
                self.drafts.current(sid).map(|c| c.workspace_id).as_deref(),
            )),
        };
        self.publish(
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

    /// Creates a draft of the session's folder and moves the session into it.
    pub async fn create(
        &self,
        sid: &str,
        label: &str,
        clean: bool,
    ) -> Result<WorkspaceChange, DraftError> {
        let trunk = self.trunk(sid).await.map_err(no_session)?;
        let hooks = self.hooks(sid, &trunk);
        let d = self
            .drafts
            .create(sid, Path::new(&trunk), label, clean, &hooks)
            .await?;
        Ok(self.changed(sid, &trunk, Action::Created, &d))
    }

    /// Lands the session's draft in trunk and moves the session back there.
    pub async fn apply(
        &self,
        sid: &str,
        message: Option<&str>,
    ) -> Result<(WorkspaceChange, Applied), DraftError> {
        let trunk = self.trunk(sid).await.map_err(no_session)?;
        let hooks = self.hooks(sid, &trunk);
        let mode = self.drafts_config(&trunk).await?.apply.unwrap_or_default();
        let applied = self.drafts.apply(sid, message, mode, &hooks).await?;
        let change = self.changed(sid, &trunk, Action::Applied, &applied.draft);
        Ok((change, applied))
    }

    async fn drafts_config(&self, trunk: &str) -> Result<crate::config::DraftsSection, DraftError> {
        self.configuration
            .project(Path::new(trunk))
            .await
            .map(|c| c.drafts)
            .map_err(|e| DraftError::unavailable(format!("the project's configuration: {e}")))
    }

    /// The model's `draft_approve`: unless the project sets `drafts.model_may_approve:
    /// true`, the user is asked first (a form on the phone) and anything but an approval
    /// lands nothing (docs/decisions.md, W1).
    pub async fn approve_by_model(
        &self,
        sid: &str,
        message: Option<&str>,
    ) -> Result<(WorkspaceChange, Applied), DraftError> {
        let trunk = self.trunk(sid).await.map_err(no_session)?;
        if self.drafts_config(&trunk).await?.model_may_approve != Some(true) {
            let Some(d) = self.drafts.current(sid) else {
                return Err(DraftError::OnTrunk(
                    "the session is on trunk (its real folder): there is no draft to apply".into(),
                ));
            };
            let files = self.drafts.changed(&d).await?;
            let into = match &d.target_branch {
                Some(b) => format!("the branch `{b}` of `{}`", d.repo_root.display()),
                None => format!("`{}`", d.trunk_root.display()),
            };
            let shown: Vec<String> = files.iter().take(20).map(|f| format!("- `{f}`")).collect();
            let more = files.len().saturating_sub(shown.len());
            let description =
                format!(
                "The model asks to land the draft '{}' in {into}{}.\n\n{} file(s) changed:\n{}{}",
                d.label,
                message.map(|m| format!(" with the message \"{m}\"")).unwrap_or_default(),
                files.len(),
                shown.join("\n"),
                if more > 0 { format!("\n- … and {more} more") } else { String::new() },
            );
            let q = Question {
                title: format!("Land the draft '{}'?", d.label),
                description,
                source: "draft_approve".into(),
            };
            if let Answer::Declined(reason) = self.human_input.confirm(sid, q).await {
                return Err(DraftError::declined(format!(
                    "the user declined to land the draft '{}' ({reason}); nothing was changed \
                     and the session is still in the draft",
                    d.label
                )));
            }
        }
        self.apply(sid, message).await
    }

    /// Parks the session's draft and moves the session back to trunk.
    pub async fn stash(&self, sid: &str) -> Result<WorkspaceChange, DraftError> {
        let trunk = self.trunk(sid).await.map_err(no_session)?;
        let d = self.drafts.stash(sid).await?;
        Ok(self.changed(sid, &trunk, Action::Stashed, &d))
    }

    /// Moves the session into a parked draft.
    pub async fn resume(&self, sid: &str, target: Target) -> Result<WorkspaceChange, DraftError> {
        let trunk = self.trunk(sid).await.map_err(no_session)?;
        let d = self.drafts.resume(sid, Path::new(&trunk), target).await?;
        Ok(self.changed(sid, &trunk, Action::Resumed, &d))
    }

    /// Removes a draft (the session's current one when `id` is `None`) for good.
    pub async fn abandon(
        &self,
        sid: &str,
        id: Option<&str>,
        reason: Option<&str>,
    ) -> Result<WorkspaceChange, DraftError> {
        let trunk = self.trunk(sid).await.map_err(no_session)?;
        let hooks = self.hooks(sid, &trunk);
        let d = self
            .drafts
            .abandon(sid, Path::new(&trunk), id, reason, &hooks)
            .await?;
        Ok(self.changed(sid, &trunk, Action::Abandoned, &d))
    }
}

/// A draft step on a session that cannot be read: the draft is not found.
fn no_session(e: SessionError) -> DraftError {
    DraftError::not_found(e.to_string())
}

fn label_of(root: &str) -> String {
    Path::new(root)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| root.to_string())
}

/// The nearest folder holding `.git` (trunk's `repo_root`).
fn repo_root_of(root: &str) -> Option<String> {
    let mut p = Path::new(root);
    loop {
        if p.join(".git").exists() {
            return Some(p.to_string_lossy().into_owned());
        }
        p = p.parent()?;
    }
}

/// A draft as the Companion lists it.
fn draft_item(d: &Draft, current: Option<&str>) -> WorkspaceDraft {
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
