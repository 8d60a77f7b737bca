//! Idle workers stop: a session worker or a filter worker that served no extension call for
//! `HostConfig::session_idle` (10 min by default) is shut down; the next call that needs it
//! starts a fresh one (its module-level state is gone, `vis.state` is not).
//! A worker with a call running or waiting (a form open for the user, a nested gate, a
//! network filter deciding a request) is never reaped, nor one whose code called the host
//! recently (a background thread updating a live view); code that runs on in the background
//! without calling the host is stopped with its worker. The registration worker is not
//! reaped: it serves the gateway's start-up work and the provider callbacks.

use super::host::Inner;
use std::sync::Weak;
use std::time::Duration;

/// The reaper task of a host's pool: a pass every quarter of the idle time (so a worker
/// stops within 1.25 × the idle time), until the host is gone.
pub(super) async fn reap(host: Weak<Inner>, idle: Duration) {
    let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = host.upgrade() else {
            return;
        };
        let (sessions, filters) = inner.workers.reapable();
        drop(inner);
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
