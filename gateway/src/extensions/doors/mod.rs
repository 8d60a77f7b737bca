//! Host doors the gateway answers: state, log, notify, activity, declare_env and
//! `vis.fs` (the extension's permissions: any path the gateway's user may touch; relative
//! paths from the session's workspace; the session's `fs_access` gates consulted, failing
//! closed). `request_input`, `live`, the secrets and the shell family go to the host's
//! [`super::HumanDoors`] (the gateway's human-input module); a host without one answers
//! "`<op>` is not available in this gateway build yet".

mod fs;

use self::fs::{blocking, bytes_of, fs_apply, locate};
use super::client::{CallCtx, DoorError, Running};
use super::logfile::LogFile;
use super::registry::SharedRegistry;
use super::types::file_str;
use super::{
    env, DoorWorker, HostConfig, HostEvents, HumanDoors, LinePrinter, SessionCtx, StateStore,
};
use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The doors every worker calls back through: the gateway's state store, events and human
/// input, the extensions log, the printers of running logins, and the `fs_access` gates.
pub(super) struct Doors {
    cfg: HostConfig,
    state: Arc<dyn StateStore>,
    events: Arc<dyn HostEvents>,
    human: Arc<dyn HumanDoors>,
    registry: SharedRegistry,
    /// `<home>/logs/…/extensions.log` (`vis.log` and what extension code prints).
    log: Option<LogFile>,
    /// Where the lines of running `auth_fn` logins go, by printer id.
    printers: Mutex<HashMap<String, LinePrinter>>,
}

impl Doors {
    pub(super) fn new(
        cfg: HostConfig,
        state: Arc<dyn StateStore>,
        events: Arc<dyn HostEvents>,
        human: Arc<dyn HumanDoors>,
        registry: SharedRegistry,
        log: Option<LogFile>,
    ) -> Doors {
        Doors {
            cfg,
            state,
            events,
            human,
            registry,
            log,
            printers: Mutex::new(HashMap::new()),
        }
    }

    /// Answers one door call of `worker`.
    pub(super) async fn answer(
        &self,
        worker: Arc<Running>,
        ctx: CallCtx,
        op: &str,
        payload: Value,
    ) -> Result<Value, DoorError> {
        answer(self, worker, ctx, op, payload).await
    }

    /// Runs the session's `fs_access` gates in `running` (see [`run_gates`]).
    pub(super) async fn run_gates(
        &self,
        running: &Arc<Running>,
        session: &SessionCtx,
        operation: &str,
        path: &Path,
    ) -> Result<(), String> {
        run_gates(self, running, session, operation, path).await
    }

    /// Sends the lines printed under `token` to `print` until [`Self::remove_printer`].
    pub(super) fn add_printer(&self, token: String, print: LinePrinter) {
        self.printers.lock().insert(token, print);
    }

    pub(super) fn remove_printer(&self, token: &str) {
        self.printers.lock().remove(token);
    }

    /// A session ended: its pending human input is let go.
    pub(super) fn session_disposed(&self, session_id: &str) {
        self.human.session_disposed(session_id);
    }
}

/// Every kind of worker answers its doors the same way, while the host is alive.
pub(super) async fn answer_weak(
    doors: &Weak<Doors>,
    worker: Arc<Running>,
    ctx: CallCtx,
    op: String,
    payload: Value,
) -> Result<Value, DoorError> {
    match doors.upgrade() {
        Some(d) => d.answer(worker, ctx, &op, payload).await,
        None => Err(DoorError::new("the gateway is shutting down")),
    }
}

/// The calling worker as [`super::HumanDoors`] sees it: callbacks run as nested requests
/// in the context of the call the door serves.
struct CallingWorker {
    running: Arc<Running>,
    ctx: CallCtx,
    timeout: Duration,
}

#[async_trait]
impl DoorWorker for CallingWorker {
    async fn callback(&self, callable: &Value, args: Vec<Value>) -> Result<Value, String> {
        let Some(id) = callable.get("id").and_then(Value::as_str) else {
            return Err("the callable did not cross to the gateway (no callback id)".into());
        };
        let payload = json!({"id": id, "args": args});
        // Spawned: a caller that goes away (an HTTP client disconnecting) must not abandon
        // the nested request, which would kill the worker.
        let (running, ctx, timeout) = (self.running.clone(), self.ctx.clone(), self.timeout);
        tokio::spawn(async move { running.request(ctx, "callback", payload, timeout).await })
            .await
            .map_err(|e| format!("callback task failed: {e}"))?
            .map_err(|e| e.message())
    }
    fn is_alive(&self) -> bool {
        self.running.is_alive()
    }
    fn hold(&self) -> Box<dyn Send + Sync> {
        Box::new(self.running.hold())
    }
}

