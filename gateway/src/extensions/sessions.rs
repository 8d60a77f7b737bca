//! Sessions: what the extensions add to each turn of a session (`activation`, `prompt`,
//! `ctx`), their slash commands run in the session's worker, and the end of a session.

use super::catalog::Catalog;
use super::doors::Doors;
use super::pool::WorkerPool;
use super::types::file_str;
use super::{HostConfig, SessionCtx, SlashOutcome, TurnExtras};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The extensions' part in each session: its turns, its slash commands, its end.
pub struct Sessions {
    catalog: Arc<Catalog>,
    workers: Arc<WorkerPool>,
    /// The session's pending human input ends with it.
    doors: Arc<Doors>,
    /// One slash command (`HostConfig::call_timeout`).
    call_timeout: Duration,
    /// `prompt` / `activation` / `ctx` (`HostConfig::turn_timeout`).
    turn_timeout: Duration,
}

impl Sessions {
    pub(super) fn new(
        cfg: &HostConfig,
        catalog: Arc<Catalog>,
        workers: Arc<WorkerPool>,
        doors: Arc<Doors>,
    ) -> Sessions {
        Sessions {
            catalog,
            workers,
            doors,
            call_timeout: cfg.call_timeout,
            turn_timeout: cfg.turn_timeout,
        }
    }

    /// Stops a session's worker (session disposal). The registration worker keeps running.
    pub async fn stop(&self, session_id: &str) {
        self.doors.session_disposed(session_id);
        self.workers.stop_session(session_id).await;
    }

    /// Runs `/name args` (args = the text after the command) without a channel. Ok:
    /// Markdown (title, body, data). Err: Markdown of a `vis.err(...)` result or of the
    /// exception (tests; the engine uses [`Self::slash`]).
    #[cfg(test)]
    pub async fn run_slash(
        &self,
        session: &SessionCtx,
        name: &str,
        args: &str,
    ) -> Result<String, String> {
        let out = self.slash(session, name, args, None).await;
        if out.ok {
            Ok(out.markdown)
        } else {
            Err(out.markdown)
        }
    }

    /// Runs `/name args` from `channel` (the session's channel: `web`, `cli`, …): the
    /// command's Markdown (title, body, then its `data` as a JSON block) and its `data`.
    pub async fn slash(
        &self,
        session: &SessionCtx,
        name: &str,
        args: &str,
        channel: Option<&str>,
    ) -> SlashOutcome {
        let name = name.trim_start_matches('/');
        let entry = self
            .catalog
            .entries(session.project_root.as_deref())
            .await
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
        let worker = self.workers.session(session);
        match worker
            .client
            .call(session.call_ctx(), "run_slash", payload, self.call_timeout)
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
                let e = worker.explain(&entry, e);
                SlashOutcome {
                    ok: false,
                    markdown: e.text_with_traceback(),
                    data: None,
                }
            }
        }
    }

    /// Runs every extension's `activation`, `prompt` and `ctx` for one turn. A
    /// raising `activation` hides the extension; a raising `prompt`/`ctx` adds nothing.
    pub async fn turn(&self, session: &SessionCtx, channel: Option<&str>) -> TurnExtras {
        let env = json!({
            "cwd": file_str(&session.workspace_root),
            "session_id": session.id,
            "channel": channel,
        });
        let mut out = TurnExtras {
            session: json!({}),
            ..TurnExtras::default()
        };
        let entries = self.catalog.entries(session.project_root.as_deref()).await;
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
        let worker = self.workers.session(session);
        for e in entries {
            let name = e.catalog.name.clone();
            let call = |which: &'static str| {
                let payload = json!({"file": file_str(&e.file), "which": which, "env": env});
                worker
                    .client
                    .call(session.call_ctx(), "turn", payload, self.turn_timeout)
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
