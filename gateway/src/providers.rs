//! The provider router: which configured LLM provider serves a turn (docs/decisions.md, G6, G7).
//! Sources: `providers:` in the configuration, then the providers saved from the phone
//! (`provider_admin`), then `OPENAI_API_KEY` / `OPENAI_BASE_URL` and `ANTHROPIC_API_KEY` /
//! `ANTHROPIC_BASE_URL` from the gateway's environment.

use crate::config::Config;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use vis_providers::{Client, Dialect, ProviderConfig};

#[derive(Clone, Default)]
pub struct Router {
    pub clients: BTreeMap<String, Arc<Client>>,
    pub default: Option<String>,
    /// Models listed per provider (for `/v1/router`).
    pub models: BTreeMap<String, Vec<String>>,
    /// Where each provider comes from.
    pub sources: BTreeMap<String, Source>,
}

/// Where a provider of the router is defined (and so where it can be changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `providers.<id>` of the configuration; `key_env` names the variable its key comes
    /// from, when it does not hold the key itself.
    Config { key_env: Option<String> },
    /// Saved from the phone (`<home>/provider-keys.json`).
    Saved,
    /// Only the environment (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`).
    Env { var: String },
}

/// One provider saved from the phone (`provider_admin` keeps the file).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedProvider {
    /// The preset it was added from (`openai`, `ollama`, an extension's provider id, …).
    pub preset: String,
    pub label: String,
    /// `openai` or `anthropic`.
    pub api_style: String,
    pub base_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(default)]
    pub models: Vec<String>,
    /// The Provider extension that declares it, when one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<String>,
}

impl std::fmt::Debug for SavedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedProvider")
            .field("preset", &self.preset)
            .field("api_style", &self.api_style)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("models", &self.models)
            .field("extension", &self.extension)
            .finish()
    }
}

pub type Saved = BTreeMap<String, SavedProvider>;

fn default_model(d: &Dialect) -> &'static str {
    match d {
        Dialect::Anthropic => "claude-sonnet-4-5",
        _ => "gpt-4.1",
    }
}

fn env(name: &str) -> Option<String> {
    crate::start_env::var(name).filter(|v| !v.trim().is_empty())
}

