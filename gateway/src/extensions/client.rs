//! The gateway side of one worker process: spawn, request/response with timeouts, host-door
//! dispatch, crash detection and replacement.
//!
//! Pipe IO runs on dedicated tokio tasks (a writer, a stdout reader, a stderr forwarder and a
//! reaper that owns the child); nothing here blocks a runtime thread. Top-level calls are
//! serialized per worker ([`WorkerClient::call`]); nested calls made while a door is being
//! answered (the `fs_access` gate) go straight to the running process ([`Running::request`]).
//!
//! A worker spawned with [`WorkerSpec::filter_lane`] also gets a filter lane
//! ([`super::lane`]): [`WorkerClient::filter`] sends network-filter calls over it from the
//! calling task, concurrently with each other and with the serialized calls (the worker
//! keeps calls into one extension serialized).

use super::lane::{Lane, LaneError, Lanes, Reply};
use super::protocol::{Msg, WireError};
use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

/// Who a request acts for; door calls made while serving it are answered in this context.
#[derive(Debug, Clone, Default)]
pub struct CallCtx {
    pub session_id: Option<String>,
    pub project_root: Option<PathBuf>,
    pub workspace_root: Option<PathBuf>,
    /// The request runs an `fs_access` gate: file doors it calls are not gated again.
    pub is_gate: bool,
}

/// Why a call into a worker failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Extension code raised (type, `Class: message`, traceback).
    Python(WireError),
    /// The call did not answer in time; the worker was killed.
    Timeout(Duration),
    /// The worker stayed busy with other calls for longer than the caller would wait.
    Busy(Duration),
    /// The worker process died during the call (crash, `os._exit`).
    Exited(String),
    /// The worker could not be started.
    Start(String),
    /// Nothing to call (unknown extension, tool, or a file that failed to load here).
    Unavailable(String),
}

impl CallError {
    /// One-line message for users and the model.
    pub fn message(&self) -> String {
        match self {
            CallError::Python(e) => e.message.clone(),
            CallError::Timeout(d) => format!(
                "the extension call timed out after {:.1} s; its worker was stopped and \
                 the next call starts a fresh one",
                d.as_secs_f64()
            ),
            CallError::Busy(d) => format!(
                "the extension worker stayed busy with other calls for more than {:.1} s",
                d.as_secs_f64()
            ),
            CallError::Exited(why) => format!(
                "the extension worker exited during the call ({why}); the next call starts \
                 a fresh one"
            ),
            CallError::Start(why) => format!("cannot start an extension worker: {why}"),
            CallError::Unavailable(why) => why.clone(),
        }
    }

    pub fn traceback(&self) -> Option<String> {
        match self {
            CallError::Python(e) => e.traceback.clone().filter(|t| !t.is_empty()),
            _ => None,
        }
    }

