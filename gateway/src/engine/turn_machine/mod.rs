//! The turn's life as one type. A session's [`SessionState`] moves through its transitions
//! (submit, start, land, cancel, edit, delete, resume, drain, recover) and each returns the
//! [`Effect`]s the caller must carry out: store, publish, spawn, arm a cancel backstop, count.
//! Nothing here does I/O or reads a clock: the time, the new turn's id and order, and whether
//! the gateway is stopping come in as arguments, so every transition is tested as a plain
//! function (`tests.rs`).
//!
//! The shell (`lifecycle.rs`) calls a transition with the session's lock held and applies the
//! effects in order before releasing it, so clients see events in the order state changed;
//! `Spawn` and `CancelBackstop` are carried out once the lock is released.

mod land;
#[cfg(test)]
mod tests;

pub use land::Terminal;

use super::runner::Progress;
use crate::records::turn::{preview, Status, Turn};
use crate::store::rows::SessionRow;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use vis_companion_api::events::{
    Event, QueueResumed, TurnQueued, TurnQueuedDeleted, TurnQueuedUpdated, TurnRef, TurnStarted,
};
use vis_companion_api::wire::TurnRecord;

/// The running turn of a session.
pub struct Running {
    pub turn: Turn,
    pub cancel: CancellationToken,
    /// The seq of its `turn.started` (0 for a turn settled from its stored record).
    pub started_seq: i64,
    pub progress: Arc<Mutex<Progress>>,
}

/// A session as the turn engine holds it: its row, the running turn, the queue, and every
/// idempotency key it has seen.
pub struct SessionState {
    pub row: SessionRow,
    pub running: Option<Running>,
    pub queue: VecDeque<Turn>,
    /// idempotency key → turn id, for every turn of the session.
    pub keys: HashMap<String, String>,
}

/// A started turn's worker, to spawn once the session lock is released.
pub struct Launch {
    pub sid: String,
    pub tid: String,
    pub cancel: CancellationToken,
    pub progress: Arc<Mutex<Progress>>,
}

/// What a transition asks the shell to do, in order.
pub enum Effect {
    /// Store the session row (queued behind earlier writes).
    SaveRow(SessionRow),
    /// Store a turn record.
    SaveTurn(Turn),
    /// Forget a turn's stored record (a queued turn deleted or swept).
    DeleteTurn(String),
    /// Publish an event on the session.
    Publish(Event),
    /// Publish `turn.started`; its seq becomes the running turn's `started_seq`.
    PublishStarted(Event),
    /// Publish a terminal event and store the settled turn in the same transaction.
    PublishTerminal(Event, Box<Turn>),
    /// The session got its title: tell it and every other open session.
    Title(String),
    /// Start the worker of the turn that just started (after the lock).
    Spawn(Launch),
    /// Land the turn as cancelled if its worker has not within the backstop (after the lock).
    CancelBackstop(String),
    /// Count for the metrics.
    Count(Count),
}

pub enum Count {
    Started,
    /// A turn that failed or was cancelled.
    Failed,
    Settled {
        duration_ms: u64,
        tokens_in: u64,
        tokens_out: u64,
    },
}

/// The effects of one transition.
pub type Effects = Vec<Effect>;

/// Why a request on a session's turns was refused, in the turn engine's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    #[error("request must be a non-blank string")]
    BlankRequest,
    /// A queued turn's edit without a non-blank request.
    #[error("request must be a non-blank string")]
    BlankEdit,
    #[error("no turn is running in this session")]
    NoRunningTurn,
    #[error("the idempotency key does not match the running turn")]
    NotOwner { tid: String },
    #[error("turn {tid} is not running ({status})")]
    NotRunning { tid: String, status: String },
    #[error("turn {tid} is not queued ({status})")]
    NotQueued { tid: String, status: String },
}

/// Where a turn the transition was asked about is, when it is not where it had to be.
#[derive(Debug, PartialEq, Eq)]
pub enum Elsewhere {
    /// In this session's memory with this status.
    Here(Status),
    /// Not in memory: only the store knows (the shell reads its status).
    Stored,
}

/// An idempotency key the session has seen.
#[derive(Debug)]
pub enum Replay {
    /// The turn is running or queued: its fresh record.
    Live(Box<TurnRecord>),
    /// The turn has settled: the shell answers its stored record.
    Stored(String),
}

/// The outcome of a submit.
pub struct Submitted {
    pub record: TurnRecord,
    pub effects: Effects,
}

impl SessionState {
    pub fn new(row: SessionRow) -> SessionState {
        SessionState {
            row,
            running: None,
            queue: VecDeque::new(),
            keys: HashMap::new(),
        }
    }

