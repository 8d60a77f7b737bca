//! One live worker process: requests over its pipes, calls over its filter lanes, kills.

use super::types::{CallCtx, CallError, DoorError, Outcome, Preload};
use crate::extensions::lane::{mono_ns, Lane, LaneError, Lanes, Reply};
use crate::extensions::protocol::{Msg, WireError};
use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use vis_proxy::FilterVerdict;

/// What a worker needs from its owner (the host).
#[async_trait]
pub trait WorkerOwner: Send + Sync + 'static {
    /// Files to load into a fresh process, and the registry generation they belong to.
    fn preload(&self) -> (u64, Vec<Preload>);
    /// The current registry generation; a worker loaded for an older one is replaced before
    /// its next call. `None`: never replaced for that reason (the registration worker).
    fn generation(&self) -> Option<u64>;
    /// Answers one host door called by extension code.
    async fn door(
        &self,
        worker: Arc<Running>,
        ctx: CallCtx,
        op: String,
        payload: Value,
    ) -> Result<Value, DoorError>;
}

/// One live worker process.
pub struct Running {
    pub(super) label: String,
    /// Only the tests ask ([`Running::pid`]).
    #[cfg(test)]
    pub(super) pid: Option<u32>,
    pub(super) generation: u64,
    pub(super) tx: mpsc::UnboundedSender<String>,
    pub(super) pending: Mutex<HashMap<u64, oneshot::Sender<Outcome>>>,
    pub(super) ctxs: Mutex<HashMap<u64, CallCtx>>,
    pub(super) next_id: AtomicU64,
    pub(super) alive: AtomicBool,
    pub(super) doomed: AtomicBool,
    pub(super) kill: Mutex<Option<oneshot::Sender<()>>>,
    /// Files that failed to load in THIS process (file → error).
    pub(super) failures: Mutex<HashMap<PathBuf, WireError>>,
    /// Doors waiting for a human ([`Running::hold`]): requests do not time out meanwhile.
    pub(super) holds: Arc<std::sync::atomic::AtomicUsize>,
    /// The filter lanes, when the worker has them.
    pub(super) lane: Option<Lanes>,
    /// How the process ended (`None` while it runs).
    pub(super) exit: watch::Receiver<Option<String>>,
    /// Why the gateway killed the process: the lane call whose time ran out
    /// ([`RETIRED`]: replaced for none of them). A lane call that fails because the process was
    /// killed for ANOTHER call only waited behind it, and runs again on a fresh worker.
    pub(super) killed_for: Mutex<Option<u64>>,
    /// When extension code last called a host door (a background thread updating a live
    /// view counts as activity for idle reaping).
    pub(super) last_door: Mutex<std::time::Instant>,
    /// Lane calls in flight (a filter worker serving requests is not idle).
    pub(super) lane_busy: AtomicUsize,
    /// When the last lane call ended (`mono_ns`; idle reaping of filter workers).
    pub(super) lane_used_ns: AtomicU64,
}

/// [`Running::killed_for`] of a worker the client replaced (`sys.exit` in a filter) or stopped
/// when idle.
pub(super) const RETIRED: u64 = u64::MAX;

/// How many times one filter call may be sent (the first time and after being collateral).
pub const FILTER_ATTEMPTS: usize = 3;

/// How one lane call ended on one process.
pub(super) enum LaneOutcome {
    Done(Result<FilterVerdict, CallError>),
    /// The process died because of another call (its timeout, or a replacement); this call
    /// had only been waiting and may run again on a fresh process.
    Collateral(CallError),
}