fn session_of(ctx: &CallCtx) -> Option<SessionCtx> {
    Some(SessionCtx {
        id: ctx.session_id.clone()?,
        project_root: ctx.project_root.clone(),
        workspace_root: ctx.workspace_root.clone()?,
    })
}

fn str_field<'a>(payload: &'a Value, key: &str) -> Result<&'a str, DoorError> {
    payload
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| DoorError::typed("TypeError", format!("'{key}' must be a string")))
}

fn owner(payload: &Value) -> Result<String, DoorError> {
    payload
        .get("extension")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            DoorError::new(
                "vis.state belongs to a registered extension: call \
                 vis.register(vis.Extension(...)) before using vis.state",
            )
        })
}

async fn answer(
    host: &Doors,
    worker: Arc<Running>,
    ctx: CallCtx,
    op: &str,
    payload: Value,
) -> Result<Value, DoorError> {
    let ext_label = payload
        .get("extension")
        .and_then(Value::as_str)
        .unwrap_or("(loading)")
        .to_string();
    match op {
        "provider_auth_print" => {
            let printer = str_field(&payload, "printer")?;
            let line = str_field(&payload, "line")?;
            let sink = host.printers.lock().get(printer).cloned();
            if let Some(sink) = sink {
                sink(line.to_string());
            }
            Ok(Value::Null)
        }
        "state_get" => {
            let ext = owner(&payload)?;
            let key = str_field(&payload, "key")?;
            host.state
                .get(&ext, key)
                .await
                .map(|v| v.unwrap_or(Value::Null))
                .map_err(|e| DoorError::new(format!("vis.state: {e:#}")))
        }
        "state_put" => {
            let ext = owner(&payload)?;
            let key = str_field(&payload, "key")?;
            let value = payload.get("value").cloned().unwrap_or(Value::Null);
            let r = if value.is_null() {
                host.state.delete(&ext, key).await
            } else {
                host.state.put(&ext, key, value).await
            };
            r.map(|_| Value::Null)
                .map_err(|e| DoorError::new(format!("vis.state: {e:#}")))
        }
        "state_del" => {
            let ext = owner(&payload)?;
            let key = str_field(&payload, "key")?;
            host.state
                .delete(&ext, key)
                .await
                .map(|_| Value::Null)
                .map_err(|e| DoorError::new(format!("vis.state: {e:#}")))
        }
        "state_keys" => {
            let ext = owner(&payload)?;
            host.state
                .keys(&ext)
                .await
                .map(|mut k| {
                    k.sort();
                    json!(k)
                })
                .map_err(|e| DoorError::new(format!("vis.state: {e:#}")))
        }
        "log" => {
            let level = payload
                .get("level")
                .and_then(Value::as_str)
                .unwrap_or("info");
            let msg = payload.get("message").and_then(Value::as_str).unwrap_or("");
            if let Some(log) = &host.log {
                log.line(level, &ext_label, ctx.session_id.as_deref(), msg);
            }
            let session = ctx.session_id.as_deref().unwrap_or("-");
            match level {
                "trace" => {
                    tracing::trace!(target: "vis::extension", extension = %ext_label, session, "{msg}")
                }
                "debug" => {
                    tracing::debug!(target: "vis::extension", extension = %ext_label, session, "{msg}")
                }
                "warn" => {
                    tracing::warn!(target: "vis::extension", extension = %ext_label, session, "{msg}")
                }
                "error" => {
                    tracing::error!(target: "vis::extension", extension = %ext_label, session, "{msg}")
                }
                _ => {
                    tracing::info!(target: "vis::extension", extension = %ext_label, session, "{msg}")
                }
            }
            Ok(Value::Null)
        }
        "notify" => {
            let text = payload.get("text").and_then(Value::as_str).unwrap_or("");
            let level = payload
                .get("level")
                .and_then(Value::as_str)
                .unwrap_or("info");
            host.events
                .notify(ctx.session_id.as_deref(), &ext_label, text, level);
            Ok(Value::Null)
        }
        "activity" => {
            let presentation = payload.get("presentation").cloned().unwrap_or(Value::Null);
            Ok(Value::Bool(host.events.activity(
                ctx.session_id.as_deref(),
                &ext_label,
                presentation,
            )))
        }
        "declare_env" => {
            let names: Vec<String> = payload
                .get("names")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            // The declared names and the project's own (`environment:`, `.env`, `.env.local`),
            // resolved as docs/decisions.md E5 says; reading the dotenv files is blocking IO.
            let environment_of = host.cfg.environment.clone();
            let project = ctx.project_root.clone();
            let resolved = blocking(move || {
                let environment = environment_of(project.as_deref());
                Ok(env::resolve_for_extension(
                    &names,
                    project.as_deref(),
                    &environment,
                    &|n| crate::start_env::var(n),
                ))
            })
            .await?;
            Ok(json!(resolved))
        }
        op if op.starts_with("fs_") => fs_door(host, &worker, &ctx, op, &payload).await,
        "request_input" | "live" | "shell" | "jailed_shell" | "jailed_shell_session" => {
            let session = session_of(&ctx);
            let caller: Arc<dyn DoorWorker> = Arc::new(CallingWorker {
                running: worker,
                ctx: ctx.clone(),
                timeout: host.cfg.hook_timeout,
            });
            if op != "live" && op != "request_input" {
                let opts = payload.get("opts").cloned().unwrap_or(Value::Null);
                host.human
                    .shell(op, session.as_ref(), &ext_label, opts, caller)
                    .await
            } else if op == "live" {
                let envelope = payload.get("envelope").cloned().unwrap_or(Value::Null);
                host.human
                    .live(session.as_ref(), &ext_label, envelope, caller)
                    .await
            } else {
                host.human
                    .request_input(session.as_ref(), &ext_label, payload, caller)
                    .await
            }
        }
        "reveal_secret" => {
            let handle = str_field(&payload, "handle")?;
            Ok(host
                .human
                .reveal_secret(ctx.session_id.as_deref(), handle)
                .map(Value::String)
                .unwrap_or(Value::Null))
        }
        "forget_secret" => {
            let handle = str_field(&payload, "handle")?;
            Ok(Value::Bool(
                host.human.forget_secret(ctx.session_id.as_deref(), handle),
            ))
        }
        other => Err(DoorError::new(format!("unknown host operation '{other}'"))),
    }
}

