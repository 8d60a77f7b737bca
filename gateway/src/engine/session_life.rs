//! A session's life outside its turns: creation (the folder and its configuration checked,
//! the row stored), the child environment handed to `vis-gateway exec`, and deletion (the
//! running turn cancelled, every resource of the session released).

use super::{now_ms, Turns};
use crate::records::SessionError;
use crate::store::rows::{self, SessionRow};
use crate::store::StoreError;
use vis_companion_api::wire::*;
use vis_companion_api::CreateSession;

/// Why a session could not be created or handed to `vis-gateway exec`.
#[derive(Debug, thiserror::Error)]
pub enum SessionLifeError {
    #[error("root {root} is not a directory")]
    RootNotADirectory { root: String },
    /// The folder's `vis.yml` (or the home's) does not load; the message says where and why.
    #[error("{0}")]
    InvalidConfig(String),
    #[error("the egress proxy is not running")]
    SandboxUnavailable,
    /// `jail.enabled` is set and the jail cannot be built here (fail closed).
    #[error("{0}")]
    JailUnavailable(String),
    /// The blocking configuration check did not finish (its thread panicked).
    #[error("the configuration check failed: {0}")]
    CheckFailed(String),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type SessionLifeResult<T> = Result<T, SessionLifeError>;

impl Turns {
    /// A new session in `req.root` (default: the gateway's folder), once the folder and its
    /// configuration check out.
    pub async fn create_session(&self, req: CreateSession) -> SessionLifeResult<SessionCreated> {
        let g = self;
        let root = match req.root.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
            None => g.default_root.clone(),
            Some(r) => {
                let p = std::path::PathBuf::from(r);
                if !p.is_dir() {
                    return Err(SessionLifeError::RootNotADirectory {
                        root: r.to_string(),
                    });
                }
                p
            }
        };
        let (home, project) = (g.configuration.home().to_path_buf(), root.clone());
        tokio::task::spawn_blocking(move || crate::config::load(&home, &project))
            .await
            .map_err(|e| SessionLifeError::CheckFailed(e.to_string()))?
            .map_err(|e| SessionLifeError::InvalidConfig(e.to_string()))?;
        let now = now_ms();
        let row = SessionRow {
            id: uuid::Uuid::new_v4().to_string(),
            channel: req
                .channel
                .filter(|c| !c.trim().is_empty())
                .unwrap_or_else(|| "api".into()),
            title: req.title.filter(|t| !t.trim().is_empty()),
            external_id: req.external_id,
            workspace_id: req.workspace_id,
            root: root.to_string_lossy().to_string(),
            created_at: now,
            last_active_at: now,
            last_status: "idle".into(),
            ..Default::default()
        };
        let r = row.clone();
        g.store.with(move |db| rows::put_session(db, &r)).await?;
        g.sessions.get(&row.id).await?;
        tracing::info!(session = %row.id, channel = %row.channel, root = %row.root, "session created");
        Ok(SessionCreated {
            id: row.id,
            channel: row.channel,
            title: row.title,
            external_id: row.external_id,
            workspace_id: row.workspace_id,
        })
    }

    /// Deletes a session: its running turn is cancelled (and given a moment to land), then
    /// every resource it holds is released and its rows are removed.
    pub async fn delete_session(&self, sid: &str) {
        let g = self;
        // Cancel a running turn first and give it a moment to land its terminal.
        if let Ok(shared) = g.sessions.get(sid).await {
            if let Some(r) = &shared.lock().running {
                r.cancel.cancel();
            }
            for _ in 0..100 {
                if shared.lock().running.is_none() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        g.sessions.forget(sid);
        if let Some(sb) = g.sandbox.get() {
            sb.tokens.revoke(sid);
        }
        g.model_sandboxes
            .end_session(
                sid,
                Some(crate::model_sandbox::state::file(
                    g.configuration.home(),
                    sid,
                )),
            )
            .await;
        // Its draft stays, parked: another session of the repository can resume it.
        g.workspaces.release(sid).await;
        g.mcp.stop_session(sid).await;
        g.extensions.sessions().stop(sid).await;
        let id = sid.to_string();
        let _ = g.store.with(move |db| rows::delete_session(db, &id)).await;
        tracing::info!(session = sid, "session deleted");
    }

    /// The child environment `vis-gateway exec` runs a command in (a new `cli` session when
    /// none is named).
    pub async fn sandbox_env(
        &self,
        session_id: Option<String>,
        root: Option<String>,
        title: Option<String>,
        command: Option<String>,
    ) -> SessionLifeResult<SandboxEnv> {
        let g = self;
        let Some(sandbox) = g.sandbox.get() else {
            return Err(SessionLifeError::SandboxUnavailable);
        };
        let sid = match session_id {
            Some(sid) => sid,
            None => {
                let created = self
                    .create_session(CreateSession {
                        channel: Some("cli".into()),
                        root,
                        title,
                        ..Default::default()
                    })
                    .await?;
                created.id
            }
        };
        let shared = g.sessions.get(&sid).await?;
        let root = g.workspaces.work_root(&sid, &shared.lock().row.root);
        let cfg = g
            .configuration
            .project(&root)
            .await
            .map_err(SessionLifeError::InvalidConfig)?;
        // The project's filters decide the child's first request (also without a turn).
        g.extensions.catalog().ensure_project(Some(&root)).await;
        let env = sandbox.child_env_for(&sid, &root, &cfg, command.as_deref());
        // `jail.enabled: true`: the caller must run `argv_prefix + command` (fail closed).
        let jail = sandbox
            .jail_prefix(&root, &cfg)
            .map_err(SessionLifeError::JailUnavailable)?
            .map(|argv_prefix| JailPrefix { argv_prefix });
        tracing::info!(session = %sid, root = %root.display(), jailed = jail.is_some(), "exec: child environment handed out");
        Ok(SandboxEnv {
            session_id: sid,
            cwd: root.to_string_lossy().into_owned(),
            env,
            proxy_port: sandbox.port(),
            jail,
        })
    }
}
