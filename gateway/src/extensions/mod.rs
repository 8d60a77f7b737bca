//! The extension host runtime (decisions A4, E1–E10, P6).
//!
//! Python extensions run in worker PROCESSES: the `vis-gateway` binary started as
//! `vis-gateway worker` (see [`worker`]), embedding CPython. The gateway keeps ONE
//! registration worker that loads every extension file (catalog, network filters, provider
//! callbacks) and one worker per session, started on that session's first extension call
//! and stopped with [`ExtensionHost::stop_session`]. Entry files are read once per load
//! (the "admitted" bytes) and every worker executes exactly those bytes, so a session
//! worker started after an edit runs the version the catalog describes; edits are adopted by
//! [`ExtensionHost::reload`] only.
//!
//! ```ignore
//! let host = ExtensionHost::new(HostConfig::new(home), state_store, host_events, human_doors);
//! host.reload(None).await;                       // global extensions, at start
//! let tools = host.tools(&session).await;        // ensures the session's project is loaded
//! let out = host.call_tool(&session, "todo__add", json!({"text": "x"})).await;
//! host.stop_session(&session.id).await;
//! ```

pub mod client;
pub mod discovery;
mod doors;
pub mod embed;
pub mod env;
mod filters;
pub mod freeze;
pub mod lane;
mod listing;
pub mod protocol;
mod providers;
#[cfg(test)]
mod tests;
mod tools;
pub mod worker;

use self::client::{CallCtx, CallError, Preload, WorkerClient, WorkerOwner, WorkerSpec};
use self::protocol::WireError;
use async_trait::async_trait;
use parking_lot::{Mutex, RwLock};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// Traits the gateway implements
// ---------------------------------------------------------------------------------------

/// Durable extension state (decision E6), keyed by extension NAME. Values are JSON data;
/// `put` is never called with `Value::Null` (writing `None` in Python deletes). The worker
/// blocks while these run; implementations may do blocking database work inside
/// `spawn_blocking`.
#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    async fn get(&self, extension: &str, key: &str) -> anyhow::Result<Option<Value>>;
    async fn put(&self, extension: &str, key: &str, value: Value) -> anyhow::Result<()>;
    /// Deleting an absent key is not an error.
    async fn delete(&self, extension: &str, key: &str) -> anyhow::Result<()>;
    /// Keys of one extension (any order; the SDK sorts).
    async fn keys(&self, extension: &str) -> anyhow::Result<Vec<String>>;
}

/// Where `vis.notify` and `publish_activity` go. Called from async tasks: do not block.
pub trait HostEvents: Send + Sync + 'static {
    /// A toast (`level`: info, success, warn, error). `session_id` is `None` for calls made
    /// outside a session (registration worker).
    fn notify(&self, session_id: Option<&str>, extension: &str, text: &str, level: &str);
    /// Replace the running tool's activity presentation (wire form). `true` when shown.
    fn activity(&self, session_id: Option<&str>, extension: &str, presentation: Value) -> bool;
}

/// The worker that called a human-facing door, as that door sees it.
#[async_trait]
pub trait DoorWorker: Send + Sync + 'static {
    /// Calls a Python callable that crossed in the door payload (its wire form
    /// `{"__vis_callback__": name, "id": …}`) with `args`, as a nested request served while
    /// the door is pending. Errors are messages.
    async fn callback(&self, callable: &Value, args: Vec<Value>) -> Result<Value, String>;
    /// `false` once the worker process has ended (its call was abandoned, timed out or the
    /// session was disposed): nobody is waiting for the door's answer any more.
    fn is_alive(&self) -> bool;
    /// While the returned guard lives, the request the door serves does not time out (a
    /// human is answering).
    fn hold(&self) -> Box<dyn Send + Sync>;
}

