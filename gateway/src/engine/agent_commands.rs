//! The turn engine's side of the agent: a turn's window and system prompt, and the slash
//! commands that need them (`/prompt`, `/compact`).

use super::compaction::{self, How};
use super::run_ctx::{Conversation, RunCtx};
use super::turn_tools::TurnKit;
use super::Turns;
use crate::agent::budget::Budgets;
use crate::agent::memory::Trigger;
use crate::agent::prompt::{self, PromptInputs, SystemPrompt};
use crate::agent::window::{self, text_tokens, Budget};
use crate::config::Config;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use vis_providers::{ChatMessage, Client};

impl Turns {
    /// The context window of `model` on `client`'s provider.
    pub(super) fn window_of(&self, client: &Client, model: &str, cfg: &Config) -> u64 {
        let pc = client.config();
        let configured = cfg.providers.get(&pc.id).and_then(|p| p.context_window);
        let listed = vis_providers::listed_window(&pc.base_url, model);
        window::resolve(configured, listed, model).0
    }

    /// The session's system prompt for this turn (files and git are read off the workers).
    pub(super) async fn system_prompt(
        &self,
        sid: &str,
        trunk: &std::path::Path,
        kit: &TurnKit,
    ) -> SystemPrompt {
        let view = self.workspaces.view(sid, &trunk.to_string_lossy());
        let sandbox = kit.config.model_tools() == crate::config::ModelTools::Sandbox;
        let inputs = PromptInputs {
            home: self.configuration.home().to_path_buf(),
            project: trunk.to_path_buf(),
            work: PathBuf::from(&view.root),
            draft: view.is_draft.then(|| view.label.clone()),
            sandbox,
            system_prompt: kit.config.system_prompt.clone(),
            append_system_prompt: kit.config.append_system_prompt.clone(),
            namespaces: kit.namespaces.clone(),
            mcp: kit.mcp.clone(),
            network: prompt::network_line(
                kit.config.jail.enabled.unwrap_or(false),
                kit.config.jail.network.as_ref(),
            ),
            extensions: kit.prompts.clone(),
        };
        tokio::task::spawn_blocking(move || prompt::assemble(&inputs))
            .await
            .unwrap_or_else(|_| SystemPrompt {
                text: String::new(),
                stable_len: 0,
                sources: Vec::new(),
            })
    }
}

/// `/prompt` and `/compact` for the slash turn that runs them.
pub struct ForTurn {
    pub gw: Arc<Turns>,
    pub sid: String,
    pub tid: String,
    pub trunk: PathBuf,
    /// The session's model (its pin, else the router's default).
    pub model: Option<String>,
    /// The slash turn's progress (a compaction's tokens count for it).
    pub progress: Arc<parking_lot::Mutex<super::run_ctx::Progress>>,
    pub cancel: CancellationToken,
}

#[async_trait::async_trait]
impl super::slash::AgentCommands for ForTurn {
    async fn prompt(&self) -> Result<String, String> {
        let kit = self.gw.turn_tools.for_turn(&self.sid, &self.trunk).await;
        let p = self.gw.system_prompt(&self.sid, &self.trunk, &kit).await;
        let files = if p.sources.is_empty() {
            "no instruction files".to_string()
        } else {
            p.sources
                .iter()
                .map(|s| format!("`{}`", s.display()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Ok(format!(
            "System prompt — about {} tokens; from {files}\n\n````markdown\n{}\n````",
            text_tokens(p.text.len()),
            p.text
        ))
    }

    async fn compact(&self, focus: &str) -> Result<String, String> {
        let gw = &self.gw;
        let Some((client, model)) = gw.configuration.pick(self.model.as_deref()) else {
            return Err("no usable AI provider is configured to write the summary".into());
        };
        let cfg = gw
            .configuration
            .project(&self.trunk)
            .await
            .unwrap_or_default();
        let mut context = super::conversation::load(
            &gw.store,
            &self.sid,
            &self.tid,
            ChatMessage::User {
                text: String::new(),
            },
        )
        .await;
        context.current = None;
        if context.past.is_empty() {
            return Ok("Nothing to compact yet: no turns since the last summary.".into());
        }
        let turns = context.past.len();
        let mut conv = Conversation {
            context,
            budget: Budget::new(gw.window_of(&client, &model, &cfg)),
            budgets: Budgets::from_config(&cfg.agent),
            system: String::new(),
            extra: None,
            selected: (client.config().id.clone(), model.clone()),
        };
        let ctx = RunCtx {
            gw: gw.clone(),
            sid: self.sid.clone(),
            tid: self.tid.clone(),
            root: self.trunk.clone(),
            trunk: self.trunk.clone(),
            progress: self.progress.clone(),
            cancel: self.cancel.clone(),
        };
        let how = How {
            trigger: Trigger::Manual,
            focus: Some(focus).filter(|f| !f.trim().is_empty()),
            all: true,
        };
        match compaction::compact(&ctx, &client, &model, &mut conv, 0, how).await {
            Ok(Some(c)) => Ok(format!(
                "Compacted {turns} turns: about {} → {} tokens of context.\n\n{}",
                c.tokens_before, c.tokens_after, c.summary
            )),
            Ok(None) => Err("the model could not write the summary; nothing was changed".into()),
            Err(_) => Err("cancelled".into()),
        }
    }
}
