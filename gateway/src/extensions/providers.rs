//! `vis.Provider`s (docs/decisions.md, G7): listing and calling their callbacks in the registration worker.

use super::client::CallCtx;
use super::*;
use serde_json::{json, Value};
use std::path::Path;

/// The `api_style` names whose wire dialect this gateway drives (`_` and `-` alike), as the
/// SDK lists them; others (`gemini`, `responses`, …) are refused when the extension loads.
pub const DRIVEN_API_STYLES: &[&str] = &[
    "anthropic",
    "anthropic-messages",
    "claude",
    "messages",
    "openai",
    "openai-chat",
    "openai-compatible",
    "openai-compatible-chat",
    "chat",
    "chat-completions",
];

/// The dialect an `api_style` of a `vis.Provider` names, when this gateway drives it.
pub fn dialect_of(api_style: &str) -> Option<vis_providers::Dialect> {
    let key = api_style.trim().replace('_', "-");
    let i = DRIVEN_API_STYLES.iter().position(|s| *s == key)?;
    Some(if i < 4 {
        vis_providers::Dialect::Anthropic
    } else {
        vis_providers::Dialect::OpenAiChat
    })
}

impl ExtensionHost {
    /// Every `vis.Provider` of the global extensions and of `project`.
    pub async fn providers(&self, project: Option<&Path>) -> Vec<ProviderInfo> {
        self.ensure_project(project).await;
        let mut out = Vec::new();
        for e in self.resolve(project) {
            for p in &e.catalog.providers {
                out.push(ProviderInfo {
                    extension: e.catalog.name.clone(),
                    id: p.id.clone(),
                    label: p.label.clone(),
                    preset: p.preset.clone(),
                    is_managed: p.is_managed,
                    slots: p.slots.clone(),
                });
            }
        }
        out
    }

    /// Calls one provider slot (`get_token_fn`, `status_fn`, `enrich_models_fn`, …) in the
    /// registration worker. `Ok(Value::Null)` when the slot is empty or returned `None`;
    /// records come back in their wire form.
    pub async fn provider_call(
        &self,
        extension: &str,
        provider_id: &str,
        slot: &str,
        args: Vec<Value>,
    ) -> Result<Value, ToolError> {
        let entry = self
            .inner
            .registry
            .read()
            .all()
            .into_iter()
            .find(|e| {
                e.catalog.name == extension
                    && e.catalog.providers.iter().any(|p| p.id == provider_id)
            })
            .ok_or_else(|| ToolError {
                message: format!("extension '{extension}' has no provider '{provider_id}'"),
                traceback: None,
                hint: None,
                kind: "unavailable".into(),
            })?;
        let payload =
            json!({"file": file_str(&entry.file), "id": provider_id, "slot": slot, "args": args});
        let ctx = CallCtx {
            project_root: entry.scope.project_root().map(Path::to_path_buf),
            ..CallCtx::default()
        };
        self.inner
            .workers
            .registration()
            .call(ctx, "provider", payload, self.inner.cfg.provider_timeout)
            .await
            .map_err(ToolError::from_call)
    }

    /// `get_token_fn()` of a provider: the `ProviderCredential` wire form, or `None`.
    pub async fn provider_token(
        &self,
        extension: &str,
        provider_id: &str,
    ) -> Result<Option<Value>, ToolError> {
        let v = self
            .provider_call(extension, provider_id, "get_token_fn", Vec::new())
            .await?;
        Ok(if v.is_null() { None } else { Some(v) })
    }
}

#[cfg(test)]
mod tests {
    use super::dialect_of;
    use vis_providers::Dialect;

    #[test]
    fn only_the_dialects_the_gateway_drives_map_and_nothing_defaults() {
        assert_eq!(dialect_of("claude"), Some(Dialect::Anthropic));
        assert_eq!(dialect_of("anthropic_messages"), Some(Dialect::Anthropic));
        assert_eq!(dialect_of("openai-compatible"), Some(Dialect::OpenAiChat));
        assert_eq!(dialect_of("chat_completions"), Some(Dialect::OpenAiChat));
        for refused in [
            "gemini",
            "google",
            "responses",
            "OpenAI",
            "anthropic-ish",
            "",
        ] {
            assert_eq!(dialect_of(refused), None, "{refused}");
        }
    }
}
