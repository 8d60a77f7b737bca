//! The restartable handle of one worker: serialized calls, filter-lane calls, (re)start,
//! idle stop.

use super::running::{LaneOutcome, Running, WorkerOwner, FILTER_ATTEMPTS, RETIRED};
use super::spawn::{sdk_root, spawn};
use super::types::{load_payload, CallCtx, CallError, Outcome, WorkerSpec};
use crate::extensions::protocol::WireError;
use parking_lot::Mutex;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use vis_proxy::FilterVerdict;

/// The gateway side of one (re)startable worker.
pub struct WorkerClient {
    spec: WorkerSpec,
    base_ctx: CallCtx,
    owner: Arc<dyn WorkerOwner>,
    serial: tokio::sync::Mutex<()>,
    current: Mutex<Option<Arc<Running>>>,
    /// When a serialized call last ended (or the process started): idle reaping.
    last_used: Mutex<std::time::Instant>,
}

impl WorkerClient {
    pub fn new(spec: WorkerSpec, base_ctx: CallCtx, owner: Arc<dyn WorkerOwner>) -> WorkerClient {
        WorkerClient {
            spec,
            base_ctx,
            owner,
            serial: tokio::sync::Mutex::new(()),
            current: Mutex::new(None),
            last_used: Mutex::new(std::time::Instant::now()),
        }
    }

    /// Stops the process when it has served no call (request or lane call) for `idle` and
    /// none is running or waiting (no caller holds the call lock, no request, lane call or
    /// door is pending); the next call starts a fresh one. Answers whether it stopped a process.
    pub async fn stop_if_idle(&self, idle: Duration) -> bool {
        let Ok(_turn) = self.serial.try_lock() else {
            return false;
        };
        let Some(r) = self.running() else {
            return false;
        };
        let quiet = r.holds.load(Ordering::SeqCst) == 0 && r.pending.lock().is_empty();
        let idle_for = self
            .last_used
            .lock()
            .elapsed()
            .min(r.last_door.lock().elapsed());
        if !quiet || idle_for < idle || !r.lanes_idle_for(idle) {
            return false;
        }
        let taken = self.current.lock().take();
        if let Some(r) = taken {
            // A lane call that starts while this one stops is sent again to a fresh worker,
            // never denied for the stop.
            let _ = r.killed_for.lock().get_or_insert(RETIRED);
            self.shutdown(r).await;
        }
        true
    }

    /// The running process, if any.
    pub fn running(&self) -> Option<Arc<Running>> {
        self.current.lock().clone().filter(|r| r.is_alive())
    }

    /// One serialized call: starts (or replaces) the process when needed.
    pub async fn call(&self, ctx: CallCtx, op: &str, payload: Value, timeout: Duration) -> Outcome {
        let _turn = self.serial.lock().await;
        let running = self.ensure().await?;
        let result = running.request(ctx, op, payload, timeout).await;
        *self.last_used.lock() = std::time::Instant::now();
        if running.doomed.load(Ordering::SeqCst) || !running.is_alive() {
            self.discard(&running);
        }
        result
    }

    /// One network-filter call over the worker's filter lane, from the calling task and
    /// without the call lock (the worker serializes calls into one extension). Waiting for
    /// a (re)start is bounded by `timeout`; a filter that does not answer in time kills the
    /// worker, also when its caller gave up first. A call that was only waiting behind the
    /// call the worker was killed for runs again on the fresh worker (at most
    /// [`FILTER_ATTEMPTS`] times), so it is answered on its own merits, never denied in
    /// another call's name. A filter worker always has its lanes (it does not start without
    /// them), so this is the only way a network filter runs.
    pub async fn filter(
        &self,
        file: &str,
        index: u32,
        ctx: &vis_proxy::FilterCtx,
        timeout: Duration,
    ) -> Result<FilterVerdict, CallError> {
        let mut attempt = 1;
        loop {
            let running = self.filter_worker(timeout).await?;
            let outcome = running.filter(file, index, ctx, timeout).await;
            if running.doomed.load(Ordering::SeqCst) || !running.is_alive() {
                self.discard(&running);
            }
            match outcome {
                LaneOutcome::Done(result) => return result,
                LaneOutcome::Collateral(e) if attempt >= FILTER_ATTEMPTS => return Err(e),
                LaneOutcome::Collateral(_) => {
                    tracing::debug!(worker = %self.spec.label, "a filter call waited behind a killed one; running it again");
                    attempt += 1;
                }
            }
        }
    }

