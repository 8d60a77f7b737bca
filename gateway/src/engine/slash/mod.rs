//! Slash commands (`/name args`): run locally, without a provider (docs/decisions.md, E8).
//! Built-ins first, then the sandbox's, then the extensions' of the session's project.
//!
//! `SlashCommands` is the job: the command table and the Companion palette (`table.rs`),
//! running a command and keeping its one synthetic iteration (`run.rs`), and the built-ins
//! that need the sandbox (`sandboxed.rs`). It reaches everything through the handles it
//! holds; `/reload` reloads the configuration job, then the extensions.

mod net;
mod run;
mod sandboxed;
mod table;

use super::sessions::Sessions;
use super::workspace::Workspaces;
use crate::bus::Bus;
use crate::configuration::Configuration;
use crate::extensions::ExtensionHost;
use crate::sandbox::Sandbox;
use std::sync::{Arc, OnceLock};

/// The commands about the model's side of a session (`/prompt`, `/compact`), answered by
/// the turn engine for the turn that runs them.
#[async_trait::async_trait]
pub trait AgentCommands: Send + Sync {
    /// The system prompt the model gets in this session now.
    async fn prompt(&self) -> Result<String, String>;
    /// Summarises the session's settled turns (`/compact FOCUS`).
    async fn compact(&self, focus: &str) -> Result<String, String>;
}

/// The slash commands of the sessions: which exist for a project, and running one as a turn.
pub struct SlashCommands {
    sessions: Arc<Sessions>,
    bus: Arc<Bus>,
    /// The extensions: their commands, the listing and reload.
    extensions: ExtensionHost,
    /// Where each session works (`/draft`, and the folder an extension command sees).
    workspaces: Arc<Workspaces>,
    /// A project's configuration (`/sh`, `/net-probe`) and its reload (`/reload`).
    configuration: Arc<Configuration>,
    /// The egress proxy and child runner, once started (`/sh`, `/net-probe`).
    sandbox: OnceLock<Arc<Sandbox>>,
    /// Learn mode (`/net`) and the review form it opens.
    learn: Arc<crate::learn::Learn>,
    human: Arc<crate::human_input::HumanInput>,
}

impl SlashCommands {
    pub fn new(
        sessions: Arc<Sessions>,
        bus: Arc<Bus>,
        extensions: ExtensionHost,
        workspaces: Arc<Workspaces>,
        configuration: Arc<Configuration>,
        learn: Arc<crate::learn::Learn>,
        human: Arc<crate::human_input::HumanInput>,
    ) -> SlashCommands {
        SlashCommands {
            sessions,
            bus,
            extensions,
            workspaces,
            configuration,
            sandbox: OnceLock::new(),
            learn,
            human,
        }
    }

    /// The sandbox runs: `/sh` and `/net-probe` join the built-ins.
    pub fn install_sandbox(&self, sandbox: Arc<Sandbox>) {
        let _ = self.sandbox.set(sandbox);
    }
}