impl Router {
    /// The router of a configuration and the providers saved from the phone (a saved
    /// provider whose id the configuration also defines is left out: the file wins).
    pub fn from_config(cfg: &Config, saved: &Saved) -> Result<Router> {
        let mut r = Router::default();
        for (id, p) in &cfg.providers {
            let style = p
                .api_style
                .as_deref()
                .unwrap_or(if id.contains("anthropic") {
                    "anthropic"
                } else {
                    "openai"
                });
            let dialect: Dialect = style
                .parse()
                .map_err(|_| anyhow!("config error at `providers.{id}.api_style`: unknown api_style {style:?} (openai, anthropic, openai-compatible)"))?;
            let base_url = p.base_url.clone().unwrap_or_else(|| match dialect {
                Dialect::Anthropic => "https://api.anthropic.com/v1".into(),
                _ => "https://api.openai.com/v1".into(),
            });
            let key_env = match (&p.api_key, &p.api_key_env, dialect) {
                (Some(_), _, _) => None,
                (None, Some(var), _) => Some(var.clone()),
                (None, None, Dialect::Anthropic) => Some("ANTHROPIC_API_KEY".to_string()),
                (None, None, _) if p.base_url.is_none() => Some("OPENAI_API_KEY".to_string()),
                (None, None, _) => None,
            };
            let api_key = p
                .api_key
                .clone()
                .or_else(|| key_env.as_deref().and_then(env));
            r.sources.insert(id.clone(), Source::Config { key_env });
            let model = p
                .model
                .clone()
                .unwrap_or_else(|| default_model(&dialect).to_string());
            r.add(
                id,
                dialect,
                base_url,
                api_key,
                model.clone(),
                p.max_retries,
                p.headers.clone().into_iter().collect(),
            )?;
            let mut models = p.models.clone();
            if !models.contains(&model) {
                models.insert(0, model);
            }
            r.models.insert(id.clone(), models);
        }
        for (id, p) in saved {
            // An extension's provider saved without a key waits for the extension's own
            // credential (`get_token_fn`, after its sign-in): turns reach it through the
            // extension, not through a keyless client here.
            if r.clients.contains_key(id) || (p.extension.is_some() && p.api_key.is_none()) {
                continue;
            }
            // A saved entry that cannot be built is left out (and said), never fatal.
            if let Err(e) = r.add_saved(id, p) {
                tracing::error!(target: "vis::providers", provider = %id, "saved provider left out: {e}");
            }
        }
        if !r.clients.contains_key("openai") {
            if let Some(key) = env("OPENAI_API_KEY") {
                let base =
                    env("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".into());
                r.add(
                    "openai",
                    Dialect::OpenAiChat,
                    base,
                    Some(key),
                    default_model(&Dialect::OpenAiChat).into(),
                    None,
                    vec![],
                )?;
                r.sources.insert(
                    "openai".into(),
                    Source::Env {
                        var: "OPENAI_API_KEY".into(),
                    },
                );
            }
        }
        if !r.clients.contains_key("anthropic") {
            if let Some(key) = env("ANTHROPIC_API_KEY") {
                let base = env("ANTHROPIC_BASE_URL")
                    .unwrap_or_else(|| "https://api.anthropic.com/v1".into());
                r.add(
                    "anthropic",
                    Dialect::Anthropic,
                    base,
                    Some(key),
                    default_model(&Dialect::Anthropic).into(),
                    None,
                    vec![],
                )?;
                r.sources.insert(
                    "anthropic".into(),
                    Source::Env {
                        var: "ANTHROPIC_API_KEY".into(),
                    },
                );
            }
        }
        r.default = match &cfg.default_provider {
            Some(p) if r.clients.contains_key(p) => Some(p.clone()),
            Some(p) => {
                return Err(anyhow!(
                    "config error at `default_provider`: no provider named {p:?} is configured"
                ))
            }
            // Adding a provider from the phone does not move the default away from one the
            // files or the environment give (the phone sets it with `PATCH /v1/router`).
            None => r
                .clients
                .keys()
                .find(|id| r.sources.get(*id) != Some(&Source::Saved))
                .or_else(|| r.clients.keys().next())
                .cloned(),
        };
        if let (Some(def), Some(model)) = (&r.default, &cfg.default_model) {
            if let Some(c) = r.clients.get(def) {
                let mut pc = c.config().clone();
                pc.default_model = model.clone();
                r.clients.insert(
                    def.clone(),
                    Arc::new(Client::new(pc).map_err(|e| anyhow!("provider {def}: {e}"))?),
                );
            }
        }
        Ok(r)
    }

    fn add_saved(&mut self, id: &str, p: &SavedProvider) -> Result<()> {
        let dialect: Dialect = p
            .api_style
            .parse()
            .map_err(|_| anyhow!("unknown api_style {:?}", p.api_style))?;
        let model = p
            .models
            .first()
            .cloned()
            .unwrap_or_else(|| default_model(&dialect).to_string());
        self.add(
            id,
            dialect,
            p.base_url.clone(),
            p.api_key.clone(),
            model.clone(),
            None,
            vec![],
        )?;
        let mut models = p.models.clone();
        if !models.contains(&model) {
            models.insert(0, model);
        }
        self.models.insert(id.to_string(), models);
        self.sources.insert(id.to_string(), Source::Saved);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        id: &str,
        dialect: Dialect,
        base_url: String,
        api_key: Option<String>,
        model: String,
        max_retries: Option<u32>,
        headers: Vec<(String, String)>,
    ) -> Result<()> {
        let cfg = ProviderConfig {
            id: id.to_string(),
            dialect,
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
            default_model: model.clone(),
            max_retries: max_retries.unwrap_or(2),
            connect_timeout: Duration::from_secs(15),
            stall_timeout: stall_timeout(),
            extra_headers: headers,
        };
        let client = Client::new(cfg).map_err(|e| anyhow!("provider {id}: {e}"))?;
        self.clients.insert(id.to_string(), Arc::new(client));
        self.models
            .entry(id.to_string())
            .or_insert_with(|| vec![model]);
        Ok(())
    }