/// The doors that reach the human or the session's sandbox: `request_input` (`vis.ask`),
/// `live`, `reveal_secret` / `forget_secret` and the shell family. The gateway implements
/// it; the tests' `NoHumanDoors` answers "not available".
#[async_trait]
pub trait HumanDoors: Send + Sync + 'static {
    /// `vis.ask`: the door payload (`request`, `validators`, `run_validator`); answers
    /// `{status, values, request_id, reason}`.
    async fn request_input(
        &self,
        session: Option<&SessionCtx>,
        extension: &str,
        payload: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError>;
    /// `vis.live`: one envelope (`op`: open, patch, state, close).
    async fn live(
        &self,
        session: Option<&SessionCtx>,
        extension: &str,
        envelope: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError>;
    /// `shell`, `jailed_shell` or `jailed_shell_session` (`door`) with the SDK's `opts`;
    /// answers a shell record.
    async fn shell(
        &self,
        door: &str,
        session: Option<&SessionCtx>,
        extension: &str,
        opts: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError>;
    /// Plaintext of a `vis-secret:` handle, `None` when unknown.
    fn reveal_secret(&self, session_id: Option<&str>, handle: &str) -> Option<String>;
    /// Drops a handle; `true` when it existed.
    fn forget_secret(&self, session_id: Option<&str>, handle: &str) -> bool;
    /// The session is being disposed ([`ExtensionHost::stop_session`]): settle its forms,
    /// close its views, stop its children, drop its secrets.
    fn session_disposed(&self, _session_id: &str) {}
}

/// [`HumanDoors`] of a host without a gateway behind it: every door answers
/// "`<op>` is not available in this gateway build yet".
#[cfg(test)]
#[derive(Default)]
pub struct NoHumanDoors;

#[cfg(test)]
fn not_available(op: &str) -> client::DoorError {
    client::DoorError::typed(
        "NotImplementedError",
        format!("{op} is not available in this gateway build yet"),
    )
}

#[cfg(test)]
#[async_trait]
impl HumanDoors for NoHumanDoors {
    async fn request_input(
        &self,
        _: Option<&SessionCtx>,
        _: &str,
        _: Value,
        _: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError> {
        Err(not_available("request_input"))
    }
    async fn live(
        &self,
        _: Option<&SessionCtx>,
        _: &str,
        _: Value,
        _: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError> {
        Err(not_available("live"))
    }
    async fn shell(
        &self,
        door: &str,
        _: Option<&SessionCtx>,
        _: &str,
        _: Value,
        _: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError> {
        Err(not_available(door))
    }
    fn reveal_secret(&self, _: Option<&str>, _: &str) -> Option<String> {
        None
    }
    fn forget_secret(&self, _: Option<&str>, _: &str) -> bool {
        false
    }
}

/// An in-memory [`StateStore`] (tests).
#[cfg(test)]
#[derive(Default)]
pub struct MemoryState {
    map: Mutex<BTreeMap<(String, String), Value>>,
}

#[cfg(test)]
#[async_trait]
impl StateStore for MemoryState {
    async fn get(&self, extension: &str, key: &str) -> anyhow::Result<Option<Value>> {
        Ok(self
            .map
            .lock()
            .get(&(extension.to_string(), key.to_string()))
            .cloned())
    }
    async fn put(&self, extension: &str, key: &str, value: Value) -> anyhow::Result<()> {
        self.map
            .lock()
            .insert((extension.to_string(), key.to_string()), value);
        Ok(())
    }
    async fn delete(&self, extension: &str, key: &str) -> anyhow::Result<()> {
        self.map
            .lock()
            .remove(&(extension.to_string(), key.to_string()));
        Ok(())
    }
    async fn keys(&self, extension: &str) -> anyhow::Result<Vec<String>> {
        Ok(self
            .map
            .lock()
            .keys()
            .filter(|(e, _)| e == extension)
            .map(|(_, k)| k.clone())
            .collect())
    }
}

// ---------------------------------------------------------------------------------------
// Configuration and public value types
// ---------------------------------------------------------------------------------------

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
    /// `prompt` / `activation` / `ctx` per turn (default 5 s, §13 O8).
    pub turn_timeout: Duration,
    /// Provider callbacks (default 30 s).
    pub provider_timeout: Duration,
    /// The project's `environment:` block (E5). Default: empty.
    pub environment: EnvironmentFn,
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
        }
    }
}

/// The session an extension call belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCtx {
    pub id: String,
    /// The project whose `.vis/extensions/` apply (and whose `.env` files E5 reads).
    pub project_root: Option<PathBuf>,
    /// `vis.fs` is confined to this folder.
    pub workspace_root: PathBuf,
}

/// One tool offered to the model (E9).
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
    fn from_call(e: CallError) -> ToolError {
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

/// A network filter's decision (P6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny {
        extension: String,
        reason: String,
        /// `blocked-by-filter` (a `vis.block`) or `filter-error` (a raise or a timeout).
        kind: &'static str,
        traceback: Option<String>,
    },
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

/// Sent after a reload changed what a scope provides (live sessions rebind their tools and
/// slash palettes; the next extension call of a session runs the new versions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionsChanged {
    /// `None`: the global scope.
    pub project_root: Option<PathBuf>,
    /// Names registered in the scope now.
    pub extensions: Vec<String>,
    /// Names that disappeared.
    pub removed: Vec<String>,
}

