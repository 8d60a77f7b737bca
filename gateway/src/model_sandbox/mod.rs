//! The model's sandbox: the one model tool `python_execution(code)` and the per-session
//! Python runtime process that runs its blocks.
//!
//! - [`process`]: one runtime process (`python3 -I -S`, jailed when the project asks) and
//!   its control channel ([`protocol`]).
//! - [`host`]: the host side of the functions a block calls (file tools, `shell`,
//!   `apropos`/`doc`, extension Symbols), with op hooks and `fs_access` gates.
//! - [`tool`]: `python_execution` as a turn tool.
//! - [`Sandboxes`]: the live runtime of each session. A block that runs past its limit or
//!   whose turn is cancelled kills the runtime's process group; the next block starts a
//!   fresh one (a fresh namespace per block means nothing is lost).

pub mod apropos;
pub mod builtins;
pub mod host;
pub mod process;
pub mod protocol;
pub mod tool;

use parking_lot::Mutex;
use process::{Done, HostCalls, Runtime, SpawnSpec};
use protocol::FnEntry;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The model tool's name.
pub const TOOL_NAME: &str = "python_execution";

/// How a block ended.
#[derive(Debug)]
pub enum BlockOutcome {
    Done(Done),
    TimedOut(Duration),
    Cancelled,
    /// The runtime could not start, died mid-block, or broke the protocol.
    Failed(String),
}

type Slot = Arc<tokio::sync::Mutex<Option<Runtime>>>;

/// One block to run: its code, its namespace's functions and its time limit.
pub struct Block<'a> {
    pub code: &'a str,
    pub functions: &'a [FnEntry],
    pub limit: Duration,
}

/// The live sandbox runtime of each session.
#[derive(Default)]
pub struct Sandboxes {
    live: Mutex<HashMap<String, Slot>>,
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
        let mut rt = match guard.take() {
            Some(rt) => rt,
            None => {
                let spec = match spawn.await {
                    Ok(s) => s,
                    Err(e) => return BlockOutcome::Failed(e),
                };
                match Runtime::spawn(&spec).await {
                    Ok(rt) => rt,
                    Err(e) => return BlockOutcome::Failed(e.to_string()),
                }
            }
        };
        let outcome = tokio::select! {
            r = rt.run(block.code, block.functions, host) => match r {
                Ok(done) => BlockOutcome::Done(done),
                Err(e) => BlockOutcome::Failed(e.to_string()),
            },
            _ = tokio::time::sleep(block.limit) => BlockOutcome::TimedOut(block.limit),
            _ = cancel.cancelled() => BlockOutcome::Cancelled,
        };
        if matches!(outcome, BlockOutcome::Done(_)) {
            *guard = Some(rt);
        }
        outcome
    }

    /// Stops the session's runtime (session deleted, gateway stopping).
    pub fn stop(&self, sid: &str) {
        let slot = self.live.lock().remove(sid);
        if let Some(slot) = slot {
            if let Ok(mut g) = slot.try_lock() {
                g.take();
            }
        }
    }

    /// Stops every runtime.
    pub fn stop_all(&self) {
        let all: Vec<Slot> = self.live.lock().drain().map(|(_, s)| s).collect();
        for slot in all {
            if let Ok(mut g) = slot.try_lock() {
                g.take();
            }
        }
    }
}
