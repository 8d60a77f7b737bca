//! The host side of a block's function calls: the file tools (confined to the workspace,
//! every path through the extensions' `fs_access` gates), `shell`, `apropos`/`doc`, and the
//! session's extension Symbols. Every call runs the op hooks (a before-hook's block refuses
//! it with the reason) and shows on the phone as an activity update of the block's card.

use super::apropos::Index;
use super::process::HostCalls;
use super::protocol::CallError;
use crate::bus::Bus;
use crate::extensions::{ExtensionHost, SessionCtx, ToolError};
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Which activity a shell call shows.
#[derive(Clone, Copy)]
enum ActivityKindArg {
    Foreground,
    Background,
}

/// What `shell()` needs to start a sandbox child.
pub struct ShellSpec {
    pub sandbox: Arc<crate::sandbox::Sandbox>,
    pub home: PathBuf,
}

/// One block's host.
pub struct SessionHost {
    pub session: SessionCtx,
    pub host: ExtensionHost,
    pub bus: Arc<Bus>,
    pub index: Arc<Index>,
    pub shell: Option<ShellSpec>,
    pub mcp: Arc<crate::mcp::Mcp>,
    /// `server.tool` → (server, tool) of the session's MCP functions.
    pub mcp_fns: Arc<std::collections::HashMap<String, (String, String)>>,
    pub block_id: String,
    pub turn_id: String,
    pub cancel: CancellationToken,
    /// The session's drafts: where its files are right now, and the draft functions.
    pub drafts: Option<Arc<dyn crate::drafts::SessionDrafts>>,
    /// The running block's deadline (a call with its own timeout extends it).
    pub deadline: Arc<super::Deadline>,
    /// The sessions' runtimes and jobs.
    pub boxes: Arc<super::Sandboxes>,
    /// Running background jobs the session may have.
    pub max_jobs: usize,
    /// Processes that shell commands of this block left running (`cmd &`): killed when the
    /// block ends, that is when this host is dropped.
    pub leftovers: parking_lot::Mutex<Vec<crate::sandbox::run::Group>>,
}

/// Seconds from a number argument (`timeout=600`, `timeout=2.5`).
fn seconds_arg(args: &Map<String, Value>, name: &str) -> Result<Option<Duration>, CallError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s.min(1e7)))),
            _ => Err(CallError::new(
                "TypeError",
                format!("`{name}` must be a number of seconds (0 or more), not {v}"),
            )),
        },
    }
}

/// A Python exception type for an extension error (`ValueError: …` keeps its type).
fn tool_error(e: ToolError) -> CallError {
    let mut message = e.message.clone();
    if let Some(h) = &e.hint {
        message.push_str(&format!(" ({h})"));
    }
    match e.kind.as_str() {
        "blocked" => CallError::permission(message),
        "timeout" => CallError::new("TimeoutError", message),
        "unknown-tool" => CallError::new("LookupError", message),
        "python" => match e.message.split_once(": ") {
            Some((ty, rest))
                if !ty.is_empty() && ty.chars().all(|c| c.is_alphanumeric() || c == '_') =>
            {
                CallError::new(ty, rest)
            }
            _ => CallError::new("RuntimeError", message),
        },
        _ => CallError::new("RuntimeError", message),
    }
}

fn file_error(e: vis_files::FileError) -> CallError {
    CallError::new(e.python_type(), e.to_string())
}

fn text_arg(args: &Map<String, Value>, name: &str) -> Result<Option<String>, CallError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(CallError::new(
            "TypeError",
            format!("`{name}` must be a string, not {other}"),
        )),
    }
}

fn required(args: &Map<String, Value>, name: &str, func: &str) -> Result<String, CallError> {
    text_arg(args, name)?
        .ok_or_else(|| CallError::new("TypeError", format!("{func}() needs `{name}`")))
}

fn int_arg(args: &Map<String, Value>, name: &str) -> Result<Option<i64>, CallError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            CallError::new("TypeError", format!("`{name}` must be an integer, not {v}"))
        }),
    }
}

fn list_arg(args: &Map<String, Value>, name: &str) -> Result<Vec<String>, CallError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    CallError::new("TypeError", format!("`{name}` must hold strings, not {v}"))
                })
            })
            .collect(),
        Some(other) => Err(CallError::new(
            "TypeError",
            format!("`{name}` must be a string or a list of strings, not {other}"),
        )),
    }
}

/// Runs blocking file work off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, vis_files::FileError> + Send + 'static,
) -> Result<T, CallError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CallError::new("RuntimeError", e.to_string()))?
        .map_err(file_error)
}

