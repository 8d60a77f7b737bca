//! MCP servers (docs/decisions.md, M1): configured in `vis.yml` (`mcp.servers`) or added from the
//! phone, connected per session through the official SDK, and offered to the model as async
//! functions under the server's name inside `python_execution` blocks.
//!
//! - [`spec`]: what a server entry must hold; how tool names become Python names.
//! - [`conn`]: one live connection (stdio child or streamable HTTP through the proxy).
//! - [`managed`]: the servers saved from the phone (`<home>/mcp-servers.json`, 0600).
//! - [`oauth`]: sign-ins for HTTP servers that ask for one, and their tokens.
//! - [`session`]: a session's servers as the model sees them: connections opened in the
//!   background and kept, servers not ready named as such, the system prompt's facts.
//! - [`Mcp`]: the registry: the server list the phone sees, each session's connections,
//!   kills, and the last status of every server (tools seen, last error).
//!
//! A session's stdio servers are its own children (their traffic is attributed to it), so
//! connections are per session and kept across turns; a connection that died is reopened at
//! the next call, and its failure shows in the list until a connection succeeds again.

pub mod conn;
pub mod managed;
pub mod oauth;
pub mod reach;
/// The system prompt's MCP facts (docs/decisions.md, T3): `Mcp::servers_for_prompt`.
pub mod session;
pub mod spec;

use crate::config::Config;
use crate::tools::CallError;
use conn::{Conn, OpenError};
use parking_lot::Mutex;
use reach::Reach;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use vis_companion_api::mcp::{McpServer, McpServerInput, McpTransport};

/// One MCP tool as a function of the block's namespace.
#[derive(Debug, Clone)]
pub struct McpFn {
    /// `server.tool` (the tool's Python name).
    pub name: String,
    pub server: String,
    /// The tool's own name on the server.
    pub tool: String,
    pub contract: Value,
    pub summary: String,
    pub doc: String,
    /// A server waiting for a sign-in: its name is offered, and any use raises the doc.
    pub is_unavailable: bool,
}

#[derive(Debug, Default, Clone)]
struct Status {
    tools: usize,
    last_error: Option<String>,
    /// The server refused the gateway for want of a sign-in, while its tokens were at this
    /// generation (a later sign-in, refresh or sign-out makes the refusal stale).
    refused_at: Option<u64>,
}

struct Live {
    input: McpServerInput,
    reach: Reach,
    conn: Arc<Conn>,
}

/// The gateway's MCP registry.
pub struct Mcp {
    home: PathBuf,
    managed: Mutex<managed::Servers>,
    pub auth: oauth::Auth,
    killed: Mutex<HashSet<String>>,
    status: Mutex<HashMap<String, Status>>,
    live: tokio::sync::Mutex<HashMap<(String, String), Live>>,
    /// The session MCP tests run in, once created.
    probe: Mutex<Option<String>>,
    /// Names a server cannot take: the sandbox's own functions.
    reserved: Vec<String>,
    /// Hand-written entries that cannot be read, with why (from the last `servers`).
    invalid: Mutex<HashMap<String, String>>,
    /// Connections being opened in the background, per (session, server): `true` once done.
    opening: Mutex<HashMap<(String, String), tokio::sync::watch::Receiver<bool>>>,
}

/// One server of a configuration: `(name, spec, is_managed)`.
pub type Entry = (String, McpServerInput, bool);

impl Mcp {
    /// The registry of a home; a broken saved-server file is reported and treated as empty.
    /// `reserved`: the block functions a server's name would shadow.
    pub fn new(home: PathBuf, reserved: Vec<String>) -> Mcp {
        let saved = managed::load(&home).unwrap_or_else(|e| {
            tracing::error!(target: "vis::mcp", "{e}");
            managed::Servers::new()
        });
        Mcp {
            auth: oauth::Auth::new(&home),
            home,
            managed: Mutex::new(saved),
            killed: Mutex::default(),
            status: Mutex::default(),
            live: tokio::sync::Mutex::default(),
            probe: Mutex::default(),
            reserved,
            invalid: Mutex::default(),
            opening: Mutex::default(),
        }
    }

    /// Whether `name` can name a server (`spec::check_name` with the reserved names).
    pub fn check_name(&self, name: &str) -> Result<(), String> {
        spec::check_name(name, &self.reserved)
    }

    /// Every server of `cfg` (hand-written ones first) and those saved from the phone.
    /// A hand-written entry that cannot be read is listed with the reason (and never
    /// connected).
    pub fn servers(&self, cfg: &Config) -> Vec<Entry> {
        let mut invalid = self.invalid.lock();
        invalid.clear();
        let mut out: Vec<Entry> = Vec::new();
        for (n, raw) in &cfg.mcp.servers {
            match spec::from_config(raw) {
                Ok(s) => out.push((n.clone(), s, false)),
                Err(e) => {
                    invalid.insert(n.clone(), e);
                    out.push((n.clone(), spec::unreadable(), false));
                }
            }
        }
        drop(invalid);
        for (n, s) in self.managed.lock().iter() {
            if !cfg.mcp.servers.contains_key(n) {
                out.push((n.clone(), s.clone(), true));
            }
        }
        out
    }

