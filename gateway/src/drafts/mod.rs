//! Drafts: isolated workspaces a session can try, keep (apply), park (stash), resume or
//! throw away (abandon).
//!
//! - [`git`]: the git backend — a `git worktree` on its own branch, seeded from the trunk's
//!   current tree (uncommitted and untracked files included) without touching the user's
//!   index or working tree; apply = commit + merge into the target branch.
//! - [`copy`]: the copy backend outside git — a reflink (else plain) copy with a content
//!   manifest of the baseline; apply lands the changed files, refusing on conflicts.
//! - [`rows`]: the SQLite records (drafts and forks), so state survives restarts.
//! - [`service`]: [`Drafts`], the small lifecycle API (create, status, list, apply, stash,
//!   resume, abandon) and the in-memory pin of each session's current draft.

pub mod copy;
pub mod git;
pub mod rows;
pub mod service;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// How a draft isolates its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Git,
    Copy,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Git => "git",
            Backend::Copy => "copy",
        }
    }
}

/// Where a draft is in its life. Applied and abandoned drafts are kept as history only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DraftState {
    Active,
    Applied,
    Abandoned,
}

impl DraftState {
    pub fn as_str(self) -> &'static str {
        match self {
            DraftState::Active => "active",
            DraftState::Applied => "applied",
            DraftState::Abandoned => "abandoned",
        }
    }
}

/// One draft, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Draft {
    pub workspace_id: String,
    pub label: String,
    /// The real root the draft was derived from (the git top level, or the copied folder).
    pub repo_root: PathBuf,
    /// The session's trunk root when the draft was made (may be a folder inside the repo).
    pub trunk_root: PathBuf,
    /// The draft's top folder (the worktree or the copy).
    pub dir: PathBuf,
    /// The draft's twin of `trunk_root`: where the session's tools run.
    pub root: PathBuf,
    pub backend: Backend,
    /// git: the draft's branch and the branch apply merges into.
    pub branch: Option<String>,
    pub target_branch: Option<String>,
    /// git: the commit the draft started from.
    pub baseline: Option<String>,
    pub state: DraftState,
    /// The session currently inside the draft (at most one).
    pub session_id: Option<String>,
    pub created_by: String,
    pub fork_ms: i64,
    #[serde(default)]
    pub ended_ms: Option<i64>,
    #[serde(default)]
    pub reason: Option<String>,
}

impl Draft {
    /// The arguments the `draft/*` op hooks receive.
    pub fn hook_args(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("workspace_id".into(), self.workspace_id.clone().into());
        m.insert("label".into(), self.label.clone().into());
        m.insert(
            "root".into(),
            self.root.to_string_lossy().into_owned().into(),
        );
        m.insert(
            "repo_root".into(),
            self.repo_root.to_string_lossy().into_owned().into(),
        );
        m.insert("backend".into(), self.backend.as_str().into());
        m
    }
}

/// Why a draft operation was refused or failed; each variant carries the sentence the user
/// sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DraftError {
    /// The label is not a usable branch and folder name.
    #[error("{0}")]
    BadLabel(String),
    #[error("{0}")]
    NotFound(String),
    /// The session is on trunk (its real folder) and the step needs a draft.
    #[error("{0}")]
    OnTrunk(String),
    /// The session is already in a draft and the step needs trunk.
    #[error("{0}")]
    AlreadyInDraft(String),
    /// A draft, branch or folder of that name already exists.
    #[error("{0}")]
    Exists(String),
    /// The draft was applied or abandoned.
    #[error("{0}")]
    NotActive(String),
    /// The draft belongs to another repository than the session's.
    #[error("{0}")]
    OtherRepo(String),
    /// Another session is in the draft.
    #[error("{0}")]
    InUse(String),
    /// The draft's changes collide with trunk's (`files`: the files named).
    #[error("{message}")]
    Conflict { message: String, files: Vec<String> },
    /// An op hook refused (`vis.block(reason)`): the reason is what the user sees.
    #[error("{0}")]
    Blocked(String),
    /// The user was asked to approve and did not.
    #[error("{0}")]
    Declined(String),
    /// Drafts are not available for this folder.
    #[error("{0}")]
    Unavailable(String),
    /// A step failed on the way (a file, git, the store).
    #[error("{0}")]
    Failed(String),
}

