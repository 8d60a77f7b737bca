//! `python_execution(code)`: the model's one tool in sandbox mode (docs/decisions.md, G6).

use super::apropos::{DocEntry, Index};
use super::host::{SessionHost, ShellSpec};
use super::process::SpawnSpec;
use super::protocol::{FnEntry, FnKind};
use super::{BlockOutcome, Sandboxes, TOOL_NAME};
use crate::bus::Bus;
use crate::extensions::{ExtensionHost, SessionCtx};
use crate::tools::{Tool, ToolCtx, ToolOutput};
use async_trait::async_trait;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use vis_providers::ToolSpec;

/// One extension Symbol as a function of the block's namespace.
#[derive(Debug, Clone)]
pub struct SymbolFn {
    pub name: String,
    pub contract: Value,
    pub doc: String,
    pub summary: String,
    pub is_hidden: bool,
}

/// One loaded extension, as `apropos` and `doc` show it.
#[derive(Debug, Clone)]
pub struct ExtensionDoc {
    pub name: String,
    /// Where its Symbols live (its alias, else its name).
    pub namespace: String,
    pub description: String,
}

/// What the tool needs from the gateway.
pub struct Parts {
    pub boxes: Arc<Sandboxes>,
    pub sandbox: Option<Arc<crate::sandbox::Sandbox>>,
    pub host: ExtensionHost,
    pub session: SessionCtx,
    pub bus: Arc<Bus>,
    pub home: PathBuf,
    /// A block's limit (a call with a timeout of its own extends it).
    pub limit: Duration,
    /// Running background jobs the session may have.
    pub max_jobs: usize,
    pub mcp: Arc<crate::mcp::Mcp>,
    /// The session's drafts (its current folder; `draft_create` and friends).
    pub drafts: Option<Arc<dyn crate::drafts::SessionDrafts>>,
}

/// The tool, built per turn with the session's function table.
pub struct PythonExecution {
    parts: Parts,
    functions: Vec<FnEntry>,
    index: Arc<Index>,
    /// `server.tool` → (server, tool) of the session's MCP functions.
    mcp_fns: Arc<HashMap<String, (String, String)>>,
}

impl PythonExecution {
    pub fn new(
        parts: Parts,
        symbols: Vec<SymbolFn>,
        mcp: Vec<crate::mcp::McpFn>,
        extensions: Vec<ExtensionDoc>,
    ) -> PythonExecution {
        let mut functions: Vec<FnEntry> = super::builtins::docs()
            .iter()
            .filter(|d| !super::builtins::RUNTIME_ONLY.contains(&d.name.as_str()))
            .map(|d| FnEntry::builtin(&d.name))
            .collect();
        let mut docs = super::builtins::docs();
        for s in symbols {
            functions.push(FnEntry {
                name: s.name.clone(),
                kind: FnKind::Symbol,
                contract: Some(s.contract.clone()),
                doc: Some(s.doc.clone()),
            });
            docs.push(DocEntry {
                name: s.name,
                summary: s.summary,
                doc: s.doc,
                is_hidden: s.is_hidden,
                kind: "symbol".into(),
            });
        }
        let mut mcp_fns = HashMap::new();
        for f in mcp {
            functions.push(FnEntry {
                name: f.name.clone(),
                kind: if f.is_unavailable {
                    FnKind::Unavailable
                } else {
                    FnKind::Mcp
                },
                contract: Some(f.contract),
                doc: Some(f.doc.clone()),
            });
            docs.push(DocEntry {
                name: f.name.clone(),
                summary: f.summary,
                doc: f.doc,
                is_hidden: false,
                kind: "mcp".into(),
            });
            if !f.is_unavailable {
                mcp_fns.insert(f.name, (f.server, f.tool));
            }
        }
        for e in extensions {
            let members: Vec<&str> = functions
                .iter()
                .filter(|f| f.name.starts_with(&format!("{}.", e.namespace)))
                .map(|f| f.name.as_str())
                .collect();
            let mut doc = format!("extension {}\n\n{}", e.name, e.description);
            if !members.is_empty() {
                doc.push_str(&format!("\n\nIts functions: {}", members.join(", ")));
            }
            docs.push(DocEntry {
                name: e.namespace,
                summary: e.description.lines().next().unwrap_or("").to_string(),
                doc,
                is_hidden: false,
                kind: "extension".into(),
            });
        }
        PythonExecution {
            parts,
            functions,
            index: Arc::new(Index::new(docs)),
            mcp_fns: Arc::new(mcp_fns),
        }
    }

