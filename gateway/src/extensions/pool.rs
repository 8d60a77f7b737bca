//! The worker pool: the registration worker, one worker per session and one per extension
//! file with network filters (`filter_workers.rs`), and the reaper that stops idle ones.
//! Workers are created here, handed out by job, and stopped here; nothing else owns one.

use super::client::{self, CallCtx, Preload, WorkerClient, WorkerOwner, WorkerSpec};
use super::filter_workers::{FilterWorkers, Key};
use super::host::{session_call_ctx, Inner};
use super::logfile::LogFile;
use super::{doors, Entry, HostConfig, SessionCtx};
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

/// Every worker process of one extension host.
pub(super) struct WorkerPool {
    host: Weak<Inner>,
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
    /// The pool of the host `host` (being built). No process starts until a call needs it.
    pub(super) fn new(cfg: &HostConfig, log: Option<LogFile>, host: &Weak<Inner>) -> WorkerPool {
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
        let owner = Arc::new(RegistrationOwner { host: host.clone() });
        WorkerPool {
            host: host.clone(),
            exe: cfg.worker_exe.clone(),
            home: cfg.home.clone(),
            load_timeout: cfg.load_timeout,
            idle: cfg.session_idle,
            registration: WorkerClient::new(spec, CallCtx::default(), owner),
            log,
            sessions: Mutex::new(HashMap::new()),
            filters: FilterWorkers::default(),
            reaper_started: AtomicBool::new(false),
        }
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
            host: self.host.clone(),
            session: session.clone(),
        });
        let w = Arc::new(SessionWorker {
            session: session.clone(),
            client: WorkerClient::new(spec, session_call_ctx(session), owner),
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
            .client_for(&self.host, cfg, self.log.as_ref(), entry);
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
        rt.spawn(super::reaper::reap(self.host.clone(), self.idle));
    }

    /// The workers the reaper looks at: every session worker and every filter worker.
    pub(super) fn reapable(&self) -> (Vec<Arc<SessionWorker>>, Vec<Arc<WorkerClient>>) {
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

    /// The filter workers, for the tests' questions.
    #[cfg(test)]
    pub(super) fn filters(&self) -> &FilterWorkers {
        &self.filters
    }
}

struct RegistrationOwner {
    host: Weak<Inner>,
}

struct SessionOwner {
    host: Weak<Inner>,
    session: SessionCtx,
}

#[async_trait]
impl WorkerOwner for RegistrationOwner {
    fn preload(&self) -> (u64, Vec<Preload>) {
        let Some(host) = self.host.upgrade() else {
            return (0, Vec::new());
        };
        let reg = host.registry.read();
        let list = reg
            .all()
            .iter()
            .map(|e| Preload {
                ctx: CallCtx {
                    project_root: e.scope.project_root().map(Path::to_path_buf),
                    ..CallCtx::default()
                },
                file: e.file.clone(),
                source: e.source.clone(),
                import_root: e.import_root.clone(),
            })
            .collect();
        (reg.generation, list)
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
        answer_door(&self.host, worker, ctx, op, payload).await
    }
}

#[async_trait]
impl WorkerOwner for SessionOwner {
    fn preload(&self) -> (u64, Vec<Preload>) {
        let Some(host) = self.host.upgrade() else {
            return (0, Vec::new());
        };
        let reg = host.registry.read();
        let ctx = session_call_ctx(&self.session);
        let list = reg
            .resolve(self.session.project_root.as_deref())
            .iter()
            .map(|e| Preload {
                ctx: ctx.clone(),
                file: e.file.clone(),
                source: e.source.clone(),
                import_root: e.import_root.clone(),
            })
            .collect();
        (reg.generation, list)
    }
    fn generation(&self) -> Option<u64> {
        self.host.upgrade().map(|h| h.registry.read().generation)
    }
    async fn door(
        &self,
        worker: Arc<client::Running>,
        ctx: CallCtx,
        op: String,
        payload: Value,
    ) -> Result<Value, client::DoorError> {
        answer_door(&self.host, worker, ctx, op, payload).await
    }
}

/// Every kind of worker answers its doors the same way, while the host is alive.
pub(super) async fn answer_door(
    host: &Weak<Inner>,
    worker: Arc<client::Running>,
    ctx: CallCtx,
    op: String,
    payload: Value,
) -> Result<Value, client::DoorError> {
    match host.upgrade() {
        Some(h) => doors::answer(&h, worker, ctx, &op, payload).await,
        None => Err(client::DoorError::new("the gateway is shutting down")),
    }
}
