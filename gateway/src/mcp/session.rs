//! A session's MCP servers as the model sees them: connections opened in the background
//! and kept (a turn waits for them at most [`turn_wait`]), servers that cannot be offered
//! named as such in the block (`apropos`, `doc`, and a clear error on use), and a typed fact
//! per server for the system prompt.

use super::{function, unavailable, waiting_for_sign_in, Entry, Live, Mcp, McpFn};
use crate::config::Config;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use vis_companion_api::mcp::{McpServerInput, McpTransport};

/// How long a turn waits for connections still being opened (`VIS_MCP_TURN_WAIT_MS`,
/// default 1 s); the ones not ready by then are offered from the next turn on.
pub fn turn_wait() -> Duration {
    crate::config::env_ms("VIS_MCP_TURN_WAIT_MS", Duration::from_millis(1000))
}

/// Where one server of a session stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum McpServerState {
    /// Connected in this session; its tools are functions of the block.
    Connected {
        tools: usize,
    },
    /// A connection is being opened; its tools come once it is up.
    Connecting,
    /// Not connected in this session yet (opened at the next turn).
    NotConnected,
    /// The last connection or call failed.
    Down {
        error: String,
    },
    /// An HTTP server that waits for someone to sign in on the phone.
    NeedsSignIn,
    /// Its entry cannot work as written.
    Invalid {
        error: String,
    },
    Disabled,
    /// Stopped from the phone until started again.
    Stopped,
}

/// One MCP server as the system prompt states it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerFact {
    /// The server's name: its tools are `await <name>.<tool>(…)` in a block.
    pub name: String,
    /// One line: how it is reached and, when connected, its tools.
    pub summary: String,
    pub state: McpServerState,
}

impl McpServerFact {
    /// The state and summary as one line (the prompt puts the name before it).
    pub fn describe(&self) -> String {
        let state = match &self.state {
            McpServerState::Connected { tools } => format!("connected, {tools} tool(s)"),
            McpServerState::Connecting => "connecting".into(),
            McpServerState::NotConnected => "not connected yet".into(),
            McpServerState::Down { error } => format!("down: {error}"),
            McpServerState::NeedsSignIn => "needs a sign-in on the phone".into(),
            McpServerState::Invalid { error } => format!("misconfigured: {error}"),
            McpServerState::Disabled => "disabled".into(),
            McpServerState::Stopped => "stopped".into(),
        };
        let name = &self.name;
        match &self.state {
            McpServerState::Connected { .. } => {
                format!("{state} (`await {name}.tool(...)`); {}", self.summary)
            }
            _ => format!("{state}; its tools are not available now; {}", self.summary),
        }
    }
}

/// The project environment `${VAR}` in a server entry resolves from: the `environment:`
/// block, `.env.local`, `.env`, then the gateway's own environment.
async fn project_vars(root: &std::path::Path, cfg: &Config) -> BTreeMap<String, String> {
    let (root, declared) = (root.to_path_buf(), cfg.environment.clone());
    tokio::task::spawn_blocking(move || crate::sandbox::env::project_env(&root, &declared))
        .await
        .unwrap_or_default()
}

impl Mcp {
    /// The session's open connection to `name` for exactly `input`, if any.
    async fn open_conn(
        &self,
        sid: &str,
        name: &str,
        input: &McpServerInput,
    ) -> Option<Arc<super::Conn>> {
        let live = self.live.lock().await;
        let l = live.get(&(sid.to_string(), name.to_string()))?;
        (l.input == *input && !l.conn.is_closed()).then(|| l.conn.clone())
    }

    /// Opens the session's connection to `name` in the background (or joins the opening
    /// already under way); the receiver turns `true` when it is done, either way.
    fn open_in_background(
        self: &Arc<Self>,
        sid: &str,
        name: &str,
        input: &McpServerInput,
        reach: &super::reach::Reach,
    ) -> tokio::sync::watch::Receiver<bool> {
        let key = (sid.to_string(), name.to_string());
        let mut opening = self.opening.lock();
        if let Some(rx) = opening.get(&key) {
            return rx.clone();
        }
        let (tx, rx) = tokio::sync::watch::channel(false);
        opening.insert(key.clone(), rx.clone());
        drop(opening);
        let (me, input, reach) = (self.clone(), input.clone(), reach.clone());
        tokio::spawn(async move {
            let r = me.open(&key.1, &input, &reach).await;
            // A session stopped or a server dropped meanwhile forgot this opening: its
            // connection is not kept (its child ends with it).
            let wanted = me.opening.lock().remove(&key).is_some();
            if let (true, Ok(conn)) = (wanted, r) {
                me.live
                    .lock()
                    .await
                    .insert(key, Live { input, reach, conn });
            }
            let _ = tx.send(true);
        });
        rx
    }

