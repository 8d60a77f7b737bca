//! Running a slash command as a turn: announce it (`chunk.slash`), run the built-in or the
//! extension's command, keep the one synthetic iteration in the transcript, and answer the
//! turn's terminal. `/reload` is here too, shared with the reload route.

use super::table::parse;
use super::SlashCommands;
use crate::engine::turn_machine::Terminal;
use crate::records::turn::prose_block;
use serde_json::{json, Value};
use std::path::Path;
use vis_companion_api::events::{Event, SlashChunk};

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

impl SlashCommands {
    /// Runs `request` as turn `tid` of session `sid`, where the session works (`root`).
    pub async fn run(
        &self,
        sid: &str,
        tid: &str,
        request: &str,
        root: &str,
        agent: &dyn super::AgentCommands,
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
                .names(project)
                .await
                .iter()
                .map(|(n, d)| format!("- `/{n}` — {d}"))
                .collect::<Vec<_>>()
                .join("\n")),
            "reload" => self.reload(project).await,
            "extensions" => Ok(self.extensions.catalog().markdown(Some(project)).await),
            "sh" => self.sh(sid, args, work).await,
            "draft" => self.workspaces.slash(sid, args).await,
            "net-probe" => self.net_probe(sid, args, work).await,
            "net" => self.net(sid, args, project).await,
            "prompt" => agent.prompt().await,
            "compact" => agent.compact(args).await,
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
        self.record_iteration(sid, tid, request, name, &result, data.as_ref());
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
    fn record_iteration(
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

    /// `/reload`: configuration (last good stays on failure), then extensions (build-then-swap).
    pub async fn reload(&self, root: &Path) -> Result<String, String> {
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
}
