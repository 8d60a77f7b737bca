//! The built-ins that need the sandbox: `/sh` runs a shell command as a sandbox child,
//! `/net-probe` explains an egress verdict without sending anything.

use super::SlashCommands;
use std::path::Path;

impl SlashCommands {
    /// `/sh <command>`: runs in `root` (where the session works) with the sandbox's child
    /// environment and jail; answers the output as a code block.
    pub(super) async fn sh(&self, sid: &str, command: &str, root: &Path) -> Result<String, String> {
        let sandbox = self.sandbox.get().ok_or("the sandbox is not running")?;
        if command.trim().is_empty() {
            return Err("usage: /sh <command>".into());
        }
        let cfg = self.configuration.project(root).await?;
        let program = command
            .split_whitespace()
            .next()
            .and_then(|p| p.rsplit('/').next());
        let env = sandbox.child_env_for(sid, root, &cfg, program);
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

    /// `/net-probe [METHOD] <url | host:port>`: the egress verdict the sandbox would give.
    pub(super) async fn net_probe(
        &self,
        sid: &str,
        args: &str,
        root: &Path,
    ) -> Result<String, String> {
        let sandbox = self.sandbox.get().ok_or("the sandbox is not running")?;
        let cfg = self.configuration.project(root).await?;
        sandbox.probe(sid, root, &cfg, args).await
    }
}
