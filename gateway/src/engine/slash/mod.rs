//! Slash commands (`/name args`): run locally, without a provider (docs/decisions.md, E8).
//! Built-ins first, then the sandbox's, then the extensions' of the session's project.
//!
//! `SlashCommands` is the job: the command table and the Companion palette (`table.rs`),
//! running a command and keeping its one synthetic iteration (`run.rs`), and the built-ins
//! that need the sandbox (`sandboxed.rs`). `/reload` reloads the configuration through the
//! narrow [`ConfigReload`] handle its caller passes in; everything else it reaches through
//! the handles it holds.

mod run;
mod sandboxed;
mod table;

use super::sessions::Sessions;
use super::workspace::Workspaces;
use crate::bus::Bus;
use crate::extensions::ExtensionHost;
use crate::sandbox::Sandbox;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Reloads a project's configuration for `/reload` (and the reload route): re-reads the
/// configuration layers and rebuilds what depends on them; the last good configuration
/// stays active on failure. Answers the keys that changed.
pub trait ConfigReload: Sync {
    fn reload_config(
        &self,
        root: &Path,
    ) -> impl Future<Output = Result<Vec<String>, String>> + Send;
}

/// The slash commands of the sessions: which exist for a project, and running one as a turn.
pub struct SlashCommands {
    sessions: Arc<Sessions>,
    bus: Arc<Bus>,
    /// The extensions: their commands, the listing and reload.
    extensions: ExtensionHost,
    /// Where each session works (`/draft`, and the folder an extension command sees).
    workspaces: Arc<Workspaces>,
    /// The home folder, for a project's configuration (`/sh`, `/net-probe`).
    home: PathBuf,
    /// The egress proxy and child runner, once started (`/sh`, `/net-probe`).
    sandbox: OnceLock<Arc<Sandbox>>,
}

impl SlashCommands {
    pub fn new(
        sessions: Arc<Sessions>,
        bus: Arc<Bus>,
        extensions: ExtensionHost,
        workspaces: Arc<Workspaces>,
        home: PathBuf,
    ) -> SlashCommands {
        SlashCommands {
            sessions,
            bus,
            extensions,
            workspaces,
            home,
            sandbox: OnceLock::new(),
        }
    }

    /// The sandbox runs: `/sh` and `/net-probe` join the built-ins.
    pub fn install_sandbox(&self, sandbox: Arc<Sandbox>) {
        let _ = self.sandbox.set(sandbox);
    }
}
