//! `vis.Provider`s (docs/decisions.md, G7): listing and calling their callbacks in the registration worker.

use super::catalog::Catalog;
use super::client::CallCtx;
use super::doors::Doors;
use super::pool::WorkerPool;
use super::types::file_str;
use super::{HostConfig, LinePrinter, ProviderInfo, ToolError};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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

/// The longest an `auth_fn` login may run.
pub const LOGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// The `vis.Provider`s of the loaded extensions, and their callbacks.
pub struct Providers {
    catalog: Arc<Catalog>,
    /// Callbacks run in the registration worker.
    workers: Arc<WorkerPool>,
    /// Where the lines a login prints go.
    doors: Arc<Doors>,
    /// One callback (`HostConfig::provider_timeout`).
    timeout: Duration,
}

impl Providers {
    pub(super) fn new(
        cfg: &HostConfig,
        catalog: Arc<Catalog>,
        workers: Arc<WorkerPool>,
        doors: Arc<Doors>,
    ) -> Providers {
        Providers {
            catalog,
            workers,
            doors,
            timeout: cfg.provider_timeout,
        }
    }

    /// Every `vis.Provider` of the global extensions and of `project`.
    pub async fn list(&self, project: Option<&Path>) -> Vec<ProviderInfo> {
        let mut out = Vec::new();
        for e in self.catalog.entries(project).await {
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
    pub async fn call(
        &self,
        extension: &str,
        provider_id: &str,
        slot: &str,
        args: Vec<Value>,
    ) -> Result<Value, ToolError> {
        let payload = json!({"id": provider_id, "slot": slot, "args": args});
        request(
            &self.catalog,
            &self.workers,
            extension,
            provider_id,
            payload,
            self.timeout,
        )
        .await
    }

    /// Runs a provider's `auth_fn` (an interactive login) in the registration worker:
    /// each line it prints goes to `print` as it is printed; the answer is `Ok(message)`
    /// for a sign-in (`"ok"`, `"authenticated"`, `"already-authenticated"`, `True`,
    /// `None`), `Err(reason)` otherwise. Bounded by [`LOGIN_TIMEOUT`]; the worker serves
    /// no other call meanwhile.
    pub fn login(
        &self,
        extension: &str,
        provider_id: &str,
        print: LinePrinter,
    ) -> impl std::future::Future<Output = Result<String, String>> + Send + 'static {
        let (catalog, workers, doors) = (
            self.catalog.clone(),
            self.workers.clone(),
            self.doors.clone(),
        );
        let (extension, provider_id) = (extension.to_string(), provider_id.to_string());
        let token = uuid::Uuid::new_v4().to_string();
        doors.add_printer(token.clone(), print);
        async move {
            let payload =
                json!({"id": provider_id, "slot": "auth_fn", "args": [], "printer": token});
            let r = request(
                &catalog,
                &workers,
                &extension,
                &provider_id,
                payload,
                LOGIN_TIMEOUT,
            )
            .await;
            doors.remove_printer(&token);
            match r {
                Ok(Value::Null) | Ok(Value::Bool(true)) => {
                    Ok(format!("signed in to {provider_id}"))
                }
                Ok(Value::String(s))
                    if matches!(s.as_str(), "ok" | "authenticated" | "already-authenticated") =>
                {
                    Ok(format!("signed in to {provider_id} ({s})"))
                }
                Ok(Value::String(s)) => Err(s),
                Ok(_) => Err(format!("the sign-in to {provider_id} did not succeed")),
                Err(e) => Err(format!(
                    "the sign-in to {provider_id} failed: {}",
                    e.message
                )),
            }
        }
    }

    /// `get_token_fn()` of a provider: the `ProviderCredential` wire form, or `None`.
    pub async fn token(
        &self,
        extension: &str,
        provider_id: &str,
    ) -> Result<Option<Value>, ToolError> {
        let v = self
            .call(extension, provider_id, "get_token_fn", Vec::new())
            .await?;
        Ok(if v.is_null() { None } else { Some(v) })
    }
}

/// One provider request in the registration worker, for the file that registered the
/// provider.
async fn request(
    catalog: &Catalog,
    workers: &WorkerPool,
    extension: &str,
    provider_id: &str,
    mut payload: Value,
    timeout: Duration,
) -> Result<Value, ToolError> {
    let entry = catalog
        .all()
        .into_iter()
        .find(|e| {
            e.catalog.name == extension && e.catalog.providers.iter().any(|p| p.id == provider_id)
        })
        .ok_or_else(|| ToolError {
            message: format!("extension '{extension}' has no provider '{provider_id}'"),
            traceback: None,
            hint: None,
            kind: "unavailable".into(),
        })?;
    payload["file"] = json!(file_str(&entry.file));
    let ctx = CallCtx {
        project_root: entry.scope.project_root().map(Path::to_path_buf),
        ..CallCtx::default()
    };
    workers
        .registration()
        .call(ctx, "provider", payload, timeout)
        .await
        .map_err(ToolError::from_call)
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