/// What `prompt`, `activation` and `ctx` produced for one turn (§5.5).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnExtras {
    /// `(extension, fragment)` for every active extension with a prompt.
    pub prompts: Vec<(String, String)>,
    /// Extensions whose `activation` returned false or raised (their tools are hidden).
    pub inactive: Vec<String>,
    /// The deep-merged `ctx` dicts.
    pub session: Value,
}

// ---------------------------------------------------------------------------------------
// The catalog as the worker reports it
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Catalog {
    name: String,
    description: String,
    version: Option<String>,
    kind: Option<String>,
    alias: Option<String>,
    env: Vec<String>,
    prompt: Option<String>,
    has_prompt_fn: bool,
    has_activation: bool,
    has_ctx: bool,
    symbols: Vec<SymbolCat>,
    slash_commands: Vec<SlashCat>,
    op_hooks: Vec<HookCat>,
    network_filters: Vec<Value>,
    providers: Vec<ProviderCat>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct SymbolCat {
    name: String,
    is_namespace: bool,
    members: Vec<MemberCat>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct MemberCat {
    name: String,
    tag: String,
    is_hidden: bool,
    doc: String,
    contract: Value,
    tool: ToolCat,
    activity: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct ToolCat {
    name: String,
    description: String,
    parameters: Value,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct SlashCat {
    name: String,
    doc: Option<String>,
    usage: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct HookCat {
    ops: Vec<String>,
    phase: String,
    is_gate: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct ProviderCat {
    id: String,
    label: String,
    preset: Value,
    is_managed: bool,
    slots: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Scope {
    Global,
    Project(PathBuf),
}

impl Scope {
    fn project_root(&self) -> Option<&Path> {
        match self {
            Scope::Global => None,
            Scope::Project(p) => Some(p),
        }
    }
}

/// One loaded (or last-good) extension file.
#[derive(Debug)]
struct Entry {
    file: PathBuf,
    scope: Scope,
    catalog: Catalog,
    raw: Value,
    source: Arc<Vec<u8>>,
    import_root: Option<PathBuf>,
    is_stale: bool,
}

#[derive(Debug, Default, Clone)]
struct ScopeState {
    entries: Vec<Arc<Entry>>,
    failures: Vec<LoadFailure>,
}

#[derive(Default)]
struct Registry {
    generation: u64,
    scopes: BTreeMap<Scope, ScopeState>,
    /// [`ExtensionHost::network_filters`], rebuilt whenever a scope is swapped (the proxy
    /// asks for them on every request).
    filters: Vec<Arc<dyn vis_proxy::NetworkFilter>>,
}

impl Registry {
    /// The extensions a project sees: global ones not overridden by name, then the project's.
    fn resolve(&self, project: Option<&Path>) -> Vec<Arc<Entry>> {
        let global = self
            .scopes
            .get(&Scope::Global)
            .map(|s| s.entries.clone())
            .unwrap_or_default();
        let local = project
            .and_then(|p| self.scopes.get(&Scope::Project(p.to_path_buf())))
            .map(|s| s.entries.clone())
            .unwrap_or_default();
        let mut out: Vec<Arc<Entry>> = global
            .into_iter()
            .filter(|g| !local.iter().any(|l| l.catalog.name == g.catalog.name))
            .collect();
        out.extend(local);
        out
    }

    fn all(&self) -> Vec<Arc<Entry>> {
        self.scopes
            .values()
            .flat_map(|s| s.entries.iter().cloned())
            .collect()
    }

    /// Every registered network filter, in registration order (global, then projects).
    fn filter_infos(&self) -> Vec<FilterInfo> {
        let mut out = Vec::new();
        for e in self.scopes.values().flat_map(|s| s.entries.iter()) {
            for i in 0..e.catalog.network_filters.len() {
                out.push(FilterInfo {
                    extension: e.catalog.name.clone(),
                    file: e.file.clone(),
                    index: i,
                });
            }
        }
        out
    }

    fn rebuild_filters(&mut self, host: &Weak<Inner>) {
        self.filters = self
            .filter_infos()
            .into_iter()
            .map(|info| {
                Arc::new(filters::PyNetworkFilter {
                    host: host.clone(),
                    file: file_str(&info.file),
                    info,
                }) as Arc<dyn vis_proxy::NetworkFilter>
            })
            .collect();
    }
}

// ---------------------------------------------------------------------------------------
// The host
// ---------------------------------------------------------------------------------------

struct Inner {
    cfg: HostConfig,
    state: Arc<dyn StateStore>,
    events: Arc<dyn HostEvents>,
    human: Arc<dyn HumanDoors>,
    registry: RwLock<Registry>,
    registration: WorkerClient,
    sessions: Mutex<HashMap<String, Arc<SessionWorker>>>,
    reload_lock: tokio::sync::Mutex<()>,
    changes: tokio::sync::broadcast::Sender<ExtensionsChanged>,
    frozen_cleared: std::sync::atomic::AtomicBool,
}

struct SessionWorker {
    session: SessionCtx,
    client: WorkerClient,
}

/// The extension host. Cheap to clone.
#[derive(Clone)]
pub struct ExtensionHost {
    inner: Arc<Inner>,
}

struct RegistrationOwner {
    host: Weak<Inner>,
}

struct SessionOwner {
    host: Weak<Inner>,
    session: SessionCtx,
}

#[async_trait]
impl WorkerOwner for RegistrationOwner {
    fn preload(&self) -> (u64, Vec<Preload>) {
        let Some(host) = self.host.upgrade() else {
            return (0, Vec::new());
        };
        let reg = host.registry.read();
        let list = reg
            .all()
            .iter()
            .map(|e| Preload {
                ctx: CallCtx {
                    project_root: e.scope.project_root().map(Path::to_path_buf),
                    ..CallCtx::default()
                },
                file: e.file.clone(),
                source: e.source.clone(),
                import_root: e.import_root.clone(),
            })
            .collect();
        (reg.generation, list)
    }
    fn generation(&self) -> Option<u64> {
        None
    }
    async fn door(
        &self,
        worker: Arc<client::Running>,
        ctx: CallCtx,
        op: String,
        payload: Value,
    ) -> Result<Value, client::DoorError> {
        answer_door(&self.host, worker, ctx, op, payload).await
    }
}

/// Both kinds of worker answer their doors the same way, while the host is alive.
async fn answer_door(
    host: &Weak<Inner>,
    worker: Arc<client::Running>,
    ctx: CallCtx,
    op: String,
    payload: Value,
) -> Result<Value, client::DoorError> {
    match host.upgrade() {
        Some(h) => doors::answer(&h, worker, ctx, &op, payload).await,
        None => Err(client::DoorError::new("the gateway is shutting down")),
    }
}

fn session_call_ctx(s: &SessionCtx) -> CallCtx {
    CallCtx {
        session_id: Some(s.id.clone()),
        project_root: s.project_root.clone(),
        workspace_root: Some(s.workspace_root.clone()),
        is_gate: false,
    }
}

#[async_trait]
impl WorkerOwner for SessionOwner {
    fn preload(&self) -> (u64, Vec<Preload>) {
        let Some(host) = self.host.upgrade() else {
            return (0, Vec::new());
        };
        let reg = host.registry.read();
        let ctx = session_call_ctx(&self.session);
        let list = reg
            .resolve(self.session.project_root.as_deref())
            .iter()
            .map(|e| Preload {
                ctx: ctx.clone(),
                file: e.file.clone(),
                source: e.source.clone(),
                import_root: e.import_root.clone(),
            })
            .collect();
        (reg.generation, list)
    }
    fn generation(&self) -> Option<u64> {
        self.host.upgrade().map(|h| h.registry.read().generation)
    }
    async fn door(
        &self,
        worker: Arc<client::Running>,
        ctx: CallCtx,
        op: String,
        payload: Value,
    ) -> Result<Value, client::DoorError> {
        answer_door(&self.host, worker, ctx, op, payload).await
    }
}

fn file_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

impl ExtensionHost {
    /// Creates the host. No process starts until the first load or call. `human` serves
    /// the ask / live / secret / shell doors.
    pub fn new(
        cfg: HostConfig,
        state: Arc<dyn StateStore>,
        events: Arc<dyn HostEvents>,
        human: Arc<dyn HumanDoors>,
    ) -> ExtensionHost {
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| {
            let spec = WorkerSpec {
                exe: cfg.worker_exe.clone(),
                home: cfg.home.clone(),
                label: "registration".into(),
                cwd: Some(cfg.home.clone()),
                load_timeout: cfg.load_timeout,
                filter_lane: true,
            };
            let owner = Arc::new(RegistrationOwner { host: weak.clone() });
            Inner {
                registration: WorkerClient::new(spec, CallCtx::default(), owner),
                cfg,
                state,
                events,
                human,
                registry: RwLock::new(Registry::default()),
                sessions: Mutex::new(HashMap::new()),
                reload_lock: tokio::sync::Mutex::new(()),
                changes: tokio::sync::broadcast::channel(64).0,
                frozen_cleared: std::sync::atomic::AtomicBool::new(false),
            }
        });
        ExtensionHost { inner }
    }

    /// Reload notifications (only when a scope's files actually changed).
    #[cfg(test)]
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<ExtensionsChanged> {
        self.inner.changes.subscribe()
    }

    // -- loading ------------------------------------------------------------------------

    /// Loads (again) the global extensions and, with `project`, that project's: build then
    /// swap, file by file. A file that fails keeps its last good version (`is_stale`);
    /// vanished files are removed. Session workers pick the new versions up at their next
    /// call (none is interrupted).
    pub async fn reload(&self, project: Option<&Path>) -> ReloadReport {
        let mut report = self.reload_scope(Scope::Global).await;
        if let Some(p) = project {
            let r = self.reload_scope(Scope::Project(p.to_path_buf())).await;
            report.loaded.extend(r.loaded);
            report.failures.extend(r.failures);
            report.removed.extend(r.removed);
        }
        report
    }

    /// Loads a project's extensions the first time a session of that project needs them.
    pub async fn ensure_project(&self, project: Option<&Path>) {
        let missing_global = !self
            .inner
            .registry
            .read()
            .scopes
            .contains_key(&Scope::Global);
        if missing_global {
            self.load_scope(Scope::Global, true).await;
        }
        if let Some(p) = project {
            let scope = Scope::Project(p.to_path_buf());
            let missing = !self.inner.registry.read().scopes.contains_key(&scope);
            if missing {
                self.load_scope(scope, true).await;
            }
        }
    }

    async fn reload_scope(&self, scope: Scope) -> ReloadReport {
        self.load_scope(scope, false).await
    }

    async fn load_scope(&self, scope: Scope, only_if_missing: bool) -> ReloadReport {
        let _one = self.inner.reload_lock.lock().await;
        if only_if_missing && self.inner.registry.read().scopes.contains_key(&scope) {
            return ReloadReport::default();
        }
        let dir = match &scope {
            Scope::Global => discovery::global_dir(&self.inner.cfg.home),
            Scope::Project(p) => discovery::project_dir(p),
        };
        let files = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || discovery::entries(&dir))
                .await
                .unwrap_or_default()
        };
        let previous = self
            .inner
            .registry
            .read()
            .scopes
            .get(&scope)
            .cloned()
            .unwrap_or_default();
        let home = self.inner.cfg.home.clone();
        let first = !self
            .inner
            .frozen_cleared
            .swap(true, std::sync::atomic::Ordering::SeqCst);
        let to_freeze = files.clone();
        // Freeze every import root (blocking IO off the runtime threads).
        let sources: Vec<(PathBuf, Result<freeze::Frozen, String>)> =
            tokio::task::spawn_blocking(move || {
                if first {
                    freeze::clear(&home);
                }
                to_freeze
                    .into_iter()
                    .map(|f| {
                        let frozen = freeze::freeze(&home, &f).map_err(|e| format!("{e:#}"));
                        (f, frozen)
                    })
                    .collect()
            })
            .await
            .unwrap_or_default();
        let ctx = CallCtx {
            project_root: scope.project_root().map(Path::to_path_buf),
            ..CallCtx::default()
        };
        let timeout = self.inner.cfg.load_timeout;
        let scope_root = scope.project_root().map(Path::to_path_buf);
        // One call per file: a file that hangs or kills the worker at import fails alone
        // (the next call starts a fresh registration worker).
        let mut results = Vec::new();
        for (file, bytes) in sources {
            let outcome = match bytes {
                Err(e) => Err(WireError::host("OSError", e)),
                Ok(frozen) => {
                    let payload =
                        client::load_payload(&file, &frozen.source, Some(&frozen.import_root));
                    match self
                        .inner
                        .registration
                        .call(ctx.clone(), "load", payload, timeout)
                        .await
                    {
                        Ok(v) if v.get("loaded").and_then(Value::as_bool) == Some(true) => {
                            Ok((v.get("catalog").cloned().unwrap_or(Value::Null), frozen))
                        }
                        Ok(v) => Err(v
                            .get("error")
                            .cloned()
                            .and_then(|e| serde_json::from_value(e).ok())
                            .unwrap_or_else(|| {
                                WireError::host("LoadError", "the file did not load")
                            })),
                        Err(e) => Err(WireError {
                            kind: e.kind().to_string(),
                            message: e.message(),
                            traceback: e.traceback(),
                        }),
                    }
                }
            };
            results.push((file, outcome));
        }

        let mut next = ScopeState::default();
        let mut report = ReloadReport::default();
        for (file, outcome) in results {
            let old = previous.entries.iter().find(|e| e.file == file).cloned();
            match outcome {
                Ok((raw, frozen)) => {
                    let catalog: Catalog = serde_json::from_value(raw.clone()).unwrap_or_default();
                    if let Some(dup) = next.entries.iter().find(|e| e.catalog.name == catalog.name)
                    {
                        next.failures.push(LoadFailure {
                            file: file.clone(),
                            project_root: scope_root.clone(),
                            extension: Some(catalog.name.clone()),
                            error: WireError::host(
                                "DuplicateExtension",
                                format!(
                                    "extension '{}' is already registered by {}",
                                    catalog.name,
                                    dup.file.display()
                                ),
                            ),
                            is_stale: false,
                        });
                        continue;
                    }
                    report.loaded.push(catalog.name.clone());
                    next.entries.push(Arc::new(Entry {
                        file,
                        scope: scope.clone(),
                        catalog,
                        raw,
                        source: Arc::new(frozen.source),
                        import_root: Some(frozen.import_root),
                        is_stale: false,
                    }));
                }
                Err(error) => {
                    let failure = LoadFailure {
                        file: file.clone(),
                        project_root: scope_root.clone(),
                        extension: old.as_ref().map(|o| o.catalog.name.clone()),
                        error,
                        is_stale: old.is_some(),
                    };
                    tracing::warn!(
                        target: "vis::extension",
                        file = %file.display(),
                        "extension failed to load: {}",
                        failure.error.message
                    );
                    next.failures.push(failure);
                    if let Some(old) = old {
                        next.entries.push(Arc::new(Entry {
                            file: old.file.clone(),
                            scope: old.scope.clone(),
                            catalog: old.catalog.clone(),
                            raw: old.raw.clone(),
                            source: old.source.clone(),
                            import_root: old.import_root.clone(),
                            is_stale: true,
                        }));
                    }
                }
            }
        }
        for old in &previous.entries {
            if !files.contains(&old.file) {
                report.removed.push(old.catalog.name.clone());
                let payload = json!({"file": file_str(&old.file)});
                let _ = self
                    .inner
                    .registration
                    .call(CallCtx::default(), "unload", payload, timeout)
                    .await;
            }
        }
        report.failures = next.failures.clone();
        type Print = (PathBuf, Option<PathBuf>, bool);
        let fingerprint = |s: &ScopeState| -> Vec<Print> {
            s.entries
                .iter()
                .map(|e| (e.file.clone(), e.import_root.clone(), e.is_stale))
                .collect()
        };
        let changed = {
            let mut reg = self.inner.registry.write();
            let known = reg.scopes.contains_key(&scope);
            let changed = !known || fingerprint(&previous) != fingerprint(&next);
            if changed {
                // Session workers load the new versions before their next call.
                reg.generation += 1;
            }
            let names = next
                .entries
                .iter()
                .map(|e| e.catalog.name.clone())
                .collect();
            reg.scopes.insert(scope.clone(), next);
            reg.rebuild_filters(&Arc::downgrade(&self.inner));
            changed.then_some(names)
        };
        if let Some(extensions) = changed {
            let _ = self.inner.changes.send(ExtensionsChanged {
                project_root: scope.project_root().map(Path::to_path_buf),
                extensions,
                removed: report.removed.clone(),
            });
        }
        report
    }

    fn resolve(&self, project: Option<&Path>) -> Vec<Arc<Entry>> {
        self.inner.registry.read().resolve(project)
    }

    // -- sessions -----------------------------------------------------------------------

    fn session_worker(&self, session: &SessionCtx) -> Arc<SessionWorker> {
        let mut map = self.inner.sessions.lock();
        if let Some(w) = map.get(&session.id) {
            if w.session == *session {
                return w.clone();
            }
        }
        let spec = WorkerSpec {
            exe: self.inner.cfg.worker_exe.clone(),
            home: self.inner.cfg.home.clone(),
            label: format!("session:{}", session.id),
            cwd: Some(session.workspace_root.clone()),
            load_timeout: self.inner.cfg.load_timeout,
            filter_lane: false,
        };
        let owner = Arc::new(SessionOwner {
            host: Arc::downgrade(&self.inner),
            session: session.clone(),
        });
        let w = Arc::new(SessionWorker {
            session: session.clone(),
            client: WorkerClient::new(spec, session_call_ctx(session), owner),
        });
        if let Some(old) = map.insert(session.id.clone(), w.clone()) {
            tokio::spawn(async move { old.client.stop().await });
        }
        w
    }

    /// Stops a session's worker (session disposal). The registration worker keeps running.
    pub async fn stop_session(&self, session_id: &str) {
        self.inner.human.session_disposed(session_id);
        let w = self.inner.sessions.lock().remove(session_id);
        if let Some(w) = w {
            w.client.stop().await;
        }
    }

    /// Stops every worker.
    pub async fn shutdown(&self) {
        let all: Vec<_> = self.inner.sessions.lock().drain().map(|(_, w)| w).collect();
        for w in all {
            w.client.stop().await;
        }
        self.inner.registration.stop().await;
    }

    /// Process id of a session's worker, when it runs (tests).
    #[cfg(test)]
    pub fn session_worker_pid(&self, session_id: &str) -> Option<u32> {
        let w = self.inner.sessions.lock().get(session_id).cloned()?;
        w.client.running().and_then(|r| r.pid())
    }

    /// Process id of the registration worker, when it runs (tests).
    #[cfg(test)]
    pub fn registration_worker_pid(&self) -> Option<u32> {
        self.inner.registration.running().and_then(|r| r.pid())
    }

    // -- slash commands -----------------------------------------------------------------

    /// `(name, doc)` of the slash commands a project sees (doc falls back to usage).
    pub async fn slashes(&self, project: Option<&Path>) -> Vec<(String, String)> {
        self.ensure_project(project).await;
        let mut out = Vec::new();
        for e in self.resolve(project) {
            for c in &e.catalog.slash_commands {
                let doc = c
                    .doc
                    .clone()
                    .or_else(|| c.usage.clone())
                    .unwrap_or_else(|| e.catalog.description.clone());
                out.push((c.name.clone(), doc));
            }
        }
        out
    }

    /// Runs `/name args` (args = the text after the command). Ok: Markdown (title, then
    /// body). Err: Markdown of an `vis.err(...)` result or of the exception.
    pub async fn run_slash(
        &self,
        session: &SessionCtx,
        name: &str,
        args: &str,
    ) -> Result<String, String> {
        self.run_slash_with_channel(session, name, args, None).await
    }

    /// [`Self::run_slash`] with the channel the command came from.
    pub async fn run_slash_with_channel(
        &self,
        session: &SessionCtx,
        name: &str,
        args: &str,
        channel: Option<&str>,
    ) -> Result<String, String> {
        let name = name.trim_start_matches('/');
        self.ensure_project(session.project_root.as_deref()).await;
        let entry = self
            .resolve(session.project_root.as_deref())
            .into_iter()
            .find(|e| e.catalog.slash_commands.iter().any(|c| c.name == name))
            .ok_or_else(|| format!("no extension slash command named '/{name}'"))?;
        let argv: Vec<&str> = args.split_whitespace().collect();
        let raw = if args.trim().is_empty() {
            format!("/{name}")
        } else {
            format!("/{name} {}", args.trim())
        };
        let payload = json!({
            "file": file_str(&entry.file),
            "name": name,
            "ctx": {"channel": channel, "args": argv, "raw": raw, "session_id": session.id},
        });
        let worker = self.session_worker(session);
        match worker
            .client
            .call(
                session_call_ctx(session),
                "run_slash",
                payload,
                self.inner.cfg.call_timeout,
            )
            .await
        {
            Ok(v) => {
                let title = v.get("title").and_then(Value::as_str).unwrap_or("");
                let mut md = title.to_string();
                if let Some(body) = v.get("body").and_then(Value::as_str) {
                    md.push_str("\n\n");
                    md.push_str(body);
                }
                if v.get("status").and_then(Value::as_str) == Some("error") {
                    Err(md)
                } else {
                    Ok(md)
                }
            }
            Err(e) => {
                let e = self.explain(&worker.client, &entry, e);
                let mut md = e.message;
                if let Some(tb) = e.traceback {
                    md.push_str(&format!("\n\n```\n{}\n```", tb.trim_end()));
                }
                Err(md)
            }
        }
    }

    // -- per-turn callables -------------------------------------------------------------

    /// Runs every extension's `activation`, `prompt` and `ctx` for one turn (§5.5). A
    /// raising `activation` hides the extension; a raising `prompt`/`ctx` adds nothing.
    pub async fn turn(&self, session: &SessionCtx, channel: Option<&str>) -> TurnExtras {
        self.ensure_project(session.project_root.as_deref()).await;
        let env = json!({
            "cwd": file_str(&session.workspace_root),
            "session_id": session.id,
            "channel": channel,
        });
        let mut out = TurnExtras {
            session: json!({}),
            ..TurnExtras::default()
        };
        let entries = self.resolve(session.project_root.as_deref());
        if !entries
            .iter()
            .any(|e| e.catalog.has_activation || e.catalog.has_prompt_fn || e.catalog.has_ctx)
        {
            for e in entries {
                if let Some(p) = &e.catalog.prompt {
                    out.prompts.push((e.catalog.name.clone(), p.clone()));
                }
            }
            return out;
        }
        let worker = self.session_worker(session);
        for e in entries {
            let name = e.catalog.name.clone();
            let call = |which: &'static str| {
                let payload = json!({"file": file_str(&e.file), "which": which, "env": env});
                worker.client.call(
                    session_call_ctx(session),
                    "turn",
                    payload,
                    self.inner.cfg.turn_timeout,
                )
            };
            if e.catalog.has_activation {
                match call("activation").await {
                    Ok(Value::Bool(true)) => {}
                    Ok(_) => {
                        out.inactive.push(name);
                        continue;
                    }
                    Err(err) => {
                        tracing::warn!(target: "vis::extension", extension = %name, "activation failed: {}", err.message());
                        out.inactive.push(name);
                        continue;
                    }
                }
            }
            if e.catalog.has_prompt_fn {
                match call("prompt").await {
                    Ok(Value::String(p)) => out.prompts.push((name.clone(), p)),
                    Ok(_) => {}
                    Err(err) => {
                        tracing::warn!(target: "vis::extension", extension = %name, "prompt failed: {}", err.message())
                    }
                }
            } else if let Some(p) = &e.catalog.prompt {
                out.prompts.push((name.clone(), p.clone()));
            }
            if e.catalog.has_ctx {
                match call("ctx").await {
                    Ok(v @ Value::Object(_)) => deep_merge(&mut out.session, v),
                    Ok(_) => {}
                    Err(err) => {
                        tracing::warn!(target: "vis::extension", extension = %name, "ctx failed: {}", err.message())
                    }
                }
            }
        }
        out
    }
}

fn deep_merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => deep_merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}
