//! The machine: router status and defaults, settings toggles, push devices, extensions and
//! the environment of a sandbox child (`vis-gateway exec`).

use super::path::Path;
use super::{invalid, Q};
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::records::{DeviceInput, RouterPatch, SettingAction};
use crate::wire::{ExtensionsListing, ReloadAnswer, SandboxEnv};
use crate::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::json;

/// Every route of this resource, each path once.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/router", get(router).patch(patch_router))
        .route("/v1/settings", get(settings).post(set_setting))
        .route("/v1/settings/{id}", get(setting))
        .route("/v1/devices", get(devices).post(register_device))
        .route("/v1/devices/{token}", delete(unregister_device))
        .route("/v1/extensions", get(extensions))
        .route("/v1/extensions/reload", post(reload_extensions))
        .route("/v1/sandbox/env", post(sandbox_env))
}

pub async fn router(State(st): State<AppState>) -> ApiResult<Response> {
    Ok(Json(st.areas.machine.router_status().await?).into_response())
}

pub async fn patch_router(State(st): State<AppState>, body: JsonBody) -> ApiResult<Response> {
    if !body.0.is_object() {
        return Err(ApiError::bad_request(
            "invalid-request",
            "the body must be {provider, model, role?}",
        ));
    }
    let patch: RouterPatch = super::record(body).map_err(|e| {
        invalid(format!(
            "provider, model and role must be strings: {}",
            e.message
        ))
    })?;
    Ok(Json(st.areas.machine.patch_router(patch).await?).into_response())
}

pub async fn settings(State(st): State<AppState>) -> ApiResult<Response> {
    Ok(Json(st.areas.machine.settings().await?).into_response())
}

pub async fn setting(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    Ok(Json(st.areas.machine.setting(&id).await?).into_response())
}

pub async fn set_setting(State(st): State<AppState>, body: JsonBody) -> ApiResult<Response> {
    const NO_ID: &str = "id must be a setting id";
    const NO_ACTION: &str = "action must be toggle, cycle or value";
    const NO_VALUE: &str = "action value needs a string value";
    let b: SetSetting = super::typed_or_default(body, |member| {
        let said = match member {
            "id" => NO_ID,
            "action" => NO_ACTION,
            "value" => NO_VALUE,
            _ => return None,
        };
        Some(said.to_string())
    })?;
    let id =
        b.id.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| invalid(NO_ID))?;
    let action = match b.action.as_deref() {
        Some("toggle") => SettingAction::Toggle,
        Some("cycle") => SettingAction::Cycle,
        Some("value") => match b.value {
            Some(SettingValue::Text(v)) => SettingAction::Value(v),
            Some(SettingValue::Flag(f)) => SettingAction::Value(f.to_string()),
            None => return Err(invalid(NO_VALUE)),
        },
        _ => return Err(invalid(NO_ACTION)),
    };
    Ok(Json(st.areas.machine.set_setting(id, action).await?).into_response())
}

pub async fn devices(State(st): State<AppState>) -> ApiResult<Response> {
    Ok(Json(st.areas.machine.devices().await?).into_response())
}

pub async fn register_device(State(st): State<AppState>, body: JsonBody) -> ApiResult<Response> {
    if !body.0.is_object() {
        return Err(ApiError::bad_request(
            "invalid-request",
            "token or grant is required",
        ));
    }
    let input: DeviceInput = super::record(body)
        .map_err(|e| invalid(format!("device fields must be strings: {}", e.message)))?;
    Ok(Json(st.areas.machine.register_device(input).await?).into_response())
}

pub async fn unregister_device(
    State(st): State<AppState>,
    Path(token): Path<String>,
) -> ApiResult<Response> {
    let removed = st.areas.machine.unregister_device(&token).await?;
    Ok(Json(json!({ "is_removed": removed })).into_response())
}

pub async fn extensions(State(st): State<AppState>, q: Q) -> ApiResult<Json<ExtensionsListing>> {
    Ok(Json(
        st.areas.machine.extensions(q.get("root").cloned()).await?,
    ))
}

/// `POST /v1/extensions/reload` — project from `?root=` or the body's `root` (default: the
/// gateway's start-up directory).
pub async fn reload_extensions(
    State(st): State<AppState>,
    q: Q,
    body: crate::body::JsonBody,
) -> ApiResult<Json<ReloadAnswer>> {
    let b: Reload = super::typed_or_default(body, |_| None)?;
    let root = q
        .get("root")
        .cloned()
        .or(b.root)
        .filter(|r| !r.trim().is_empty());
    Ok(Json(st.areas.machine.reload_extensions(root).await?))
}

pub async fn sandbox_env(
    State(st): State<AppState>,
    body: crate::body::JsonBody,
) -> ApiResult<Json<SandboxEnv>> {
    let b: SandboxEnvRequest =
        super::typed_or_default(body, |member| Some(format!("{member} must be a string")))?;
    let given = |s: Option<String>| s.filter(|s| !s.trim().is_empty());
    Ok(Json(
        st.areas
            .machine
            .sandbox_env(
                given(b.session_id),
                given(b.root),
                given(b.title),
                given(b.command),
            )
            .await?,
    ))
}

/// `POST /v1/settings {id, action, value?}`.
#[derive(Default, serde::Deserialize)]
struct SetSetting {
    id: Option<String>,
    action: Option<String>,
    value: Option<SettingValue>,
}

/// A setting's new value: text, or a flag (sent on as `true`/`false`).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum SettingValue {
    Text(String),
    Flag(bool),
}

/// `POST /v1/extensions/reload {root?}`.
#[derive(Default, serde::Deserialize)]
struct Reload {
    root: Option<String>,
}

/// `POST /v1/sandbox/env {session_id?, root?, title?, command?}`.
#[derive(Default, serde::Deserialize)]
struct SandboxEnvRequest {
    session_id: Option<String>,
    root: Option<String>,
    title: Option<String>,
    command: Option<String>,
}
