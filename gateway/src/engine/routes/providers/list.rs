//! The provider list the phone shows: every router provider (configuration, environment,
//! saved) and the Provider extensions' own, with where each comes from and its last status.

use super::*;
use crate::provider_admin::{presets, probe};
use crate::providers::Source;
use vis_companion_api::providers::*;
use vis_companion_api::ApiResult;

impl ProviderRoutes {
    pub(super) async fn rows(&self) -> ApiResult<Vec<ProviderRow>> {
        let tags = self.0.companion.settings().router_status().await?;
        let r = self.0.configuration.router().clone();
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
                        self.0.configuration.home().to_path_buf(),
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
                is_removable: saved.contains_key(&e.id),
                is_routable: probe::has_slot(e, "get_token_fn"),
                status,
                limits: None,
            });
        }
        Ok(rows)
    }

    pub(super) async fn list_now(&self) -> ApiResult<ProviderList> {
        Ok(ProviderList {
            providers: self.rows().await?,
        })
    }

    /// An extension provider's `limits_fn` report, when it has one.
    pub(super) async fn extension_limits(&self, id: &str) -> Option<ProviderLimits> {
        let r = self.call_slot(id, "limits_fn").await?;
        probe::from_limits_fn(id, r.map_err(|e| e.message))
    }
}
