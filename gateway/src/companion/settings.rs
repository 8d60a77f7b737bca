//! The gateway's own settings (table `gateway_settings`): the reasoning level, verbosity and
//! fast mode every model request carries where its dialect has the field, and the router's
//! default and fallback picks (`PATCH /v1/router`). Also `GET /v1/router` in the app's shape,
//! and the model a turn runs on (the session's pin, the router default, the fallback).

use super::errors::SettingsError;
use crate::configuration::Configuration;
use crate::store::rows::SessionRow;
use crate::store::{Store, StoreError};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use vis_companion_api::records::{
    ProviderStatus, RouterAnswer, RouterDefaults, RouterPatch, RouterProvider, SettingAction,
    SettingsAnswer, Toggle, ToggleGroup,
};
use vis_providers::{ChatRequest, Dialect, Level};

const KEY: &str = "companion";

/// Everything stored, as one JSON value under one key: what the person chose.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Choices {
    /// `None` = the provider's default.
    pub reasoning: Option<Level>,
    pub verbosity: Option<Level>,
    pub fast: bool,
    pub default_provider: Option<String>,
    pub default_model: Option<String>,
    pub fallback_provider: Option<String>,
    pub fallback_model: Option<String>,
}

const LEVELS: [&str; 4] = ["default", "low", "medium", "high"];

fn level_word(l: Option<Level>) -> &'static str {
    l.map_or("default", Level::as_str)
}

fn enum_toggle(id: &str, label: &str, description: &str, value: Option<Level>) -> Toggle {
    Toggle {
        id: id.into(),
        label: label.into(),
        kind: "enum".into(),
        description: Some(description.into()),
        enabled: None,
        value: Some(level_word(value).into()),
        choices: Some(LEVELS.iter().map(|s| s.to_string()).collect()),
    }
}

impl Choices {
    /// The toggle `id`, or `None` for an unknown id.
    pub fn toggle(&self, id: &str) -> Option<Toggle> {
        Some(match id {
            "reasoning_level" => enum_toggle(
                id,
                "Reasoning",
                "How hard the model thinks: OpenAI reasoning_effort, Anthropic extended \
                 thinking budget. default sends nothing.",
                self.reasoning,
            ),
            "verbosity" => enum_toggle(
                id,
                "Verbosity",
                "Answer length (OpenAI verbosity; the Anthropic dialect has no such field).",
                self.verbosity,
            ),
            "codex_fast_mode" => Toggle {
                id: id.into(),
                label: "Fast mode".into(),
                kind: "boolean".into(),
                description: Some(
                    "Ask for the provider's priority tier (OpenAI service_tier=priority; \
                     the Anthropic dialect has no such field)."
                        .into(),
                ),
                enabled: Some(self.fast),
                value: None,
                choices: None,
            },
            _ => return None,
        })
    }

    /// Applies an action to the toggle `id`.
    pub fn apply(&mut self, id: &str, action: &SettingAction) -> Result<(), String> {
        let next_level =
            |cur: Option<Level>, action: &SettingAction| -> Result<Option<Level>, String> {
                let word = match action {
                    SettingAction::Cycle | SettingAction::Toggle => {
                        let at = LEVELS
                            .iter()
                            .position(|w| *w == level_word(cur))
                            .unwrap_or(0);
                        LEVELS[(at + 1) % LEVELS.len()].to_string()
                    }
                    SettingAction::Value(v) => v.trim().to_ascii_lowercase(),
                };
                match word.as_str() {
                    "default" => Ok(None),
                    w => Level::parse(w)
                        .map(Some)
                        .ok_or_else(|| format!("{id} must be one of {}", LEVELS.join(", "))),
                }
            };
        match id {
            "reasoning_level" => self.reasoning = next_level(self.reasoning, action)?,
            "verbosity" => self.verbosity = next_level(self.verbosity, action)?,
            "codex_fast_mode" => {
                self.fast = match action {
                    SettingAction::Toggle | SettingAction::Cycle => !self.fast,
                    SettingAction::Value(v) => match v.trim() {
                        "true" | "on" => true,
                        "false" | "off" => false,
                        _ => return Err("codex_fast_mode takes true or false".into()),
                    },
                }
            }
            _ => return Err(format!("no setting {id}")),
        }
        Ok(())
    }

