//! Symbols as turn tools (docs/decisions.md, E9): the session's tool list, calls through the
//! session worker with the op hooks around them, the `apropos`/`doc` catalogue, and the
//! `fs_access` gates the host's own file tools consult.

use super::catalog::Catalog;
use super::doors::Doors;
use super::pool::WorkerPool;
use super::registry::Entry;
use super::types::file_str;
use super::{CatalogEntry, HostConfig, SessionCtx, ToolDef, ToolError, ToolResult};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The extensions' tools and op hooks, as a session sees them.
pub struct Tools {
    catalog: Arc<Catalog>,
    workers: Arc<WorkerPool>,
    doors: Arc<Doors>,
    /// One tool call (`HostConfig::call_timeout`).
    call_timeout: Duration,
    /// One op hook (`HostConfig::hook_timeout`).
    hook_timeout: Duration,
}

impl Tools {
    pub(super) fn new(
        cfg: &HostConfig,
        catalog: Arc<Catalog>,
        workers: Arc<WorkerPool>,
        doors: Arc<Doors>,
    ) -> Tools {
        Tools {
            catalog,
            workers,
            doors,
            call_timeout: cfg.call_timeout,
            hook_timeout: cfg.hook_timeout,
        }
    }

    /// Every tool of the session's extensions (hidden ones flagged).
    pub async fn list(&self, session: &SessionCtx) -> Vec<ToolDef> {
        let mut out = Vec::new();
        for e in self.catalog.entries(session.project_root.as_deref()).await {
            for s in &e.catalog.symbols {
                for m in &s.members {
                    out.push(ToolDef {
                        name: if m.tool.name.is_empty() {
                            m.name.replace('.', "__")
                        } else {
                            m.tool.name.clone()
                        },
                        full_name: m.name.clone(),
                        description: m.tool.description.clone(),
                        parameters: m.tool.parameters.clone(),
                        extension: e.catalog.name.clone(),
                        is_hidden: m.is_hidden,
                        tag: m.tag.clone(),
                        activity: m.activity.clone(),
                        contract: m.contract.clone(),
                        doc: m.doc.clone(),
                    });
                }
            }
        }
        out
    }

    /// The `apropos`/`doc` catalogue of a session (public and hidden members, flagged).
    pub async fn entries(&self, session: &SessionCtx) -> Vec<CatalogEntry> {
        let mut out = Vec::new();
        for e in self.catalog.entries(session.project_root.as_deref()).await {
            for s in &e.catalog.symbols {
                for m in &s.members {
                    let summary = m
                        .contract
                        .get("description")
                        .and_then(Value::as_str)
                        .and_then(|d| d.lines().next())
                        .unwrap_or("")
                        .to_string();
                    out.push(CatalogEntry {
                        name: m.name.clone(),
                        summary,
                        doc: m.doc.clone(),
                        extension: e.catalog.name.clone(),
                        is_hidden: m.is_hidden,
                    });
                }
            }
        }
        out
    }

    /// The built-in `apropos(pattern)` tool (docs/decisions.md, E9): public tools whose full dotted name matches
    /// the regular expression, as a compact catalogue (name, summary).
    pub async fn apropos(
        &self,
        session: &SessionCtx,
        pattern: &str,
    ) -> Result<Vec<CatalogEntry>, String> {
        let re = regex::Regex::new(pattern).map_err(|e| format!("invalid pattern: {e}"))?;
        Ok(self
            .entries(session)
            .await
            .into_iter()
            .filter(|e| !e.is_hidden && re.is_match(&e.name))
            .collect())
    }

    /// The built-in `doc(name)` tool (docs/decisions.md, E9): the full document of one public tool (dotted or
    /// provider name).
    pub async fn doc(&self, session: &SessionCtx, name: &str) -> Result<String, String> {
        self.entries(session)
            .await
            .into_iter()
            .find(|e| !e.is_hidden && (e.name == name || e.name.replace('.', "__") == name))
            .map(|e| e.doc)
            .ok_or_else(|| format!("no public tool named '{name}'; search with apropos(pattern)"))
    }