    /// The server saved from the phone under `name`, if any.
    pub fn saved(&self, name: &str) -> Option<McpServerInput> {
        self.managed.lock().get(name).cloned()
    }

    fn is_killed(&self, name: &str) -> bool {
        self.killed.lock().contains(name)
    }

    fn note(&self, name: &str, r: Result<usize, String>) {
        let mut st = self.status.lock();
        let s = st.entry(name.to_string()).or_default();
        match r {
            Ok(n) => {
                s.tools = n;
                s.last_error = None;
                s.refused_at = None;
            }
            Err(e) => {
                s.last_error = Some(e);
                s.refused_at = None;
            }
        }
    }

    /// The server asked for a sign-in the gateway does not hold.
    pub fn note_needs_auth(&self, name: &str) {
        let at = self.auth.tokens.generation(name);
        let mut st = self.status.lock();
        let s = st.entry(name.to_string()).or_default();
        s.last_error = Some(conn::sign_in_message(name));
        s.refused_at = Some(at);
    }

    /// Records how opening a connection went.
    fn note_open(&self, name: &str, r: &Result<Arc<Conn>, OpenError>) {
        match r {
            Ok(c) => self.note(name, Ok(c.tools.len())),
            Err(OpenError::NeedsAuth) => self.note_needs_auth(name),
            Err(OpenError::Failed(e)) => self.note(name, Err(e.clone())),
        }
    }

    /// The phone's view of one server.
    pub async fn view(&self, (name, input, is_managed): &Entry) -> McpServer {
        let connected = self
            .live
            .lock()
            .await
            .iter()
            .any(|((_, n), l)| n == name && !l.conn.is_closed());
        let mut st = self.status.lock().get(name).cloned().unwrap_or_default();
        if let Some(e) = self.invalid.lock().get(name) {
            st.last_error = Some(e.clone());
        }
        let (is_authorized, needs_auth) = match (input.transport, input.url.as_deref()) {
            (McpTransport::StreamableHttp, Some(url)) => {
                let refused = match st.refused_at {
                    Some(at) if at == self.auth.tokens.generation(name) => true,
                    Some(_) => {
                        // The tokens changed since that refusal: it no longer says anything.
                        st.last_error = None;
                        false
                    }
                    None => false,
                };
                let held = self.auth.tokens.status(name, url).is_authorized;
                (Some(held), Some(refused))
            }
            _ => (None, None),
        };
        McpServer {
            name: name.clone(),
            transport: input.transport,
            enabled: input.enabled != Some(false),
            is_connected: connected,
            is_managed: *is_managed,
            tools: st.tools,
            is_killed: self.is_killed(name),
            is_authorized,
            needs_auth,
            command: input.command.clone(),
            args: input.args.clone(),
            cwd: input.cwd.clone(),
            url: input.url.clone(),
            timeout_ms: input.timeout_ms,
            env_keys: input.env.iter().flatten().map(|(k, _)| k.clone()).collect(),
            header_keys: input
                .headers
                .iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect(),
            last_error: st.last_error,
        }
    }

    async fn open(
        &self,
        name: &str,
        input: &McpServerInput,
        reach: &Reach,
    ) -> Result<Arc<Conn>, OpenError> {
        let r = Conn::open(name, input, reach, &self.auth)
            .await
            .map(Arc::new);
        self.note_open(name, &r);
        r
    }

    /// The session's connection to `name`, opened (again) when missing, stale or dead.
    async fn connection(
        &self,
        sid: &str,
        name: &str,
        input: &McpServerInput,
        reach: &Reach,
    ) -> Result<Arc<Conn>, OpenError> {
        let key = (sid.to_string(), name.to_string());
        if let Some(l) = self.live.lock().await.get(&key) {
            if l.input == *input && !l.conn.is_closed() {
                return Ok(l.conn.clone());
            }
        }
        let conn = self.open(name, input, reach).await?;
        self.live.lock().await.insert(
            key,
            Live {
                input: input.clone(),
                reach: reach.clone(),
                conn: conn.clone(),
            },
        );
        Ok(conn)
    }

    /// Calls `tool` of `server` for the session (reconnecting a dead connection once).
    pub async fn call(
        &self,
        sid: &str,
        server: &str,
        tool: &str,
        args: Map<String, Value>,
    ) -> Result<Value, CallError> {
        if self.is_killed(server) {
            return Err(CallError::new(
                "ConnectionError",
                format!("the MCP server {server} is stopped; start it again from the server list"),
            ));
        }
        let key = (sid.to_string(), server.to_string());
        let (input, reach, conn) = {
            let live = self.live.lock().await;
            let Some(l) = live.get(&key) else {
                return Err(CallError::new(
                    "LookupError",
                    format!("the MCP server {server} is not connected in this session"),
                ));
            };
            (l.input.clone(), l.reach.clone(), l.conn.clone())
        };
        let conn = if conn.is_closed() {
            self.connection(sid, server, &input, &reach)
                .await
                .map_err(|e| match e {
                    OpenError::NeedsAuth => CallError::permission(conn::sign_in_message(server)),
                    OpenError::Failed(e) => {
                        CallError::new("ConnectionError", format!("{server}: {e}"))
                    }
                })?
        } else {
            conn
        };
        let r = conn.call(tool, args).await;
        if let Err(e) = &r {
            if e.kind == "ConnectionError" || e.kind == "TimeoutError" {
                self.note(server, Err(e.message.clone()));
            } else if e.kind == "PermissionError" {
                self.note_needs_auth(server);
            }
        }
        r
    }

