//! The `/v1/providers…` and `/v1/provider-presets` answers over the gateway, and the one
//! place that publishes provider changes to connected clients (the router rebuild is the
//! configuration job's, `configuration.rs`). `list`, `edit` and `auth` hold the
//! listing, the changes to the saved file, and the sign-in flows (`api-key`, and an
//! extension's `auth_fn` run as a device-style flow).

mod auth;
mod edit;
mod list;

use crate::engine::Gateway;
use crate::extensions::ProviderInfo;
use crate::provider_admin::{presets, probe};
use crate::providers::Source;
use async_trait::async_trait;
use axum::http::StatusCode;
use std::path::Path;
use std::sync::Arc;
use vis_companion_api::events::{Event, ProvidersUpdated};
use vis_companion_api::providers::*;
use vis_companion_api::{ApiError, ApiResult};

pub struct ProviderRoutes(pub Arc<Gateway>);

/// What changed, as published to connected clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Replaced,
    Removed,
    SignedIn,
}

impl Change {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Replaced => "replaced",
            Change::Removed => "removed",
            Change::SignedIn => "signed-in",
        }
    }
}

/// The one place provider changes are published: a live-only `providers.updated` event
/// (`{change, provider_id}`, never a key) on every session loaded in memory, so every
/// connected client re-reads the list.
pub fn publish(gw: &Gateway, change: Change, provider_id: &str) {
    gw.sessions
        .broadcast(Event::ProvidersUpdated(ProvidersUpdated {
            change: change.as_str().to_string(),
            provider_id: provider_id.to_string(),
        }));
}

pub(super) fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "provider-not-found",
        format!("no provider {id:?} is configured, saved or declared by an extension"),
    )
    .with("provider_id", id)
}

pub(super) fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid-request", message).with("field", field)
}

/// The layer files that define `providers.<id>` (blocking IO).
pub(super) fn config_origin(home: &Path, root: &Path, id: &str) -> String {
    let found: Vec<String> = crate::config::layer_paths(home, root)
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| serde_norway::from_str::<serde_norway::Value>(&t).ok())
                .is_some_and(|v| v.get("providers").and_then(|ps| ps.get(id)).is_some())
        })
        .map(|p| p.display().to_string())
        .collect();
    if found.is_empty() {
        "the configuration".into()
    } else {
        found.join(", ")
    }
}

/// Where a provider id is known from.
pub(super) enum Known {
    Routed {
        source: Source,
        client: Arc<vis_providers::Client>,
    },
    Extension(ProviderInfo),
}

impl ProviderRoutes {
    pub(super) fn admin(&self) -> &crate::provider_admin::Admin {
        self.0.configuration.admin()
    }

    pub(super) async fn extension_providers(&self) -> Vec<ProviderInfo> {
        self.0
            .extensions
            .providers()
            .list(Some(&self.0.default_root))
            .await
    }

    /// Calls `slot` (no arguments) of the extension provider `id`; `None` when no extension
    /// provider of that id declares the slot.
    pub(super) async fn call_slot(
        &self,
        id: &str,
        slot: &str,
    ) -> Option<Result<serde_json::Value, crate::extensions::ToolError>> {
        let info = self
            .extension_providers()
            .await
            .into_iter()
            .find(|p| p.id == id && probe::has_slot(p, slot))?;
        Some(
            self.0
                .extensions
                .providers()
                .call(&info.extension, id, slot, Vec::new())
                .await,
        )
    }

    pub(super) async fn known(&self, id: &str) -> ApiResult<Known> {
        let routed = {
            let r = self.0.configuration.router();
            r.clients.get(id).map(|c| {
                (
                    r.sources.get(id).cloned().unwrap_or(Source::Saved),
                    c.clone(),
                )
            })
        };
        if let Some((source, client)) = routed {
            return Ok(Known::Routed { source, client });
        }
        self.extension_providers()
            .await
            .into_iter()
            .find(|p| p.id == id)
            .map(Known::Extension)
            .ok_or_else(|| not_found(id))
    }