    /// Sets the request's reasoning, verbosity and fast fields (the clients send each only
    /// where their dialect has it).
    pub fn shape(&self, req: &mut ChatRequest) {
        req.reasoning = self.reasoning;
        req.verbosity = self.verbosity;
        req.fast = self.fast;
    }
}

fn setting_not_found(id: &str) -> SettingsError {
    SettingsError::NotFound { id: id.to_string() }
}

type SettingsResult<T> = Result<T, SettingsError>;

/// The settings and router-defaults job: the stored choices (cached after the first read),
/// and from them and the provider router the model a turn runs on.
pub struct Settings {
    store: Store,
    cached: RwLock<Option<Choices>>,
    configuration: Arc<Configuration>,
}

impl Settings {
    /// Reads the provider router and the configuration through the gateway's configuration
    /// job (they are replaced in place when providers change).
    pub fn new(store: Store, configuration: Arc<Configuration>) -> Self {
        Settings {
            store,
            cached: RwLock::new(None),
            configuration,
        }
    }

    /// The stored choices (cached after the first read).
    pub async fn current(&self) -> SettingsResult<Choices> {
        if let Some(s) = self.cached.read().clone() {
            return Ok(s);
        }
        let stored: Option<String> = self
            .store
            .with(|db| db.value("SELECT value FROM gateway_settings WHERE key = ?1", &[&KEY]))
            .await?;
        let s: Choices = stored
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        *self.cached.write() = Some(s.clone());
        Ok(s)
    }

    async fn save(&self, s: Choices) -> SettingsResult<()> {
        let text = serde_json::to_string(&s).map_err(|e| StoreError::Other(e.to_string()))?;
        self.store
            .with(move |db| {
                db.exec(
                    "INSERT INTO gateway_settings (key, value) VALUES (?1, ?2) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    &[&KEY, &text],
                )?;
                Ok(())
            })
            .await?;
        *self.cached.write() = Some(s);
        Ok(())
    }

    /// `GET /v1/settings`: every toggle, in one group.
    pub async fn answer(&self) -> SettingsResult<SettingsAnswer> {
        let s = self.current().await?;
        let toggles = ["reasoning_level", "verbosity", "codex_fast_mode"]
            .iter()
            .filter_map(|id| s.toggle(id))
            .collect();
        Ok(SettingsAnswer {
            groups: vec![ToggleGroup {
                id: "model-requests".into(),
                title: "Model requests".into(),
                toggles,
            }],
        })
    }

    /// One toggle (404 for an unknown id).
    pub async fn get(&self, id: &str) -> SettingsResult<Toggle> {
        self.current()
            .await?
            .toggle(id)
            .ok_or_else(|| setting_not_found(id))
    }

    /// Applies an action to a toggle and stores the result.
    pub async fn set(&self, id: &str, action: SettingAction) -> SettingsResult<Toggle> {
        let mut s = self.current().await?;
        if s.toggle(id).is_none() {
            return Err(setting_not_found(id));
        }
        s.apply(id, &action)
            .map_err(|message| SettingsError::InvalidValue {
                id: id.to_string(),
                message,
            })?;
        self.save(s.clone()).await?;
        s.toggle(id).ok_or_else(|| setting_not_found(id))
    }

    /// The model a turn without its own `model` runs on: the session's pin, if its
    /// provider is still configured, as `provider/model`.
    pub fn pinned_model(&self, row: &SessionRow) -> Option<String> {
        let pref = row.model_pref.as_ref()?;
        let provider = pref.get("provider")?.as_str()?.trim();
        let model = pref.get("model")?.as_str()?.trim();
        if provider.is_empty() || !self.configuration.has_provider(provider) {
            return None;
        }
        if model.is_empty() {
            let c = self.configuration.client(provider)?;
            return Some(format!("{provider}/{}", c.config().default_model));
        }
        Some(format!("{provider}/{model}"))
    }

