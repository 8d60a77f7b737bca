//! The `/v1/providers…` and `/v1/provider-presets` answers.

use super::flows::{self, Progress};
use super::presets::{self, check_base_url};
use super::probe;
use super::saved::{self, SavedProvider};
use crate::engine::Gateway;
use crate::extensions::ProviderInfo;
use crate::providers::{Router, Source};
use async_trait::async_trait;
use axum::http::StatusCode;
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;
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
    fn as_str(self) -> &'static str {
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
    let payload = serde_json::json!({"change": change.as_str(), "provider_id": provider_id});
    let serde_json::Value::Object(map) = payload else {
        return;
    };
    for (sid, _) in gw.loaded() {
        gw.bus.publish(&sid, "providers.updated", map.clone());
    }
}

/// Rebuilds the router from the configuration and the saved providers (the next turn uses
/// it); the egress proxy's provider routes follow.
pub fn rebuild(gw: &Gateway) -> Result<(), String> {
    let cfg = gw.config.read().clone();
    let router =
        Router::from_config(&cfg, &gw.provider_admin.saved()).map_err(|e| e.to_string())?;
    if let Some(sb) = gw.sandbox.get() {
        sb.routes.refresh(&router.clients);
    }
    *gw.providers.write() = router;
    Ok(())
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "provider-not-found",
        format!("no provider {id:?} is configured, saved or declared by an extension"),
    )
    .with("provider_id", id)
}

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid-request", message).with("field", field)
}

/// The layer files that define `providers.<id>` (blocking IO).
fn config_origin(home: &Path, root: &Path, id: &str) -> String {
    let found: Vec<String> = crate::config::layer_paths(home, root)
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| serde_yaml::from_str::<serde_yaml::Value>(&t).ok())
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

/// A provider id the phone may create: 1–64 of `a-z 0-9 . _ -`.
fn check_id(id: &str) -> ApiResult<String> {
    let id = id.trim();
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(id.to_string())
    } else {
        Err(invalid(
            "id",
            format!("id {id:?} must be 1–64 characters of a-z, 0-9, '.', '_' or '-'"),
        ))
    }
}

/// A key fit for a header: one line of printable characters.
fn check_key(key: &str) -> ApiResult<String> {
    let key = key.trim();
    if key.is_empty() {
        return Err(invalid("api_key", "api_key must not be blank"));
    }
    if key.len() > 4096 || key.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(invalid(
            "api_key",
            "api_key must be one line of printable characters without spaces (at most 4096)",
        ));
    }
    Ok(key.to_string())
}

/// Where a provider id is known from.
enum Known {
    Routed {
        source: Source,
        client: Arc<vis_providers::Client>,
    },
    Extension(ProviderInfo),
}

impl ProviderRoutes {
    fn admin(&self) -> &super::Admin {
        &self.0.provider_admin
    }

    async fn extension_providers(&self) -> Vec<ProviderInfo> {
        self.0
            .extensions
            .providers(Some(&self.0.default_root))
            .await
    }