    /// Calls a tool (provider name `a__b` or dotted `a.b`) with its JSON arguments, with the
    /// session's op hooks around it: a before-hook `vis.block(reason)` refuses the call; a
    /// raising hook allows it; after-hooks observe the result.
    pub async fn call(
        &self,
        session: &SessionCtx,
        name: &str,
        args: Value,
    ) -> Result<ToolResult, ToolError> {
        let entries = self.catalog.entries(session.project_root.as_deref()).await;
        let found = entries.iter().find_map(|e| {
            e.catalog
                .symbols
                .iter()
                .flat_map(|s| s.members.iter())
                .find(|m| {
                    m.name == name || m.tool.name == name || m.name.replace('.', "__") == name
                })
                .map(|m| (e.clone(), m.name.clone()))
        });
        let Some((entry, full_name)) = found else {
            return Err(ToolError {
                message: format!("no extension tool named '{name}'"),
                traceback: None,
                hint: None,
                kind: "unknown-tool".into(),
            });
        };
        let op = full_name.clone();
        self.before_hooks(session, &op, std::slice::from_ref(&args))
            .await?;
        let worker = self.workers.session(session);
        let payload = json!({
            "file": file_str(&entry.file),
            "name": full_name,
            "arguments": args,
        });
        let outcome = worker
            .client
            .call(session.call_ctx(), "call_tool", payload, self.call_timeout)
            .await;
        let result = match outcome {
            Ok(v) => Ok(ToolResult {
                text: v
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| v.get("value").cloned().unwrap_or(Value::Null).to_string()),
                value: v.get("value").cloned().unwrap_or(Value::Null),
            }),
            Err(e) => Err(worker.explain(&entry, e)),
        };
        if let Ok(r) = &result {
            self.after_hooks(session, &op, &[args], &r.text).await;
        }
        result
    }

    /// Runs the session's `before` op hooks for `op` (also for built-in tools such as
    /// `shell`). The last registered hook runs first; the first block wins; a raising or
    /// timed-out hook allows (logged).
    pub async fn before_hooks(
        &self,
        session: &SessionCtx,
        op: &str,
        args: &[Value],
    ) -> Result<(), ToolError> {
        let hooks = self.hooks_for(session, op, "before");
        if hooks.is_empty() {
            return Ok(());
        }
        let worker = self.workers.session(session);
        for (entry, index) in hooks.into_iter().rev() {
            let payload = json!({
                "file": file_str(&entry.file),
                "index": index,
                "call": {"op": op, "args": args},
            });
            let ctx = session.call_ctx();
            match worker
                .client
                .call(ctx, "run_hook", payload, self.hook_timeout)
                .await
            {
                Ok(v) if v.get("blocked").and_then(Value::as_bool) == Some(true) => {
                    let reason = v
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    return Err(ToolError {
                        message: reason,
                        traceback: None,
                        hint: Some(format!(
                            "Blocked by the '{}' Python extension. Ask the user before retrying.",
                            entry.catalog.name
                        )),
                        kind: "blocked".into(),
                    });
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    target: "vis::extension",
                    extension = %entry.catalog.name,
                    op,
                    "a before op hook failed; the call is allowed: {}",
                    e.message()
                ),
            }
        }
        Ok(())
    }

    /// Runs the session's `after` op hooks (they observe; errors are logged).
    pub async fn after_hooks(&self, session: &SessionCtx, op: &str, args: &[Value], result: &str) {
        let hooks = self.hooks_for(session, op, "after");
        if hooks.is_empty() {
            return;
        }
        let worker = self.workers.session(session);
        for (entry, index) in hooks {
            let payload = json!({
                "file": file_str(&entry.file),
                "index": index,
                "call": {"op": op, "args": args, "result": result},
            });
            if let Err(e) = worker
                .client
                .call(session.call_ctx(), "run_hook", payload, self.hook_timeout)
                .await
            {
                tracing::warn!(
                    target: "vis::extension",
                    extension = %entry.catalog.name,
                    op,
                    "an after op hook failed: {}",
                    e.message()
                );
            }
        }
    }

    fn hooks_for(&self, session: &SessionCtx, op: &str, phase: &str) -> Vec<(Arc<Entry>, usize)> {
        let tool_name = op.replace('.', "__");
        let mut out = Vec::new();
        for e in self.catalog.resolve(session.project_root.as_deref()) {
            for (i, h) in e.catalog.op_hooks.iter().enumerate() {
                if !h.is_gate
                    && h.phase == phase
                    && h.ops.iter().any(|o| o == op || *o == tool_name)
                {
                    out.push((e.clone(), i));
                }
            }
        }
        out
    }

    /// Consults the session's `fs_access` gates (for the host's own file tools):
    /// `operation` is `file-read` or `file-write`. A block or a failing gate refuses.
    pub async fn fs_access(
        &self,
        session: &SessionCtx,
        operation: &str,
        path: &Path,
    ) -> Result<(), String> {
        self.catalog
            .ensure_project(session.project_root.as_deref())
            .await;
        let worker = self.workers.session(session);
        let doors = self.doors.clone();
        let operation = operation.to_string();
        let path = path.to_path_buf();
        let s = session.clone();
        worker
            .client
            .with_worker(
                |running| async move { doors.run_gates(&running, &s, &operation, &path).await },
            )
            .await
            .map_err(|e| {
                format!(
                    "the fs_access guards could not run, and a boundary fails closed: {}",
                    e.message()
                )
            })?
    }
}
