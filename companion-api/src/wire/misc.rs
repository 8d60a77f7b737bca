//! The palette, egress decisions, stored events, extensions and the sandbox environment.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// One slash command of the palette.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlashCommand {
    /// With its leading `/`.
    pub name: String,
    pub doc: String,
}

/// `GET /v1/sessions/:sid/slashes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlashPalette {
    pub commands: Vec<SlashCommand>,
}

/// JSON text as it was stored (an egress decision, a journal event), sent as is.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct StoredJson(pub Box<RawValue>);

impl StoredJson {
    /// `None` when `text` is not JSON.
    pub fn parse(text: String) -> Option<StoredJson> {
        RawValue::from_string(text).ok().map(StoredJson)
    }

    pub fn get(&self) -> &str {
        self.0.get()
    }
}

/// `GET /v1/sessions/:sid/egress`: newest first.
#[derive(Debug, Serialize)]
pub struct EgressPage {
    pub decisions: Vec<StoredJson>,
    pub has_more: bool,
    pub next_before: Option<i64>,
}

/// Stored events were trimmed between `from` and `to` (inclusive).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamGap {
    /// Always `stream.gap`.
    #[serde(rename = "type")]
    pub kind: String,
    pub session_id: String,
    pub from: i64,
    pub to: i64,
}

/// One entry of `GET /v1/sessions/:sid/events`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum JournalEntry {
    Gap(StreamGap),
    Event(StoredJson),
}

/// A member of an extension's Symbol, as the listing shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionSymbol {
    pub name: String,
    pub tool_name: String,
    pub tag: String,
    pub is_hidden: bool,
    pub summary: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionSlash {
    pub name: String,
    pub doc: Option<String>,
    pub usage: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionHook {
    pub ops: Vec<String>,
    /// `pre`, `post` or `gate`.
    pub phase: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionProvider {
    pub id: String,
    pub label: String,
    pub is_managed: bool,
    pub slots: Vec<String>,
}

/// One loaded extension.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionInfo {
    pub name: String,
    pub description: String,
    pub kind: String,
    pub version: Option<String>,
    pub alias: Option<String>,
    /// `global` or `project`.
    pub scope: String,
    pub project_root: Option<String>,
    pub file: String,
    pub is_stale: bool,
    pub symbols: Vec<ExtensionSymbol>,
    pub slash_commands: Vec<ExtensionSlash>,
    pub op_hooks: Vec<ExtensionHook>,
    pub network_filters: usize,
    pub providers: Vec<ExtensionProvider>,
    pub env: Vec<String>,
}

/// An extension file that did not load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionFailure {
    pub file: String,
    pub project_root: Option<String>,
    pub extension: Option<String>,
    pub error: String,
    pub error_type: String,
    pub traceback: Option<String>,
    pub is_stale: bool,
}

/// `GET /v1/extensions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionsListing {
    pub extensions: Vec<ExtensionInfo>,
    pub failures: Vec<ExtensionFailure>,
}

/// Whether a reload went through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReloadStatus {
    #[default]
    Ok,
    Error,
}

/// `POST /v1/extensions/reload`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReloadAnswer {
    pub status: ReloadStatus,
    pub title: String,
    pub extensions: ExtensionsListing,
}

/// How a sandbox child must be started when the jail is on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JailPrefix {
    pub argv_prefix: Vec<String>,
}

/// `POST /v1/sandbox/env`: what `vis-gateway exec` needs to start a child of a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxEnv {
    pub session_id: String,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub proxy_port: u16,
    pub jail: Option<JailPrefix>,
}

/// `GET /v1/sessions/:sid/events-since`.
#[derive(Debug, Serialize)]
pub struct EventsSince {
    pub events: Vec<JournalEntry>,
}
