//! `/net`: learn mode from the chat (docs/decisions.md, L1) — the proposal, its review form,
//! the session's mode switch and the suggested additions.

use super::SlashCommands;
use crate::engine::routes::learn::LearnRoutes;
use crate::learn::rows::Scope;
use crate::learn::{describe, parse_mode};
use std::path::Path;

const USAGE: &str = "usage: /net propose [project] | /net review | /net mode [learn|enforce|project] | /net suggested [project]";

impl SlashCommands {
    /// `/net …` for session `sid` of project `root`.
    pub(super) async fn net(&self, sid: &str, args: &str, root: &Path) -> Result<String, String> {
        let mut words = args.split_whitespace();
        let sub = words.next().unwrap_or("");
        let rest = words.next();
        let scope = |project: bool| {
            if project {
                Scope::Project(root.to_string_lossy().into_owned())
            } else {
                Scope::Session(sid.to_string())
            }
        };
        let project = match rest {
            None => false,
            Some("project") => true,
            Some(other) if sub != "mode" => {
                return Err(format!("unknown scope {other:?}; {USAGE}"))
            }
            Some(_) => false,
        };
        match sub {
            "propose" => {
                let p = self
                    .learn
                    .proposal(scope(project), root, Some(sid))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "## Proposed network policy ({} scope, mode now: {})\n\n{}\n```yaml\n{}```\n\n`/net review` to choose rules and write them into `vis.yml`.",
                    p.scope,
                    p.mode,
                    if p.rules.is_empty() {
                        "Nothing was recorded: the proposal denies everything.\n".to_string()
                    } else {
                        describe(&p.rules)
                    },
                    p.yaml
                ))
            }
            "review" => {
                let p = self
                    .learn
                    .proposal(Scope::Session(sid.to_string()), root, Some(sid))
                    .await
                    .map_err(|e| e.to_string())?;
                let applied = LearnRoutes::review_and_apply(
                    self.human.clone(),
                    self.learn.clone(),
                    sid.to_string(),
                    root.to_path_buf(),
                    p,
                )
                .await?;
                Ok(match applied {
                    None => "Nothing applied (the review was cancelled).".into(),
                    Some(c) => format!(
                        "Wrote {} rule(s) into `{}`{}.\n\n{}",
                        c.rules.len(),
                        c.file,
                        if c.mode.is_some() {
                            " and switched to `mode: enforce`"
                        } else {
                            ""
                        },
                        describe(&c.rules)
                    ),
                })
            }
            "mode" => {
                let m = match rest {
                    None => self.learn.mode(sid, root).await,
                    Some("project") => self.learn.set_mode(sid, root, None).await,
                    Some(m) => match parse_mode(m) {
                        Ok(mode) => self.learn.set_mode(sid, root, Some(mode)).await,
                        Err(e) => Err(e),
                    },
                }
                .map_err(|e| e.to_string())?;
                Ok(format!(
                    "Network mode of this session: **{}** (project: {}{})",
                    m.mode,
                    m.project_mode,
                    if m.session_override.is_some() {
                        "; switched for this session"
                    } else {
                        ""
                    }
                ))
            }
            "suggested" => {
                let s = self
                    .learn
                    .suggested(scope(project), root)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(if s.rules.is_empty() {
                    "No denial a proposal would allow.".into()
                } else {
                    format!(
                        "## Suggested additions\n\n{} denial(s) a proposal would allow:\n\n{}",
                        s.denials,
                        describe(&s.rules)
                    )
                })
            }
            _ => Err(USAGE.into()),
        }
    }
}
