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
    /// An HTTP endpoint, reached through the egress proxy (`http` is accepted for it).
    #[serde(alias = "http")]
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
    /// The names of the environment variables the gateway holds for the server (never
    /// their values), so an edit form can show what is kept.
    pub env_keys: Vec<String>,
    /// The names of the headers the gateway holds for the server (never their values).
    pub header_keys: Vec<String>,
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

/// How a save or a test changes one of a server's secret maps (`env`, `headers`), whose
/// values the gateway never sends back, so an edit form cannot resend them: the key left
/// out keeps the saved map, `null` clears it, an object merges into it (a string sets that
/// name, `null` removes it, names not mentioned are kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SecretsEdit {
    #[default]
    Keep,
    Clear,
    Merge(BTreeMap<String, Option<String>>),
}

impl SecretsEdit {
    /// Reads the member `key` of a server object: absent, `null` or an object of strings
    /// and nulls; anything else is an error naming the field.
    pub fn from_member(
        server: &mut serde_json::Map<String, serde_json::Value>,
        key: &str,
    ) -> Result<SecretsEdit, String> {
        use serde_json::Value;
        match server.remove(key) {
            None => Ok(SecretsEdit::Keep),
            Some(Value::Null) => Ok(SecretsEdit::Clear),
            Some(Value::Object(m)) => {
                let mut out = BTreeMap::new();
                for (k, v) in m {
                    let v = match v {
                        Value::String(s) => Some(s),
                        Value::Null => None,
                        other => {
                            return Err(format!(
                                "`server.{key}.{k}` must be a string (or null to remove it), \
                                 got {other}"
                            ))
                        }
                    };
                    out.insert(k, v);
                }
                Ok(SecretsEdit::Merge(out))
            }
            Some(other) => Err(format!(
                "`server.{key}` must be an object of strings (null removes a name) or null \
                 (clears them all), got {other}"
            )),
        }
    }

    /// The map after the edit, from the one saved (`None`: no map).
    pub fn apply(
        &self,
        saved: Option<&BTreeMap<String, String>>,
    ) -> Option<BTreeMap<String, String>> {
        match self {
            SecretsEdit::Keep => saved.cloned(),
            SecretsEdit::Clear => None,
            SecretsEdit::Merge(m) => {
                let mut out = saved.cloned().unwrap_or_default();
                for (k, v) in m {
                    match v {
                        Some(v) => out.insert(k.clone(), v.clone()),
                        None => out.remove(k),
                    };
                }
                (!out.is_empty()).then_some(out)
            }
        }
    }

    /// Every saved value is replaced or dropped: nothing of the saved map is kept.
    pub fn keeps_nothing_of(&self, saved: Option<&BTreeMap<String, String>>) -> bool {
        match self {
            SecretsEdit::Keep => saved.is_none_or(BTreeMap::is_empty),
            SecretsEdit::Clear => true,
            SecretsEdit::Merge(m) => saved.into_iter().flatten().all(|(k, _)| m.contains_key(k)),
        }
    }
}

/// A server as the phone sends it to save or test: the plain fields, and how its secret
/// maps change relative to what the gateway holds for that name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerEdit {
    /// The server with `env` and `headers` unset.
    pub server: McpServerInput,
    pub env: SecretsEdit,
    pub headers: SecretsEdit,
}

impl McpServerEdit {
    /// Parses the `server` member of a save or test body.
    pub fn parse(server: serde_json::Value) -> Result<McpServerEdit, String> {
        let serde_json::Value::Object(mut m) = server else {
            return Err("`server` must be an object".into());
        };
        let env = SecretsEdit::from_member(&mut m, "env")?;
        let headers = SecretsEdit::from_member(&mut m, "headers")?;
        let server = serde_json::from_value(serde_json::Value::Object(m))
            .map_err(|e| format!("invalid `server`: {e}"))?;
        Ok(McpServerEdit {
            server,
            env,
            headers,
        })
    }

    /// The server as a new entry (nothing saved under its name).
    pub fn fresh(&self) -> McpServerInput {
        self.over(None)
    }

    /// The server with its secret maps edited from `saved`'s.
    pub fn over(&self, saved: Option<&McpServerInput>) -> McpServerInput {
        let mut s = self.server.clone();
        s.env = self.env.apply(saved.and_then(|p| p.env.as_ref()));
        s.headers = self.headers.apply(saved.and_then(|p| p.headers.as_ref()));
        s
    }
}

/// What the MCP routes need from the gateway.
#[async_trait]
pub trait McpApi: Send + Sync {
    async fn list(&self) -> ApiResult<McpServers>;
    /// Adds or changes a managed server (its secrets edited as `edit` says).
    async fn save(&self, name: String, edit: McpServerEdit) -> ApiResult<McpServer>;
    async fn set_enabled(&self, name: &str, enabled: bool) -> ApiResult<McpServer>;
    async fn delete(&self, name: &str) -> ApiResult<()>;
    /// Stops every running instance and holds the server stopped until `start`.
    async fn kill(&self, name: &str) -> ApiResult<McpServer>;
    async fn start(&self, name: &str) -> ApiResult<McpServer>;
    /// Connects once with `edit` over what is saved under `name` (nothing is saved) and
    /// lists its tools.
    async fn test(&self, name: String, edit: McpServerEdit) -> ApiResult<McpTestResult>;
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