    /// The 409 for a provider the phone does not own.
    pub(super) async fn not_removable(&self, id: &str, source: &Source) -> ApiError {
        let (home, root, key) = (
            self.0.configuration.home().to_path_buf(),
            self.0.default_root.clone(),
            id.to_string(),
        );
        let message = match source {
            Source::Config { .. } => {
                let at = tokio::task::spawn_blocking(move || config_origin(&home, &root, &key))
                    .await
                    .unwrap_or_else(|_| "the configuration".into());
                format!(
                    "the provider {id:?} is defined under providers.{id} in {at}; edit that file \
                     to change or remove it"
                )
            }
            Source::Env { var } => format!(
                "the provider {id:?} comes from the environment variable {var} of the gateway; \
                 unset it and restart the gateway to remove it"
            ),
            Source::Saved => format!("the provider {id:?} is saved from the phone"),
        };
        ApiError::conflict("provider-not-removable", message).with("provider_id", id)
    }

    /// The preset `id` names: a built-in one or an extension's.
    /// A saved provider saved without models takes the ones its server lists (the first
    /// is then its default model); one with models of its own keeps them.
    async fn adopt_listed_models(&self, id: &str, listed: Vec<String>) -> ApiResult<()> {
        let listed: Vec<String> = listed
            .into_iter()
            .filter(|m| !m.trim().is_empty())
            .collect();
        let wants = self
            .admin()
            .saved()
            .get(id)
            .is_some_and(|s| s.models.is_empty());
        if !wants || listed.is_empty() {
            return Ok(());
        }
        let key = id.to_string();
        self.edit_saved(move |s| {
            if let Some(e) = s.get_mut(&key).filter(|e| e.models.is_empty()) {
                e.models = listed;
            }
        })
        .await
    }

    pub(super) async fn preset(&self, id: &str) -> Option<ProviderPreset> {
        if let Some(p) = presets::builtin().into_iter().find(|p| p.id == id) {
            return Some(p);
        }
        self.extension_providers()
            .await
            .iter()
            .find(|p| p.id == id)
            .and_then(presets::of_extension)
    }
}

#[async_trait]
impl ProvidersApi for ProviderRoutes {
    async fn list(&self) -> ApiResult<ProviderList> {
        self.list_now().await
    }

    async fn add(&self, input: ProviderInput) -> ApiResult<ProviderList> {
        let id = input.id.trim().to_string();
        let change = self.save(input).await?;
        tracing::info!(target: "vis::providers", provider = %id, change = change.as_str(), "provider saved from the phone");
        // A server that names no models of its own (an OpenAI-compatible one) is checked
        // now: the models it lists become its models, the first one the default.
        if self
            .admin()
            .saved()
            .get(&id)
            .is_some_and(|s| s.models.is_empty())
        {
            let _ = self.status(&id).await;
        }
        publish(&self.0, change, &id);
        self.list_now().await
    }

    async fn remove(&self, id: &str) -> ApiResult<ProviderList> {
        if self.admin().saved().contains_key(id) {
            let extension = self
                .admin()
                .saved()
                .get(id)
                .and_then(|s| s.extension.clone());
            let key = id.to_string();
            self.edit_saved(move |s| {
                s.remove(&key);
            })
            .await?;
            self.admin().forget_checked(id);
            // The extension discards its own credential too, when it keeps one.
            if let Some(ext) = extension {
                if let Err(e) = self
                    .0
                    .extensions
                    .providers()
                    .call(&ext, id, "logout_fn", Vec::new())
                    .await
                {
                    tracing::warn!(target: "vis::providers", provider = %id, "logout_fn failed: {}", e.message);
                }
            }
            tracing::info!(target: "vis::providers", provider = %id, "provider removed from the phone");
            publish(&self.0, Change::Removed, id);
            return self.list_now().await;
        }
        match self.known(id).await? {
            Known::Routed { source, .. } => Err(self.not_removable(id, &source).await),
            Known::Extension(info) => Err(ApiError::conflict(
                "provider-not-removable",
                format!(
                    "the provider {id:?} is declared by the extension {}; remove or disable \
                     that extension to remove it",
                    info.extension
                ),
            )
            .with("provider_id", id)),
        }
    }

