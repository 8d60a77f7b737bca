//! `GET /v1/extensions`, `vis-gateway extension list` and `/extensions`: what each
//! extension provides and every load failure.

use super::*;
use serde_json::{json, Value};
use std::path::Path;

impl ExtensionHost {
    /// `GET /v1/extensions` (a route of our own): the global extensions and, with
    /// `project`, that project's; plus each extension's tools, slash commands, hooks,
    /// filters and providers.
    pub async fn list(&self, project: Option<&Path>) -> Value {
        self.ensure_project(project).await;
        let reg = self.inner.registry.read();
        let mut extensions = Vec::new();
        let mut failures = Vec::new();
        let mut scopes = vec![Scope::Global];
        if let Some(p) = project {
            scopes.push(Scope::Project(p.to_path_buf()));
        }
        for scope in scopes {
            let Some(state) = reg.scopes.get(&scope) else {
                continue;
            };
            for e in &state.entries {
                let c = &e.catalog;
                extensions.push(json!({
                    "name": c.name,
                    "description": c.description,
                    "kind": c.kind.clone().unwrap_or_else(|| "python".into()),
                    "version": c.version,
                    "alias": c.alias,
                    "scope": if scope == Scope::Global { "global" } else { "project" },
                    "project_root": scope.project_root().map(file_str),
                    "file": file_str(&e.file),
                    "is_stale": e.is_stale,
                    "symbols": c.symbols.iter().flat_map(|s| s.members.iter()).map(|m| json!({
                        "name": m.name,
                        "tool_name": m.tool.name,
                        "tag": m.tag,
                        "is_hidden": m.is_hidden,
                        "summary": m.contract.get("description").and_then(Value::as_str)
                            .and_then(|d| d.lines().next()).unwrap_or(""),
                    })).collect::<Vec<_>>(),
                    "slash_commands": c.slash_commands.iter().map(|s| json!({
                        "name": s.name, "doc": s.doc, "usage": s.usage,
                    })).collect::<Vec<_>>(),
                    "op_hooks": c.op_hooks.iter().map(|h| json!({
                        "ops": h.ops, "phase": if h.is_gate { "gate" } else { h.phase.as_str() },
                    })).collect::<Vec<_>>(),
                    "network_filters": c.network_filters.len(),
                    "providers": c.providers.iter().map(|p| json!({
                        "id": p.id, "label": p.label, "is_managed": p.is_managed, "slots": p.slots,
                    })).collect::<Vec<_>>(),
                    "env": c.env,
                }));
            }
            for f in &state.failures {
                failures.push(json!({
                    "file": file_str(&f.file),
                    "project_root": f.project_root.as_deref().map(file_str),
                    "extension": f.extension,
                    "error": f.error.message,
                    "error_type": f.error.kind,
                    "traceback": f.error.traceback,
                    "is_stale": f.is_stale,
                }));
            }
        }
        json!({"extensions": extensions, "failures": failures})
    }

    /// Markdown for the built-in `/extensions` slash command (docs/decisions.md, E8).
    pub async fn extensions_markdown(&self, project: Option<&Path>) -> String {
        let list = self.list(project).await;
        let mut md = String::new();
        let exts = list["extensions"].as_array().cloned().unwrap_or_default();
        let fails = list["failures"].as_array().cloned().unwrap_or_default();
        md.push_str(&format!(
            "Extensions: {} loaded, {} failed\n",
            exts.len(),
            fails.len()
        ));
        for e in &exts {
            let stale = if e["is_stale"] == true {
                " (stale: last good version)"
            } else {
                ""
            };
            md.push_str(&format!(
                "\n- **{}** ({}){stale} — {}\n  `{}`",
                e["name"].as_str().unwrap_or(""),
                e["scope"].as_str().unwrap_or(""),
                e["description"].as_str().unwrap_or(""),
                e["file"].as_str().unwrap_or("")
            ));
            let tools: Vec<&str> = e["symbols"]
                .as_array()
                .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
                .unwrap_or_default();
            if !tools.is_empty() {
                md.push_str(&format!("\n  tools: {}", tools.join(", ")));
            }
            let slashes: Vec<String> = e["slash_commands"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|t| t["name"].as_str().map(|n| format!("/{n}")))
                        .collect()
                })
                .unwrap_or_default();
            if !slashes.is_empty() {
                md.push_str(&format!("\n  slash commands: {}", slashes.join(", ")));
            }
        }
        if !fails.is_empty() {
            md.push_str("\n\nFailures:\n");
            for f in &fails {
                md.push_str(&format!(
                    "\n- `{}`: {}",
                    f["file"].as_str().unwrap_or(""),
                    f["error"].as_str().unwrap_or("")
                ));
            }
        }
        md
    }
}
