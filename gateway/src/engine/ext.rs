//! Wiring of the Python extension host into the gateway: extension state in the store (docs/decisions.md, E6),
//! notifications and activity on the session stream (a live-only `notification` event), Symbols as turn tools (docs/decisions.md, E9) with op
//! hooks around every tool, and network filters for the proxy (docs/decisions.md, P6).

use crate::bus::Bus;
use crate::extensions::{ExtensionHost, HostEvents, SessionCtx, StateStore, ToolDef};
use crate::store::{rows, Store};
use crate::tools::{Tool, ToolCtx, ToolOutput};
use async_trait::async_trait;
use serde_json::{json, Value};
use std::sync::Arc;
use vis_companion_api::events::{Event, Notification};
use vis_providers::ToolSpec;

/// `vis.state` in the gateway's database.
pub struct SqliteState(pub Store);

fn store_err(e: crate::store::StoreError) -> anyhow::Error {
    anyhow::anyhow!(e.to_string())
}

#[async_trait]
impl StateStore for SqliteState {
    async fn get(&self, ext: &str, key: &str) -> anyhow::Result<Option<Value>> {
        let (e, k) = (ext.to_string(), key.to_string());
        let text = self
            .0
            .with(move |db| rows::state_get(db, &e, &k))
            .await
            .map_err(store_err)?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }
    async fn put(&self, ext: &str, key: &str, value: Value) -> anyhow::Result<()> {
        let (e, k, v) = (ext.to_string(), key.to_string(), value.to_string());
        self.0
            .with(move |db| rows::state_put(db, &e, &k, &v))
            .await
            .map_err(store_err)
    }
    async fn delete(&self, ext: &str, key: &str) -> anyhow::Result<()> {
        let (e, k) = (ext.to_string(), key.to_string());
        self.0
            .with(move |db| rows::state_delete(db, &e, &k))
            .await
            .map_err(store_err)
    }
    async fn keys(&self, ext: &str) -> anyhow::Result<Vec<String>> {
        let e = ext.to_string();
        self.0
            .with(move |db| rows::state_keys(db, &e))
            .await
            .map_err(store_err)
    }
}

/// `vis.notify` → a live `notification` event; `publish_activity` → a live `activity` update
/// carrying the running tool call's block id and display fields.
pub struct BusEvents {
    pub bus: Arc<Bus>,
    pub presentations: Arc<super::presentation::Presentations>,
}

impl HostEvents for BusEvents {
    fn notify(&self, session_id: Option<&str>, extension: &str, text: &str, level: &str) {
        tracing::info!(target: "vis::extension", extension, level, "{text}");
        if let Some(sid) = session_id {
            let now = crate::engine::now_ms();
            self.bus.publish(
                sid,
                Event::Notification(Notification {
                    id: uuid::Uuid::new_v4().to_string(),
                    text: text.to_string(),
                    level: level.to_string(),
                    created_at: now,
                    until: now + 3000,
                    extension: extension.to_string(),
                }),
            );
        }
    }

    fn activity(&self, session_id: Option<&str>, extension: &str, presentation: Value) -> bool {
        let Some(sid) = session_id else { return false };
        match self.presentations.publish(sid, extension, presentation) {
            Some(update) => {
                self.bus.publish(sid, Event::Activity(update));
                true
            }
            None => false,
        }
    }
}

/// One extension Symbol member as a turn tool.
pub struct ExtTool {
    pub host: ExtensionHost,
    pub def: ToolDef,
    pub session: SessionCtx,
}

#[async_trait]
impl Tool for ExtTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.def.name.clone(),
            description: self.def.description.clone(),
            parameters: self.def.parameters.clone(),
        }
    }
    fn is_hidden(&self) -> bool {
        self.def.is_hidden
    }
    fn activity(&self) -> Option<Value> {
        self.def.activity.clone()
    }
    async fn call(&self, _ctx: &ToolCtx, args: Value) -> ToolOutput {
        match self
            .host
            .tools()
            .call(&self.session, &self.def.name, args)
            .await
        {
            Ok(r) => ToolOutput::ok(r.text),
            // The message once, then the hint and the traceback's frames.
            Err(e) => ToolOutput::fail(e.text()),
        }
    }
}

/// A built-in tool wrapped in the extensions' op hooks (before-hooks may block it).
pub struct Hooked {
    pub host: ExtensionHost,
    pub inner: Arc<dyn Tool>,
    pub session: SessionCtx,
}

#[async_trait]
impl Tool for Hooked {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }
    fn display(&self, args: &Value) -> Option<(String, &'static str)> {
        self.inner.display(args)
    }
    async fn call(&self, ctx: &ToolCtx, args: Value) -> ToolOutput {
        let op = self.inner.spec().name;
        if let Err(e) = self
            .host
            .tools()
            .before_hooks(&self.session, &op, std::slice::from_ref(&args))
            .await
        {
            let mut msg = e.message;
            if let Some(h) = e.hint {
                msg.push_str(&format!("\n{h}"));
            }
            return ToolOutput::fail(msg);
        }
        let out = self.inner.call(ctx, args.clone()).await;
        self.host
            .tools()
            .after_hooks(&self.session, &op, &[args], &out.result)
            .await;
        out
    }
}

/// `apropos(pattern)` over the session's catalogue (docs/decisions.md, E9).
pub struct Apropos {
    pub host: ExtensionHost,
    pub session: SessionCtx,
}

