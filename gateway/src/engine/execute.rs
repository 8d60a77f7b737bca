//! Running one started turn: wait for an execution permit (the start watchdog), pick the
//! model and its provider, gather the tools and the history, run the model loop under the
//! silence watchdog, and hand its outcome to `finish` (`lifecycle.rs`).

use super::runner::{self, Outcome, RunCtx};
use super::turn_machine::{Launch, Terminal};
use super::Turns;
use crate::agent::budget::Budgets;
use crate::agent::window::Budget;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long a started turn may wait for an execution permit before it fails
/// (`VIS_TURN_START_TIMEOUT_MS`, default 60 s: "no worker activity 60 s").
fn start_timeout() -> Duration {
    crate::config::env_ms("VIS_TURN_START_TIMEOUT_MS", Duration::from_secs(60))
}

/// How long a model turn may stay silent after its first output, outside tool calls,
/// before it is force-failed (`VIS_TURN_SILENCE_MS`, default 6 min).
fn silence_timeout() -> Duration {
    crate::config::env_ms("VIS_TURN_SILENCE_MS", Duration::from_secs(6 * 60))
}

impl Turns {
    pub(super) fn spawn(self: &Arc<Self>, l: Launch) {
        let gw = self.clone();
        tokio::spawn(async move { gw.work(l).await });
    }

    async fn work(self: Arc<Self>, l: Launch) {
        // The start watchdog: a turn that gets no execution permit in time fails.
        let limit = start_timeout();
        let permit = tokio::select! {
            p = tokio::time::timeout(limit, self.permits.clone().acquire_owned()) => match p {
                Ok(p) => p.ok().map(Some),
                Err(_) => Some(None),
            },
            _ = l.cancel.cancelled() => None,
        };
        let terminal = match permit {
            None => Terminal::Cancelled,
            Some(None) => Terminal::Failed {
                code: "turn_stalled".into(),
                message: format!(
                    "turn never started running: no execution slot came free within {} s \
                     (VIS_GATEWAY_MAX_CONCURRENT_TURNS turns were running)",
                    limit.as_secs_f64()
                ),
            },
            Some(Some(_permit)) => {
                self.counters.executing.fetch_add(1, Ordering::Relaxed);
                let t = tokio::select! {
                    biased;
                    _ = l.cancel.cancelled() => Terminal::Cancelled,
                    t = self.execute(&l) => t,
                };
                self.counters.executing.fetch_sub(1, Ordering::Relaxed);
                // A cancel that raced the work's own ending (e.g. the provider stream reporting
                // the cancellation as an error) is still a cancel.
                if l.cancel.is_cancelled() {
                    Terminal::Cancelled
                } else {
                    t
                }
            }
        };
        let terminal = self.checked_terminal(&l.sid, &l.tid, terminal).await;
        // The exchange is kept before the terminal goes out: the next turn reads it.
        let steps = std::mem::take(&mut l.progress.lock().transcript);
        super::conversation::keep(&self.store, &l.sid, &l.tid, steps, &terminal).await;
        self.finish(&l.sid, &l.tid, terminal);
    }

    async fn execute(self: &Arc<Self>, l: &Launch) -> Terminal {
        let Ok(shared) = self.sessions.get(&l.sid).await else {
            return Terminal::Cancelled;
        };
        let (request, model, root, attachments, pinned, trunk, extra) = {
            let st = shared.lock();
            let Some(r) = &st.running else {
                return Terminal::Cancelled;
            };
            (
                r.turn.request.clone(),
                r.turn.model.clone(),
                self.workspaces
                    .work_root(&l.sid, &st.row.root)
                    .to_string_lossy()
                    .into_owned(),
                r.turn.attachments.clone(),
                self.companion.settings().pinned_model(&st.row),
                std::path::PathBuf::from(&st.row.root),
                r.turn.extra_body.clone(),
            )
        };
        // A turn without its own model runs on the session's pin, else the router default.
        let model = match model {
            Some(m) => Some(m),
            None if !request.trim_start().starts_with('/') => {
                self.companion.settings().effective_model(pinned).await
            }
            None => None,
        };
        // Slash commands are the project's (its real folder), wherever the session works.
        if self.slash.is_slash(&request, &trunk).await {
            if let Some(r) = shared
                .lock()
                .running
                .as_mut()
                .filter(|r| r.turn.tid == l.tid)
            {
                r.turn.is_slash = true;
            }
            let agent = super::agent_commands::ForTurn {
                gw: self.clone(),
                sid: l.sid.clone(),
                tid: l.tid.clone(),
                trunk: trunk.clone(),
                model: model.clone(),
                progress: l.progress.clone(),
                cancel: l.cancel.clone(),
            };
            return self
                .slash
                .run(&l.sid, &l.tid, &request, &root, &agent)
                .await;
        }
        let configured = self.configuration.pick(model.as_deref());
        let names_configured = configured.is_some()
            && model
                .as_deref()
                .and_then(|m| m.split_once('/'))
                .is_none_or(|(p, _)| self.configuration.has_provider(p));
        let picked = if names_configured {
            configured
        } else {
            self.extension_provider(std::path::Path::new(&root), model.as_deref())
                .await
                .or(configured)
        };
        let Some((client, model)) = picked else {
            return Terminal::Failed {
                code: "no_provider".into(),
                message: "no usable AI provider is configured: set OPENAI_API_KEY or ANTHROPIC_API_KEY, or add `providers:` to vis.yml".into(),
            };
        };
        let request = crate::companion::attachments::user_message(&request, &attachments);
        let context = super::conversation::load(&self.store, &l.sid, &l.tid, request).await;
        let kit = self.turn_tools.for_turn(&l.sid, &trunk).await;
        let conv = runner::Conversation {
            context,
            budget: Budget::new(self.window_of(&client, &model, &kit.config)),
            budgets: Budgets::from_config(&kit.config.agent),
            system: self.system_prompt(&l.sid, &trunk, &kit).await.text,
            extra,
            selected: (client.config().id.clone(), model.clone()),
        };
        let ctx = RunCtx {
            gw: self.clone(),
            sid: l.sid.clone(),
            tid: l.tid.clone(),
            root: root.into(),
            trunk,
            progress: l.progress.clone(),
            cancel: l.cancel.clone(),
        };
        let limit = silence_timeout();
        let fallback = self.companion.settings().fallback_pick(&client).await;
        let outcome = tokio::select! {
            o = runner::run_with_fallback(&ctx, client, model, conv, kit.tools, fallback) => o,
            _ = runner::silence(&l.progress, limit) => Outcome::Failed {
                code: "turn_stalled",
                message: format!(
                    "the turn went silent: no output for {} s after it had started answering \
                     (outside any tool call)",
                    limit.as_secs_f64()
                ),
            },
        };
        match outcome {
            Outcome::Completed { content } => Terminal::Completed { content },
            Outcome::Failed { code, message } => Terminal::Failed {
                code: code.into(),
                message,
            },
        }
    }
}