/// Keeps a worker's requests from timing out while it lives ([`Running::hold`]).
pub struct Hold(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Running {
    #[cfg(test)]
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// While the guard lives (a door waits for a human: `vis.ask`, a live view's `state`
    /// wait), the requests of this worker do not time out; the timer restarts afterwards.
    pub fn hold(&self) -> Hold {
        self.holds.fetch_add(1, Ordering::SeqCst);
        Hold(self.holds.clone())
    }

    /// No lane call is in flight, and none ended within `idle`.
    pub(super) fn lanes_idle_for(&self, idle: Duration) -> bool {
        if self.lane_busy.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let since = mono_ns().saturating_sub(self.lane_used_ns.load(Ordering::Relaxed));
        Duration::from_nanos(since) >= idle
    }

    pub fn load_failure(&self, file: &std::path::Path) -> Option<WireError> {
        self.failures.lock().get(file).cloned()
    }

    /// Sends one request and waits for its answer (no serialization: callers that need it
    /// go through [`WorkerClient::call`]). A timeout kills the process.
    pub async fn request(
        self: &Arc<Self>,
        ctx: CallCtx,
        op: &str,
        payload: Value,
        timeout: Duration,
    ) -> Outcome {
        if !self.is_alive() {
            return Err(CallError::Exited("the worker had already exited".into()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        self.ctxs.lock().insert(id, ctx);
        let line = Msg::Request {
            id,
            op: op.to_string(),
            payload,
        }
        .to_line();
        // A request abandoned by its caller (a cancelled turn drops the future) kills the
        // worker: Python code cannot be interrupted otherwise, and a later call must not
        // queue behind it.
        let mut guard = Abandon {
            running: self,
            id,
            armed: true,
        };
        if self.tx.send(line).is_err() {
            guard.armed = false;
            self.forget(id);
            return Err(CallError::Exited("its input pipe is closed".into()));
        }
        let mut rx = rx;
        let answer = loop {
            match tokio::time::timeout(timeout, &mut rx).await {
                Err(_) if self.holds.load(Ordering::SeqCst) > 0 => continue,
                other => break other,
            }
        };
        guard.armed = false;
        let result = match answer {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(CallError::Exited("the process ended".into())),
            Err(_) => {
                tracing::warn!(worker = %self.label, op, "extension call timed out; killing the worker");
                self.kill();
                Err(CallError::Timeout(timeout))
            }
        };
        self.forget(id);
        result
    }

    /// One call over the filter lane (see [`WorkerClient::filter`]).
    pub(super) async fn filter(
        self: &Arc<Self>,
        file: &str,
        index: u32,
        ctx: &vis_proxy::FilterCtx,
        timeout: Duration,
    ) -> LaneOutcome {
        let Some(lane) = self.lane.as_ref().map(Lanes::pick) else {
            return LaneOutcome::Done(Err(CallError::Unavailable(
                "the worker has no filter lane".into(),
            )));
        };
        self.lane_busy.fetch_add(1, Ordering::SeqCst);
        let _busy = LaneBusy(self);
        let deadline_ns =
            mono_ns().saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX));
        let mut call = match lane.call(file, index, ctx, deadline_ns) {
            Ok(c) => c,
            Err(LaneError::Closed(why)) => return self.lane_closed(None, why).await,
        };
        let id = call.id();
        let mut watch = Watchdog {
            running: self,
            lane: lane.clone(),
            id,
            timeout,
            armed: true,
        };
        let answer = loop {
            match tokio::time::timeout(timeout, call.answer()).await {
                Err(_) if self.holds.load(Ordering::SeqCst) > 0 => continue,
                other => break other,
            }
        };
        watch.armed = false;
        LaneOutcome::Done(match answer {
            Ok(Ok(Reply::Error { error, restart })) => {
                if restart {
                    self.doomed.store(true, Ordering::SeqCst);
                }
                Err(CallError::Python(error))
            }
            Ok(Ok(Reply::Busy)) => Err(CallError::Busy(timeout)),
            Ok(Ok(Reply::Allow)) => Ok(FilterVerdict::Allow),
            Ok(Ok(Reply::Block(reason))) => Ok(FilterVerdict::Block(reason)),
            Ok(Err(LaneError::Closed(why))) => return self.lane_closed(Some(id), why).await,
            Err(_) => {
                tracing::warn!(worker = %self.label, "network filter timed out; killing the worker");
                self.kill_for(id);
                Err(CallError::Timeout(timeout))
            }
        })
    }

    /// The lane closed under call `id` (`None`: before it was sent): the process ended.
    /// Collateral when the gateway killed it for another call.
    async fn lane_closed(&self, id: Option<u64>, why: String) -> LaneOutcome {
        let error = self.exited(why).await;
        let cause = *self.killed_for.lock();
        match cause {
            Some(k) if Some(k) != id => LaneOutcome::Collateral(error),
            _ => LaneOutcome::Done(Err(error)),
        }
    }

    /// The process ended during a lane call: say how, when the reaper knows it soon.
    async fn exited(&self, lane_why: String) -> CallError {
        let mut exit = self.exit.clone();
        let why = match tokio::time::timeout(Duration::from_secs(2), exit.wait_for(|v| v.is_some()))
            .await
        {
            Ok(Ok(v)) => v.clone().unwrap_or(lane_why),
            _ => lane_why,
        };
        self.alive.store(false, Ordering::SeqCst);
        CallError::Exited(why)
    }

    fn forget(&self, id: u64) {
        self.pending.lock().remove(&id);
        self.ctxs.lock().remove(&id);
    }

    /// Kills the process on account of lane call `id` (its time ran out), so that the calls
    /// waiting behind it know they were not the cause.
    pub(super) fn kill_for(&self, id: u64) {
        let _ = self.killed_for.lock().get_or_insert(id);
        self.kill();
    }

    /// Kills the process (idempotent).
    pub fn kill(&self) {
        self.alive.store(false, Ordering::SeqCst);
        if let Some(k) = self.kill.lock().take() {
            let _ = k.send(());
        }
    }

    pub(super) fn fail_all(&self, why: &str) {
        self.alive.store(false, Ordering::SeqCst);
        if let Some(lane) = &self.lane {
            lane.fail_all(why);
        }
        let pending: Vec<_> = self.pending.lock().drain().collect();
        for (_, tx) in pending {
            let _ = tx.send(Err(CallError::Exited(why.to_string())));
        }
    }
}

/// Counts a lane call as in flight until it ends (or its caller goes away).
struct LaneBusy<'a>(&'a Running);

impl Drop for LaneBusy<'_> {
    fn drop(&mut self) {
        self.0.lane_used_ns.store(mono_ns(), Ordering::Relaxed);
        self.0.lane_busy.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Abandon<'a> {
    running: &'a Arc<Running>,
    id: u64,
    armed: bool,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(worker = %self.running.label, "extension call abandoned; killing the worker");
            self.running.forget(self.id);
            self.running.kill();
        }
    }
}

/// A lane call whose caller went away (the proxy's own timeout, a client that left): if
/// the filter still has not answered when its time is up, the worker is killed, as if the
/// caller had waited (a hung filter must not block the lane for everybody).
struct Watchdog<'a> {
    running: &'a Arc<Running>,
    lane: Arc<Lane>,
    id: u64,
    timeout: Duration,
    armed: bool,
}

impl Drop for Watchdog<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (running, lane, id, timeout) = (
            self.running.clone(),
            self.lane.clone(),
            self.id,
            self.timeout,
        );
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            tokio::time::sleep(timeout).await;
            let stuck = lane.is_outstanding(id);
            if stuck && running.holds.load(Ordering::SeqCst) == 0 {
                tracing::warn!(worker = %running.label, "an abandoned network filter call never answered; killing the worker");
                running.kill_for(id);
            }
        });
    }
}
