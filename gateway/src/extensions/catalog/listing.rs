//! `GET /v1/extensions`, `vis-gateway extension list` and `/extensions`: what each
//! extension provides and every load failure.

use super::Catalog;
use crate::extensions::registry::{Entry, Scope};
use crate::extensions::types::file_str;
use crate::extensions::LoadFailure;
use serde_json::Value;
use std::path::Path;
use vis_companion_api::wire::{
    ExtensionFailure, ExtensionHook, ExtensionInfo, ExtensionProvider, ExtensionSlash,
    ExtensionSymbol, ExtensionsListing,
};

impl Catalog {
    /// `GET /v1/extensions` (a route of our own): the global extensions and, with
    /// `project`, that project's; plus each extension's tools, slash commands, hooks,
    /// filters and providers.
    pub async fn list(&self, project: Option<&Path>) -> ExtensionsListing {
        self.ensure_project(project).await;
        let reg = self.registry.read();
        let mut listing = ExtensionsListing::default();
        let mut scopes = vec![Scope::Global];
        if let Some(p) = project {
            scopes.push(Scope::Project(p.to_path_buf()));
        }
        for scope in scopes {
            let Some(state) = reg.scope(&scope) else {
                continue;
            };
            for e in &state.entries {
                listing.extensions.push(info_of(&scope, e));
            }
            for f in &state.failures {
                listing.failures.push(failure_of(f));
            }
        }
        listing
    }

    /// Markdown for the built-in `/extensions` slash command (docs/decisions.md, E8).
    pub async fn markdown(&self, project: Option<&Path>) -> String {
        let list = self.list(project).await;
        let mut md = String::new();
        md.push_str(&format!(
            "Extensions: {} loaded, {} failed\n",
            list.extensions.len(),
            list.failures.len()
        ));
        for e in &list.extensions {
            let stale = if e.is_stale {
                " (stale: last good version)"
            } else {
                ""
            };
            md.push_str(&format!(
                "\n- **{}** ({}){stale} — {}\n  `{}`",
                e.name, e.scope, e.description, e.file
            ));
            let tools: Vec<&str> = e.symbols.iter().map(|t| t.name.as_str()).collect();
            if !tools.is_empty() {
                md.push_str(&format!("\n  tools: {}", tools.join(", ")));
            }
            let slashes: Vec<String> = e
                .slash_commands
                .iter()
                .map(|t| format!("/{}", t.name))
                .collect();
            if !slashes.is_empty() {
                md.push_str(&format!("\n  slash commands: {}", slashes.join(", ")));
            }
        }
        if !list.failures.is_empty() {
            md.push_str("\n\nFailures:\n");
            for f in &list.failures {
                md.push_str(&format!("\n- `{}`: {}", f.file, f.error));
            }
        }
        md
    }
}

/// One loaded extension as the listing shows it.
fn info_of(scope: &Scope, e: &Entry) -> ExtensionInfo {
    let c = &e.catalog;
    ExtensionInfo {
        name: c.name.clone(),
        description: c.description.clone(),
        kind: c.kind.clone().unwrap_or_else(|| "python".into()),
        version: c.version.clone(),
        alias: c.alias.clone(),
        scope: if *scope == Scope::Global {
            "global"
        } else {
            "project"
        }
        .into(),
        project_root: scope.project_root().map(file_str),
        file: file_str(&e.file),
        is_stale: e.is_stale,
        symbols: c
            .symbols
            .iter()
            .flat_map(|s| s.members.iter())
            .map(|m| ExtensionSymbol {
                name: m.name.clone(),
                tool_name: m.tool.name.clone(),
                tag: m.tag.clone(),
                is_hidden: m.is_hidden,
                summary: m
                    .contract
                    .get("description")
                    .and_then(Value::as_str)
                    .and_then(|d| d.lines().next())
                    .unwrap_or("")
                    .to_string(),
            })
            .collect(),
        slash_commands: c
            .slash_commands
            .iter()
            .map(|s| ExtensionSlash {
                name: s.name.clone(),
                doc: s.doc.clone(),
                usage: s.usage.clone(),
            })
            .collect(),
        op_hooks: c
            .op_hooks
            .iter()
            .map(|h| ExtensionHook {
                ops: h.ops.clone(),
                phase: if h.is_gate { "gate" } else { h.phase.as_str() }.to_string(),
            })
            .collect(),
        network_filters: c.network_filters.len(),
        providers: c
            .providers
            .iter()
            .map(|p| ExtensionProvider {
                id: p.id.clone(),
                label: p.label.clone(),
                is_managed: p.is_managed,
                slots: p.slots.clone(),
            })
            .collect(),
        env: c.env.clone(),
    }
}

/// One load failure as the listing shows it.
fn failure_of(f: &LoadFailure) -> ExtensionFailure {
    ExtensionFailure {
        file: file_str(&f.file),
        project_root: f.project_root.as_deref().map(file_str),
        extension: f.extension.clone(),
        error: f.error.message.clone(),
        error_type: f.error.kind.clone(),
        traceback: f.error.traceback.clone(),
        is_stale: f.is_stale,
    }
}
