//! `/v1/providers…` and `/v1/provider-presets`: providers the user manages from the phone.

use super::path::Path;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::providers::{
    AuthComplete, AuthFlow, AuthVerdict, FlowRef, LimitsAnswer, PresetList, ProviderInput,
    ProviderList, ProvidersApi, StatusAnswer,
};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

/// Every route of this resource, each path once.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/providers", get(list).post(add))
        .route("/v1/providers/{id}", axum::routing::delete(remove))
        .route("/v1/providers/{id}/status", get(status))
        .route("/v1/providers/{id}/limits", get(limits))
        .route("/v1/providers/{id}/auth/start", post(auth_start))
        .route("/v1/providers/{id}/auth/complete", post(auth_complete))
        .route("/v1/providers/{id}/auth/poll", post(auth_poll))
        .route("/v1/providers/{id}/auth/cancel", post(auth_cancel))
        .route("/v1/provider-presets", get(presets))
}

fn api(st: &AppState) -> ApiResult<Arc<dyn ProvidersApi>> {
    st.areas.providers.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "providers-unavailable",
            "provider management is not available on this gateway",
        )
    })
}

/// The body as `T` (a `null` member left out), or a 400 naming the field that is wrong.
fn typed<T: DeserializeOwned>(body: JsonBody) -> ApiResult<T> {
    // `null` stands for "not given" (the app sends `base_url: undefined`).
    let Value::Object(mut map) = body.0 else {
        return Err(ApiError::bad_request(
            "invalid-request",
            "the body must be a JSON object",
        ));
    };
    map.retain(|_, v| !v.is_null());
    super::typed(JsonBody(Value::Object(map)))
}

pub async fn list(State(st): State<AppState>) -> ApiResult<Json<ProviderList>> {
    Ok(Json(api(&st)?.list().await?))
}

pub async fn add(State(st): State<AppState>, body: JsonBody) -> ApiResult<Json<ProviderList>> {
    let input: ProviderInput = typed(body)?;
    Ok(Json(api(&st)?.add(input).await?))
}

pub async fn remove(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ProviderList>> {
    Ok(Json(api(&st)?.remove(&id).await?))
}

pub async fn status(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<StatusAnswer>> {
    let status = api(&st)?.status(&id).await?;
    Ok(Json(StatusAnswer { status }))
}

pub async fn limits(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<LimitsAnswer>> {
    let report = api(&st)?.limits(&id).await?;
    Ok(Json(LimitsAnswer { report }))
}

pub async fn presets(State(st): State<AppState>) -> ApiResult<Json<PresetList>> {
    Ok(Json(api(&st)?.presets().await?))
}

pub async fn auth_start(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<AuthFlow>> {
    Ok(Json(api(&st)?.auth_start(&id).await?))
}

pub async fn auth_complete(
    State(st): State<AppState>,
    Path(id): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<AuthVerdict>> {
    let b: AuthComplete = typed(body)?;
    Ok(Json(api(&st)?.auth_complete(&id, b).await?))
}

pub async fn auth_poll(
    State(st): State<AppState>,
    Path(id): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<AuthVerdict>> {
    let b: FlowRef = typed(body)?;
    Ok(Json(api(&st)?.auth_poll(&id, &b.flow_id).await?))
}

pub async fn auth_cancel(
    State(st): State<AppState>,
    Path(id): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<AuthVerdict>> {
    let b: FlowRef = typed(body)?;
    Ok(Json(api(&st)?.auth_cancel(&id, &b.flow_id).await?))
}
