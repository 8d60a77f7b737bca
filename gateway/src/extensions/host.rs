//! The extension host: its shared state, sessions, slash commands, turns.

use super::client::CallCtx;
use super::pool::{SessionWorker, WorkerPool};
use super::{
    logfile::LogFile, Entry, HostConfig, HostEvents, HumanDoors, Registry, SessionCtx,
    SlashOutcome, StateStore, TurnExtras,
};
use parking_lot::{Mutex, RwLock};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};

pub(super) struct Inner {
    pub(super) cfg: HostConfig,
    pub(super) state: Arc<dyn StateStore>,
    pub(super) events: Arc<dyn HostEvents>,
    pub(super) human: Arc<dyn HumanDoors>,
    pub(super) registry: RwLock<Registry>,
    /// Every worker process (`pool.rs`).
    pub(super) workers: WorkerPool,
    pub(super) reload_lock: tokio::sync::Mutex<()>,
    pub(super) frozen_cleared: std::sync::atomic::AtomicBool,
    /// `<home>/logs/…/extensions.log` (`vis.log` and what extension code prints).
    pub(super) log: Option<LogFile>,
    /// Where the lines of running `auth_fn` logins go, by printer id.
    pub(super) printers: Mutex<HashMap<String, super::providers::LinePrinter>>,
}

/// The extension host. Cheap to clone.
#[derive(Clone)]
pub struct ExtensionHost {
    pub(super) inner: Arc<Inner>,
}

pub(super) fn session_call_ctx(s: &SessionCtx) -> CallCtx {
    CallCtx {
        session_id: Some(s.id.clone()),
        project_root: s.project_root.clone(),
        workspace_root: Some(s.workspace_root.clone()),
        is_gate: false,
    }
}

pub(super) fn file_str(p: &Path) -> String {
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
        let log = LogFile::start(&cfg.home);
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| Inner {
            workers: WorkerPool::new(&cfg, log.clone(), weak),
            cfg,
            state,
            events,
            human,
            registry: RwLock::new(Registry::default()),
            reload_lock: tokio::sync::Mutex::new(()),
            frozen_cleared: std::sync::atomic::AtomicBool::new(false),
            log,
            printers: Mutex::new(HashMap::new()),
        });
        ExtensionHost { inner }
    }

    pub(super) fn resolve(&self, project: Option<&Path>) -> Vec<Arc<Entry>> {
        self.inner.registry.read().resolve(project)
    }

    // -- sessions -----------------------------------------------------------------------

    pub(super) fn session_worker(&self, session: &SessionCtx) -> Arc<SessionWorker> {
        self.inner.workers.session(session)
    }

    /// Stops a session's worker (session disposal). The registration worker keeps running.
    pub async fn stop_session(&self, session_id: &str) {
        self.inner.human.session_disposed(session_id);
        self.inner.workers.stop_session(session_id).await;
    }

    /// Stops every worker.
    pub async fn shutdown(&self) {
        self.inner.workers.shutdown().await;
    }

    /// Process id of a session's worker, when it runs (tests).
    #[cfg(test)]
    pub fn session_worker_pid(&self, session_id: &str) -> Option<u32> {
        self.inner.workers.session_pid(session_id)
    }

    /// Session workers that run now (tests).
    #[cfg(test)]
    pub fn running_session_workers(&self) -> usize {
        self.inner.workers.running_sessions()
    }

    /// Process id of the registration worker, when it runs (tests).
    #[cfg(test)]
    pub fn registration_worker_pid(&self) -> Option<u32> {
        self.inner.workers.registration_pid()
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

    /// Runs `/name args` (args = the text after the command) without a channel. Ok:
    /// Markdown (title, body, data). Err: Markdown of a `vis.err(...)` result or of the
    /// exception (tests; the engine uses [`Self::run_slash_outcome`]).
    #[cfg(test)]
    pub async fn run_slash(
        &self,
        session: &SessionCtx,
        name: &str,
        args: &str,
    ) -> Result<String, String> {
        let out = self.run_slash_outcome(session, name, args, None).await;
        if out.ok {
            Ok(out.markdown)
        } else {
            Err(out.markdown)
        }
    }

    /// Runs `/name args` from `channel` (the session's channel: `web`, `cli`, …): the
    /// command's Markdown (title, body, then its `data` as a JSON block) and its `data`.
    pub async fn run_slash_outcome(
        &self,
        session: &SessionCtx,
        name: &str,
        args: &str,
        channel: Option<&str>,
    ) -> SlashOutcome {
        let name = name.trim_start_matches('/');
        self.ensure_project(session.project_root.as_deref()).await;
        let entry = self
            .resolve(session.project_root.as_deref())
            .into_iter()
            .find(|e| e.catalog.slash_commands.iter().any(|c| c.name == name));
        let Some(entry) = entry else {
            return SlashOutcome {
                ok: false,
                markdown: format!("no extension slash command named '/{name}'"),
                data: None,
            };
        };
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
                let data = v.get("data").filter(|d| !d.is_null()).cloned();
                if let Some(d) = &data {
                    let text = serde_json::to_string_pretty(d).unwrap_or_default();
                    md.push_str(&format!("\n\n```json\n{text}\n```"));
                }
                SlashOutcome {
                    ok: v.get("status").and_then(Value::as_str) != Some("error"),
                    markdown: md,
                    data,
                }
            }
            Err(e) => {
                let e = self.explain(&worker.client, &entry, e);
                SlashOutcome {
                    ok: false,
                    markdown: e.text_with_traceback(),
                    data: None,
                }
            }
        }
    }

    // -- per-turn callables -------------------------------------------------------------

    /// Runs every extension's `activation`, `prompt` and `ctx` for one turn. A
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