    async fn known(&self, id: &str) -> ApiResult<Known> {
        let routed = {
            let r = self.0.providers.read();
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
    async fn not_removable(&self, id: &str, source: &Source) -> ApiError {
        let (home, root, key) = (
            self.0.home.dir.clone(),
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
    async fn preset(&self, id: &str) -> Option<ProviderPreset> {
        if let Some(p) = presets::builtin().into_iter().find(|p| p.id == id) {
            return Some(p);
        }
        self.extension_providers()
            .await
            .iter()
            .find(|p| p.id == id)
            .and_then(presets::of_extension)
    }

    /// Writes the saved list with `f` applied, then rebuilds the router.
    async fn edit_saved(&self, f: impl FnOnce(&mut saved::Saved)) -> ApiResult<()> {
        let admin = self.admin();
        let _one = admin.edit.lock().await;
        let mut next = admin.saved();
        f(&mut next);
        let (home, list) = (admin.home.clone(), next.clone());
        tokio::task::spawn_blocking(move || saved::save(&home, &list))
            .await
            .map_err(|e| ApiError::engine(e.to_string()))?
            .map_err(ApiError::engine)?;
        *admin.saved.lock() = next;
        rebuild(&self.0).map_err(ApiError::engine)
    }

    /// Adds or replaces a saved provider (the key kept when none is given).
    async fn save(&self, input: ProviderInput) -> ApiResult<Change> {
        let id = check_id(&input.id)?;
        let key = input.api_key.as_deref().map(check_key).transpose()?;
        let base = input.base_url.as_deref().map(check_base_url).transpose();
        let base = base.map_err(|e| invalid("base_url", e))?;
        let existing = self.admin().saved().get(&id).cloned();
        if existing.is_none() {
            if let Ok(Known::Routed { source, .. }) = self.known(&id).await {
                return Err(self.not_removable(&id, &source).await);
            }
        }
        let entry = match existing.clone() {
            Some(mut e) => {
                e.base_url = base.unwrap_or(e.base_url);
                e.api_key = key.or(e.api_key);
                e.models = input.models.unwrap_or(e.models);
                e
            }
            None => {
                let Some(p) = self.preset(&id).await else {
                    let known: Vec<String> = presets::builtin().into_iter().map(|p| p.id).collect();
                    return Err(invalid(
                        "id",
                        format!(
                            "no preset or provider {id:?}; presets: {} (or a Provider \
                             extension's id, GET /v1/provider-presets)",
                            known.join(", ")
                        ),
                    )
                    .with("provider_id", id.as_str()));
                };
                let Some(base_url) = base.or(p.base_url.clone()) else {
                    return Err(invalid(
                        "base_url",
                        format!("the provider {id:?} declares no address: give base_url"),
                    ));
                };
                SavedProvider {
                    preset: p.id.clone(),
                    label: p.label.clone(),
                    api_style: p.api_style.clone().unwrap_or_else(|| "openai".into()),
                    base_url,
                    api_key: key,
                    models: input.models.unwrap_or(p.models),
                    extension: p.extension,
                }
            }
        };
        if entry.models.iter().any(|m| m.trim().is_empty()) {
            return Err(invalid("models", "models must not contain a blank name"));
        }
        let k = id.clone();
        self.edit_saved(move |s| {
            s.insert(k, entry);
        })
        .await?;
        self.admin().forget_checked(&id);
        Ok(if existing.is_some() {
            Change::Replaced
        } else {
            Change::Added
        })
    }

    /// Every provider as the phone lists it.
    async fn rows(&self) -> ApiResult<Vec<ProviderRow>> {
        let tags = self.0.router_status().await?;
        let r = self.0.providers.read().clone();
        let saved = self.admin().saved();
        let exts = self.extension_providers().await;
        let label_of = |id: &str| {
            saved
                .get(id)
                .map(|s| s.label.clone())
                .or_else(|| exts.iter().find(|e| e.id == id).map(|e| e.label.clone()))
                .or_else(|| {
                    presets::builtin()
                        .into_iter()
                        .find(|p| p.id == id)
                        .map(|p| p.label)
                })
                .unwrap_or_else(|| id.to_string())
        };
        let mut rows = Vec::new();
        for (id, c) in &r.clients {
            let cfg = c.config();
            let tag = tags.providers.iter().find(|p| &p.id == id);
            let source = r.sources.get(id).cloned().unwrap_or(Source::Saved);
            let has_key = cfg.api_key.as_deref().is_some_and(|k| !k.is_empty());
            // A saved provider needs no key when its preset says so; otherwise a server on
            // this machine is taken as a local one.
            let local = match saved.get(id) {
                Some(s) => presets::builtin()
                    .iter()
                    .any(|p| p.id == s.preset && p.auth_kind == AuthKind::None),
                None => presets::is_loopback_url(&cfg.base_url),
            };
            let (wire_source, configured_in, key_env) = match &source {
                Source::Config { key_env } => {
                    let (home, root, key) = (
                        self.0.home.dir.clone(),
                        self.0.default_root.clone(),
                        id.clone(),
                    );
                    let at = tokio::task::spawn_blocking(move || config_origin(&home, &root, &key))
                        .await
                        .ok();
                    (ProviderSource::Config, at, key_env.clone())
                }
                Source::Env { var } => {
                    (ProviderSource::EnvVar, Some(var.clone()), Some(var.clone()))
                }
                Source::Saved => (
                    ProviderSource::Saved,
                    Some(self.admin().file().display().to_string()),
                    None,
                ),
            };
            let source_name = match wire_source {
                ProviderSource::Config => "config",
                ProviderSource::EnvVar => "env-var",
                _ => "saved",
            };
            let status = self.admin().checked(id).unwrap_or_else(|| {
                probe::unchecked(source_name, has_key, local, key_env.as_deref())
            });
            rows.push(ProviderRow {
                id: id.clone(),
                label: label_of(id),
                base_url: Some(cfg.base_url.clone()),
                api_style: Some(cfg.dialect.as_str().to_string()),
                models: r.models.get(id).cloned().unwrap_or_default(),
                is_default: tag.is_some_and(|t| t.is_default),
                default_model: tag.and_then(|t| t.default_model.clone()),
                is_fallback: tag.is_some_and(|t| t.is_fallback),
                fallback_model: tag.and_then(|t| t.fallback_model.clone()),
                source: wire_source,
                configured_in,
                has_key,
                is_removable: source == Source::Saved,
                is_routable: true,
                status,
                limits: Some(probe::from_headers(id, Some(c))),
            });
        }
        for e in exts.iter().filter(|e| !r.clients.contains_key(&e.id)) {
            let p = presets::of_extension(e);
            let status = self
                .admin()
                .checked(&e.id)
                .unwrap_or_else(|| ProviderStatus {
                    auth_state: "unverified".into(),
                    detail: Some(if e.is_managed {
                        format!(
                            "the extension {} issues this provider's credential",
                            e.extension
                        )
                    } else {
                        format!(
                            "credential from the extension {}; not checked yet",
                            e.extension
                        )
                    }),
                    source: Some("extension".into()),
                    ..Default::default()
                });
            rows.push(ProviderRow {
                id: e.id.clone(),
                label: e.label.clone(),
                base_url: p.as_ref().and_then(|p| p.base_url.clone()),
                api_style: p.as_ref().and_then(|p| p.api_style.clone()),
                models: p.map(|p| p.models).unwrap_or_default(),
                is_default: false,
                default_model: None,
                is_fallback: false,
                fallback_model: None,
                source: ProviderSource::Extension,
                configured_in: Some(e.extension.clone()),
                has_key: false,
                is_removable: false,
                is_routable: probe::has_slot(e, "get_token_fn"),
                status,
                limits: None,
            });
        }
        Ok(rows)
    }

    async fn list_now(&self) -> ApiResult<ProviderList> {
        Ok(ProviderList {
            providers: self.rows().await?,
        })
    }

    /// An extension provider's `limits_fn` report, when it has one.
    async fn extension_limits(&self, id: &str) -> Option<ProviderLimits> {
        let info = self
            .extension_providers()
            .await
            .into_iter()
            .find(|p| p.id == id && probe::has_slot(p, "limits_fn"))?;
        let r = self
            .0
            .extensions
            .provider_call(&info.extension, id, "limits_fn", Vec::new())
            .await
            .map_err(|e| e.message);
        probe::from_limits_fn(id, r)
    }

    /// The lines an extension's `auth_prompt_fn` gives for its API-key dialog.
    async fn auth_prompt(&self, id: &str) -> Option<Vec<String>> {
        let info = self
            .extension_providers()
            .await
            .into_iter()
            .find(|p| p.id == id && probe::has_slot(p, "auth_prompt_fn"))?;
        let v = self
            .0
            .extensions
            .provider_call(&info.extension, id, "auth_prompt_fn", Vec::new())
            .await
            .ok()?;
        let lines: Vec<String> = match v {
            serde_json::Value::String(s) => s.lines().map(str::to_string).collect(),
            serde_json::Value::Array(a) => a
                .iter()
                .filter_map(|l| l.as_str().map(str::to_string))
                .collect(),
            _ => return None,
        };
        Some(lines.into_iter().filter(|l| !l.trim().is_empty()).collect())
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
                    .provider_call(&ext, id, "logout_fn", Vec::new())
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
                let name = match source {
                    Source::Config { .. } => "config",
                    Source::Env { .. } => "env-var",
                    Source::Saved => "saved",
                };
                let label = self
                    .rows()
                    .await
                    .ok()
                    .and_then(|rows| rows.into_iter().find(|r| r.id == id).map(|r| r.label))
                    .unwrap_or_else(|| id.to_string());
                let s = probe::check_client(&client, &label, name).await;
                match self.extension_limits(id).await {
                    Some(l) => probe::with_limits(s, &l),
                    None => s,
                }
            }
            Known::Extension(info) => {
                let own = if probe::has_slot(&info, "status_fn") {
                    self.0
                        .extensions
                        .provider_call(&info.extension, id, "status_fn", Vec::new())
                        .await
                        .ok()
                        .and_then(|v| probe::from_status_fn(&v, &info.extension))
                } else {
                    None
                };
                let picked = self
                    .0
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
        let configured: Vec<String> = self.0.providers.read().clients.keys().cloned().collect();
        let mut presets: Vec<ProviderPreset> = presets::builtin();
        for e in self.extension_providers().await {
            if let Some(p) = presets::of_extension(&e) {
                presets.retain(|b| b.id != p.id);
                presets.push(p);
            }
        }
        presets.retain(|p| !configured.contains(&p.id));
        Ok(PresetList { presets })
    }

    async fn auth_start(&self, id: &str) -> ApiResult<AuthFlow> {
        let saved = self.admin().saved().contains_key(id);
        let info = self
            .extension_providers()
            .await
            .into_iter()
            .find(|p| p.id == id);
        if !saved {
            match self.known(id).await {
                Ok(Known::Routed { source, .. }) => {
                    let e = self.not_removable(id, &source).await;
                    return Err(ApiError::conflict(
                        "provider-not-managed",
                        format!("{}; its key is not set from the phone", e.message),
                    )
                    .with("provider_id", id));
                }
                Ok(Known::Extension(_)) => {}
                Err(_) if self.preset(id).await.is_some() => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(info) = &info {
            if info.is_managed {
                return Err(ApiError::conflict(
                    "auth-managed",
                    format!(
                        "the extension {} issues the credential of {id}; there is nothing to sign in",
                        info.extension
                    ),
                ));
            }
            if probe::has_slot(info, "auth_fn") {
                return self.start_extension_login(info).await;
            }
        }
        let label = self
            .preset(id)
            .await
            .map_or_else(|| id.to_string(), |p| p.label);
        let instructions = match self.auth_prompt(id).await {
            Some(lines) if !lines.is_empty() => lines,
            _ => vec![
                format!("{label} needs an API key: paste it here."),
                "The key is kept on the gateway's machine, readable only by the gateway's \
                 user, and is never sent back to any device."
                    .to_string(),
            ],
        };
        Ok(self
            .admin()
            .flows
            .open(id, FlowKind::ApiKey, instructions, None))
    }

    async fn auth_complete(&self, id: &str, body: AuthComplete) -> ApiResult<AuthVerdict> {
        let flow = self.flow(id, &body.flow_id)?;
        if flow.progress.is_some() {
            return self.auth_poll(id, &body.flow_id).await;
        }
        if body.redirect_url.is_some() && body.api_key.is_none() {
            return Err(invalid(
                "api_key",
                format!("{id} signs in with an API key, not a redirect URL: send api_key"),
            ));
        }
        let Some(key) = body.api_key else {
            return Err(invalid(
                "api_key",
                "api_key is required to finish an api-key sign-in",
            ));
        };
        let change = self
            .save(ProviderInput {
                id: id.to_string(),
                api_key: Some(key),
                ..Default::default()
            })
            .await?;
        self.admin().flows.close(&body.flow_id);
        tracing::info!(target: "vis::providers", provider = %id, "API key saved from the phone");
        publish(
            &self.0,
            if change == Change::Added {
                Change::Added
            } else {
                Change::SignedIn
            },
            id,
        );
        Ok(AuthVerdict {
            status: VerdictStatus::Ok,
            message: Some(format!("API key saved for {id}; the next turn uses it")),
        })
    }

    async fn auth_poll(&self, id: &str, flow_id: &str) -> ApiResult<AuthVerdict> {
        let flow = self.flow(id, flow_id)?;
        let Some(progress) = flow.progress else {
            return Ok(AuthVerdict {
                status: VerdictStatus::Pending,
                message: Some("waiting for the API key".into()),
            });
        };
        let (verdict, last) = {
            let p = progress.lock();
            (p.verdict.clone(), p.lines.last().cloned())
        };
        Ok(match verdict {
            None => AuthVerdict {
                status: VerdictStatus::Pending,
                message: last,
            },
            Some(Ok(m)) => {
                self.admin().flows.close(flow_id);
                self.admin().forget_checked(id);
                AuthVerdict {
                    status: VerdictStatus::Ok,
                    message: Some(m),
                }
            }
            Some(Err(e)) => {
                self.admin().flows.close(flow_id);
                AuthVerdict {
                    status: VerdictStatus::Error,
                    message: Some(e),
                }
            }
        })
    }

    async fn auth_cancel(&self, id: &str, flow_id: &str) -> ApiResult<AuthVerdict> {
        let was_open =
            self.admin().flows.get(id, flow_id).is_some() && self.admin().flows.close(flow_id);
        Ok(AuthVerdict {
            status: VerdictStatus::Cancelled,
            message: (!was_open)
                .then(|| "no such sign-in is open (already finished or forgotten)".into()),
        })
    }
}

impl ProviderRoutes {
    fn flow(&self, id: &str, flow_id: &str) -> ApiResult<flows::Flow> {
        self.admin().flows.get(id, flow_id).ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown-flow",
                format!(
                    "no open sign-in {flow_id:?} for {id} (it finished, was cancelled or expired)"
                ),
            )
        })
    }

    /// Runs the extension's `auth_fn` in the background; its printed lines are the flow's
    /// instructions and its answer the verdict.
    async fn start_extension_login(&self, info: &ProviderInfo) -> ApiResult<AuthFlow> {
        let progress = Arc::new(Mutex::new(Progress::default()));
        let mut flow = self.admin().flows.open(
            &info.id,
            FlowKind::Device,
            Vec::new(),
            Some(progress.clone()),
        );
        let sink = progress.clone();
        let print: crate::extensions::LinePrinter = Arc::new(move |line: String| {
            sink.lock().lines.push(line);
        });
        let login = self
            .0
            .extensions
            .provider_login(&info.extension, &info.id, print);
        let (gw, id, done) = (self.0.clone(), info.id.clone(), progress.clone());
        tokio::spawn(async move {
            let verdict = login.await;
            if verdict.is_ok() {
                publish(&gw, Change::SignedIn, &id);
            }
            done.lock().verdict = Some(verdict);
        });
        // The first instructions usually come at once (a URL and a code to enter).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            {
                let p = progress.lock();
                if !p.lines.is_empty() || p.verdict.is_some() {
                    flow.instructions = p.lines.clone();
                    break;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        flow.url = flows::first_url(&flow.instructions);
        flow.verification_uri = flow.url.clone();
        Ok(flow)
    }
}