    async fn status(&self, id: &str) -> ApiResult<ProviderStatus> {
        let status = match self.known(id).await? {
            Known::Routed { source, client } => {
                let name = match &source {
                    Source::Config { .. } => "config",
                    Source::Env { .. } => "env-var",
                    Source::Saved => "saved",
                };
                let label = match self.admin().saved().get(id) {
                    Some(s) => s.label.clone(),
                    None => self
                        .preset(id)
                        .await
                        .map_or_else(|| id.to_string(), |p| p.label),
                };
                let (s, listed) = probe::check_listing(&client, &label, name).await;
                if let (Source::Saved, Some(listed)) = (&source, listed) {
                    self.adopt_listed_models(id, listed).await?;
                }
                match self.extension_limits(id).await {
                    Some(l) => probe::with_limits(s, &l),
                    None => s,
                }
            }
            Known::Extension(info) => {
                let own = if probe::has_slot(&info, "status_fn") {
                    self.0
                        .extensions
                        .providers()
                        .call(&info.extension, id, "status_fn", Vec::new())
                        .await
                        .ok()
                        .and_then(|v| probe::from_status_fn(&v, &info.extension))
                } else {
                    None
                };
                let picked = self
                    .0
                    .turns
                    .extension_provider(&self.0.default_root, Some(&format!("{id}/probe")))
                    .await;
                let s = match (picked, own) {
                    (Some((client, _)), _) => {
                        probe::check_client(&client, &info.label, "extension").await
                    }
                    (None, Some(s)) => s,
                    (None, None) => ProviderStatus {
                        is_authenticated: Some(false),
                        auth_state: "unverified".into(),
                        detail: Some(format!(
                            "the extension {} gave no credential for {id}",
                            info.extension
                        )),
                        source: Some("extension".into()),
                        ..Default::default()
                    },
                };
                match self.extension_limits(id).await {
                    Some(l) => probe::with_limits(s, &l),
                    None => s,
                }
            }
        };
        self.admin().note_checked(id, &status);
        Ok(status)
    }

    async fn limits(&self, id: &str) -> ApiResult<ProviderLimits> {
        let client = match self.known(id).await? {
            Known::Routed { client, .. } => Some(client),
            Known::Extension(_) => None,
        };
        let headers = probe::from_headers(id, client.as_deref());
        Ok(probe::merge(id, self.extension_limits(id).await, headers))
    }

    async fn presets(&self) -> ApiResult<PresetList> {
        let configured: Vec<String> = self.0.configuration.provider_ids();
        let mut presets: Vec<ProviderPreset> = presets::builtin();
        for e in self.extension_providers().await {
            if let Some(p) = presets::of_extension(&e) {
                presets.retain(|b| b.id != p.id);
                presets.push(p);
            }
        }
        let saved = self.admin().saved();
        presets.retain(|p| !configured.contains(&p.id) && !saved.contains_key(&p.id));
        Ok(PresetList { presets })
    }

    async fn auth_start(&self, id: &str) -> ApiResult<AuthFlow> {
        self.start_flow(id).await
    }

    async fn auth_complete(&self, id: &str, body: AuthComplete) -> ApiResult<AuthVerdict> {
        self.complete_flow(id, body).await
    }

    async fn auth_poll(&self, id: &str, flow_id: &str) -> ApiResult<AuthVerdict> {
        self.poll_flow(id, flow_id).await
    }

    async fn auth_cancel(&self, id: &str, flow_id: &str) -> ApiResult<AuthVerdict> {
        self.cancel_flow(id, flow_id).await
    }
}
