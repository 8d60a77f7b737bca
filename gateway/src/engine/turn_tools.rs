//! The tools of a model turn: in sandbox mode one `python_execution` tool whose blocks call
//! the extensions' Symbols, the MCP servers' tools and the draft functions; otherwise
//! `apropos`/`doc`, each active Symbol, the built-ins (`shell` once the sandbox runs) and
//! the draft tools. Every tool but the draft tools runs inside the op hooks.

use super::workspace::Workspaces;
use crate::bus::Bus;
use crate::extensions::ExtensionHost;
use crate::mcp::Mcp;
use crate::model_sandbox::Sandboxes;
use crate::sandbox::Sandbox;
use crate::tools::Tool;
use parking_lot::RwLock;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// What a model turn gets: its tools, and what the system prompt says about them.
pub struct TurnKit {
    pub tools: Vec<Arc<dyn Tool>>,
    /// The extensions' prompt parts, labelled by extension (`ctx` data as `session_env`).
    pub prompts: Vec<(String, String)>,
    /// Extension namespaces the model can call: (name, one line).
    pub namespaces: Vec<(String, String)>,
    /// The MCP servers of the session: (name, one line with its state).
    pub mcp: Vec<(String, String)>,
    /// The project's configuration as the turn read it.
    pub config: crate::config::Config,
}

/// Extension namespaces from dotted function names: (namespace, "N functions: a, b, …").
fn namespaces<'a>(names: impl Iterator<Item = &'a str>) -> Vec<(String, String)> {
    let mut by: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for n in names {
        let ns = n.split('.').next().unwrap_or(n).to_string();
        by.entry(ns).or_default().push(n.to_string());
    }
    by.into_iter()
        .map(|(ns, fns)| {
            let shown: Vec<&str> = fns.iter().take(6).map(String::as_str).collect();
            let more = if fns.len() > shown.len() { ", …" } else { "" };
            let noun = if fns.len() == 1 {
                "function"
            } else {
                "functions"
            };
            (
                ns,
                format!("{} {noun}: {}{more}", fns.len(), shown.join(", ")),
            )
        })
        .collect()
}

/// Assembles a turn's tools from the extension host, the sandboxes, MCP and the workspaces.
pub struct TurnTools {
    extensions: ExtensionHost,
    workspaces: Arc<Workspaces>,
    model_sandboxes: Arc<Sandboxes>,
    mcp: Arc<Mcp>,
    bus: Arc<Bus>,
    home: PathBuf,
    /// The egress proxy and child runner, once started.
    sandbox: OnceLock<Arc<Sandbox>>,
    /// Built-in tools beyond the extensions' (`shell`).
    extra: RwLock<Vec<Arc<dyn Tool>>>,
}

impl TurnTools {
    pub fn new(
        extensions: ExtensionHost,
        workspaces: Arc<Workspaces>,
        model_sandboxes: Arc<Sandboxes>,
        mcp: Arc<Mcp>,
        bus: Arc<Bus>,
        home: PathBuf,
    ) -> TurnTools {
        TurnTools {
            extensions,
            workspaces,
            model_sandboxes,
            mcp,
            bus,
            home,
            sandbox: OnceLock::new(),
            extra: RwLock::new(Vec::new()),
        }
    }

    /// The sandbox runs: blocks and MCP servers reach the network through it, and the
    /// `shell` tool joins the built-ins.
    pub fn install_sandbox(&self, sandbox: Arc<Sandbox>) {
        let tool = crate::sandbox::shell::ShellTool {
            sandbox: sandbox.clone(),
            home: self.home.clone(),
        };
        self.extra.write().push(Arc::new(tool));
        let _ = self.sandbox.set(sandbox);
    }

