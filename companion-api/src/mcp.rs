//! MCP servers the user manages from the phone: the wire records and the trait the
//! `/v1/mcp/servers…` routes call. Secret values (environment, headers) are accepted on the
//! way in and never sent back.

use crate::error::ApiResult;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How the gateway talks to a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A command the gateway runs as a sandbox child, speaking MCP on its stdio.
    Stdio,
    /// An HTTP endpoint, reached through the egress proxy.
    StreamableHttp,
}

/// A server as configured (`mcp.servers.<name>` in `vis.yml`, or saved from the phone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerInput {
    pub transport: McpTransport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The phone's view of one server (no secret values).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpServer {
    pub name: String,
    pub transport: McpTransport,
    pub enabled: bool,
    pub is_connected: bool,
    /// False for a server written by hand in a `vis.yml`: listed, never rewritten.
    pub is_managed: bool,
    /// Tools seen at the last successful connection.
    pub tools: usize,
    pub is_killed: bool,
    /// HTTP servers only: the gateway holds an OAuth token for this server's URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_authorized: Option<bool>,
    /// HTTP servers only: the server refused the gateway until someone signs in
    /// (`auth/start`); `last_error` says what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_auth: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Why the last connection or call failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpServers {
    pub servers: Vec<McpServer>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpToolInfo {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpTestResult {
    pub name: String,
    pub is_connected: bool,
    pub tools: Vec<McpToolInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How a sign-in proves itself: always the authorization code flow with PKCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpAuthKind {
    Pkce,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpAuthFlowStatus {
    Pending,
    Ok,
    Error,
}

/// One OAuth sign-in for an HTTP server. The gateway keeps the PKCE verifier, the state
/// and the tokens; only these fields travel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpAuthFlow {
    pub flow_id: String,
    pub server: String,
    pub kind: McpAuthKind,
    /// The authorization URL the phone opens in a browser.
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect_uri: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    pub status: McpAuthFlowStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the gateway holds for a server's sign-in, without the tokens themselves.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpAuthStatus {
    pub server: String,
    pub is_authorized: bool,
    pub is_expired: bool,
    pub has_refresh_token: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpAuthCancelled {
    pub flow_id: String,
    /// False when no such flow was running (finished, expired or never started).
    pub is_cancelled: bool,
}

/// What the MCP routes need from the gateway.
#[async_trait]
pub trait McpApi: Send + Sync {
    async fn list(&self) -> ApiResult<McpServers>;
    /// Adds or replaces a managed server.
    async fn save(&self, name: String, input: McpServerInput) -> ApiResult<McpServer>;
    async fn set_enabled(&self, name: &str, enabled: bool) -> ApiResult<McpServer>;
    async fn delete(&self, name: &str) -> ApiResult<()>;
    /// Stops every running instance and holds the server stopped until `start`.
    async fn kill(&self, name: &str) -> ApiResult<McpServer>;
    async fn start(&self, name: &str) -> ApiResult<McpServer>;
    /// Connects once with `input` (nothing saved) and lists its tools.
    async fn test(&self, name: String, input: McpServerInput) -> ApiResult<McpTestResult>;
    /// Starts an OAuth sign-in for an HTTP server: the authorization URL to open.
    async fn auth_start(&self, name: &str) -> ApiResult<McpAuthFlow>;
    /// Finishes a sign-in with what the browser landed on (the redirect URL) or the bare code.
    async fn auth_complete(&self, name: &str, flow_id: &str, input: &str)
        -> ApiResult<McpAuthFlow>;
    /// A sign-in's state, without waiting.
    async fn auth_poll(&self, name: &str, flow_id: &str) -> ApiResult<McpAuthFlow>;
    async fn auth_cancel(&self, name: &str, flow_id: &str) -> ApiResult<McpAuthCancelled>;
    /// Forgets the server's tokens.
    async fn auth_logout(&self, name: &str) -> ApiResult<McpAuthStatus>;
}
