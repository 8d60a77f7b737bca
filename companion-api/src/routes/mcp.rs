//! `/v1/mcp/servers…`: MCP servers the user manages from the phone.

use super::path::Path;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::mcp::{McpApi, McpServer, McpServerInput, McpServers, McpTestResult};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::sync::Arc;

fn api(st: &AppState) -> ApiResult<Arc<dyn McpApi>> {
    st.engine.mcp().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "mcp-unavailable",
            "MCP servers are not available on this gateway",
        )
    })
}

/// The body as `T`, or a 400 naming the field that is wrong.
fn typed<T: DeserializeOwned>(body: JsonBody) -> ApiResult<T> {
    serde_json::from_value(body.0)
        .map_err(|e| ApiError::bad_request("invalid-request", format!("invalid body: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveBody {
    name: String,
    server: McpServerInput,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnableBody {
    enabled: bool,
}

pub async fn list(State(st): State<AppState>) -> ApiResult<Json<McpServers>> {
    Ok(Json(api(&st)?.list().await?))
}

pub async fn save(State(st): State<AppState>, body: JsonBody) -> ApiResult<Json<McpServer>> {
    let b: SaveBody = typed(body)?;
    Ok(Json(api(&st)?.save(b.name, b.server).await?))
}

pub async fn test(State(st): State<AppState>, body: JsonBody) -> ApiResult<Json<McpTestResult>> {
    let b: SaveBody = typed(body)?;
    Ok(Json(api(&st)?.test(b.name, b.server).await?))
}

pub async fn enable(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<McpServer>> {
    let b: EnableBody = typed(body)?;
    Ok(Json(api(&st)?.set_enabled(&name, b.enabled).await?))
}

pub async fn delete(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    api(&st)?.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn kill(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<McpServer>> {
    Ok(Json(api(&st)?.kill(&name).await?))
}

pub async fn start(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<McpServer>> {
    Ok(Json(api(&st)?.start(&name).await?))
}

/// The OAuth sign-in routes: no MCP OAuth flow is implemented; a server that needs a token
/// takes it as a header (`headers: {Authorization: "Bearer …"}`).
pub async fn auth(Path(_name_step): Path<(String, String)>) -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "mcp-oauth-unsupported",
        "this gateway does not run MCP OAuth sign-ins; give the server its token as a header \
         (server.headers.Authorization = \"Bearer …\")",
    )
}
