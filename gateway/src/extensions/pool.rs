//! The worker pool: the registration worker, one worker per session and one per extension
//! file with network filters (`filter_workers.rs`), and the reaper that stops idle ones.
//! Workers are created here, handed out by job, and stopped here; nothing else owns one.
//!
//! Idle workers stop: a session worker or a filter worker that served no extension call for
//! `HostConfig::session_idle` (10 min by default) is shut down; the next call that needs it
//! starts a fresh one (its module-level state is gone, `vis.state` is not).
//! A worker with a call running or waiting (a form open for the user, a nested gate, a
//! network filter deciding a request) is never reaped, nor one whose code called the host
//! recently (a background thread updating a live view); code that runs on in the background
//! without calling the host is stopped with its worker. The registration worker is not
//! reaped: it serves the gateway's start-up work and the provider callbacks.

use super::client::{self, CallCtx, CallError, Preload, WorkerClient, WorkerOwner, WorkerSpec};
use super::doors::{self, Doors};
use super::filter_workers::{FilterWorkers, Key};
use super::logfile::LogFile;
use super::registry::{Entry, SharedRegistry};
use super::{HostConfig, SessionCtx, ToolError};
use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A session's worker, for the session it was started for.
pub(super) struct SessionWorker {
    pub(super) session: SessionCtx,
    pub(super) client: WorkerClient,
}

impl SessionWorker {
    /// A failed call of `entry`'s code as the caller sees it: when the file did not load in
    /// this worker, that load failure; otherwise the call's own error.
    pub(super) fn explain(&self, entry: &Entry, e: CallError) -> ToolError {
        if let Some(failure) = self
            .client
            .running()
            .and_then(|r| r.load_failure(&entry.file))
        {
            return ToolError {
                message: format!(
                    "extension '{}' did not load in this session's worker: {}",
                    entry.catalog.name, failure.message
                ),
                traceback: failure.traceback,
                hint: None,
                kind: "unavailable".into(),
            };
        }
        ToolError::from_call(e)
    }
}

/// Every worker process of one extension host.
pub(super) struct WorkerPool {
    /// This pool, for the reaper (which ends with it).
    me: Weak<WorkerPool>,
    /// Where the workers' door calls go while the host lives.
    doors: Weak<Doors>,
    registry: SharedRegistry,
    exe: std::path::PathBuf,
    home: std::path::PathBuf,
    load_timeout: Duration,
    idle: Duration,
    log: Option<LogFile>,
    registration: WorkerClient,
    sessions: Mutex<HashMap<String, Arc<SessionWorker>>>,
    filters: FilterWorkers,
    reaper_started: AtomicBool,
}

impl WorkerPool {
    /// The pool of a host whose doors are `doors` and whose loaded files `registry` holds.
    /// No process starts until a call needs it.
    pub(super) fn new(
        cfg: &HostConfig,
        log: Option<LogFile>,
        doors: Weak<Doors>,
        registry: SharedRegistry,
    ) -> Arc<WorkerPool> {
        // Filters run in their own workers, not in this one.
        let spec = WorkerSpec {
            exe: cfg.worker_exe.clone(),
            home: cfg.home.clone(),
            label: "registration".into(),
            cwd: Some(cfg.home.clone()),
            load_timeout: cfg.load_timeout,
            filter_lane: false,
            log: log.clone(),
        };
        let owner = Arc::new(RegistrationOwner {
            doors: doors.clone(),
            registry: registry.clone(),
        });
        Arc::new_cyclic(|me| WorkerPool {
            me: me.clone(),
            doors,
            registry,
            exe: cfg.worker_exe.clone(),
            home: cfg.home.clone(),
            load_timeout: cfg.load_timeout,
            idle: cfg.session_idle,
            registration: WorkerClient::new(spec, CallCtx::default(), owner),
            log,
            sessions: Mutex::new(HashMap::new()),
            filters: FilterWorkers::default(),
            reaper_started: AtomicBool::new(false),
        })
    }

    /// The gateway-wide worker that loads every file and serves provider callbacks.
    pub(super) fn registration(&self) -> &WorkerClient {
        &self.registration
    }

    /// The worker of `session` (created, not started, when new or when the session's roots
    /// changed; the one it replaces is stopped).
    pub(super) fn session(&self, session: &SessionCtx) -> Arc<SessionWorker> {
        let mut map = self.sessions.lock();
        if let Some(w) = map.get(&session.id) {
            if w.session == *session {
                return w.clone();
            }
        }
        let spec = WorkerSpec {
            exe: self.exe.clone(),
            home: self.home.clone(),
            label: format!("session:{}", session.id),
            cwd: Some(session.workspace_root.clone()),
            load_timeout: self.load_timeout,
            filter_lane: false,
            log: self.log.clone(),
        };
        let owner = Arc::new(SessionOwner {
            doors: self.doors.clone(),
            registry: self.registry.clone(),
            session: session.clone(),
        });
        let w = Arc::new(SessionWorker {
            session: session.clone(),
            client: WorkerClient::new(spec, session.call_ctx(), owner),
        });
        if let Some(old) = map.insert(session.id.clone(), w.clone()) {
            tokio::spawn(async move { old.client.stop().await });
        }
        drop(map);
        self.start_reaper();
        w
    }