    /// The model of a turn without its own: the session's pin, else the router default
    /// chosen with `PATCH /v1/router` (when its provider is still configured).
    pub async fn effective_model(&self, pinned: Option<String>) -> Option<String> {
        if pinned.is_some() {
            return pinned;
        }
        let s = self.current().await.ok()?;
        let provider = s.default_provider?;
        let c = self.configuration.client(&provider)?;
        let model = s
            .default_model
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| c.config().default_model.clone());
        Some(format!("{provider}/{model}"))
    }

    /// The fallback `provider/model`, if one is set and configured.
    async fn fallback_model(&self) -> Option<String> {
        let s = self.current().await.ok()?;
        let provider = s.fallback_provider?;
        let c = self.configuration.client(&provider)?;
        let model = s
            .fallback_model
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| c.config().default_model.clone());
        Some(format!("{provider}/{model}"))
    }

    /// The fallback client and model for a turn running on `primary`, when one is set on
    /// another provider.
    pub async fn fallback_pick(
        &self,
        primary: &Arc<vis_providers::Client>,
    ) -> Option<(Arc<vis_providers::Client>, String)> {
        let m = self.fallback_model().await?;
        let (c, model) = self.configuration.pick(Some(&m))?;
        (c.config().id != primary.config().id).then_some((c, model))
    }

    /// `GET /v1/router`: every configured provider with its default and fallback roles.
    pub async fn router_status(&self) -> SettingsResult<RouterAnswer> {
        let s = self.current().await?;
        let cfg = self.configuration.current();
        let r = self.configuration.router().clone();
        let admin = self.configuration.admin();
        let saved = admin.saved();
        let default = s
            .default_provider
            .clone()
            .filter(|p| r.clients.contains_key(p))
            .or(r.default.clone());
        let providers = r
            .clients
            .iter()
            .map(|(id, c)| {
                let pc = c.config();
                let entry = cfg.providers.get(id);
                let source = match entry {
                    Some(e) if e.api_key.is_some() => "config",
                    Some(e) if e.api_key_env.is_some() => "env-var",
                    Some(_) if pc.api_key.is_some() => "env-var",
                    Some(_) => "config",
                    None if r.sources.get(id) == Some(&crate::providers::Source::Saved) => "saved",
                    None => "env-var",
                };
                let has_key = pc.api_key.as_deref().is_some_and(|k| !k.is_empty());
                let local = pc.base_url.contains("127.0.0.1") || pc.base_url.contains("localhost");
                // The last status check, when there was one, says more than the key's presence.
                let checked = admin.checked(id);
                let status = if let Some(c) = checked {
                    ProviderStatus {
                        is_authenticated: c.is_authenticated.unwrap_or(has_key || local),
                        auth_state: c.auth_state,
                        detail: c.detail,
                        label: c.label,
                        source: c.source,
                        error: c.error,
                    }
                } else if has_key || local {
                    ProviderStatus {
                        is_authenticated: true,
                        auth_state: "unverified".into(),
                        detail: Some(if has_key {
                            format!("API key from {source}; not checked against the provider")
                        } else {
                            "local endpoint; no key needed".into()
                        }),
                        label: Some(if has_key { "API key" } else { "No key" }.into()),
                        source: Some(source.into()),
                        error: None,
                    }
                } else {
                    ProviderStatus {
                        is_authenticated: false,
                        auth_state: "rejected".into(),
                        detail: Some("no API key is configured for this provider".into()),
                        label: None,
                        source: Some(source.into()),
                        error: Some("no API key is configured for this provider".into()),
                    }
                };
                let is_default = default.as_deref() == Some(id.as_str());
                let is_fallback = s.fallback_provider.as_deref() == Some(id.as_str());
                RouterProvider {
                    id: id.clone(),
                    label: crate::provider_admin::presets::label_of(id, &saved),
                    base_url: Some(pc.base_url.clone()),
                    api_style: match pc.dialect {
                        Dialect::Anthropic => "anthropic".into(),
                        Dialect::OpenAiChat => "openai".into(),
                    },
                    models: r.models.get(id).cloned().unwrap_or_default(),
                    is_default,
                    default_model: Some(
                        s.default_model
                            .clone()
                            .filter(|_| is_default && s.default_provider.as_deref() == Some(id))
                            .unwrap_or_else(|| pc.default_model.clone()),
                    ),
                    is_fallback,
                    fallback_model: if is_fallback {
                        s.fallback_model.clone().or(Some(pc.default_model.clone()))
                    } else {
                        None
                    },
                    status,
                    limits: None,
                }
            })
            .collect();
        Ok(RouterAnswer { providers })
    }

    /// `PATCH /v1/router`: sets the default or the fallback provider and model.
    pub async fn patch_router(&self, patch: RouterPatch) -> SettingsResult<RouterDefaults> {
        let role = patch
            .role
            .as_deref()
            .unwrap_or("primary")
            .trim()
            .to_string();
        if role != "primary" && role != "fallback" {
            return Err(SettingsError::UnknownRole { role });
        }
        let provider = patch.provider.unwrap_or_default().trim().to_string();
        let model = patch.model.unwrap_or_default().trim().to_string();
        let mut s = self.current().await?;
        let known = |p: &str| self.configuration.has_provider(p);
        if provider.is_empty() {
            if role == "primary" {
                return Err(SettingsError::PrimaryWithoutProvider);
            }
            s.fallback_provider = None;
            s.fallback_model = None;
        } else {
            if !known(&provider) {
                return Err(SettingsError::UnknownProvider { provider });
            }
            let model = (!model.is_empty()).then_some(model);
            if role == "primary" {
                s.default_provider = Some(provider.clone());
                s.default_model = model;
                if s.fallback_provider.as_deref() == Some(provider.as_str()) {
                    s.fallback_provider = None;
                    s.fallback_model = None;
                }
            } else {
                let primary = s
                    .default_provider
                    .clone()
                    .or_else(|| self.configuration.default_provider());
                if primary.as_deref() == Some(provider.as_str()) {
                    return Err(SettingsError::FallbackIsPrimary);
                }
                s.fallback_provider = Some(provider);
                s.fallback_model = model;
            }
        }
        self.save(s.clone()).await?;
        let primary = s
            .default_provider
            .clone()
            .or_else(|| self.configuration.default_provider());
        let primary_model = s.default_model.clone().or_else(|| {
            let p = primary.clone()?;
            Some(
                self.configuration
                    .client(&p)?
                    .config()
                    .default_model
                    .clone(),
            )
        });
        Ok(RouterDefaults {
            default_provider: primary,
            default_model: primary_model,
            fallback_provider: s.fallback_provider,
            fallback_model: s.fallback_model,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycling_walks_default_low_medium_high_and_back() {
        let mut s = Choices::default();
        let mut seen = Vec::new();
        for _ in 0..4 {
            s.apply("reasoning_level", &SettingAction::Cycle).unwrap();
            seen.push(s.toggle("reasoning_level").unwrap().value.unwrap());
        }
        assert_eq!(seen, ["low", "medium", "high", "default"]);
        assert!(s
            .apply("verbosity", &SettingAction::Value("loud".into()))
            .is_err());
        s.apply("codex_fast_mode", &SettingAction::Toggle).unwrap();
        assert_eq!(s.toggle("codex_fast_mode").unwrap().enabled, Some(true));
    }

    #[test]
    fn the_settings_shape_the_request() {
        let s = Choices {
            reasoning: Some(Level::High),
            verbosity: Some(Level::Low),
            fast: true,
            ..Default::default()
        };
        let mut req = ChatRequest::default();
        s.shape(&mut req);
        assert_eq!(req.reasoning, Some(Level::High));
        assert_eq!(req.verbosity, Some(Level::Low));
        assert!(req.fast);
    }
}
