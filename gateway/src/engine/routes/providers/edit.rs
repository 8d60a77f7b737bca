//! Adding, replacing and removing saved providers: input checks, the file write and the
//! router rebuild, one change at a time.

use super::*;
use crate::provider_admin::presets::{self, check_base_url};
use crate::provider_admin::saved::{self, SavedProvider};
use vis_companion_api::providers::*;
use vis_companion_api::{ApiError, ApiResult};

/// A provider id the phone may create: 1–64 of `a-z 0-9 . _ -`.
pub(super) fn check_id(id: &str) -> ApiResult<String> {
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
pub(super) fn check_key(key: &str) -> ApiResult<String> {
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

impl ProviderRoutes {
    pub(super) async fn edit_saved(&self, f: impl FnOnce(&mut saved::Saved)) -> ApiResult<()> {
        self.admin()
            .edit_saved(f, || self.0.configuration.rebuild_router())
            .await
            .map_err(ApiError::engine)
    }

    /// Adds or replaces a saved provider (the key kept when none is given).
    pub(super) async fn save(&self, input: ProviderInput) -> ApiResult<Change> {
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
}