impl SessionHost {
    /// The session as of this call: a draft made or left earlier in the block moves
    /// every later call to the new folder.
    fn ctx(&self) -> SessionCtx {
        let mut s = self.session.clone();
        if let Some(root) = self.drafts.as_ref().and_then(|d| d.root(&s.id)) {
            s.workspace_root = root;
        } else if let Some(trunk) = &s.project_root {
            s.workspace_root = trunk.clone();
        }
        s
    }

    fn workspace(&self) -> Result<vis_files::Workspace, CallError> {
        vis_files::Workspace::new(vec![self.ctx().workspace_root]).map_err(file_error)
    }

    async fn draft(&self, func: &str, args: &Map<String, Value>) -> Result<Value, CallError> {
        let Some(drafts) = &self.drafts else {
            return Err(CallError::new(
                "RuntimeError",
                "drafts are not available here",
            ));
        };
        drafts
            .call(&self.session.id, func, args)
            .await
            .map_err(|e| {
                use crate::drafts::DraftError as D;
                let message = e.to_string();
                match e {
                    D::Blocked(_) | D::Declined(_) => CallError::permission(message),
                    D::BadLabel(_) => CallError::new("ValueError", message),
                    _ => CallError::new("RuntimeError", message),
                }
            })
    }

    fn activity(&self, op: &str, label: &str) {
        use vis_companion_api::events::{Activity, ActivityKind, Event};
        let mut a = Activity::new(ActivityKind::Tool);
        a.op = Some(op.to_string());
        a.label = Some(label.to_string());
        a.phrase = Some(format!("Vis is running {label}"));
        a.block_id = Some(self.block_id.clone());
        a.turn_id = Some(self.turn_id.clone());
        a.parent_op = Some(super::TOOL_NAME.to_string());
        self.bus.publish(&self.session.id, Event::Activity(a));
    }

    /// The `fs_access` gates for `path` (fail closed: a gate that cannot run refuses).
    async fn gate(&self, operation: &str, path: &std::path::Path) -> Result<(), CallError> {
        self.host
            .tools()
            .fs_access(&self.ctx(), operation, path)
            .await
            .map_err(CallError::permission)
    }

    async fn dispatch(&self, func: &str, args: &Map<String, Value>) -> Result<Value, CallError> {
        match func {
            "cat" => {
                let path = required(args, "path", "cat")?;
                let (start, end) = (int_arg(args, "start")?, int_arg(args, "end")?);
                let ws = self.workspace()?;
                let full = ws.resolve(&path).map_err(file_error)?;
                self.gate("file-read", &full).await?;
                let out = blocking(move || vis_files::cat(&ws, &path, start, end)).await?;
                Ok(Value::String(out.text))
            }
            "grep" => {
                let paths = list_arg(args, "paths")?;
                let ws = self.workspace()?;
                let targets = if paths.is_empty() {
                    vec![self.ctx().workspace_root]
                } else {
                    paths
                        .iter()
                        .map(|p| ws.resolve(p).map_err(file_error))
                        .collect::<Result<Vec<_>, _>>()?
                };
                for t in &targets {
                    self.gate("file-read", t).await?;
                }
                let mut terms = list_arg(args, "query")?.into_iter();
                let count = |name: &str| -> Result<usize, CallError> {
                    Ok(int_arg(args, name)?.unwrap_or(0).max(0) as usize)
                };
                // The first page starts at `offset`; later pages carry their `cursor`.
                let cursor = match int_arg(args, "cursor")? {
                    Some(c) if c > 0 => c as usize,
                    _ => count("offset")?,
                };
                let q = vis_files::GrepQuery {
                    query: terms.next().unwrap_or_default(),
                    more: terms.collect(),
                    paths,
                    include: list_arg(args, "include")?,
                    exclude: list_arg(args, "exclude")?,
                    is_regex: args
                        .get("is_regex")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    case: args.get("case").and_then(Value::as_bool),
                    context: count("context")?.min(50),
                    page_size: count("limit")?,
                    cursor,
                };
                let page = blocking(move || vis_files::grep(&ws, &q)).await?;
                Ok(
                    json!({"text": page.text, "hits": page.hits, "files": page.files,
                          "names": page.names, "next": page.next}),
                )
            }
            "patch" => {
                let path = required(args, "path", "patch")?;
                let edits = vis_files::edits_from_json(args.get("edits").unwrap_or(&Value::Null))
                    .map_err(file_error)?;
                let ws = self.workspace()?;
                let full = ws.resolve(&path).map_err(file_error)?;
                self.gate("file-write", &full).await?;
                let out = blocking(move || vis_files::patch(&ws, &path, &edits)).await?;
                Ok(Value::String(out.text))
            }
            "ls" => {
                let path = text_arg(args, "path")?.unwrap_or_else(|| ".".into());
                let ws = self.workspace()?;
                let full = ws.resolve(&path).map_err(file_error)?;
                self.gate("file-read", &full).await?;
                Ok(Value::String(
                    blocking(move || vis_files::ls(&ws, &path)).await?,
                ))
            }
            "shell" => self.shell(args).await,
            "job" | "jobs" => self.job(func, args).await,
            d if crate::drafts::FUNCTIONS.contains(&d) => self.draft(d, args).await,
            "apropos" => {
                let hits = match text_arg(args, "text")?.filter(|t| !t.trim().is_empty()) {
                    Some(text) => self.index.search(&text, 20),
                    None => self.index.listed(),
                };
                Ok(Value::Array(
                    hits.iter()
                        .map(|e| json!({"name": e.name, "kind": e.kind, "summary": e.summary}))
                        .collect(),
                ))
            }
            "doc" => {
                let Some(name) = text_arg(args, "name")?.filter(|n| !n.trim().is_empty()) else {
                    return Ok(Value::String(self.index.index()));
                };
                self.index
                    .get(&name)
                    .map(|e| Value::String(e.doc.clone()))
                    .ok_or_else(|| {
                        CallError::new(
                            "LookupError",
                            format!("nothing named {name:?}; doc() lists everything, apropos(words) searches"),
                        )
                    })
            }
            mcp if self.mcp_fns.contains_key(mcp) => {
                let (server, tool) = &self.mcp_fns[mcp];
                self.mcp
                    .call(&self.session.id, server, tool, args.clone())
                    .await
            }
            symbol => {
                let r = self
                    .host
                    .tools()
                    .call(&self.ctx(), symbol, Value::Object(args.clone()))
                    .await
                    .map_err(tool_error)?;
                Ok(r.value)
            }
        }
    }