    /// Tools of a model turn and the extensions' prompt fragments: `apropos`/`doc`, the
    /// active extensions' Symbols, and the built-ins (wrapped in the op hooks).
    pub async fn for_turn(&self, sid: &str, trunk: &std::path::Path) -> TurnKit {
        let session = self.workspaces.session(sid, trunk);
        let root = session.workspace_root.clone();
        let root = root.as_path();
        let host = self.extensions.clone();
        let extras = host.sessions().turn(&session, Some("web")).await;
        let cfg = crate::config::load_async(&self.home, root)
            .await
            .unwrap_or_default();
        if cfg.model_tools() == crate::config::ModelTools::Sandbox {
            let symbols: Vec<crate::model_sandbox::tool::SymbolFn> = host
                .tools()
                .list(&session)
                .await
                .into_iter()
                .filter(|d| !extras.inactive.contains(&d.extension))
                .map(|d| crate::model_sandbox::tool::SymbolFn {
                    summary: d.description.lines().next().unwrap_or("").to_string(),
                    name: d.full_name,
                    contract: d.contract,
                    doc: d.doc,
                    is_hidden: d.is_hidden,
                })
                .collect();
            let mcp_fns = self.mcp_functions(sid, root, &cfg).await;
            let project = session.project_root.clone();
            let extensions = host
                .catalog()
                .list(project.as_deref())
                .await
                .extensions
                .into_iter()
                .filter(|e| !extras.inactive.contains(&e.name))
                .map(|e| crate::model_sandbox::tool::ExtensionDoc {
                    namespace: e.alias.clone().unwrap_or_else(|| e.name.clone()),
                    name: e.name,
                    description: e.description,
                })
                .collect();
            let spaces = namespaces(
                symbols
                    .iter()
                    .filter(|s| !s.is_hidden)
                    .map(|s| s.name.as_str()),
            );
            // Each configured MCP server with its state this turn (the same the block names).
            let mcp = self
                .mcp
                .servers_for_prompt(sid, &cfg)
                .await
                .into_iter()
                .map(|f| (f.name.clone(), f.describe()))
                .collect();
            let tool = crate::model_sandbox::tool::PythonExecution::new(
                crate::model_sandbox::tool::Parts {
                    boxes: self.model_sandboxes.clone(),
                    sandbox: self.sandbox.get().cloned(),
                    host: host.clone(),
                    session: session.clone(),
                    bus: self.bus.clone(),
                    home: self.home.clone(),
                    limit: cfg.block_limit(),
                    max_jobs: cfg.max_background_jobs(),
                    mcp: self.mcp.clone(),
                    drafts: Some(self.workspaces.model_drafts()),
                },
                symbols,
                mcp_fns,
                extensions,
            );
            let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(super::ext::Hooked {
                host,
                inner: Arc::new(tool),
                session,
            })];
            return TurnKit {
                tools,
                prompts: extras.into_labelled_prompts(),
                namespaces: spaces,
                mcp,
                config: cfg,
            };
        }
        let mut tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(super::ext::Apropos {
                host: host.clone(),
                session: session.clone(),
            }),
            Arc::new(super::ext::Doc {
                host: host.clone(),
                session: session.clone(),
            }),
        ];
        for def in host.tools().list(&session).await {
            if !extras.inactive.contains(&def.extension) {
                tools.push(Arc::new(super::ext::ExtTool {
                    host: host.clone(),
                    def,
                    session: session.clone(),
                }));
            }
        }
        for inner in self.extra.read().iter() {
            tools.push(Arc::new(super::ext::Hooked {
                host: host.clone(),
                inner: inner.clone(),
                session: session.clone(),
            }));
        }
        // Not wrapped: they cross `draft/*` and `git/commit` themselves.
        tools.extend(self.workspaces.draft_tools());
        let spaces = namespaces(
            tools
                .iter()
                .map(|t| t.spec().name)
                .filter(|n| n.contains("__"))
                .map(|n| n.replace("__", "."))
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str),
        );
        TurnKit {
            tools,
            prompts: extras.into_labelled_prompts(),
            namespaces: spaces,
            mcp: Vec::new(),
            config: cfg,
        }
    }

    /// The tools of the session's MCP servers as block functions (connecting as needed).
    async fn mcp_functions(
        &self,
        sid: &str,
        root: &std::path::Path,
        cfg: &crate::config::Config,
    ) -> Vec<crate::mcp::McpFn> {
        let Some(sandbox) = self.sandbox.get().cloned() else {
            return Vec::new();
        };
        if self.mcp.servers(cfg).is_empty() {
            return Vec::new();
        }
        let (s, r, c) = (sid.to_string(), root.to_path_buf(), cfg.clone());
        let reach =
            tokio::task::spawn_blocking(move || crate::mcp::reach::reach(&sandbox, &s, &r, &c));
        match reach.await {
            Ok(Ok(reach)) => self.mcp.session_fns(sid, cfg, &reach).await,
            Ok(Err(e)) => {
                tracing::warn!(target: "vis::mcp", session = sid, "MCP servers not reachable: {e}");
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }
}
