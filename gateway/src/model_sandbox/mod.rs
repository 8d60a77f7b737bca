//! The model's sandbox: the one model tool `python_execution(code)` and the per-session
//! Python runtime process that runs its blocks.
//!
//! - [`process`]: one runtime process (`python3 -I -S`, jailed when the project asks) and
//!   its control channel ([`protocol`]).
//! - [`host`]: the host side of the functions a block calls (file tools, `shell`, jobs,
//!   `apropos`/`doc`, extension Symbols), with op hooks and `fs_access` gates.
//! - [`jobs`]: background jobs (`shell(cmd, background=True)`), owned by the gateway.
//! - [`state`]: what survives a runtime restart (the model's `def`/`class` sources).
//! - [`tool`]: `python_execution` as a turn tool.
//! - [`Sandboxes`]: the live runtime of each session. Names persist from block to block in
//!   it. A block that runs past its limit or whose turn is cancelled kills the runtime's
//!   process group; the next block starts a fresh one, says so in one line and gets the
//!   model's functions and classes back from their source.

pub mod apropos;
pub mod builtins;
pub mod host;
pub mod jobs;
pub mod process;
pub mod protocol;
pub mod state;
pub mod tool;

use parking_lot::Mutex;
use process::{Done, HostCalls, Runtime, SpawnSpec};
use protocol::FnEntry;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The model tool's name.
pub const TOOL_NAME: &str = "python_execution";

/// Added to a call's own timeout when it extends its block.
pub const CALL_GRACE: Duration = Duration::from_secs(5);

/// How a block ended.
#[derive(Debug)]
pub enum BlockOutcome {
    Done(Done),
    TimedOut(Duration),
    Cancelled,
    /// The runtime could not start, died mid-block, or broke the protocol.
    Failed(String),
}

/// When a running block is stopped: its limit from its start, pushed later by a call with a
/// timeout of its own (`shell(cmd, timeout=600)`, `job.wait(600)`).
#[derive(Debug)]
pub struct Deadline {
    started: Instant,
    at: Mutex<Instant>,
}

impl Deadline {
    pub fn new(limit: Duration) -> Deadline {
        let started = Instant::now();
        Deadline {
            started,
            at: Mutex::new(started + limit),
        }
    }

    /// Makes room for a call that may take `d`: the block may run at least until now + `d`
    /// + [`CALL_GRACE`].
    pub fn extend_for(&self, d: Duration) {
        let want = Instant::now() + d + CALL_GRACE;
        let mut at = self.at.lock();
        if want > *at {
            *at = want;
        }
    }

    /// Time left before the block is stopped.
    pub fn remaining(&self) -> Duration {
        self.at.lock().saturating_duration_since(Instant::now())
    }

    /// How long the block has run.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Resolves once the deadline (as it stands then) has passed.
    async fn passed(&self) {
        loop {
            let at = *self.at.lock();
            if Instant::now() >= at {
                return;
            }
            tokio::time::sleep_until(at.into()).await;
        }
    }
}

/// One session's runtime and what the next one must know.
#[derive(Default)]
struct SlotState {
    rt: Option<Runtime>,
    /// Why the last runtime ended, when it did not end cleanly.
    lost: Option<String>,
    /// The model's definitions (loaded from the state file on first use).
    defs: Option<state::Defs>,
}

type Slot = Arc<tokio::sync::Mutex<SlotState>>;

/// One block to run: its code, its namespace's functions and its deadline.
pub struct Block<'a> {
    pub code: &'a str,
    pub functions: &'a [FnEntry],
    pub deadline: Arc<Deadline>,
    /// Where the session's definitions are kept across gateway restarts.
    pub state_file: Option<PathBuf>,
}

/// The live sandbox runtime and the background jobs of each session.
#[derive(Default)]
pub struct Sandboxes {
    live: Mutex<HashMap<String, Slot>>,
    pub jobs: jobs::Jobs,
    /// The scratch folders each session wrote to (removed with the session).
    scratch: Mutex<HashMap<String, std::collections::BTreeSet<PathBuf>>>,
}

impl Sandboxes {
    fn slot(&self, sid: &str) -> Slot {
        self.live.lock().entry(sid.to_string()).or_default().clone()
    }