    async fn spawn_spec(&self) -> Result<SpawnSpec, String> {
        let sandbox = self
            .parts
            .sandbox
            .clone()
            .ok_or("the egress proxy is not running, so no sandbox can start")?;
        let sid = self.parts.session.id.clone();
        // A session in a draft runs its runtime there (switching drafts restarts it).
        let root = self
            .parts
            .drafts
            .as_ref()
            .and_then(|d| d.root(&sid))
            .or_else(|| self.parts.session.project_root.clone())
            .unwrap_or_else(|| self.parts.session.workspace_root.clone());
        let home = self.parts.home.clone();
        tokio::task::spawn_blocking(move || {
            let cfg = crate::config::load(&home, &root).map_err(|e| e.to_string())?;
            let env = sandbox.child_env(&sid, &root, &cfg);
            let jail = sandbox.jail_prefix(&root, &cfg)?.unwrap_or_default();
            Ok(SpawnSpec {
                python: super::process::default_python(),
                cwd: root,
                env,
                jail,
            })
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

const DESCRIPTION: &str = "Run Python 3 code in the session's sandbox (cwd = the workspace). \
Names persist from call to call (defs() lists yours); after a sandbox restart your functions and \
classes are restored and the output says so. Top-level `await` works. Only what the code prints \
(stdout and stderr), the value of a final expression and an uncaught exception's traceback \
come back, capped at 64 KiB. Built-in \
functions (no import needed): cat(path, start, end), grep(query_or_list, paths, include, exclude, \
is_regex, context, limit, offset), patch(path, edits), ls(path), shell(cmd, timeout, \
background), jobs(), defs(), apropos(text), doc(name), gather(*aws), draft_create(label), \
draft_approve(message), draft_discard(). A call's own timeout extends the block \
(shell('cargo test', timeout=900)); shell(cmd, background=True) returns a job handle at once. \
Extension symbols are async functions at their dotted names (`await todo.add('x')`). Start \
with apropos() and doc() to find what exists. The standard library is available; network \
access goes through the session's egress policy.";

#[async_trait]
impl Tool for PythonExecution {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: TOOL_NAME.into(),
            description: DESCRIPTION.into(),
            parameters: json!({"type": "object", "properties": {
                "code": {"type": "string", "description": "Python source to run"}},
                "required": ["code"]}),
        }
    }

    fn display(&self, args: &Value) -> Option<(String, &'static str)> {
        let code = args.get("code")?.as_str()?;
        Some((code.to_string(), "python"))
    }

    async fn call(&self, ctx: &ToolCtx, args: Value) -> ToolOutput {
        let Some(code) = args.get("code").and_then(Value::as_str) else {
            return ToolOutput::fail("python_execution needs a string `code`");
        };
        let p = &self.parts;
        let deadline = Arc::new(super::Deadline::new(p.limit));
        let host = SessionHost {
            session: p.session.clone(),
            host: p.host.clone(),
            bus: p.bus.clone(),
            index: self.index.clone(),
            shell: p.sandbox.clone().map(|sandbox| ShellSpec {
                sandbox,
                home: p.home.clone(),
            }),
            mcp: p.mcp.clone(),
            mcp_fns: self.mcp_fns.clone(),
            block_id: ctx.block_id.clone(),
            turn_id: ctx.turn_id.clone(),
            cancel: ctx.cancel.clone(),
            drafts: p.drafts.clone(),
            deadline: deadline.clone(),
            boxes: p.boxes.clone(),
            max_jobs: p.max_jobs,
            leftovers: Default::default(),
        };
        let outcome = p
            .boxes
            .run_block(
                &p.session.id,
                self.spawn_spec(),
                super::Block {
                    code,
                    functions: &self.functions,
                    deadline,
                    state_file: Some(super::state::file(&p.home, &p.session.id)),
                },
                &host,
                &ctx.cancel,
            )
            .await;
        render(outcome)
    }
}

/// What the model and the phone's card see of a block.
pub fn render(outcome: BlockOutcome) -> ToolOutput {
    match outcome {
        BlockOutcome::Done(d) => {
            let mut text = match &d.note {
                Some(n) => format!("{n}\n{}", d.output),
                None => d.output.clone(),
            };
            if let Some(err) = &d.error {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(err);
            }
            if text.trim().is_empty() {
                text = "[no output]".into();
            }
            ToolOutput {
                result: text.clone(),
                stdout: Some(d.output),
                error: d.error.map(|_| text),
                is_timeout: false,
            }
        }
        BlockOutcome::TimedOut(limit) => ToolOutput {
            is_timeout: true,
            ..ToolOutput::fail(format!(
                "the block ran past its limit and was stopped after {} s, with everything it \
                 started (not background jobs); the next block runs in a fresh process, with \
                 the functions and classes defined so far restored. Give a long command its own \
                 timeout (shell(cmd, timeout=600)) or run it as a job \
                 (shell(cmd, background=True))",
                limit.as_secs()
            ))
        },
        BlockOutcome::Cancelled => ToolOutput::fail("the block was cancelled with its turn"),
        BlockOutcome::Failed(e) => ToolOutput::fail(e),
    }
}
