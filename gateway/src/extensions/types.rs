//! The host's configuration and its public value types.

use super::client::{CallCtx, CallError};
use super::protocol::WireError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The project's `environment:` block, by project root (`None`: no project).
pub type EnvironmentFn = Arc<dyn Fn(Option<&Path>) -> BTreeMap<String, String> + Send + Sync>;

#[derive(Clone)]
pub struct HostConfig {
    /// The Vis home (global extensions live in `<home>/extensions/`).
    pub home: PathBuf,
    /// The binary started in worker mode (default: the running executable).
    pub worker_exe: PathBuf,
    /// Tool calls and slash commands (default 30 s).
    pub call_timeout: Duration,
    /// Op hooks and `fs_access` gates (default 10 s).
    pub hook_timeout: Duration,
    /// One network filter call (default 5 s); a timeout denies.
    pub filter_timeout: Duration,
    /// Loading one file (default 30 s).
    pub load_timeout: Duration,
    /// `prompt` / `activation` / `ctx` per turn (default 5 s).
    pub turn_timeout: Duration,
    /// Provider callbacks (default 30 s).
    pub provider_timeout: Duration,
    /// The project's `environment:` block (docs/decisions.md, E5). Default: empty.
    pub environment: EnvironmentFn,
    /// A session worker that served no call for this long is stopped; the session's next
    /// extension call starts a fresh one (default 10 min, `VIS_SESSION_WORKER_IDLE_SECS`;
    /// zero keeps session workers until their session ends).
    pub session_idle: Duration,
}

impl HostConfig {
    pub fn new(home: impl Into<PathBuf>) -> HostConfig {
        HostConfig {
            home: home.into(),
            worker_exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("vis-gateway")),
            call_timeout: Duration::from_secs(30),
            hook_timeout: Duration::from_secs(10),
            filter_timeout: Duration::from_secs(5),
            load_timeout: Duration::from_secs(30),
            turn_timeout: Duration::from_secs(5),
            provider_timeout: Duration::from_secs(30),
            environment: Arc::new(|_| BTreeMap::new()),
            session_idle: Duration::from_secs(
                crate::start_env::var("VIS_SESSION_WORKER_IDLE_SECS")
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(600),
            ),
        }
    }
}

/// The session an extension call belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCtx {
    pub id: String,
    /// The project whose `.vis/extensions/` apply (and whose `.env` files docs/decisions.md E5 reads).
    pub project_root: Option<PathBuf>,
    /// `vis.fs` is confined to this folder.
    pub workspace_root: PathBuf,
}

impl SessionCtx {
    /// The context of a call made for this session (not a gate).
    pub(super) fn call_ctx(&self) -> CallCtx {
        CallCtx {
            session_id: Some(self.id.clone()),
            project_root: self.project_root.clone(),
            workspace_root: Some(self.workspace_root.clone()),
            is_gate: false,
        }
    }
}

/// Where the lines an `auth_fn` prints go.
pub type LinePrinter = Arc<dyn Fn(String) + Send + Sync>;

/// A path as the worker protocol carries it.
pub(super) fn file_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// One tool offered to the model (docs/decisions.md, E9).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// Provider tool name: the full dotted name with `.` → `__`.
    pub name: String,
    /// The full dotted Python name (`tracker.issues.find`).
    pub full_name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    pub extension: String,
    /// Callable but not offered to the model.
    pub is_hidden: bool,
    /// `observation` or `mutation`.
    pub tag: String,
    /// The Symbol's `vis.Activity` (`{presenter, show_start, label?}`), if declared.
    pub activity: Option<Value>,
    /// The portable contract (`.contract` in the sandbox) and its rendered document.
    pub contract: Value,
    pub doc: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// What the model sees: the string result, or the JSON text of the value.
    pub text: String,
    /// The portable result (objects as `__vis_object__` records).
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// `ValueError: …` for a Python exception; the hook's reason for a block.
    pub message: String,
    pub traceback: Option<String>,
    /// For a block: "Blocked by the '<ext>' Python extension. Ask the user before retrying."
    pub hint: Option<String>,
    /// `blocked`, `python`, `timeout`, `worker-exited`, `unavailable`, `unknown-tool`.
    pub kind: String,
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ToolError {
    /// The traceback without a last line that repeats the message (`None` when nothing
    /// else is left).
    pub fn frames(&self) -> Option<&str> {
        let tb = self.traceback.as_deref()?.trim_end();
        let tb = match tb.rsplit_once('\n') {
            Some((head, last)) if last.trim() == self.message.trim() => head.trim_end(),
            None if tb.trim() == self.message.trim() => "",
            _ => tb,
        };
        (!tb.is_empty()).then_some(tb)
    }

    /// What the model or a user reads: the message (once), the hint, then the traceback.
    pub fn text(&self) -> String {
        let mut out = self.message.clone();
        if let Some(h) = &self.hint {
            out.push('\n');
            out.push_str(h);
        }
        if let Some(tb) = self.frames() {
            out.push('\n');
            out.push_str(tb);
        }
        out
    }

    /// [`Self::text`] as Markdown, the traceback in a code block.
    pub fn text_with_traceback(&self) -> String {
        let mut out = self.message.clone();
        if let Some(h) = &self.hint {
            out.push_str("\n\n");
            out.push_str(h);
        }
        if let Some(tb) = self.frames() {
            out.push_str(&format!("\n\n```\n{tb}\n```"));
        }
        out
    }

    pub(super) fn from_call(e: CallError) -> ToolError {
        let kind = match &e {
            CallError::Python(_) => "python",
            CallError::Timeout(_) => "timeout",
            CallError::Busy(_) => "busy",
            CallError::Exited(_) => "worker-exited",
            CallError::Start(_) => "worker-start",
            CallError::Unavailable(_) => "unavailable",
        };
        ToolError {
            message: e.message(),
            traceback: e.traceback(),
            hint: None,
            kind: kind.into(),
        }
    }
}