    /// The client for a turn: the explicit `provider/model` or model of the request, else the default.
    pub fn pick(&self, model: Option<&str>) -> Option<(Arc<Client>, String)> {
        if let Some(m) = model {
            if let Some((p, name)) = m.split_once('/') {
                if let Some(c) = self.clients.get(p) {
                    return Some((c.clone(), name.to_string()));
                }
            }
        }
        let id = self.default.as_ref()?;
        let c = self.clients.get(id)?.clone();
        let name = model
            .map(str::to_string)
            .unwrap_or_else(|| c.config().default_model.clone());
        Some((c, name))
    }
}

/// Mid-stream silence after which a provider stream counts as stalled
/// (`VIS_PROVIDER_STALL_MS`, default 120 s).
fn stall_timeout() -> Duration {
    crate::config::env_ms("VIS_PROVIDER_STALL_MS", Duration::from_secs(120))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderEntry;

    fn saved(key: &str, base: &str) -> SavedProvider {
        SavedProvider {
            preset: "openai-compatible".into(),
            label: "Box".into(),
            api_style: "openai".into(),
            base_url: base.into(),
            api_key: Some(key.into()),
            models: vec!["m1".into(), "m2".into()],
            extension: None,
        }
    }

    #[test]
    fn saved_providers_join_the_router_and_the_configuration_wins_an_id_clash() {
        let mut cfg = Config::default();
        cfg.providers.insert(
            "box".into(),
            ProviderEntry {
                base_url: Some("http://127.0.0.1:1/v1".into()),
                api_key: Some("from-file".into()),
                ..Default::default()
            },
        );
        let mut list = Saved::new();
        list.insert("box".into(), saved("from-phone", "http://127.0.0.1:2/v1"));
        list.insert("phone-only".into(), saved("k2", "http://127.0.0.1:3/v1"));
        let r = Router::from_config(&cfg, &list).unwrap();
        let boxed = r.clients["box"].config();
        assert_eq!(boxed.api_key.as_deref(), Some("from-file"));
        assert_eq!(r.sources["box"], Source::Config { key_env: None });
        let phone = r.clients["phone-only"].config();
        assert_eq!(phone.api_key.as_deref(), Some("k2"));
        assert_eq!(phone.default_model, "m1");
        assert_eq!(r.models["phone-only"], vec!["m1", "m2"]);
        assert_eq!(r.sources["phone-only"], Source::Saved);
        // The file's provider stays the default although "box" < "phone-only" anyway;
        // with only saved ones, the first is.
        assert_eq!(r.default.as_deref(), Some("box"));
        let mut first = Saved::new();
        first.insert("a-phone".into(), saved("k", "http://127.0.0.1:4/v1"));
        let mut cfg2 = Config::default();
        cfg2.providers.insert(
            "z-file".into(),
            ProviderEntry {
                base_url: Some("http://127.0.0.1:5/v1".into()),
                ..Default::default()
            },
        );
        let r = Router::from_config(&cfg2, &first).unwrap();
        assert_eq!(r.default.as_deref(), Some("z-file"));
        let r = Router::from_config(&Config::default(), &first).unwrap();
        assert_eq!(r.default.as_deref(), Some("a-phone"));
    }

    #[test]
    fn a_saved_provider_that_cannot_be_built_is_left_out_and_the_rest_still_route() {
        let mut list = Saved::new();
        let mut bad = saved("k", "http://127.0.0.1:2/v1");
        bad.api_style = "gemini".into();
        list.insert("bad".into(), bad);
        list.insert("good".into(), saved("k", "http://127.0.0.1:3/v1"));
        let r = Router::from_config(&Config::default(), &list).unwrap();
        assert!(!r.clients.contains_key("bad"));
        assert!(r.clients.contains_key("good"));
    }
}