    /// The process to send a lane call to, started if needed.
    async fn filter_worker(&self, timeout: Duration) -> Result<Arc<Running>, CallError> {
        let ready = self
            .current
            .lock()
            .clone()
            .filter(|r| r.is_alive() && !r.doomed.load(Ordering::SeqCst) && r.lane.is_some());
        if let Some(r) = ready {
            return Ok(r);
        }
        let Ok(_turn) = tokio::time::timeout(timeout, self.serial.lock()).await else {
            return Err(CallError::Busy(timeout));
        };
        let r = self.ensure().await?;
        if r.lane.is_none() {
            return Err(CallError::Unavailable(
                "the worker has no filter lane".into(),
            ));
        }
        Ok(r)
    }

    /// Runs `f` with the running process while holding the call lock (several requests in a
    /// row without another caller in between: the `fs_access` gates).
    pub async fn with_worker<F, Fut, T>(&self, f: F) -> Result<T, CallError>
    where
        F: FnOnce(Arc<Running>) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let _turn = self.serial.lock().await;
        let running = self.ensure().await?;
        let out = f(running.clone()).await;
        *self.last_used.lock() = std::time::Instant::now();
        if running.doomed.load(Ordering::SeqCst) || !running.is_alive() {
            self.discard(&running);
        }
        Ok(out)
    }

    /// Stops the process (the next call starts a fresh one).
    pub async fn stop(&self) {
        let running = self.current.lock().take();
        if let Some(r) = running {
            self.shutdown(r).await;
        }
    }

    /// Asks a process to exit (bounded), then kills it.
    async fn shutdown(&self, r: Arc<Running>) {
        if r.is_alive() {
            let _ = tokio::time::timeout(
                Duration::from_millis(500),
                r.request(
                    self.base_ctx.clone(),
                    "shutdown",
                    Value::Null,
                    Duration::from_millis(500),
                ),
            )
            .await;
        }
        r.kill();
    }

    fn discard(&self, running: &Arc<Running>) {
        if running.is_alive() {
            // Replaced for none of its pending lane calls: they run again on the next one.
            let _ = running.killed_for.lock().get_or_insert(RETIRED);
        }
        running.kill();
        let mut cur = self.current.lock();
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, running)) {
            *cur = None;
        }
    }

    async fn ensure(&self) -> Result<Arc<Running>, CallError> {
        let existing = self.current.lock().clone();
        if let Some(r) = existing {
            let stale = self.owner.generation().is_some_and(|g| g != r.generation);
            if r.is_alive() && !r.doomed.load(Ordering::SeqCst) && !stale {
                return Ok(r);
            }
            r.kill();
        }
        let (generation, preload) = self.owner.preload();
        let sdk = sdk_root(&self.spec.home).await?;
        let running = spawn(
            &self.spec,
            &sdk,
            self.base_ctx.clone(),
            self.owner.clone(),
            generation,
        )?;
        for p in preload {
            let payload = load_payload(&p.file, &p.source, p.import_root.as_deref());
            match running
                .request(p.ctx.clone(), "load", payload, self.spec.load_timeout)
                .await
            {
                Ok(v) if v.get("loaded").and_then(Value::as_bool) == Some(true) => {}
                Ok(v) => {
                    let e = v
                        .get("error")
                        .cloned()
                        .and_then(|e| serde_json::from_value::<WireError>(e).ok())
                        .unwrap_or_else(|| WireError::host("LoadError", "the file did not load"));
                    running.failures.lock().insert(p.file.clone(), e);
                }
                Err(e) => {
                    let failure = WireError {
                        kind: e.kind().to_string(),
                        message: e.message(),
                        traceback: e.traceback(),
                    };
                    running.failures.lock().insert(p.file.clone(), failure);
                    if !running.is_alive() {
                        return Err(CallError::Start(format!(
                            "the worker died while loading {}: {}",
                            p.file.display(),
                            e.message()
                        )));
                    }
                }
            }
        }
        *self.current.lock() = Some(running.clone());
        *self.last_used.lock() = std::time::Instant::now();
        Ok(running)
    }
}

impl Drop for WorkerClient {
    fn drop(&mut self) {
        // The reader task keeps the process's input open; without this a dropped host
        // would leave its workers running.
        if let Some(r) = self.current.get_mut().take() {
            r.kill();
        }
    }
}