impl DraftError {
    pub fn bad_label(message: impl Into<String>) -> DraftError {
        DraftError::BadLabel(message.into())
    }
    pub fn not_found(message: impl Into<String>) -> DraftError {
        DraftError::NotFound(message.into())
    }
    pub fn conflict(message: impl Into<String>, files: Vec<String>) -> DraftError {
        DraftError::Conflict {
            message: message.into(),
            files,
        }
    }
    pub fn blocked(reason: impl Into<String>) -> DraftError {
        DraftError::Blocked(reason.into())
    }
    pub fn declined(message: impl Into<String>) -> DraftError {
        DraftError::Declined(message.into())
    }
    pub fn unavailable(message: impl Into<String>) -> DraftError {
        DraftError::Unavailable(message.into())
    }
    pub fn failed(message: impl Into<String>) -> DraftError {
        DraftError::Failed(message.into())
    }
}

/// The op hooks a lifecycle step crosses (`draft/create`, `draft/approve`, `draft/discard`,
/// `git/commit`). A before hook's `Err(reason)` refuses the step.
#[async_trait::async_trait]
pub trait Hooks: Send + Sync {
    async fn before(&self, op: &str, args: &Value) -> Result<(), String>;
    async fn after(&self, op: &str, args: &Value, result: &str);
}

/// Runs the before hooks of `op`; a refusal becomes a `blocked-by-hook` error.
pub async fn guard(hooks: &dyn Hooks, op: &str, args: &Value) -> Result<(), DraftError> {
    hooks.before(op, args).await.map_err(|reason| {
        let reason = if reason.trim().is_empty() {
            format!("an extension's {op} hook refused without a reason")
        } else {
            reason
        };
        DraftError::blocked(reason)
    })
}

/// The draft functions of the model's tools (`draft_create(label)`, `draft_approve(message)`,
/// `draft_discard()`), and where a session's tools run, as the gateway answers them.
#[async_trait::async_trait]
pub trait SessionDrafts: Send + Sync {
    /// The session's working root while it is in a draft (`None`: trunk).
    fn root(&self, sid: &str) -> Option<PathBuf>;
    /// Runs one draft function; the answer describes the session's workspace afterwards.
    async fn call(
        &self,
        sid: &str,
        func: &str,
        args: &serde_json::Map<String, Value>,
    ) -> Result<Value, DraftError>;
}

/// The names of the draft functions.
pub const FUNCTIONS: [&str; 3] = ["draft_create", "draft_approve", "draft_discard"];

/// Longest accepted draft label, in characters.
pub const MAX_LABEL_CHARS: usize = 64;

/// Checks a draft label: letters, digits, `.`, `_` and `-`, starting with a letter or digit;
/// no `/` and no `..` (a label names a folder and a git branch).
pub fn check_label(label: &str) -> Result<String, DraftError> {
    let l = label.trim();
    if l.is_empty() {
        return Err(DraftError::bad_label(
            "a draft needs a name: /draft new NAME",
        ));
    }
    if l.contains('/') || l.contains('\\') {
        return Err(DraftError::bad_label(format!(
            "draft name {l:?} must not contain a slash"
        )));
    }
    if l.contains("..") {
        return Err(DraftError::bad_label(format!(
            "draft name {l:?} must not contain \"..\""
        )));
    }
    if l.chars().count() > MAX_LABEL_CHARS {
        return Err(DraftError::bad_label(format!(
            "draft name must be at most {MAX_LABEL_CHARS} characters"
        )));
    }
    let first_ok = l.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    let all_ok = l
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !first_ok || !all_ok || l.ends_with(".lock") || l.ends_with('.') {
        return Err(DraftError::bad_label(format!(
            "draft name {l:?} may use letters, digits, '.', '_' and '-', and must start with \
             a letter or digit"
        )));
    }
    Ok(l.to_string())
}

#[cfg(test)]
mod tests {
    use super::check_label;

    #[test]
    fn a_label_with_a_slash_or_dots_is_refused_with_the_reason_named() {
        for (bad, needle) in [
            ("a/b", "slash"),
            ("../x", "slash"),
            ("x..y", "\"..\""),
            ("", "needs a name"),
            ("-x", "must start"),
            ("a b", "letters"),
            ("x.lock", "letters"),
        ] {
            let e = check_label(bad).unwrap_err();
            assert!(matches!(e, super::DraftError::BadLabel(_)), "{bad}");
            assert!(e.to_string().contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn a_plain_label_is_accepted_trimmed() {
        assert_eq!(check_label("  safer-parser ").unwrap(), "safer-parser");
        assert_eq!(check_label("v1.2_b").unwrap(), "v1.2_b");
    }
}