    /// Ends the session's connections (their stdio children are killed), and forgets the
    /// ones being opened (they are not kept when they come up).
    pub async fn stop_session(&self, sid: &str) {
        self.opening.lock().retain(|(s, _), _| s != sid);
        self.live.lock().await.retain(|(s, _), _| s != sid);
    }

    /// Ends every connection to `name`.
    /// Changes the saved servers and writes them (off the async workers).
    pub async fn edit_saved(&self, f: impl FnOnce(&mut managed::Servers)) -> Result<(), String> {
        let next = {
            let mut m = self.managed.lock();
            f(&mut m);
            m.clone()
        };
        let home = self.home.clone();
        tokio::task::spawn_blocking(move || managed::save(&home, &next))
            .await
            .map_err(|e| e.to_string())?
    }

    /// Stops a server's connections in every session; it stays down until started.
    pub async fn kill(&self, name: &str) {
        self.killed.lock().insert(name.to_string());
        self.drop_server(name).await;
    }

    /// Lets a killed server connect again (on the next call that needs it).
    pub fn start(&self, name: &str) {
        self.killed.lock().remove(name);
    }

    /// The session MCP tests run in, once created.
    pub fn probe_session(&self) -> Option<String> {
        self.probe.lock().clone()
    }

    pub fn set_probe_session(&self, sid: &str) {
        *self.probe.lock() = Some(sid.to_string());
    }

    /// Closes a server's connections in every session (the next call connects again).
    pub async fn drop_server(&self, name: &str) {
        self.opening.lock().retain(|(_, n), _| n != name);
        self.live.lock().await.retain(|(_, n), _| n != name);
    }
}

/// A server waiting for a sign-in, as a name of the block whose every use says so.
fn waiting_for_sign_in(server: &str) -> McpFn {
    unavailable(
        server,
        conn::sign_in_message(server),
        format!("MCP server {server}: its tools appear once someone signs in"),
    )
}

/// A server whose tools cannot be offered now, as a name of the block whose every use
/// raises `why`; `apropos` finds it by `summary`.
fn unavailable(server: &str, why: String, summary: String) -> McpFn {
    McpFn {
        name: server.to_string(),
        server: server.to_string(),
        tool: String::new(),
        contract: json!({"name": server, "mcp_server": server, "is_unavailable": true}),
        summary,
        doc: why,
        is_unavailable: true,
    }
}

/// One tool as a block function; a tool whose input schema is unusable is refused.
fn function(server: &str, tool: &rmcp::model::Tool) -> Result<McpFn, String> {
    let schema = Value::Object((*tool.input_schema).clone());
    let props = match schema.get("properties") {
        None => Map::new(),
        Some(Value::Object(p)) => p.clone(),
        Some(other) => {
            return Err(format!(
            "the tool {} has an invalid input schema: `properties` must be an object, got {other}",
            tool.name
        ))
        }
    };
    if let Some(t) = schema.get("type") {
        if t != "object" {
            return Err(format!(
                "the tool {} has an invalid input schema: `type` must be \"object\", got {t}",
                tool.name
            ));
        }
    }
    let required: HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let params: Vec<Value> = props
        .keys()
        .map(|p| {
            let req = required.contains(p.as_str());
            json!({"name": p, "kind": "keyword_only", "required": req, "has_default": !req})
        })
        .collect();
    let signature = format!(
        "(*, {})",
        props
            .iter()
            .map(|(p, s)| {
                let ty = s.get("type").and_then(Value::as_str).unwrap_or("any");
                if required.contains(p.as_str()) {
                    format!("{p}: {ty}")
                } else {
                    format!("{p}: {ty} = …")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let name = format!("{server}.{}", spec::tool_name(&tool.name));
    let description = tool.description.as_deref().unwrap_or("").to_string();
    let doc = format!(
        "await {name}{signature}\n\n{description}\n\nMCP tool {:?} of the server {server}; input schema: {schema}",
        tool.name
    );
    Ok(McpFn {
        contract: json!({"name": name, "description": description, "signature": signature,
            "parameters": params, "input_schema": schema, "mcp_server": server, "mcp_tool": tool.name}),
        summary: description.lines().next().unwrap_or("").to_string(),
        doc,
        name,
        server: server.to_string(),
        tool: tool.name.to_string(),
        is_unavailable: false,
    })
}
