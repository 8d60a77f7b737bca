//! Slash commands (`/name args`): run locally, without a provider (docs/decisions.md, E8).
//! Built-ins first, then the sandbox's, then the extensions' of the session's project.

use super::lifecycle::Terminal;
use super::turn::prose_block;
use super::Gateway;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use vis_companion_api::events::{Event, SlashChunk};
use vis_companion_api::wire::{ExtensionsListing, SlashCommand, SlashPalette};

/// The built-in commands and their one-line docs.
pub const BUILTINS: &[(&str, &str)] = &[
    ("help", "List the slash commands of this session"),
    (
        "reload",
        "Reload the configuration (providers, policy) and extensions",
    ),
    ("extensions", "List loaded extensions and load failures"),
    (
        "draft",
        "Isolated workspaces: /draft new NAME, /draft, /draft list, /draft apply, /draft stash, /draft resume NAME, /draft abandon",
    ),
];

/// The `/draft` sub-commands, listed in the palette as commands of their own.
const DRAFT_PALETTE: &[(&str, &str)] = &[
    (
        "draft new",
        "Create an isolated draft workspace and enter it: /draft new NAME",
    ),
    ("draft list", "List the drafts of this repository"),
    (
        "draft apply",
        "Land the draft's changes in the real folder (commit + merge in git)",
    ),
    (
        "draft stash",
        "Return to trunk, keeping the draft for /draft resume",
    ),
    ("draft resume", "Enter a stashed draft: /draft resume NAME"),
    ("draft abandon", "Discard the current draft for good"),
];

/// Commands that need the sandbox.
pub const SANDBOX_BUILTINS: &[(&str, &str)] = &[
    ("sh", "Run a shell command in the session sandbox: /sh <command>"),
    ("net-probe", "Explain the egress verdict for a request without sending it: /net-probe [METHOD] <url | host:port>"),
];

/// Commands the Companion implements itself; listed in the palette only.
const CLIENT_NATIVE: &[(&str, &str)] = &[
    ("help", "Show help"),
    ("new-session", "Start a new session"),
    ("sessions", "Browse sessions"),
    ("clear", "Clear the view"),
];

/// A slash reply's title: its first line (without Markdown heading marks), else `/name`.
fn slash_title(name: &str, text: &str) -> String {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let first = first.trim().trim_start_matches('#').trim();
    if first.is_empty() || first.starts_with("```") {
        format!("/{name}")
    } else {
        first.chars().take(200).collect()
    }
}

