//! `/draft [new NAME | clean NAME | list | apply [MESSAGE] | stash | resume NAME | abandon
//! [REASON]]`: the draft lifecycle as a slash command, answered in Markdown.

use super::Workspaces;
use crate::drafts::service::Target;
use crate::drafts::DraftError;
use std::path::Path;

impl Workspaces {
    /// `/draft [new NAME | clean NAME | list | apply [MESSAGE] | stash | resume NAME | abandon [REASON]]`.
    pub async fn slash(&self, sid: &str, args: &str) -> Result<String, String> {
        let (sub, rest) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
        let rest = rest.trim();
        let shown = |e: DraftError| e.to_string();
        let trunk = self.trunk(sid).await.map_err(|e| e.to_string())?;
        match sub {
            "" | "status" => Ok(self.draft_status(sid, &trunk).await),
            "list" => self.draft_list_text(sid, &trunk).await.map_err(shown),
            "new" | "clean" => {
                let c = self
                    .create(sid, rest, sub == "clean")
                    .await
                    .map_err(shown)?;
                Ok(format!(
                    "Draft **{}** created and entered: the session now works in `{}`. \
                     Trunk is untouched until `/draft apply`.",
                    c.workspace.label, c.workspace.root
                ))
            }
            "apply" => {
                let msg = (!rest.is_empty()).then_some(rest);
                let (c, a) = self.apply(sid, msg).await.map_err(shown)?;
                let what = match (&a.commit, a.files.len()) {
                    (_, 0) => "nothing had changed".to_string(),
                    (Some(sha), n) => format!(
                        "{n} file(s) committed on {} (commit {})",
                        a.draft.target_branch.clone().unwrap_or_default(),
                        &sha[..sha.len().min(12)]
                    ),
                    (None, n) if a.draft.backend == crate::drafts::Backend::Git => {
                        format!("{n} file(s) written to {}, uncommitted", c.workspace.root)
                    }
                    (None, n) => format!("{n} file(s) landed in {}", c.workspace.root),
                };
                Ok(format!(
                    "Draft **{}** applied: {what}. Back on trunk.",
                    a.draft.label
                ))
            }
            "stash" => {
                let c = self.stash(sid).await.map_err(shown)?;
                let label = c.draft.map(|d| d.label).unwrap_or_default();
                Ok(format!(
                    "Draft **{label}** stashed: back on trunk. `/draft resume {label}` returns to it."
                ))
            }
            "resume" if rest.is_empty() => {
                let list = self.draft_list_text(sid, &trunk).await.map_err(shown)?;
                Err(format!("usage: /draft resume NAME\n\n{list}"))
            }
            "resume" => {
                crate::drafts::check_label(rest).map_err(shown)?;
                let c = self
                    .resume(sid, Target::Label(rest.to_string()))
                    .await
                    .map_err(shown)?;
                Ok(format!(
                    "Resumed draft **{}**: the session works in `{}`.",
                    c.workspace.label, c.workspace.root
                ))
            }
            "abandon" => {
                let reason = (!rest.is_empty()).then_some(rest);
                let c = self.abandon(sid, None, reason).await.map_err(shown)?;
                let label = c.draft.map(|d| d.label).unwrap_or_default();
                Ok(format!(
                    "Draft **{label}** abandoned and removed. Back on trunk."
                ))
            }
            other => Err(format!(
                "unknown /draft command {other:?}: use /draft, /draft new NAME, /draft list, \
                 /draft apply, /draft stash, /draft resume NAME or /draft abandon"
            )),
        }
    }

    async fn draft_status(&self, sid: &str, trunk: &str) -> String {
        match self.drafts.current(sid) {
            None => format!("On **trunk**: the session works in its real folder `{trunk}`."),
            Some(d) => {
                let changed = self
                    .drafts
                    .changed(&d)
                    .await
                    .map(|f| format!("{} changed file(s)", f.len()))
                    .unwrap_or_else(|e| format!("changes unknown: {e}"));
                format!(
                    "In draft **{}** ({} backend{}): the session works in `{}`; {changed}.",
                    d.label,
                    d.backend.as_str(),
                    d.branch
                        .as_ref()
                        .map(|b| format!(", branch {b}"))
                        .unwrap_or_default(),
                    d.root.display()
                )
            }
        }
    }

    async fn draft_list_text(&self, sid: &str, trunk: &str) -> Result<String, DraftError> {
        let list = self.drafts.list(Path::new(trunk)).await?;
        if list.is_empty() {
            return Ok("No drafts here: create one with `/draft new NAME`.".into());
        }
        let current = self.drafts.current(sid).map(|d| d.workspace_id);
        let mut out = String::from("Drafts, newest first:\n");
        for d in &list {
            let mark = if current.as_deref() == Some(d.workspace_id.as_str()) {
                " (current)"
            } else if d.session_id.is_some() {
                " (in use by another session)"
            } else {
                ""
            };
            out.push_str(&format!(
                "- **{}**{mark} — `{}`\n",
                d.label,
                d.root.display()
            ));
        }
        Ok(out)
    }
}