/// What a slash command of an extension answered.
#[derive(Debug, Clone, PartialEq)]
pub struct SlashOutcome {
    /// `vis.ok` / a string / `None` (true) or `vis.err` / an exception (false).
    pub ok: bool,
    /// The title, then the body, then the `data` as a JSON block.
    pub markdown: String,
    /// The `data` of `vis.ok(...)` / `vis.err(...)`, when given.
    pub data: Option<Value>,
}

/// One registered network filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterInfo {
    pub extension: String,
    pub file: PathBuf,
    pub index: usize,
}

/// One `apropos`/`doc` catalogue entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    pub name: String,
    pub summary: String,
    pub doc: String,
    pub extension: String,
    pub is_hidden: bool,
}

/// One `vis.Provider` from the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderInfo {
    pub extension: String,
    pub id: String,
    pub label: String,
    /// `ProviderPreset` wire form or `null`.
    pub preset: Value,
    pub is_managed: bool,
    /// Filled callback slots (`get_token_fn`, `status_fn`, `enrich_models_fn`, …).
    pub slots: Vec<String>,
}

/// A file that failed to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadFailure {
    pub file: PathBuf,
    pub project_root: Option<PathBuf>,
    /// The extension this file registered last time it loaded, if it ever did.
    pub extension: Option<String>,
    pub error: WireError,
    /// A previous version of the file stays active.
    pub is_stale: bool,
}

/// What a reload did.
#[derive(Debug, Clone, Default)]
pub struct ReloadReport {
    pub loaded: Vec<String>,
    pub failures: Vec<LoadFailure>,
    pub removed: Vec<String>,
}

impl ReloadReport {
    /// `Python extensions: N loaded[, F failed: a.py (ValueError: …)]`.
    pub fn summary(&self) -> String {
        let mut s = format!("Python extensions: {} loaded", self.loaded.len());
        if !self.failures.is_empty() {
            let names: Vec<String> = self
                .failures
                .iter()
                .map(|f| {
                    let stale = if f.is_stale { ", last good kept" } else { "" };
                    format!("{} ({}{stale})", f.file.display(), f.error.message)
                })
                .collect();
            s.push_str(&format!(
                ", {} failed: {}",
                self.failures.len(),
                names.join("; ")
            ));
        }
        if !self.removed.is_empty() {
            s.push_str(&format!(", removed: {}", self.removed.join(", ")));
        }
        s
    }
}

/// What `prompt`, `activation` and `ctx` produced for one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnExtras {
    /// `(extension, fragment)` for every active extension with a prompt.
    pub prompts: Vec<(String, String)>,
    /// Extensions whose `activation` returned false or raised (their tools are hidden).
    pub inactive: Vec<String>,
    /// The deep-merged `ctx` dicts.
    pub session: Value,
}

impl TurnExtras {
    /// The system-prompt fragments of the turn: every active extension's prompt, then the
    /// deep-merged `ctx` dicts as one `session_env` section (when any extension added data),
    /// so the model sees them whichever tool mode the turn uses.
    /// The prompt parts labelled by extension; the `ctx` data as `session_env`.
    pub fn into_labelled_prompts(self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self.prompts;
        if let Some(section) = session_section(&self.session) {
            out.push(("session_env".to_string(), section));
        }
        out
    }

    #[cfg(test)]
    pub fn into_prompts(self) -> Vec<String> {
        let mut out: Vec<String> = self.prompts.into_iter().map(|(_, p)| p).collect();
        if let Some(section) = session_section(&self.session) {
            out.push(section);
        }
        out
    }
}

/// The `ctx` data of a turn as a system-prompt section, `None` when it is empty.
pub fn session_section(session: &Value) -> Option<String> {
    let map = session.as_object().filter(|m| !m.is_empty())?;
    let text = serde_json::to_string_pretty(map).ok()?;
    Some(format!(
        "## Session context (session_env)\n\nData the extensions added for this turn \
         (their `ctx` callables), as JSON:\n\n```json\n{text}\n```"
    ))
}
