//! A fixture MCP server written with the official SDK, for the gateway's MCP tests and
//! benchmark. Modes:
//!
//! - `fixture-mcp stdio`: MCP over stdin/stdout;
//! - `fixture-mcp http <port-file>`: streamable HTTP on 127.0.0.1 (port written to the file);
//! - `fixture-mcp http-oauth <port-file> [token-ttl-secs]`: the same behind OAuth, with its own
//!   authorization server (see `fixture_mcp/oauth.rs`);
//! - `fixture-mcp crash`: exits before answering `initialize`;
//! - `fixture-mcp hang`: reads its input and never answers.
//!
//! Tools: `add(a, b)` (structured `{sum}`), `echo(text)` (text), `fail(message)` (a tool
//! error), `sleep_ms(ms)`, `die()` (the process exits), `search-issues(q)` (a name that is not a Python name).

#[path = "fixture_mcp/oauth.rs"]
mod oauth;

use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::{schemars, tool, tool_router, ServiceExt};
use serde::{Deserialize, Serialize};

#[derive(Clone)]
struct Fixture;

#[derive(Deserialize, schemars::JsonSchema)]
struct AddIn {
    /// The left number.
    a: i64,
    /// The right number.
    b: i64,
}

#[derive(Serialize, schemars::JsonSchema)]
struct AddOut {
    sum: i64,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct TextIn {
    text: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct FailIn {
    message: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct SleepIn {
    ms: u64,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct SearchIn {
    q: String,
}

#[tool_router(server_handler)]
impl Fixture {
    #[tool(description = "Add two integers and return their sum.")]
    fn add(&self, Parameters(AddIn { a, b }): Parameters<AddIn>) -> Json<AddOut> {
        Json(AddOut { sum: a + b })
    }

    #[tool(description = "Echo the text back.")]
    fn echo(&self, Parameters(TextIn { text }): Parameters<TextIn>) -> String {
        text
    }

    #[tool(description = "Fail with the given message.")]
    fn fail(&self, Parameters(FailIn { message }): Parameters<FailIn>) -> Result<String, String> {
        Err(message)
    }

    #[tool(description = "Sleep for ms milliseconds, then answer.")]
    async fn sleep_ms(&self, Parameters(SleepIn { ms }): Parameters<SleepIn>) -> String {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        format!("slept {ms}")
    }

    #[tool(description = "Exit the server process at once (a crash).")]
    fn die(&self) -> String {
        std::process::exit(9)
    }

    #[tool(
        name = "search-issues",
        description = "Search the fixture's issues by words."
    )]
    fn search_issues(&self, Parameters(SearchIn { q }): Parameters<SearchIn>) -> String {
        format!("no issues match {q}")
    }
}

#[tokio::main]
async fn main() -> anyhow_like::Result {
    let mode = std::env::args().nth(1).unwrap_or_default();
    match mode.as_str() {
        "stdio" => {
            let running = Fixture
                .serve(rmcp::transport::stdio())
                .await
                .map_err(|e| e.to_string())?;
            running.waiting().await.map_err(|e| e.to_string())?;
        }
        "http" | "http-oauth" => {
            use rmcp::transport::streamable_http_server::{
                session::local::LocalSessionManager, StreamableHttpServerConfig,
                StreamableHttpService,
            };
            let port_file = std::env::args().nth(2).ok_or("http needs a port file")?;
            let service = StreamableHttpService::new(
                || Ok(Fixture),
                std::sync::Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())?;
            let port = listener.local_addr().map_err(|e| e.to_string())?.port();
            let app = if mode == "http-oauth" {
                let ttl = std::env::args()
                    .nth(3)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(3600);
                let auth = oauth::As::new(port, std::time::Duration::from_secs(ttl));
                let mcp = axum::Router::new().nest_service("/mcp", service).layer(
                    axum::middleware::from_fn_with_state(auth.clone(), oauth::require_token),
                );
                mcp.merge(auth.router())
            } else {
                axum::Router::new().nest_service("/mcp", service)
            };
            std::fs::write(&port_file, port.to_string()).map_err(|e| e.to_string())?;
            axum::serve(listener, app)
                .await
                .map_err(|e| e.to_string())?;
        }
        "crash" => std::process::exit(3),
        "hang" => {
            use tokio::io::AsyncReadExt;
            let mut sink = Vec::new();
            let _ = tokio::io::stdin().read_to_end(&mut sink).await;
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        }
        other => {
            return Err(format!(
                "unknown mode {other:?}: stdio | http FILE | http-oauth FILE [TTL] | crash | hang"
            )
            .into())
        }
    }
    Ok(())
}

/// `main`'s error: a message printed by the runtime.
mod anyhow_like {
    pub type Result = std::result::Result<(), Box<dyn std::error::Error>>;
}