    /// A submit with an idempotency key this session already has.
    pub fn replay(&self, key: Option<&str>) -> Option<Replay> {
        let tid = self.keys.get(key?)?.clone();
        let live = self
            .running
            .as_ref()
            .filter(|r| r.turn.tid == tid)
            .map(|r| r.turn.record())
            .or_else(|| self.queue.iter().find(|q| q.tid == tid).map(|q| q.record()));
        Some(match live {
            Some(rec) => Replay::Live(Box::new(rec)),
            None => Replay::Stored(tid),
        })
    }

    /// A new turn (status `Queued`) enters the session: it starts when the session is idle
    /// and has no backlog, otherwise it queues (and an idle session's stored backlog, left
    /// by a stop, starts its oldest turn so the order holds).
    pub fn submit(&mut self, mut t: Turn, now: i64) -> Submitted {
        if let Some(k) = &t.idempotency_key {
            self.keys.insert(k.clone(), t.tid.clone());
        }
        let behind_backlog = self.running.is_none() && self.drainable(false).is_some();
        let mut fx = Vec::new();
        if self.running.is_none() && !behind_backlog {
            let record = self.start(t, false, now, &mut fx);
            return Submitted {
                record,
                effects: fx,
            };
        }
        t.queued_at = Some(now);
        fx.push(Effect::SaveTurn(t.clone()));
        let record = t.record();
        let ev = TurnQueued {
            turn_id: t.tid.clone(),
            request: t.request.clone(),
            request_preview: preview(&t.request),
            idempotency_key: t.idempotency_key.clone(),
            display_request: t.display_request.clone(),
        };
        self.queue.push_back(t);
        fx.push(Effect::Publish(Event::TurnQueued(ev)));
        if behind_backlog {
            self.drain_into(false, now, &mut fx);
        }
        Submitted {
            record,
            effects: fx,
        }
    }

    /// Marks `t` running: the session row's counters and title, `turn.started`, the worker.
    /// Answers the started turn's record.
    fn start(&mut self, mut t: Turn, is_queued: bool, now: i64, fx: &mut Effects) -> TurnRecord {
        t.status = Status::Streaming;
        t.started_at = Some(now);
        let row = &mut self.row;
        row.turn_count += 1;
        row.modified_at = Some(now);
        row.last_active_at = now;
        row.last_status = "running".into();
        if row.first_request.is_none() {
            row.first_request = Some(preview(&t.request));
        }
        let title = if row.title.as_deref().is_none_or(|s| s.trim().is_empty()) {
            let source = t.display_request.as_deref().unwrap_or(&t.request);
            let title: String = preview(source).chars().take(60).collect();
            let title = title.trim_end_matches('…').trim().to_string();
            (!title.is_empty()).then(|| {
                row.title = Some(title.clone());
                title
            })
        } else {
            None
        };
        fx.push(Effect::SaveRow(row.clone()));
        fx.push(Effect::SaveTurn(t.clone()));
        fx.push(Effect::PublishStarted(Event::TurnStarted(TurnStarted {
            turn_id: t.tid.clone(),
            request: t
                .display_request
                .clone()
                .unwrap_or_else(|| t.request.clone()),
            display_request: t.display_request.clone(),
            started_at: now,
            is_queued: is_queued.then_some(true),
            idempotency_key: t.idempotency_key.clone(),
            attachments: (!t.attachments.is_empty()).then(|| t.attachments.clone()),
        })));
        if let Some(title) = title {
            fx.push(Effect::Title(title));
        }
        fx.push(Effect::Count(Count::Started));
        let cancel = CancellationToken::new();
        let progress = Arc::new(Mutex::new(Progress::default()));
        fx.push(Effect::Spawn(Launch {
            sid: t.sid.clone(),
            tid: t.tid.clone(),
            cancel: cancel.clone(),
            progress: progress.clone(),
        }));
        let record = t.record();
        self.running = Some(Running {
            turn: t,
            cancel,
            started_seq: 0,
            progress,
        });
        record
    }

    /// The position of the oldest queued turn a drain may start: an unpaused queue's turns
    /// queued after the cancel floor (`force`: any turn).
    pub fn drainable(&self, force: bool) -> Option<usize> {
        if self.row.queue_paused && !force {
            return None;
        }
        let floor = if force { None } else { self.row.cancel_floor };
        self.queue
            .iter()
            .position(|q| floor.is_none_or(|f| q.queued_at.unwrap_or(0) >= f))
    }

    /// Starts the oldest drainable queued turn if the session is idle: its record.
    fn drain_into(&mut self, force: bool, now: i64, fx: &mut Effects) -> Option<TurnRecord> {
        if self.running.is_some() {
            return None;
        }
        let t = self.drainable(force).and_then(|i| self.queue.remove(i))?;
        fx.push(Effect::Publish(Event::TurnQueuedDrained(TurnRef {
            turn_id: t.tid.clone(),
        })));
        Some(self.start(t, true, now, fx))
    }