/// Splits `/name rest` into `(name, rest)`.
pub fn parse(request: &str) -> Option<(&str, &str)> {
    let body = request.trim().strip_prefix('/')?;
    let (name, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    (!name.is_empty()).then_some((name, rest.trim()))
}

impl Gateway {
    /// Every slash command of a project with its doc (built-ins shadow extensions).
    pub async fn slash_names(&self, root: &Path) -> Vec<(String, String)> {
        let mut names: Vec<(String, String)> = BUILTINS
            .iter()
            .map(|(n, d)| (n.to_string(), d.to_string()))
            .collect();
        if self.sandbox.get().is_some() {
            names.extend(
                SANDBOX_BUILTINS
                    .iter()
                    .map(|(n, d)| (n.to_string(), d.to_string())),
            );
        }
        for (n, d) in self.extensions.catalog().slashes(Some(root)).await {
            let n = n.trim_start_matches('/').to_string();
            if !names.iter().any(|(m, _)| *m == n) {
                names.push((n, d));
            }
        }
        names
    }

    /// Whether a request names a registered slash command of the project.
    pub async fn is_slash(&self, request: &str, root: &Path) -> bool {
        let Some((name, _)) = parse(request) else {
            return false;
        };
        self.slash_names(root).await.iter().any(|(n, _)| n == name)
    }

    pub async fn slash_palette(&self, root: &Path) -> SlashPalette {
        let mut commands: Vec<SlashCommand> = self
            .slash_names(root)
            .await
            .into_iter()
            .map(|(n, doc)| SlashCommand {
                name: format!("/{n}"),
                doc,
            })
            .collect();
        for (n, d) in DRAFT_PALETTE {
            commands.push(SlashCommand {
                name: format!("/{n}"),
                doc: d.to_string(),
            });
        }
        for (n, d) in CLIENT_NATIVE {
            let name = format!("/{n}");
            if !commands.iter().any(|c| c.name == name) {
                commands.push(SlashCommand {
                    name,
                    doc: d.to_string(),
                });
            }
        }
        SlashPalette { commands }
    }

    pub(super) async fn run_slash(
        self: &Arc<Self>,
        sid: &str,
        tid: &str,
        request: &str,
        root: &str,
    ) -> Terminal {
        let Some((name, args)) = parse(request) else {
            return Terminal::Failed {
                code: "turn_failed".into(),
                message: "not a slash command".into(),
            };
        };
        let detail = format!("/{name} {args}");
        self.bus.publish(
            sid,
            Event::ChunkSlash(SlashChunk {
                turn_id: tid.to_string(),
                iteration: 1,
                detail: detail.trim_end().to_string(),
            }),
        );
        // `/sh` and `/net-probe` run where the session works (a draft's folder while it is in
        // one); the command set, `/reload` and extensions are the project's (its real folder).
        let work = Path::new(root);
        let trunk = self
            .sessions
            .loaded(sid)
            .map(|s| std::path::PathBuf::from(&s.lock().row.root))
            .unwrap_or_else(|| work.to_path_buf());
        let project = trunk.as_path();
        // An extension command's `data` (kept in the transcript besides its Markdown).
        let mut data = None;
        let result: Result<String, String> = match name {
            "help" => Ok(self
                .slash_names(project)
                .await
                .iter()
                .map(|(n, d)| format!("- `/{n}` — {d}"))
                .collect::<Vec<_>>()
                .join("\n")),
            "reload" => self.reload_all(project).await,
            "extensions" => Ok(self.extensions.catalog().markdown(Some(project)).await),
            "sh" => self.slash_sh(sid, args, work).await,
            "draft" => self.workspaces.slash(sid, args).await,
            "net-probe" => self.slash_net_probe(sid, args, work).await,
            other => {
                // The command sees the channel of the session it runs in (`web`, `cli`, …).
                let channel = self
                    .sessions
                    .loaded(sid)
                    .map(|s| s.lock().row.channel.clone());
                let out = self
                    .extensions
                    .sessions()
                    .slash(
                        &self.workspaces.session(sid, project),
                        other,
                        args,
                        channel.as_deref(),
                    )
                    .await;
                data = out.data;
                if out.ok {
                    Ok(out.markdown)
                } else {
                    Err(out.markdown)
                }
            }
        };
        self.record_slash_iteration(sid, tid, request, name, &result, data.as_ref());
        match result {
            Ok(t) => Terminal::Completed {
                content: vec![prose_block(format!("{tid}:assistant-prose:1"), &t)],
            },
            Err(e) => Terminal::Failed {
                code: "turn_failed".into(),
                message: e,
            },
        }
    }

    /// The one synthetic iteration a slash turn keeps in the transcript (form tag `user-slash`).
    fn record_slash_iteration(
        &self,
        sid: &str,
        tid: &str,
        request: &str,
        name: &str,
        result: &Result<String, String>,
        data: Option<&Value>,
    ) {
        let (status, text) = match result {
            Ok(t) => ("ok", t.clone()),
            Err(e) => ("error", e.clone()),
        };
        let mut outcome = json!({"slash/status": status, "slash/title": slash_title(name, &text),
            "slash/reason": result.as_ref().err()});
        if let Some(d) = data {
            outcome["slash/data"] = d.clone();
        }
        let form = json!({"tag": "user-slash", "code": request, "op": format!("slash/{name}"),
            "result": outcome});
        let Some(shared) = self.sessions.loaded(sid) else {
            return;
        };
        let st = shared.lock();
        if let Some(r) = &st.running {
            r.progress.lock().iterations.push(json!({"id": format!("{tid}:1"), "position": 0, "thinking": "",
                "assistant_prose": text, "answer": text, "code": [request], "forms": [form], "duration_ms": 0,
                "cost_usd": 0.0, "error": result.as_ref().err(), "llm_selected": null, "llm_actual": null,
                "is_llm_fallback": false, "llm_routing_trace": []}));
        }
    }

    async fn slash_sh(&self, sid: &str, command: &str, root: &Path) -> Result<String, String> {
        let sandbox = self.sandbox.get().ok_or("the sandbox is not running")?;
        if command.trim().is_empty() {
            return Err("usage: /sh <command>".into());
        }
        let cfg = self.configuration.project(root).await?;
        let env = sandbox.child_env(sid, root, &cfg);
        let jail = sandbox.jail_prefix(root, &cfg)?;
        let cancel = tokio_util::sync::CancellationToken::new();
        let out = crate::sandbox::run::run_with(
            command,
            root,
            &env,
            jail.as_deref(),
            crate::sandbox::shell::DEFAULT_TIMEOUT,
            &cancel,
        )
        .await
        .map_err(|e| format!("cannot start the command: {e}"))?;
        Ok(format!(
            "```\n{}\n```",
            crate::sandbox::shell::describe(&out).trim_end()
        ))
    }

    async fn slash_net_probe(&self, sid: &str, args: &str, root: &Path) -> Result<String, String> {
        let sandbox = self.sandbox.get().ok_or("the sandbox is not running")?;
        let cfg = self.configuration.project(root).await?;
        sandbox.probe(sid, root, &cfg, args).await
    }

    /// The extensions listing of `GET /v1/extensions` (global, plus `project`'s).
    pub async fn extensions_listing(
        &self,
        project: Option<&Path>,
    ) -> vis_companion_api::ApiResult<ExtensionsListing> {
        Ok(self.extensions.catalog().list(project).await)
    }

    /// `/reload`: configuration (last good stays on failure), then extensions (build-then-swap).
    pub async fn reload_all(&self, root: &Path) -> Result<String, String> {
        let config = self.configuration.reload(root).await;
        let report = self.extensions.catalog().reload(Some(root)).await;
        let part = match &config {
            Ok(keys) if keys.is_empty() => "configuration (unchanged)".to_string(),
            Ok(keys) => format!("configuration ({})", keys.join(", ")),
            Err(e) => format!("configuration (failed: {e})"),
        };
        let text = format!("Reloaded — {part}; {}", report.summary());
        // Any failure — configuration or an extension file — makes the reply an error
        // (a failed file is reported); what did load is still active, last good versions included.
        if config.is_err() || !report.failures.is_empty() {
            Err(text)
        } else {
            Ok(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_slash_title_is_the_first_line_of_the_reply() {
        use super::slash_title;
        assert_eq!(
            slash_title(
                "reload",
                "Reloaded — configuration (unchanged); Python extensions: 0 loaded"
            ),
            "Reloaded — configuration (unchanged); Python extensions: 0 loaded"
        );
        assert_eq!(slash_title("todo", "## Todo\n\n- a"), "Todo");
        assert_eq!(slash_title("sh", "```\nok\n```"), "/sh");
        assert_eq!(slash_title("x", ""), "/x");
    }

    #[test]
    fn a_slash_request_splits_into_name_and_arguments() {
        assert_eq!(
            parse("/net-probe GET http://x"),
            Some(("net-probe", "GET http://x"))
        );
        assert_eq!(parse("  /help "), Some(("help", "")));
        assert_eq!(parse("hello"), None);
        assert_eq!(parse("/"), None);
    }
}