    /// Runs one block in the session's runtime, starting one (from `spawn`, awaited only
    /// then) when there is none. The runtime is taken out of its slot while the block runs
    /// and put back only after a clean end, so a timeout, a cancel, a crash or a dropped
    /// caller all leave the slot empty (and the dropped runtime's process group killed).
    pub async fn run_block(
        &self,
        sid: &str,
        spawn: impl Future<Output = Result<SpawnSpec, String>>,
        block: Block<'_>,
        host: &dyn HostCalls,
        cancel: &CancellationToken,
    ) -> BlockOutcome {
        let slot = self.slot(sid);
        let mut guard = slot.lock().await;
        if guard.defs.is_none() {
            let file = block.state_file.clone();
            let loaded = tokio::task::spawn_blocking(move || state::load(file.as_deref()))
                .await
                .unwrap_or_default();
            guard.defs = Some(loaded);
        }
        let mut restore: Vec<protocol::Def> = Vec::new();
        let mut note = None;
        let mut rt = match guard.rt.take() {
            Some(rt) => rt,
            None => {
                let spec = match spawn.await {
                    Ok(s) => s,
                    Err(e) => return BlockOutcome::Failed(e),
                };
                let rt = match Runtime::spawn(&spec).await {
                    Ok(rt) => rt,
                    Err(e) => return BlockOutcome::Failed(e.to_string()),
                };
                let defs = guard.defs.clone().unwrap_or_default();
                let why = guard.lost.take().or_else(|| {
                    defs.was_used
                        .then(|| "the gateway restarted since the last block".to_string())
                });
                if let Some(why) = why {
                    restore = defs.sources();
                    note = Some(state::restart_note(&why, &defs.names()));
                }
                rt
            }
        };
        let outcome = tokio::select! {
            r = rt.run(block.code, block.functions, &restore, host) => match r {
                Ok(done) => BlockOutcome::Done(done),
                Err(e) => BlockOutcome::Failed(e.to_string()),
            },
            _ = block.deadline.passed() => BlockOutcome::TimedOut(block.deadline.elapsed()),
            _ = cancel.cancelled() => BlockOutcome::Cancelled,
        };
        match outcome {
            BlockOutcome::Done(mut done) => {
                let defs = guard.defs.get_or_insert_with(Default::default);
                let changed = done.defs.take().map(|d| defs.replace(d)).unwrap_or(false);
                if changed || !defs.was_used {
                    defs.was_used = true;
                    let (file, copy) = (block.state_file.clone(), defs.clone());
                    let _ =
                        tokio::task::spawn_blocking(move || state::save(file.as_deref(), &copy))
                            .await;
                }
                if let Some(n) = note {
                    done.note = Some(match done.note.take() {
                        Some(failed) => format!("{n} {failed}"),
                        None => n,
                    });
                }
                guard.rt = Some(rt);
                BlockOutcome::Done(done)
            }
            BlockOutcome::TimedOut(t) => {
                guard.lost = Some(format!(
                    "the previous block ran past its limit ({} s)",
                    t.as_secs()
                ));
                BlockOutcome::TimedOut(t)
            }
            BlockOutcome::Cancelled => {
                guard.lost = Some("the previous block was cancelled with its turn".into());
                BlockOutcome::Cancelled
            }
            BlockOutcome::Failed(e) => {
                guard.lost = Some(format!("the previous process failed: {e}"));
                BlockOutcome::Failed(e)
            }
        }
    }

    /// Stops the session's runtime (the session moved to another folder); its jobs and the
    /// model's definitions stay.
    pub fn stop(&self, sid: &str) {
        let slot = self.live.lock().get(sid).cloned();
        if let Some(slot) = slot {
            if let Ok(mut g) = slot.try_lock() {
                if g.rt.take().is_some() {
                    g.lost = Some("the session moved to another folder".into());
                }
            }
        }
    }

    /// Notes that the session wrote into the scratch folder `dir`.
    pub fn used_scratch(&self, sid: &str, dir: PathBuf) {
        self.scratch
            .lock()
            .entry(sid.to_string())
            .or_default()
            .insert(dir);
    }

    /// Ends everything of a deleted session: its runtime, its jobs, its scratch folders and
    /// its kept definitions.
    pub async fn end_session(&self, sid: &str, state_file: Option<PathBuf>) {
        let slot = self.live.lock().remove(sid);
        if let Some(slot) = slot {
            if let Ok(mut g) = slot.try_lock() {
                g.rt.take();
            }
        }
        self.jobs.end_session(sid);
        let dirs = self.scratch.lock().remove(sid).unwrap_or_default();
        let _ = tokio::task::spawn_blocking(move || {
            for d in dirs {
                let _ = std::fs::remove_dir_all(d);
            }
            if let Some(f) = state_file {
                let _ = std::fs::remove_file(f);
            }
        })
        .await;
    }

    /// Stops every runtime and every job (gateway stopping; the definitions stay on disk).
    pub fn stop_all(&self) {
        let all: Vec<Slot> = self.live.lock().drain().map(|(_, s)| s).collect();
        for slot in all {
            if let Ok(mut g) = slot.try_lock() {
                g.rt.take();
            }
        }
        self.jobs.end_all();
    }
}
