//! The machine: router status and defaults, settings toggles, push devices, extensions and
//! the environment of a sandbox child (`vis-gateway exec`).

use super::path::Path;
use super::Q;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::records::{DeviceInput, RouterPatch, SettingAction};
use crate::wire::{ExtensionsListing, ReloadAnswer, SandboxEnv};
use crate::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

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
    let patch: RouterPatch = serde_json::from_value(body.0.clone()).map_err(|e| {
        ApiError::bad_request(
            "invalid-request",
            format!("provider, model and role must be strings: {e}"),
        )
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
    let bad = |m: &str| ApiError::bad_request("invalid-request", m.to_string());
    let id = body
        .0
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| bad("id must be a setting id"))?;
    let action = match body.0.get("action").and_then(Value::as_str) {
        Some("toggle") => SettingAction::Toggle,
        Some("cycle") => SettingAction::Cycle,
        Some("value") => match body.0.get("value") {
            Some(Value::String(v)) => SettingAction::Value(v.clone()),
            Some(Value::Bool(b)) => SettingAction::Value(b.to_string()),
            _ => return Err(bad("action value needs a string value")),
        },
        _ => return Err(bad("action must be toggle, cycle or value")),
    };
    Ok(Json(st.areas.machine.set_setting(id.trim(), action).await?).into_response())
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
    let input: DeviceInput = serde_json::from_value(body.0.clone()).map_err(|e| {
        ApiError::bad_request(
            "invalid-request",
            format!("device fields must be strings: {e}"),
        )
    })?;
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
    let root = q
        .get("root")
        .cloned()
        .or_else(|| {
            body.0
                .get("root")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .filter(|r| !r.trim().is_empty());
    Ok(Json(st.areas.machine.reload_extensions(root).await?))
}

pub async fn sandbox_env(
    State(st): State<AppState>,
    body: crate::body::JsonBody,
) -> ApiResult<Json<SandboxEnv>> {
    let text = |k: &str| -> ApiResult<Option<String>> {
        match body.0.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone()).filter(|s| !s.trim().is_empty())),
            Some(_) => Err(ApiError::bad_request(
                "invalid-request",
                format!("{k} must be a string"),
            )),
        }
    };
    Ok(Json(
        st.areas
            .machine
            .sandbox_env(
                text("session_id")?,
                text("root")?,
                text("title")?,
                text("command")?,
            )
            .await?,
    ))
}
