//! Tools a turn's model may call. The extension host adds its Symbols here; the sandbox adds
//! `shell`. Built in: `apropos(pattern)` and `doc(name)` over the session's symbol catalogue
//! (decision E9).

use async_trait::async_trait;
use serde_json::{json, Value};
use std::sync::Arc;
use vis_providers::ToolSpec;

/// Where a tool call runs.
#[derive(Debug, Clone)]
pub struct ToolCtx {
    pub session_id: String,
    pub turn_id: String,
    pub root: std::path::PathBuf,
    pub cancel: tokio_util::sync::CancellationToken,
}

/// A tool's answer. `error` set means the call failed (the model sees it as a failure).
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    pub result: String,
    pub stdout: Option<String>,
    pub error: Option<String>,
    pub is_timeout: bool,
}

impl ToolOutput {
    pub fn ok(result: impl Into<String>) -> Self {
        Self {
            result: result.into(),
            ..Default::default()
        }
    }
    pub fn fail(error: impl Into<String>) -> Self {
        let e = error.into();
        Self {
            result: e.clone(),
            error: Some(e),
            ..Default::default()
        }
    }
}

#[async_trait]
pub trait Tool: Send + Sync {
    fn spec(&self) -> ToolSpec;
    /// A short phrase for the activity spinner.
    fn label(&self) -> String {
        self.spec().name
    }
    async fn call(&self, ctx: &ToolCtx, args: Value) -> ToolOutput;
}

/// One entry of the symbol catalogue `apropos` and `doc` search.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    pub name: String,
    pub summary: String,
    pub doc: String,
}

/// Supplies the catalogue for a session (the extension host implements it).
pub trait Catalog: Send + Sync {
    fn entries(&self, session_id: &str) -> Vec<CatalogEntry>;
}

/// A catalogue with nothing in it (no extensions loaded).
pub struct EmptyCatalog;

impl Catalog for EmptyCatalog {
    fn entries(&self, _: &str) -> Vec<CatalogEntry> {
        Vec::new()
    }
}

pub struct Apropos(pub Arc<dyn Catalog>);
pub struct Doc(pub Arc<dyn Catalog>);

#[async_trait]
impl Tool for Apropos {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "apropos".into(),
            description: "List the available symbols whose name or summary contains the pattern (case-insensitive).".into(),
            parameters: json!({"type": "object", "properties": {"pattern": {"type": "string", "description": "text to look for"}},
                "required": ["pattern"]}),
        }
    }
    async fn call(&self, ctx: &ToolCtx, args: Value) -> ToolOutput {
        let Some(pattern) = args.get("pattern").and_then(|p| p.as_str()) else {
            return ToolOutput::fail("apropos needs a string `pattern`");
        };
        let p = pattern.to_lowercase();
        let hits: Vec<String> = self
            .0
            .entries(&ctx.session_id)
            .into_iter()
            .filter(|e| e.name.to_lowercase().contains(&p) || e.summary.to_lowercase().contains(&p))
            .map(|e| format!("{} — {}", e.name, e.summary))
            .collect();
        if hits.is_empty() {
            ToolOutput::ok(format!("no symbols match {pattern:?}"))
        } else {
            ToolOutput::ok(hits.join("\n"))
        }
    }
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
    async fn call(&self, ctx: &ToolCtx, args: Value) -> ToolOutput {
        let Some(name) = args.get("name").and_then(|p| p.as_str()) else {
            return ToolOutput::fail("doc needs a string `name`");
        };
        match self
            .0
            .entries(&ctx.session_id)
            .into_iter()
            .find(|e| e.name == name)
        {
            Some(e) => ToolOutput::ok(e.doc),
            None => ToolOutput::fail(format!("no symbol named {name:?}; use apropos to find one")),
        }
    }
}