    /// The servers a session may use now, `${VAR}` expanded; the others get their reason
    /// noted in the list.
    async fn usable(&self, cfg: &Config, root: &std::path::Path) -> Vec<(String, McpServerInput)> {
        let entries: Vec<Entry> = self.servers(cfg);
        let vars = project_vars(root, cfg).await;
        let var = |n: &str| vars.get(n).cloned().or_else(|| crate::start_env::var(n));
        let invalid = self.invalid.lock().clone();
        let mut out = Vec::new();
        for (n, s, _) in entries {
            if invalid.contains_key(&n) || s.enabled == Some(false) || self.is_killed(&n) {
                continue;
            }
            let ready = self
                .check_name(&n)
                .and_then(|()| super::spec::check(&s))
                .and_then(|()| super::spec::interpolate(&s, &var));
            match ready {
                Ok(s) => out.push((n, s)),
                // A hand-written entry that cannot work is skipped, with the reason listed.
                Err(e) => self.note(&n, Err(e)),
            }
        }
        out
    }

    /// The tools of every enabled, running server of the session's configuration, as block
    /// functions. Connections are kept across turns; missing ones are opened in the
    /// background and waited for at most [`turn_wait`]. A server that is not ready (still
    /// connecting, down, waiting for a sign-in) is a name of the block whose use says why.
    pub async fn session_fns(
        self: &Arc<Self>,
        sid: &str,
        cfg: &Config,
        reach: &super::reach::Reach,
    ) -> Vec<McpFn> {
        let servers = self.usable(cfg, &reach.cwd).await;
        let mut waits = Vec::new();
        for (name, input) in &servers {
            if self.open_conn(sid, name, input).await.is_none() {
                waits.push(self.open_in_background(sid, name, input, reach));
            }
        }
        let all = futures::future::join_all(waits.into_iter().map(|mut rx| async move {
            let _ = rx.wait_for(|done| *done).await;
        }));
        let _ = tokio::time::timeout(turn_wait(), all).await;
        let mut out = Vec::new();
        for (server, input) in &servers {
            let Some(conn) = self.open_conn(sid, server, input).await else {
                out.push(self.not_ready(sid, server));
                continue;
            };
            for tool in &conn.tools {
                match function(server, tool) {
                    Ok(f) => out.push(f),
                    Err(e) => self.note(server, Err(e)),
                }
            }
        }
        out
    }

    /// A server without a connection, as the block names it.
    fn not_ready(&self, sid: &str, server: &str) -> McpFn {
        let st = self.status.lock().get(server).cloned().unwrap_or_default();
        if st.refused_at.is_some() {
            return waiting_for_sign_in(server);
        }
        let connecting = self
            .opening
            .lock()
            .contains_key(&(sid.to_string(), server.to_string()));
        let (why, summary) = match (connecting, st.last_error) {
            (true, _) => (
                format!(
                    "the MCP server {server} is not connected yet (still connecting); its tools \
                     come with a later block or turn"
                ),
                format!("MCP server {server}: not connected yet (connecting)"),
            ),
            (false, Some(e)) => (
                format!("the MCP server {server} is down: {e}"),
                format!("MCP server {server}: down ({e})"),
            ),
            (false, None) => (
                format!("the MCP server {server} is not connected"),
                format!("MCP server {server}: not connected"),
            ),
        };
        unavailable(server, why, summary)
    }

    /// Every server of the session's configuration and where it stands, for the system
    /// prompt (the same state the block names; no connection is opened or waited for).
    pub async fn servers_for_prompt(&self, sid: &str, cfg: &Config) -> Vec<McpServerFact> {
        let entries = self.servers(cfg);
        let invalid = self.invalid.lock().clone();
        let mut out = Vec::new();
        for (name, input, _) in entries {
            let key = (sid.to_string(), name.clone());
            let conn = {
                let live = self.live.lock().await;
                live.get(&key)
                    .filter(|l| !l.conn.is_closed())
                    .map(|l| l.conn.clone())
            };
            let st = self.status.lock().get(&name).cloned().unwrap_or_default();
            let state = if let Some(e) = invalid.get(&name) {
                McpServerState::Invalid { error: e.clone() }
            } else if input.enabled == Some(false) {
                McpServerState::Disabled
            } else if self.is_killed(&name) {
                McpServerState::Stopped
            } else if let Some(c) = &conn {
                McpServerState::Connected {
                    tools: c.tools.len(),
                }
            } else if self.opening.lock().contains_key(&key) {
                McpServerState::Connecting
            } else if st.refused_at.is_some() {
                McpServerState::NeedsSignIn
            } else if let Some(e) = st.last_error {
                McpServerState::Down { error: e }
            } else {
                McpServerState::NotConnected
            };
            let via = match (input.transport, &input.url, &input.command) {
                (McpTransport::StreamableHttp, Some(u), _) => format!("HTTP at {u}"),
                (_, _, Some(c)) => format!("runs `{c}`"),
                _ => "MCP server".into(),
            };
            let summary = match &conn {
                Some(c) => {
                    let names: Vec<String> = c
                        .tools
                        .iter()
                        .take(12)
                        .map(|t| super::spec::tool_name(&t.name))
                        .collect();
                    let more = c.tools.len().saturating_sub(names.len());
                    let more = if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    };
                    format!("{via}; tools: {}{more}", names.join(", "))
                }
                None => via,
            };
            out.push(McpServerFact {
                name,
                summary,
                state,
            });
        }
        out
    }
}