#[async_trait]
impl Tool for Apropos {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "apropos".into(),
            description: "List the available symbols whose name or summary matches the pattern."
                .into(),
            parameters: json!({"type": "object", "properties": {"pattern": {"type": "string", "description": "text or regular expression to look for"}},
                "required": ["pattern"]}),
        }
    }
    async fn call(&self, _ctx: &ToolCtx, args: Value) -> ToolOutput {
        let Some(pattern) = args.get("pattern").and_then(|p| p.as_str()) else {
            return ToolOutput::fail("apropos needs a string `pattern`");
        };
        match self.host.tools().apropos(&self.session, pattern).await {
            Err(e) => ToolOutput::fail(e),
            Ok(hits) if hits.is_empty() => ToolOutput::ok(format!("no symbols match {pattern:?}")),
            Ok(hits) => ToolOutput::ok(
                hits.iter()
                    .map(|e| format!("{} — {}", e.name, e.summary))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        }
    }
}

/// `doc(name)`: the documentation and contract of one symbol (docs/decisions.md, E9).
pub struct Doc {
    pub host: ExtensionHost,
    pub session: SessionCtx,
}

#[async_trait]
impl Tool for Doc {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "doc".into(),
            description:
                "Show the documentation and contract of one symbol by its full dotted name.".into(),
            parameters: json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        }
    }
    async fn call(&self, _ctx: &ToolCtx, args: Value) -> ToolOutput {
        let Some(name) = args.get("name").and_then(|p| p.as_str()) else {
            return ToolOutput::fail("doc needs a string `name`");
        };
        match self.host.tools().doc(&self.session, name).await {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::fail(e),
        }
    }
}

/// The proxy's view of the extensions' network filters (re-read on every decision, so a
/// reload takes effect at once): those of the principal's project only (global extensions
/// its project does not override, then its own). A project whose extensions are not loaded
/// yet is loaded by its first request's filter check (fail closed: a failure denies).
pub struct HostFilters(pub ExtensionHost);

impl vis_proxy::FilterSet for HostFilters {
    fn filters(&self, principal: &vis_proxy::Principal) -> Vec<Arc<dyn vis_proxy::NetworkFilter>> {
        let project = principal.project.as_deref();
        let filters = self.0.filters();
        let list: Vec<Arc<dyn vis_proxy::NetworkFilter>> = match filters.network(project) {
            Some(list) => list,
            None => vec![filters.loading(project)],
        };
        // Each call's time goes to `vis_egress_filter_duration_seconds`.
        list.into_iter()
            .map(|f| Arc::new(crate::metrics::TimedFilter(f)) as Arc<dyn vis_proxy::NetworkFilter>)
            .collect()
    }
}

impl crate::engine::Turns {
    /// A `vis.Provider` of the project's extensions as a turn's provider: used when the
    /// request names it (`<provider id>/<model>`) or when no provider is configured. The
    /// credential comes from its `get_token_fn` (after configuration and environment, which
    /// the configured router already covers); endpoint and model from the credential or the
    /// provider's preset.
    pub async fn extension_provider(
        &self,
        root: &std::path::Path,
        model: Option<&str>,
    ) -> Option<(Arc<vis_providers::Client>, String)> {
        let (want_id, want_model) = match model.and_then(|m| m.split_once('/')) {
            Some((p, m)) => (Some(p), Some(m)),
            None => (None, model),
        };
        let infos = self.extensions.providers().list(Some(root)).await;
        let info = infos.iter().find(|i| want_id.is_none_or(|w| w == i.id))?;
        let cred = match self
            .extensions
            .providers()
            .token(&info.extension, &info.id)
            .await
        {
            Ok(Some(c)) => c,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(provider = %info.id, extension = %info.extension, error = %e, "get_token_fn failed");
                return None;
            }
        };
        let text = |v: &Value, k: &str| {
            v.get(k)
                .and_then(|x| x.as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let token = text(&cred, "token")?;
        let base_url = text(&cred, "api_url").or_else(|| text(&info.preset, "base_url"))?;
        let style = text(&cred, "api_style")
            .or_else(|| text(&info.preset, "api_style"))
            .unwrap_or_else(|| "openai".into());
        // Never a silent default: a dialect this gateway does not drive is refused.
        let Some(dialect) = crate::extensions::dialect_of(&style) else {
            tracing::warn!(provider = %info.id, extension = %info.extension, api_style = %style,
                "the provider's api_style names no wire dialect this gateway drives ({})",
                crate::extensions::DRIVEN_API_STYLES.join(", "));
            return None;
        };
        let model = want_model.map(str::to_string).or_else(|| {
            info.preset
                .get("default_models")
                .and_then(|m| m.get(0))
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })?;
        let headers = cred
            .get("llm_headers")
            .and_then(|h| h.as_object())
            .map(|h| {
                h.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let mut cfg = vis_providers::ProviderConfig::new(
            info.id.clone(),
            dialect,
            base_url.trim_end_matches('/').to_string(),
            model.clone(),
        );
        cfg.api_key = Some(token);
        cfg.extra_headers = headers;
        match vis_providers::Client::new(cfg) {
            Ok(c) => Some((Arc::new(c), model)),
            Err(e) => {
                tracing::warn!(provider = %info.id, error = %e, "extension provider unusable");
                None
            }
        }
    }
}
