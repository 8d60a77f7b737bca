//! Providers the user manages from the phone: the wire records and the trait the
//! `/v1/providers…` and `/v1/provider-presets` routes call. An API key is accepted on the
//! way in and never sent back: rows say only whether one is set (`has_key`).

use crate::error::ApiResult;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/providers`: add a preset (or an extension's provider) to this gateway, or
/// replace one added earlier. `api_key` may also come later through the `api-key` sign-in.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderInput {
    /// A preset id (`GET /v1/provider-presets`), or the id of a provider added earlier.
    pub id: String,
    /// Where the provider listens (local presets; defaults to the preset's address).
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub api_key: Option<String>,
    /// The models offered in the picker (defaults to the preset's).
    #[serde(default)]
    pub models: Option<Vec<String>>,
}

/// Never prints the key.
impl std::fmt::Debug for ProviderInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderInput")
            .field("id", &self.id)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("models", &self.models)
            .finish()
    }
}

/// Where a provider is defined, and so where it can be changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderSource {
    /// `providers:` in a configuration file (`vis.yml`, `<home>/config.yml`, …).
    Config,
    /// An environment variable of the gateway (`OPENAI_API_KEY`, …).
    EnvVar,
    /// Added from the phone (kept in the gateway home, removable from the phone).
    Saved,
    /// Declared by a Provider extension, signed in through its own callbacks.
    Extension,
}

/// A provider's credential state as the app paints it (`ProviderStatus` of the app).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_authenticated: Option<bool>,
    /// `verified`, `rejected`, `degraded` or `unverified`.
    pub auth_state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `config`, `env-var`, `saved`, `extension`, `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// A definitive credential or configuration failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A live check that failed for a passing reason; the credential stays usable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// One quota window of a limits report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitWindow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at_ms: Option<i64>,
}

/// One row of a limits report (`used`/`limit`/`remaining` are absolute figures).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitRow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_unlimited: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<LimitWindow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Where the figure comes from: `provider-api`, `derived`, `static`, `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Any other field an extension's row carries, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsDynamic {
    #[serde(default)]
    pub limits: Vec<LimitRow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsError {
    pub message: String,
}

/// A provider's limits report (`ProviderLimits` of the app and of the extension API).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// `ok`, `error`, `unauthenticated`, `unknown-provider` or `unsupported`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at_ms: Option<i64>,
    /// `rpm`, `tpm` when known.
    #[serde(rename = "static", default)]
    pub static_: Map<String, Value>,
    #[serde(default)]
    pub dynamic: LimitsDynamic,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<LimitsError>,
}

/// One provider of this gateway (`RouterProvider` of the app, plus where it comes from).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderRow {
    pub id: String,
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// `openai` (chat completions) or `anthropic` (messages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_style: Option<String>,
    pub models: Vec<String>,
    pub is_default: bool,
    pub default_model: Option<String>,
    pub is_fallback: bool,
    pub fallback_model: Option<String>,
    pub source: ProviderSource,
    /// The file or variable that defines it (`vis.yml`, `OPENAI_API_KEY`, …) or the
    /// extension that declares it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configured_in: Option<String>,
    /// Whether a key is set (never the key itself).
    pub has_key: bool,
    /// Whether the phone may remove or replace it (saved from the phone).
    pub is_removable: bool,
    /// Ready for a turn now (a saved extension provider waits for its sign-in).
    pub is_routable: bool,
    pub status: ProviderStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<ProviderLimits>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderList {
    pub providers: Vec<ProviderRow>,
}

/// How a preset's credential is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthKind {
    Oauth,
    ApiKey,
    None,
    Command,
}

/// One row of the *Add provider* picker (`ProviderPreset` of the app).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderPreset {
    pub id: String,
    pub label: String,
    pub auth_kind: AuthKind,
    pub is_local: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_style: Option<String>,
    pub models: Vec<String>,
    /// The Provider extension that declares it, when one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extension: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PresetList {
    pub presets: Vec<ProviderPreset>,
}

/// What a sign-in asks of the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlowKind {
    Pkce,
    Device,
    ApiKey,
}

/// A sign-in the gateway holds open (`AuthFlow` of the app). Secrets never travel here.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuthFlow {
    pub flow_id: String,
    pub provider_id: String,
    pub kind: FlowKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification_uri: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// Epoch ms after which the flow is forgotten.
    pub expires_at: i64,
    pub instructions: Vec<String>,
}

/// Where a sign-in stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerdictStatus {
    Ok,
    Pending,
    Error,
    Cancelled,
    LoggedOut,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuthVerdict {
    pub status: VerdictStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `POST …/auth/complete`: the key of an `api-key` flow, or the redirect URL of a PKCE one.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthComplete {
    pub flow_id: String,
    #[serde(default)]
    pub api_key: Option<String>,
    #[serde(default)]
    pub redirect_url: Option<String>,
}

/// Never prints the key.
impl std::fmt::Debug for AuthComplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthComplete")
            .field("flow_id", &self.flow_id)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("redirect_url", &self.redirect_url.is_some())
            .finish()
    }
}

/// `POST …/auth/poll` and `…/auth/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowRef {
    pub flow_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusAnswer {
    pub status: ProviderStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitsAnswer {
    pub report: ProviderLimits,
}

/// What the provider routes need from the gateway.
#[async_trait]
pub trait ProvidersApi: Send + Sync {
    /// Every provider: configuration, environment, Provider extensions, saved ones.
    async fn list(&self) -> ApiResult<ProviderList>;
    /// Adds or replaces a saved provider; answers the new list.
    async fn add(&self, input: ProviderInput) -> ApiResult<ProviderList>;
    /// Removes a saved provider and its key; answers the list that remains.
    async fn remove(&self, id: &str) -> ApiResult<ProviderList>;
    /// Probes the provider now (a models-list call through its wire).
    async fn status(&self, id: &str) -> ApiResult<ProviderStatus>;
    async fn limits(&self, id: &str) -> ApiResult<ProviderLimits>;
    /// What can still be added.
    async fn presets(&self) -> ApiResult<PresetList>;
    async fn auth_start(&self, id: &str) -> ApiResult<AuthFlow>;
    async fn auth_complete(&self, id: &str, body: AuthComplete) -> ApiResult<AuthVerdict>;
    async fn auth_poll(&self, id: &str, flow_id: &str) -> ApiResult<AuthVerdict>;
    async fn auth_cancel(&self, id: &str, flow_id: &str) -> ApiResult<AuthVerdict>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_of_the_inputs_never_shows_a_key() {
        let input = ProviderInput {
            id: "openai".into(),
            api_key: Some("sk-secret-77".into()),
            ..Default::default()
        };
        let done = AuthComplete {
            flow_id: "f".into(),
            api_key: Some("sk-secret-78".into()),
            redirect_url: None,
        };
        let text = format!("{input:?} {done:?}");
        assert!(!text.contains("sk-secret"), "{text}");
    }

    #[test]
    fn an_empty_limits_report_has_the_wire_shape_of_the_extension_api() {
        let r = ProviderLimits {
            status: "ok".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"status": "ok", "static": {}, "dynamic": {"limits": []}})
        );
    }
}
