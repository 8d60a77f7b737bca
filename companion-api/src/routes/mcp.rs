//! `/v1/mcp/servers…`: MCP servers the user manages from the phone.

use super::path::Path;
use super::typed;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::mcp::{McpApi, McpServer, McpServerEdit, McpServers, McpTestResult};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::sync::Arc;

/// Every route of this resource, each path once.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/mcp/servers", get(list).post(save))
        .route("/v1/mcp/servers/actions/test", post(test))
        .route("/v1/mcp/servers/{name}", axum::routing::delete(delete))
        .route("/v1/mcp/servers/{name}/actions/enable", post(enable))
        .route("/v1/mcp/servers/{name}/actions/kill", post(kill))
        .route("/v1/mcp/servers/{name}/actions/start", post(start))
        .route("/v1/mcp/servers/{name}/auth/{step}", post(auth))
}

fn api(st: &AppState) -> ApiResult<Arc<dyn McpApi>> {
    st.areas.mcp.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "mcp-unavailable",
            "MCP servers are not available on this gateway",
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveBody {
    name: String,
    /// An [`McpServerEdit`]: `env`/`headers` left out keep what is saved.
    server: serde_json::Value,
}

impl SaveBody {
    fn parse(body: JsonBody) -> ApiResult<(String, McpServerEdit)> {
        let b: SaveBody = typed(body)?;
        let edit = McpServerEdit::parse(b.server)
            .map_err(|e| ApiError::bad_request("invalid-request", format!("invalid body: {e}")))?;
        Ok((b.name, edit))
    }
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
    let (name, edit) = SaveBody::parse(body)?;
    Ok(Json(api(&st)?.save(name, edit).await?))
}

pub async fn test(State(st): State<AppState>, body: JsonBody) -> ApiResult<Json<McpTestResult>> {
    let (name, edit) = SaveBody::parse(body)?;
    Ok(Json(api(&st)?.test(name, edit).await?))
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowBody {
    flow_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteBody {
    flow_id: String,
    /// The URL the browser was redirected to, or the bare authorization code.
    input: String,
}

/// The body of a step that takes one, or a 400 naming the missing field.
fn step_body<T: DeserializeOwned>(body: JsonBody, step: &str) -> ApiResult<T> {
    if body.0.is_null() {
        return Err(ApiError::bad_request(
            "invalid-request",
            format!("auth/{step} needs a JSON body with `flow_id`"),
        ));
    }
    typed(body)
}

/// The OAuth sign-in of an HTTP server: `start` (the authorization URL to open),
/// `complete` (the redirect URL or code the browser ended on), `poll`, `cancel`, `logout`.
pub async fn auth(
    State(st): State<AppState>,
    Path((name, step)): Path<(String, String)>,
    body: JsonBody,
) -> ApiResult<Response> {
    let api = api(&st)?;
    Ok(match step.as_str() {
        "start" => Json(api.auth_start(&name).await?).into_response(),
        "complete" => {
            let b: CompleteBody = step_body(body, &step)?;
            Json(api.auth_complete(&name, &b.flow_id, &b.input).await?).into_response()
        }
        "poll" => {
            let b: FlowBody = step_body(body, &step)?;
            Json(api.auth_poll(&name, &b.flow_id).await?).into_response()
        }
        "cancel" => {
            let b: FlowBody = step_body(body, &step)?;
            Json(api.auth_cancel(&name, &b.flow_id).await?).into_response()
        }
        "logout" => Json(api.auth_logout(&name).await?).into_response(),
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "mcp-auth-step-not-found",
                format!(
                "no MCP auth step {other:?}; the steps are start, complete, poll, cancel, logout"
            ),
            ))
        }
    })
}
