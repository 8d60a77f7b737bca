//! The tool seam of the model loop. The extension host supplies Symbols and `apropos`/`doc`
//! (`engine/ext.rs`); the sandbox supplies `shell` (`sandbox/shell.rs`).

use async_trait::async_trait;
use serde_json::Value;
use vis_providers::ToolSpec;

/// Where a tool call runs.
#[derive(Debug, Clone)]
pub struct ToolCtx {
    pub session_id: String,
    /// The turn and the card (`block_id`) of this call, for the updates it publishes.
    pub turn_id: String,
    pub block_id: String,
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
    /// Callable when named, but not offered to the model (`is_hidden`, docs/decisions.md E9).
    fn is_hidden(&self) -> bool {
        false
    }
    /// How the running call is shown (`{presenter, label?}` of an extension's `vis.Activity`).
    fn activity(&self) -> Option<Value> {
        None
    }
    /// How the call's card shows its arguments: `(code, language)`; `None`: the call as
    /// `name(json arguments)`.
    fn display(&self, _args: &Value) -> Option<(String, &'static str)> {
        None
    }
    async fn call(&self, ctx: &ToolCtx, args: Value) -> ToolOutput;
}

/// A failed host call, raised in the block as the Python exception `type` names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CallError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

impl CallError {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> CallError {
        CallError {
            kind: kind.into(),
            message: message.into(),
        }
    }
    /// A refusal: a hook's block, a gate, a path outside the workspace.
    pub fn permission(message: impl Into<String>) -> CallError {
        CallError::new("PermissionError", message)
    }
}
