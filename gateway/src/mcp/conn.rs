//! One live connection to an MCP server, through the official SDK (`rmcp`): a stdio server
//! runs as a sandbox child (the session's environment, behind the jail when the project asks,
//! its own process group); a streamable HTTP server is reached through the egress proxy with
//! the session's token, so the policy and the filters decide its traffic.

use super::oauth::Auth;
use super::reach::{http_builder, Reach};
use super::spec;
use crate::tools::CallError;
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value};
use std::process::Stdio;
use std::time::Duration;
use vis_companion_api::mcp::{McpServerInput, McpTransport};

pub struct Conn {
    server: String,
    service: RunningService<RoleClient, ()>,
    pub tools: Vec<Tool>,
    timeout: Duration,
}

fn stdio_command(input: &McpServerInput, reach: &Reach) -> Result<tokio::process::Command, String> {
    let program = input.command.clone().unwrap_or_default();
    let mut argv: Vec<String> = reach.jail.clone();
    argv.push(program);
    argv.extend(input.args.clone().unwrap_or_default());
    let mut cmd = tokio::process::Command::new(&argv[0]);
    let cwd = input
        .cwd
        .as_deref()
        .map(|c| reach.cwd.join(c))
        .unwrap_or_else(|| reach.cwd.clone());
    cmd.args(&argv[1..])
        .env_clear()
        .envs(&reach.env)
        .env("PWD", &cwd)
        .envs(input.env.clone().unwrap_or_default())
        .current_dir(cwd)
        .process_group(0)
        .kill_on_drop(true);
    Ok(cmd)
}

/// What a sign-in-less HTTP server that asks for one gets told, in the list and in blocks.
pub fn sign_in_message(server: &str) -> String {
    format!(
        "the MCP server {server} needs a sign-in: on the phone open Settings → MCP servers → \
         {server} → Sign in, then try again"
    )
}

/// Why a connection could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// The server answered 401: nobody signed in, or the sign-in ended.
    NeedsAuth,
    Failed(String),
}

impl OpenError {
    pub fn message(&self, server: &str) -> String {
        match self {
            OpenError::NeedsAuth => sign_in_message(server),
            OpenError::Failed(e) => e.clone(),
        }
    }
}

impl From<String> for OpenError {
    fn from(e: String) -> OpenError {
        OpenError::Failed(e)
    }
}

fn init_error(e: rmcp::service::ClientInitializeError) -> OpenError {
    if e.auth_challenge().is_some() || e.is_authorization_required() {
        return OpenError::NeedsAuth;
    }
    OpenError::Failed(format!("the server failed during initialize: {e}"))
}

fn has_authorization_header(input: &McpServerInput) -> bool {
    input
        .headers
        .iter()
        .flatten()
        .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
}

impl Conn {
    /// Starts or reaches the server, runs `initialize` and lists its tools. An HTTP server
    /// with a saved sign-in gets its token (refreshed when expired) on every request.
    pub async fn open(
        server: &str,
        input: &McpServerInput,
        reach: &Reach,
        auth: &Auth,
    ) -> Result<Conn, OpenError> {
        let limit = spec::connect_timeout(input);
        let fut = async {
            let service = match input.transport {
                McpTransport::Stdio => {
                    let cmd = stdio_command(input, reach)?;
                    let (transport, _stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                        .stderr(Stdio::null())
                        .spawn()
                        .map_err(|e| {
                            format!(
                                "cannot start {:?}: {e}",
                                input.command.as_deref().unwrap_or_default()
                            )
                        })?;
                    ().serve(transport)
                        .await
                        .map_err(|e| format!("the server failed during initialize: {e}"))?
                }
                McpTransport::StreamableHttp => {
                    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                    let url = input.url.clone().unwrap_or_default();
                    let mut cfg = StreamableHttpClientTransportConfig::with_uri(url.clone());
                    for (k, v) in input.headers.clone().unwrap_or_default() {
                        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                            .map_err(|e| format!("header {k:?}: {e}"))?;
                        let value = reqwest::header::HeaderValue::from_str(&v)
                            .map_err(|e| format!("header {k:?}: {e}"))?;
                        cfg.custom_headers.insert(name, value);
                    }
                    let client = http_builder(reach)
                        .await?
                        .build()
                        .map_err(|e| e.to_string())?;
                    let manager = if has_authorization_header(input) {
                        None
                    } else {
                        auth.manager(server, &url, reach).await?
                    };
                    use rmcp::transport::StreamableHttpClientTransport as Http;
                    match manager {
                        Some(m) => {
                            let client = rmcp::transport::AuthClient::new(client, m);
                            ().serve(Http::with_client(client, cfg))
                                .await
                                .map_err(init_error)?
                        }
                        None => {
                            ().serve(Http::with_client(client, cfg))
                                .await
                                .map_err(init_error)
                                .map_err(|e| match e {
                                    OpenError::NeedsAuth if has_authorization_header(input) => {
                                        OpenError::Failed(
                                            "the server refused the Authorization header of its \
                                         entry (401); fix the header, or remove it and sign in"
                                                .into(),
                                        )
                                    }
                                    e => e,
                                })?
                        }
                    }
                }
            };
            let tools = service
                .list_all_tools()
                .await
                .map_err(|e| format!("tools/list failed: {e}"))?;
            Ok::<_, OpenError>(Conn {
                server: server.to_string(),
                service,
                tools,
                timeout: spec::call_timeout(input),
            })
        };
        match tokio::time::timeout(limit, fut).await {
            Ok(r) => r,
            Err(_) => Err(OpenError::Failed(format!(
                "the server did not answer within {} ms",
                limit.as_millis()
            ))),
        }
    }

    /// The connection (or the server behind it) is gone.
    pub fn is_closed(&self) -> bool {
        self.service.is_transport_closed()
    }

    /// Calls one tool; the answer as data (structured content, else the text).
    pub async fn call(&self, tool: &str, args: Map<String, Value>) -> Result<Value, CallError> {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
        let result = match tokio::time::timeout(self.timeout, self.service.call_tool(params)).await
        {
            Err(_) => {
                return Err(CallError::new(
                    "TimeoutError",
                    format!(
                        "the MCP tool {tool} did not answer within {} ms",
                        self.timeout.as_millis()
                    ),
                ))
            }
            Ok(Err(e)) if e.auth_challenge().is_some() || e.is_authorization_required() => {
                return Err(CallError::permission(sign_in_message(&self.server)))
            }
            Ok(Err(e)) => {
                return Err(CallError::new(
                    "ConnectionError",
                    format!("the MCP call {tool} failed: {e}"),
                ))
            }
            Ok(Ok(r)) => r,
        };
        let content = serde_json::to_value(&result.content).unwrap_or(Value::Null);
        let texts: Vec<String> = content
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("text").and_then(Value::as_str).map(str::to_string))
            .collect();
        if result.is_error == Some(true) {
            return Err(CallError::new("RuntimeError", texts.join("\n")));
        }
        if let Some(structured) = result.structured_content {
            return Ok(structured);
        }
        match (texts.len(), content.as_array().map(Vec::len).unwrap_or(0)) {
            (1, 1) => Ok(Value::String(texts.into_iter().next().unwrap_or_default())),
            (n, m) if n == m => Ok(Value::String(texts.join("\n"))),
            _ => Ok(content),
        }
    }
}
