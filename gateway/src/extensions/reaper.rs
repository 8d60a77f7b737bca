//! Idle session workers stop: a session worker that served no extension call for
//! `HostConfig::session_idle` (10 min by default) is shut down; the session's next
//! extension call starts a fresh one (its module-level state is gone, `vis.state` is not).
//! A worker with a call running or waiting (a form open for the user, a nested gate) is
//! never reaped, nor one whose code called the host recently (a background thread updating
//! a live view); code that runs on in the background without calling the host is stopped
//! with its worker. The registration and filter workers are not reaped: they serve the
//! gateway's start-up work and every proxied request.

use super::*;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

impl ExtensionHost {
    /// Starts the reaper task once (with the first session worker). No-op outside a tokio
    /// runtime or when reaping is off.
    pub(super) fn start_reaper(&self) {
        let idle = self.inner.cfg.session_idle;
        if idle.is_zero() || self.inner.reaper_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.inner.reaper_started.store(false, Ordering::SeqCst);
            return;
        };
        let host = Arc::downgrade(&self.inner);
        // Scan often enough that a worker stops within 1.25 × the idle time.
        let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        rt.spawn(reap(host, idle, every));
    }

    /// Session workers that run now (tests).
    #[cfg(test)]
    pub fn running_session_workers(&self) -> usize {
        let workers: Vec<_> = self.inner.sessions.lock().values().cloned().collect();
        workers
            .iter()
            .filter(|w| w.client.running().is_some())
            .count()
    }
}

async fn reap(host: Weak<Inner>, idle: Duration, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = host.upgrade() else {
            return;
        };
        let workers: Vec<_> = inner.sessions.lock().values().cloned().collect();
        drop(inner);
        for w in workers {
            if w.client.stop_if_idle(idle).await {
                tracing::debug!(
                    target: "vis::extension",
                    session = %w.session.id,
                    "stopped an idle session worker"
                );
            }
        }
    }
}