    /// Starts the oldest drainable queued turn of an idle, unpaused session (a restart's
    /// backlog, `POST …/queue/drain`): the started turn's record, if one started.
    pub fn drain(&mut self, now: i64) -> (Option<TurnRecord>, Effects) {
        let mut fx = Vec::new();
        if self.row.queue_paused {
            return (None, fx);
        }
        let record = self.drain_into(false, now, &mut fx);
        (record, fx)
    }

    /// Resumes a paused queue: clears the pause and the cancel floor and starts the oldest
    /// queued turn. Answers the started turn's record, else the queue's head; nothing when the
    /// queue was not paused.
    pub fn resume(&mut self, now: i64) -> (Option<TurnRecord>, Effects) {
        let mut fx = Vec::new();
        if !self.row.queue_paused {
            return (None, fx);
        }
        self.row.queue_paused = false;
        self.row.cancel_floor = None;
        fx.push(Effect::Publish(Event::QueueResumed(QueueResumed {
            is_auto: false,
        })));
        let started = self.drain_into(true, now, &mut fx);
        fx.push(Effect::SaveRow(self.row.clone()));
        let record = started.or_else(|| self.queue.front().map(|q| q.record()));
        (record, fx)
    }

    /// Cancels the running turn `tid`: its token fires, and a backstop lands it if its
    /// worker does not.
    pub fn cancel(&mut self, tid: &str, now: i64) -> Result<Effects, Elsewhere> {
        match self.running.as_mut().filter(|r| r.turn.tid == tid) {
            Some(r) => Ok(fire_cancel(r, now)),
            None => Err(self.whereabouts(tid)),
        }
    }

    /// Cancels the running turn if `key` is its idempotency key; answers its id.
    pub fn cancel_current(
        &mut self,
        key: Option<&str>,
        now: i64,
    ) -> Result<(String, Effects), TurnError> {
        let r = self.running.as_mut().ok_or(TurnError::NoRunningTurn)?;
        let tid = r.turn.tid.clone();
        if key.is_none() || r.turn.idempotency_key.as_deref() != key {
            return Err(TurnError::NotOwner { tid });
        }
        Ok((tid, fire_cancel(r, now)))
    }

    /// Replaces a queued turn's request.
    pub fn edit(
        &mut self,
        tid: &str,
        text: Option<String>,
    ) -> Result<Result<(TurnRecord, Effects), Elsewhere>, TurnError> {
        let Some(q) = self.queue.iter_mut().find(|q| q.tid == tid) else {
            return Ok(Err(self.whereabouts(tid)));
        };
        let text = text
            .filter(|s| !s.trim().is_empty())
            .ok_or(TurnError::BlankEdit)?;
        q.request = text;
        q.display_request = None;
        let t = q.clone();
        let ev = Event::TurnQueuedUpdated(TurnQueuedUpdated {
            turn_id: t.tid.clone(),
            request: t.request.clone(),
            request_preview: preview(&t.request),
        });
        let record = t.record();
        Ok(Ok((record, vec![Effect::SaveTurn(t), Effect::Publish(ev)])))
    }

    /// Deletes a queued turn (its key can be used again).
    pub fn delete_queued(&mut self, tid: &str) -> Result<Effects, Elsewhere> {
        let Some(i) = self.queue.iter().position(|q| q.tid == tid) else {
            return Err(self.whereabouts(tid));
        };
        if let Some(k) = self.queue.remove(i).and_then(|q| q.idempotency_key) {
            self.keys.remove(&k);
        }
        Ok(vec![
            Effect::DeleteTurn(tid.to_string()),
            Effect::Publish(Event::TurnQueuedDeleted(TurnQueuedDeleted {
                turn_id: tid.to_string(),
                request: None,
                reason: None,
            })),
        ])
    }

    fn whereabouts(&self, tid: &str) -> Elsewhere {
        if let Some(r) = self.running.as_ref().filter(|r| r.turn.tid == tid) {
            return Elsewhere::Here(r.turn.status);
        }
        match self.queue.iter().find(|q| q.tid == tid) {
            Some(q) => Elsewhere::Here(q.status),
            None => Elsewhere::Stored,
        }
    }
}

fn fire_cancel(r: &mut Running, now: i64) -> Effects {
    if r.turn.cancelling_at.is_none() {
        r.turn.cancelling_at = Some(now);
    }
    r.cancel.cancel();
    vec![Effect::CancelBackstop(r.turn.tid.clone())]
}