// -- vis.fs --------------------------------------------------------------------------------

/// Runs the session's `fs_access` gates in registration order: the first block wins, and a
/// gate that raises, times out or cannot run REFUSES (fail closed).
async fn run_gates(
    host: &Doors,
    running: &Arc<Running>,
    session: &SessionCtx,
    operation: &str,
    path: &Path,
) -> Result<(), String> {
    let entries = host
        .registry
        .read()
        .resolve(session.project_root.as_deref());
    let mut ctx = session.call_ctx();
    ctx.is_gate = true;
    for e in entries {
        for (i, h) in e.catalog.op_hooks.iter().enumerate() {
            if !h.is_gate {
                continue;
            }
            let payload = json!({
                "file": file_str(&e.file),
                "index": i,
                "call": {"operation": operation, "path": file_str(path)},
            });
            match running
                .request(ctx.clone(), "run_hook", payload, host.cfg.hook_timeout)
                .await
            {
                Ok(v) if v.get("blocked").and_then(Value::as_bool) == Some(true) => {
                    return Err(v
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("blocked by an fs_access guard")
                        .to_string());
                }
                Ok(_) => {}
                Err(err) => {
                    return Err(format!(
                        "the '{}' extension's fs_access guard failed, and a boundary fails \
                         closed: {}",
                        e.catalog.name,
                        err.message()
                    ))
                }
            }
        }
    }
    Ok(())
}

async fn fs_door(
    host: &Doors,
    worker: &Arc<Running>,
    ctx: &CallCtx,
    op: &str,
    payload: &Value,
) -> Result<Value, DoorError> {
    // Outside a session (provider callbacks, network filters) there are no gates to ask.
    let session = session_of(ctx);
    let base = ctx.workspace_root.clone();
    // (payload key, operation) pairs this op touches.
    let touches: &[(&str, &str)] = match op {
        "fs_read" | "fs_list" | "fs_stat" | "fs_exists" => &[("path", "file-read")],
        "fs_write" | "fs_remove" | "fs_mkdir" => &[("path", "file-write")],
        "fs_copy" => &[("src", "file-read"), ("dst", "file-write")],
        "fs_move" => &[("src", "file-write"), ("dst", "file-write")],
        other => {
            return Err(DoorError::new(format!("unknown host operation '{other}'")));
        }
    };
    let mut paths = Vec::new();
    for (key, operation) in touches {
        let raw = str_field(payload, key)?.to_string();
        let b = base.clone();
        let path = blocking(move || locate(b.as_deref(), &raw)).await?;
        if let Some(session) = session.as_ref().filter(|_| !ctx.is_gate) {
            run_gates(host, worker, session, operation, &path)
                .await
                .map_err(|reason| DoorError::typed("PermissionError", reason))?;
        }
        paths.push(path);
    }
    let op = op.to_string();
    let data = if op == "fs_write" {
        Some(bytes_of(payload.get("data"))?)
    } else {
        None
    };
    let append = payload
        .get("append")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    blocking(move || fs_apply(&op, &paths, data, append)).await
}