    /// Stops a session's worker (session disposal).
    pub(super) async fn stop_session(&self, session_id: &str) {
        let w = self.sessions.lock().remove(session_id);
        if let Some(w) = w {
            w.client.stop().await;
        }
    }

    /// The filter worker of `entry` (created, not started, when new).
    pub(super) fn filter_worker(&self, cfg: &HostConfig, entry: &Entry) -> Arc<WorkerClient> {
        let client = self
            .filters
            .client_for(&self.doors, cfg, self.log.as_ref(), entry);
        self.start_reaper();
        client
    }

    /// Lets go of the filter workers of files not in `keep`.
    pub(super) fn retain_filter_workers(&self, keep: &[Key]) {
        self.filters.retain(keep);
    }

    /// Stops every worker.
    pub(super) async fn shutdown(&self) {
        let all: Vec<_> = self.sessions.lock().drain().map(|(_, w)| w).collect();
        for w in all {
            w.client.stop().await;
        }
        for c in self.filters.all() {
            c.stop().await;
        }
        self.registration.stop().await;
    }

    /// Starts the reaper task once. No-op outside a tokio runtime or when reaping is off.
    fn start_reaper(&self) {
        if self.idle.is_zero() || self.reaper_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.reaper_started.store(false, Ordering::SeqCst);
            return;
        };
        rt.spawn(reap(self.me.clone(), self.idle));
    }

    /// The workers the reaper looks at: every session worker and every filter worker.
    fn reapable(&self) -> (Vec<Arc<SessionWorker>>, Vec<Arc<WorkerClient>>) {
        let sessions = self.sessions.lock().values().cloned().collect();
        (sessions, self.filters.all())
    }

    /// Process id of a session's worker, when it runs (tests).
    #[cfg(test)]
    pub(super) fn session_pid(&self, session_id: &str) -> Option<u32> {
        let w = self.sessions.lock().get(session_id).cloned()?;
        w.client.running().and_then(|r| r.pid())
    }

    /// Session workers that run now (tests).
    #[cfg(test)]
    pub(super) fn running_sessions(&self) -> usize {
        let workers: Vec<_> = self.sessions.lock().values().cloned().collect();
        workers
            .iter()
            .filter(|w| w.client.running().is_some())
            .count()
    }

    /// Process id of the registration worker, when it runs (tests).
    #[cfg(test)]
    pub(super) fn registration_pid(&self) -> Option<u32> {
        self.registration.running().and_then(|r| r.pid())
    }

    /// Process id of the running filter worker of an extension (tests).
    #[cfg(test)]
    pub(super) fn filter_pid(&self, extension: &str) -> Option<u32> {
        self.filters.pid_of(extension)
    }

    /// How many filter workers the pool keeps (tests).
    #[cfg(test)]
    pub(super) fn filter_count(&self) -> usize {
        self.filters.len()
    }
}

/// The reaper task of a pool: a pass every quarter of the idle time (so a worker stops
/// within 1.25 × the idle time), until the pool is gone.
async fn reap(pool: Weak<WorkerPool>, idle: Duration) {
    let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    loop {
        tokio::time::sleep(every).await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let (sessions, filters) = pool.reapable();
        drop(pool);
        for w in sessions {
            if w.client.stop_if_idle(idle).await {
                tracing::debug!(
                    target: "vis::extension",
                    session = %w.session.id,
                    "stopped an idle session worker"
                );
            }
        }
        for c in filters {
            if c.stop_if_idle(idle).await {
                tracing::debug!(target: "vis::extension", "stopped an idle filter worker");
            }
        }
    }
}

struct RegistrationOwner {
    doors: Weak<Doors>,
    registry: SharedRegistry,
}

struct SessionOwner {
    doors: Weak<Doors>,
    registry: SharedRegistry,
    session: SessionCtx,
}

#[async_trait]
impl WorkerOwner for RegistrationOwner {
    fn preload(&self) -> (u64, Vec<Preload>) {
        let reg = self.registry.read();
        let list = reg
            .all()
            .iter()
            .map(|e| {
                let ctx = CallCtx {
                    project_root: e.scope.project_root().map(Path::to_path_buf),
                    ..CallCtx::default()
                };
                e.preload(ctx)
            })
            .collect();
        (reg.generation(), list)
    }
    fn generation(&self) -> Option<u64> {
        None
    }
    async fn door(
        &self,
        worker: Arc<client::Running>,
        ctx: CallCtx,
        op: String,
        payload: Value,
    ) -> Result<Value, client::DoorError> {
        doors::answer_weak(&self.doors, worker, ctx, op, payload).await
    }
}

#[async_trait]
impl WorkerOwner for SessionOwner {
    fn preload(&self) -> (u64, Vec<Preload>) {
        let reg = self.registry.read();
        let ctx = self.session.call_ctx();
        let list = reg
            .resolve(self.session.project_root.as_deref())
            .iter()
            .map(|e| e.preload(ctx.clone()))
            .collect();
        (reg.generation(), list)
    }
    fn generation(&self) -> Option<u64> {
        Some(self.registry.read().generation())
    }
    async fn door(
        &self,
        worker: Arc<client::Running>,
        ctx: CallCtx,
        op: String,
        payload: Value,
    ) -> Result<Value, client::DoorError> {
        doors::answer_weak(&self.doors, worker, ctx, op, payload).await
    }
}