    pub fn kind(&self) -> &str {
        match self {
            CallError::Python(e) => &e.kind,
            CallError::Timeout(_) => "Timeout",
            CallError::Busy(_) => "Busy",
            CallError::Exited(_) => "WorkerExited",
            CallError::Start(_) => "WorkerStart",
            CallError::Unavailable(_) => "Unavailable",
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

/// A failed door: raised in Python as `python_type` (default `RuntimeError`).
#[derive(Debug, Clone)]
pub struct DoorError {
    pub message: String,
    pub python_type: Option<&'static str>,
}

impl DoorError {
    pub fn new(message: impl Into<String>) -> DoorError {
        DoorError {
            message: message.into(),
            python_type: None,
        }
    }
    pub fn typed(python_type: &'static str, message: impl Into<String>) -> DoorError {
        DoorError {
            message: message.into(),
            python_type: Some(python_type),
        }
    }
}

/// An extension file a fresh worker loads before its first call.
#[derive(Debug, Clone)]
pub struct Preload {
    pub ctx: CallCtx,
    pub file: PathBuf,
    pub source: Arc<Vec<u8>>,
    /// The frozen copy of the file's import root (first on `sys.path`).
    pub import_root: Option<PathBuf>,
}

/// The `load` request payload.
pub fn load_payload(
    file: &std::path::Path,
    source: &[u8],
    import_root: Option<&std::path::Path>,
) -> Value {
    json!({
        "file": file.to_string_lossy(),
        "source": base64_encode(source),
        "import_root": import_root.map(|p| p.to_string_lossy().into_owned()),
    })
}

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

/// How to start a worker process.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub exe: PathBuf,
    pub home: PathBuf,
    pub label: String,
    pub cwd: Option<PathBuf>,
    pub load_timeout: Duration,
    /// Serve network filters over a filter lane (a filter worker).
    pub filter_lane: bool,
    /// The extensions' log file: what extension code prints (stderr) is written there too.
    pub log: Option<super::logfile::LogFile>,
}

type Outcome = Result<Value, CallError>;

/// One live worker process.
pub struct Running {
    label: String,
    /// Only the tests ask ([`Running::pid`]).
    #[cfg(test)]
    pid: Option<u32>,
    generation: u64,
    tx: mpsc::UnboundedSender<String>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Outcome>>>,
    ctxs: Mutex<HashMap<u64, CallCtx>>,
    next_id: AtomicU64,
    alive: AtomicBool,
    doomed: AtomicBool,
    kill: Mutex<Option<oneshot::Sender<()>>>,
    /// Files that failed to load in THIS process (file → error).
    failures: Mutex<HashMap<PathBuf, WireError>>,
    /// Doors waiting for a human ([`Running::hold`]): requests do not time out meanwhile.
    holds: Arc<std::sync::atomic::AtomicUsize>,
    /// The filter lanes, when the worker has them.
    lane: Option<Lanes>,
    /// How the process ended (`None` while it runs).
    exit: watch::Receiver<Option<String>>,
    /// Why the gateway killed the process: the lane call whose time ran out
    /// ([`RETIRED`]: replaced for none of them). A lane call that fails because the process was
    /// killed for ANOTHER call only waited behind it, and runs again on a fresh worker.
    killed_for: Mutex<Option<u64>>,
    /// When extension code last called a host door (a background thread updating a live
    /// view counts as activity for idle reaping).
    last_door: Mutex<std::time::Instant>,
}

/// [`Running::killed_for`] of a worker the client replaced (`sys.exit` in a filter).
const RETIRED: u64 = u64::MAX;

/// How many times one filter call may be sent (the first time and after being collateral).
pub const FILTER_ATTEMPTS: usize = 3;

/// How one lane call ended on one process.
enum LaneOutcome {
    Done(Result<Reply, CallError>),
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
    async fn filter(
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
        let deadline_ns = super::lane::mono_ns()
            .saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX));
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
            Ok(Ok(reply)) => Ok(reply),
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
    fn kill_for(&self, id: u64) {
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

    fn fail_all(&self, why: &str) {
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

    /// Stops the process when it has served no call for `idle` and none is running or
    /// waiting (no caller holds the call lock, no request or door is pending); the next call
    /// starts a fresh one. Answers whether it stopped a process.
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
        if !quiet || idle_for < idle {
            return false;
        }
        let taken = self.current.lock().take();
        if let Some(r) = taken {
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

    /// [`Self::call`] that gives up (without touching the worker) when the worker stays busy
    /// with other calls for longer than `wait`.
    #[cfg(test)]
    pub async fn call_waiting_at_most(
        &self,
        ctx: CallCtx,
        op: &str,
        payload: Value,
        timeout: Duration,
        wait: Duration,
    ) -> Outcome {
        let Ok(_turn) = tokio::time::timeout(wait, self.serial.lock()).await else {
            return Err(CallError::Busy(wait));
        };
        let running = self.ensure().await?;
        let result = running.request(ctx, op, payload, timeout).await;
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
    /// another call's name. Without a lane: the serialized `run_filter` request.
    pub async fn filter(
        &self,
        file: &str,
        index: u32,
        ctx: &vis_proxy::FilterCtx,
        timeout: Duration,
    ) -> Result<Reply, CallError> {
        let mut attempt = 1;
        loop {
            let running = match self.filter_worker(timeout).await? {
                Ok(r) => r,
                Err(r) => return self.filter_by_request(&r, file, index, ctx, timeout).await,
            };
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

    /// The process to send a lane call to, started if needed (`Err(process)`: it has no
    /// lane).
    async fn filter_worker(
        &self,
        timeout: Duration,
    ) -> Result<Result<Arc<Running>, Arc<Running>>, CallError> {
        let ready = self
            .current
            .lock()
            .clone()
            .filter(|r| r.is_alive() && !r.doomed.load(Ordering::SeqCst) && r.lane.is_some());
        if let Some(r) = ready {
            return Ok(Ok(r));
        }
        let Ok(_turn) = tokio::time::timeout(timeout, self.serial.lock()).await else {
            return Err(CallError::Busy(timeout));
        };
        let r = self.ensure().await?;
        Ok(if r.lane.is_some() { Ok(r) } else { Err(r) })
    }

    /// A filter over the request protocol (a worker without a lane).
    async fn filter_by_request(
        &self,
        r: &Arc<Running>,
        file: &str,
        index: u32,
        ctx: &vis_proxy::FilterCtx,
        timeout: Duration,
    ) -> Result<Reply, CallError> {
        let _turn = self.serial.lock().await;
        let payload = json!({"file": file, "index": index, "ctx": ctx});
        let out = r
            .request(CallCtx::default(), "run_filter", payload, timeout)
            .await;
        if r.doomed.load(Ordering::SeqCst) || !r.is_alive() {
            self.discard(r);
        }
        out.map(|v| {
            if v.get("blocked").and_then(Value::as_bool) == Some(true) {
                Reply::Block(
                    v.get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                )
            } else {
                Reply::Allow
            }
        })
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
        let running = spawn(
            &self.spec,
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

pub fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Environment a worker process starts with: not the gateway's whole environment (an
/// extension sees only what `env=[…]` declares, decision E5), just what processes need.
const KEPT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "VIS_WORKER_PYTHONHOME",
];

fn spawn(
    spec: &WorkerSpec,
    base_ctx: CallCtx,
    owner: Arc<dyn WorkerOwner>,
    generation: u64,
) -> Result<Arc<Running>, CallError> {
    let mut cmd = tokio::process::Command::new(&spec.exe);
    cmd.arg("--home")
        .arg(&spec.home)
        .arg("worker")
        .arg("--label")
        .arg(&spec.label)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .env_clear();
    for (k, v) in crate::start_env::vars() {
        let name = k.as_str();
        if KEPT_ENV.contains(&name) || name.starts_with("LC_") {
            cmd.env(&k, &v);
        }
    }
    if let Some(cwd) = spec.cwd.as_ref().filter(|c| c.is_dir()) {
        cmd.current_dir(cwd);
    }
    // The filter lanes (one per proxy thread, plus one): one end of each stays here, the
    // other is inherited by this child only (it is close-on-exec everywhere else).
    let lane_pairs = if spec.filter_lane {
        match (0..Lanes::wanted())
            .map(|_| lane_socketpair())
            .collect::<std::io::Result<Vec<_>>>()
        {
            Ok(pairs) => pairs,
            Err(e) => {
                tracing::warn!(worker = %spec.label, "no filter lane ({e}); filters use the request protocol");
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    if !lane_pairs.is_empty() {
        use std::os::fd::AsRawFd;
        let fds: Vec<i32> = lane_pairs.iter().map(|(_, t)| t.as_raw_fd()).collect();
        for fd in &fds {
            cmd.arg("--lane-fd").arg(fd.to_string());
        }
        let spin = super::lane::worker_spin_us();
        if spin > 0 {
            cmd.arg("--lane-spin-us").arg(spin.to_string());
        }
        // SAFETY: only async-signal-safe calls (fcntl) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &fds {
                    if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| CallError::Start(format!("{}: {e}", spec.exe.display())))?;
    let pid = child.id();
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(CallError::Start("the worker's pipes are missing".into()));
    };
    let lanes = lane_pairs
        .into_iter()
        .map(|(ours, theirs)| {
            drop(theirs);
            Lane::new(ours)
        })
        .collect::<std::io::Result<Vec<_>>>();
    let lane = match lanes {
        Ok(lanes) => Lanes::new(lanes),
        Err(e) => {
            tracing::warn!(worker = %spec.label, "no filter lane ({e}); filters use the request protocol");
            None
        }
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let (kill_tx, kill_rx) = oneshot::channel::<()>();
    let (exit_tx, exit_rx) = watch::channel::<Option<String>>(None);
    let running = Arc::new(Running {
        label: spec.label.clone(),
        #[cfg(test)]
        pid,
        generation,
        tx,
        pending: Mutex::new(HashMap::new()),
        ctxs: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        alive: AtomicBool::new(true),
        doomed: AtomicBool::new(false),
        kill: Mutex::new(Some(kill_tx)),
        failures: Mutex::new(HashMap::new()),
        holds: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        lane,
        exit: exit_rx.clone(),
        killed_for: Mutex::new(None),
        last_door: Mutex::new(std::time::Instant::now()),
    });
    tracing::debug!(worker = %spec.label, pid, "extension worker started");

    // Writer.
    tokio::spawn(async move {
        let mut stdin = stdin;
        while let Some(line) = rx.recv().await {
            let ok = stdin.write_all(line.as_bytes()).await.is_ok()
                && stdin.write_all(b"\n").await.is_ok()
                && stdin.flush().await.is_ok();
            if !ok {
                break;
            }
        }
    });

    // Reaper: owns the child, kills it on request, publishes how it ended.
    let label = spec.label.clone();
    tokio::spawn(async move {
        let mut child = child;
        let status = tokio::select! {
            s = child.wait() => s,
            _ = kill_rx => {
                let _ = child.start_kill();
                child.wait().await
            }
        };
        let why = match status {
            Ok(s) => describe_exit(s),
            Err(e) => format!("cannot wait for it: {e}"),
        };
        tracing::debug!(worker = %label, "extension worker ended: {why}");
        let _ = exit_tx.send(Some(why));
    });

    // stderr → tracing and the extensions' log file.
    let label = spec.label.clone();
    let log = spec.log.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::info!(target: "vis::extension", worker = %label, "{line}");
            if let Some(log) = &log {
                log.line("print", &label, None, &line);
            }
        }
    });

    // stdout: responses and door calls.
    let r = running.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        loop {
            let line = match lines.next_line().await {
                Ok(Some(l)) => l,
                Ok(None) | Err(_) => break,
            };
            if line.trim().is_empty() {
                continue;
            }
            match Msg::parse(&line) {
                Ok(Msg::Response {
                    id,
                    ok,
                    value,
                    error,
                    restart,
                }) => {
                    if restart {
                        r.doomed.store(true, Ordering::SeqCst);
                    }
                    let outcome = if ok {
                        Ok(value)
                    } else {
                        Err(CallError::Python(error.unwrap_or_else(|| {
                            WireError::host("Exception", "the call failed without a message")
                        })))
                    };
                    if let Some(tx) = r.pending.lock().remove(&id) {
                        let _ = tx.send(outcome);
                    }
                }
                Ok(Msg::Door {
                    id,
                    on,
                    op,
                    payload,
                }) => {
                    *r.last_door.lock() = std::time::Instant::now();
                    let ctx = on
                        .and_then(|on| r.ctxs.lock().get(&on).cloned())
                        .unwrap_or_else(|| base_ctx.clone());
                    let owner = owner.clone();
                    let worker = r.clone();
                    tokio::spawn(async move {
                        let reply = match owner.door(worker.clone(), ctx, op, payload).await {
                            Ok(value) => Msg::DoorReply {
                                id,
                                ok: true,
                                value,
                                error: None,
                                error_type: None,
                            },
                            Err(e) => Msg::DoorReply {
                                id,
                                ok: false,
                                value: Value::Null,
                                error: Some(e.message),
                                error_type: e.python_type.map(str::to_string),
                            },
                        };
                        let _ = worker.tx.send(reply.to_line());
                    });
                }
                Ok(_) => tracing::warn!(worker = %r.label, "unexpected message from a worker"),
                Err(e) => tracing::warn!(worker = %r.label, "unreadable worker message: {e}"),
            }
        }
        // EOF: the process is gone (or going). Say how it ended when we can.
        r.alive.store(false, Ordering::SeqCst);
        let mut exit_rx = exit_rx;
        let why =
            match tokio::time::timeout(Duration::from_secs(2), exit_rx.wait_for(|v| v.is_some()))
                .await
            {
                Ok(Ok(v)) => v.clone().unwrap_or_default(),
                _ => "its output closed".to_string(),
            };
        r.fail_all(&why);
    });
    Ok(running)
}

/// `(ours, theirs)`: a close-on-exec Unix stream socket pair.
fn lane_socketpair() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(9)) => "killed".to_string(),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".to_string(),
    }
}