    async fn shell(&self, args: &Map<String, Value>) -> Result<Value, CallError> {
        let cmd = required(args, "cmd", "shell")?;
        if cmd.trim().is_empty() {
            return Err(CallError::new(
                "ValueError",
                "shell() needs a non-blank command",
            ));
        }
        let background = args
            .get("background")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let own = seconds_arg(args, "timeout")?.filter(|t| !t.is_zero());
        let Some(spec) = &self.shell else {
            return Err(CallError::new("RuntimeError", "the sandbox is not running"));
        };
        use crate::sandbox::shell::{child_setup, run_in_session, ShellError};
        let shell_error = |e: ShellError| match &e {
            ShellError::Config(_) => CallError::new("RuntimeError", e.message()),
            ShellError::Jail(why) => CallError::permission(why.clone()),
            ShellError::Start(_) => CallError::new("OSError", e.message()),
        };
        let root = self.ctx().workspace_root;
        self.boxes.used_scratch(
            &self.session.id,
            crate::sandbox::shell::scratch_dir(&root, &self.session.id),
        );
        if background {
            let (env, jail) = child_setup(&spec.sandbox, &spec.home, &self.session.id, &root)
                .await
                .map_err(shell_error)?;
            let log = crate::sandbox::shell::scratch_file(&root, &self.session.id, "job");
            let job = self
                .boxes
                .jobs
                .start(super::jobs::JobSpec {
                    sid: &self.session.id,
                    cmd: &cmd,
                    cwd: &root,
                    env: &env,
                    jail: &jail,
                    log,
                    max_running: self.max_jobs,
                })
                .await
                .map_err(|e| match e {
                    super::jobs::JobError::Limit(_) => {
                        CallError::new("RuntimeError", e.to_string())
                    }
                    super::jobs::JobError::Start(_) => CallError::new("OSError", e.to_string()),
                })?;
            self.shell_activity(ActivityKindArg::Background, &cmd);
            return Ok(serde_json::to_value(job.info()).unwrap_or(Value::Null));
        }
        // The call's own timeout extends the block; without one it has what is left of it.
        let timeout = match own {
            Some(t) => {
                self.deadline.extend_for(t);
                t
            }
            None => self.deadline.remaining().max(Duration::from_secs(1)),
        };
        self.shell_activity(ActivityKindArg::Foreground, &cmd);
        let mut out = run_in_session(
            &spec.sandbox,
            &spec.home,
            &self.session.id,
            &root,
            &cmd,
            timeout,
            &self.cancel,
        )
        .await
        .map_err(shell_error)?;
        let text = crate::sandbox::shell::describe(&out);
        if let Some(g) = out.leftover.take() {
            self.leftovers.lock().push(g);
        }
        Ok(Value::String(text))
    }

