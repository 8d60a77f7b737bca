//! The built-in `shell` tool (docs/decisions.md, G6): runs a command in the session's sandbox.

use super::Sandbox;
use crate::tools::{Tool, ToolCtx, ToolOutput};
use async_trait::async_trait;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use vis_providers::ToolSpec;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

pub struct ShellTool {
    pub sandbox: Arc<Sandbox>,
    pub home: PathBuf,
}

/// Formats a run for the model and the Companion card.
pub fn describe(out: &super::run::RunOutput) -> String {
    let mut s = String::new();
    if !out.stdout.is_empty() {
        s.push_str(&out.stdout);
    }
    if !out.stderr.is_empty() {
        if !s.is_empty() && !s.ends_with('\n') {
            s.push('\n');
        }
        s.push_str("[stderr]\n");
        s.push_str(&out.stderr);
    }
    if out.leftover.is_some() {
        s.push_str(
            "\n[processes it started in the background still run; they are stopped when this \
             block ends (use shell(cmd, background=True) for a job that outlives it)]",
        );
    }
    if out.timed_out {
        s.push_str("\n[timed out: the command and everything it started were killed]");
    } else if let Some(code) = out.exit_code {
        if code != 0 {
            s.push_str(&format!("\n[exit {code}]"));
        }
    }
    s
}

/// Why a session's shell command did not run.
#[derive(Debug)]
pub enum ShellError {
    /// The project's configuration could not be read.
    Config(String),
    /// The jail was asked for and cannot be enforced (fail closed).
    Jail(String),
    /// The process could not be started.
    Start(String),
}

impl ShellError {
    pub fn message(&self) -> String {
        match self {
            ShellError::Config(e) => format!("cannot run: {e}"),
            ShellError::Jail(e) => e.clone(),
            ShellError::Start(e) => format!("cannot start the command: {e}"),
        }
    }
}

/// The session's scratch folder in the workspace `root`: long outputs and job logs, ignored
/// by git and by `grep` (it holds a `.gitignore` of `*`), removed with the session.
pub fn scratch_dir(root: &std::path::Path, sid: &str) -> PathBuf {
    let short: String = sid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect();
    root.join(".vis").join("scratch").join(short)
}

/// Creates the scratch folder (and its `.gitignore`); blocking.
pub fn ensure_scratch(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(ignore, "*\n")?;
    }
    Ok(())
}

/// A fresh file name in the scratch folder (`shell-<ms>-<n>.log`).
pub fn scratch_file(root: &std::path::Path, sid: &str, what: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    scratch_dir(root, sid).join(format!("{what}-{ms}-{n}.log"))
}

/// The child environment and the jail prefix (empty: none) of a sandbox child of session
/// `sid` in `root`: the project's configuration read now, the jail when it asks for one.
pub async fn child_setup(
    sandbox: &Sandbox,
    home: &std::path::Path,
    sid: &str,
    root: &std::path::Path,
) -> Result<(std::collections::BTreeMap<String, String>, Vec<String>), ShellError> {
    let (h, r) = (home.to_path_buf(), root.to_path_buf());
    let cfg = tokio::task::spawn_blocking(move || crate::config::load(&h, &r))
        .await
        .map_err(|e| ShellError::Config(e.to_string()))?
        .map_err(|e| ShellError::Config(e.to_string()))?;
    let env = sandbox.child_env(sid, root, &cfg);
    let jail = sandbox.jail_prefix(root, &cfg).map_err(ShellError::Jail)?;
    Ok((env, jail.unwrap_or_default()))
}

/// Runs `command` (`sh -c`) as a sandbox child of session `sid` in `root` (see
/// [`child_setup`]). The `shell` tool and the sandbox's `shell()` both run commands through
/// here; a long output is written whole to a file of the session's scratch folder.
pub async fn run_in_session(
    sandbox: &Sandbox,
    home: &std::path::Path,
    sid: &str,
    root: &std::path::Path,
    command: &str,
    timeout: Duration,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<super::run::RunOutput, ShellError> {
    let (env, jail) = child_setup(sandbox, home, sid, root).await?;
    let jail = (!jail.is_empty()).then_some(jail.as_slice());
    let spill = scratch_file(root, sid, "shell");
    super::run::run_full(command, root, &env, jail, timeout, cancel, Some(spill))
        .await
        .map_err(|e| ShellError::Start(e.to_string()))
}

#[async_trait]
impl Tool for ShellTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "shell".into(),
            description: "Run a shell command (sh -c) in the session's workspace. Network access goes through the session's egress policy.".into(),
            parameters: json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "the command line"},
                "timeout_s": {"type": "integer", "description": "seconds before the command is killed (default 120)"}},
                "required": ["command"]}),
        }
    }

    async fn call(&self, ctx: &ToolCtx, args: Value) -> ToolOutput {
        let Some(command) = args
            .get("command")
            .and_then(|c| c.as_str())
            .filter(|c| !c.trim().is_empty())
        else {
            return ToolOutput::fail("shell needs a non-blank string `command`");
        };
        let timeout = args
            .get("timeout_s")
            .and_then(|t| t.as_u64())
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TIMEOUT);
        match run_in_session(
            &self.sandbox,
            &self.home,
            &ctx.session_id,
            &ctx.root,
            command,
            timeout,
            &ctx.cancel,
        )
        .await
        {
            Err(e) => ToolOutput::fail(e.message()),
            Ok(out) => {
                let text = describe(&out);
                let failed = out.timed_out || out.exit_code != Some(0);
                ToolOutput {
                    result: text.clone(),
                    stdout: Some(out.stdout.clone()),
                    error: failed.then(|| text.clone()),
                    is_timeout: out.timed_out,
                }
            }
        }
    }
}