    fn shell_activity(&self, kind: ActivityKindArg, cmd: &str) {
        use vis_companion_api::events::{Activity, ActivityKind, Event};
        let mut a = Activity::new(match kind {
            ActivityKindArg::Foreground => ActivityKind::ShellRun,
            ActivityKindArg::Background => ActivityKind::ShellBg,
        });
        let short: String = cmd.chars().take(200).collect();
        a.op = Some("shell".into());
        a.cmd = Some(short.clone());
        a.label = Some(format!(
            "shell {}",
            short.chars().take(60).collect::<String>()
        ));
        a.phrase = Some(match kind {
            ActivityKindArg::Foreground => format!("Vis is running {short}"),
            ActivityKindArg::Background => format!("Vis started a background job: {short}"),
        });
        a.block_id = Some(self.block_id.clone());
        a.turn_id = Some(self.turn_id.clone());
        a.parent_op = Some(super::TOOL_NAME.to_string());
        self.bus.publish(&self.session.id, Event::Activity(a));
    }

    /// `jobs()` and the operations of a job handle (`job`: status, wait, logs, stop).
    async fn job(&self, func: &str, args: &Map<String, Value>) -> Result<Value, CallError> {
        let sid = &self.session.id;
        if func == "jobs" {
            let all: Vec<_> = self.boxes.jobs.list(sid).iter().map(|j| j.info()).collect();
            return Ok(serde_json::to_value(all).unwrap_or(Value::Null));
        }
        let id = int_arg(args, "id")?
            .ok_or_else(|| CallError::new("TypeError", "a job operation needs the job's `id`"))?;
        let job = u32::try_from(id)
            .ok()
            .and_then(|id| self.boxes.jobs.get(sid, id))
            .ok_or_else(|| {
                CallError::new(
                    "LookupError",
                    format!("no job {id} in this session; jobs() lists them"),
                )
            })?;
        let op = text_arg(args, "op")?.unwrap_or_else(|| "status".into());
        match op.as_str() {
            "status" => {}
            "wait" => {
                let limit = match seconds_arg(args, "timeout")? {
                    Some(t) => {
                        self.deadline.extend_for(t);
                        t
                    }
                    None => self.deadline.remaining(),
                };
                tokio::select! {
                    _ = job.wait(limit) => {}
                    _ = self.cancel.cancelled() => {}
                }
            }
            "stop" => {
                job.stop();
                job.wait(Duration::from_secs(5)).await;
            }
            "logs" => {
                let tail = int_arg(args, "tail")?.map(|n| n.max(0) as usize);
                let since = int_arg(args, "since")?.map(|n| n.max(0) as u64);
                let logs = job.logs(tail, since).await.map_err(|e| {
                    CallError::new("OSError", format!("cannot read the job's log: {e}"))
                })?;
                return Ok(serde_json::to_value(logs).unwrap_or(Value::Null));
            }
            other => {
                return Err(CallError::new(
                    "ValueError",
                    format!("unknown job operation {other:?} (status, wait, logs, stop)"),
                ))
            }
        }
        Ok(serde_json::to_value(job.info()).unwrap_or(Value::Null))
    }

    fn is_builtin(func: &str) -> bool {
        func == "job" || super::builtins::host_names().any(|n| n == func)
    }
}

#[async_trait::async_trait]
impl HostCalls for SessionHost {
    async fn call(&self, func: &str, args: Map<String, Value>) -> Result<Value, CallError> {
        let label = match args.values().next() {
            Some(Value::String(s)) => format!("{func} {}", s.chars().take(60).collect::<String>()),
            _ => func.to_string(),
        };
        self.activity(func, &label);
        if !Self::is_builtin(func) && !self.mcp_fns.contains_key(func)
            || crate::drafts::FUNCTIONS.contains(&func)
        {
            // Symbols run their own op hooks inside the extension host; the draft functions
            // cross `draft/*` and `git/commit` in the gateway.
            return self.dispatch(func, &args).await;
        }
        let session = self.ctx();
        let as_value = Value::Object(args.clone());
        if let Err(e) = self
            .host
            .tools()
            .before_hooks(&session, func, std::slice::from_ref(&as_value))
            .await
        {
            return Err(tool_error(e));
        }
        let out = self.dispatch(func, &args).await;
        let shown = match &out {
            Ok(Value::String(s)) => s.clone(),
            Ok(v) => v.to_string(),
            Err(e) => format!("{}: {}", e.kind, e.message),
        };
        self.host
            .tools()
            .after_hooks(&session, func, &[as_value], &shown)
            .await;
        out
    }
}
