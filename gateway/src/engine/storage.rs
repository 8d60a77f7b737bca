//! Storage faults (a full disk, an I/O error). An event the database could not store never
//! reaches a client (`bus.rs`), so a turn that lost events can no longer be told truthfully:
//! the watcher stops it, waits until the database takes writes again and then lands its
//! terminal, `turn.failed` with an `error` block `storage_error`. A turn whose own terminal
//! was lost (landed in memory, not stored) is failed the same way. While it waits, the watcher
//! also records the lost seqs as used (`sessions.last_seq`), so no seq a client could have been
//! told of is handed out again, even after a `kill -9`.
//!
//! Every session that loses an event learns it: the watcher stops each session's turn as soon
//! as its loss is recorded, also while it is still waiting for the database on behalf of
//! others, and a turn's worker asks before landing its terminal ([`Gateway::checked_terminal`]),
//! so a turn that ended between a loss and the watcher's next look fails `storage_error`
//! instead of ending `turn.completed` with holes.

use super::turn_machine::Terminal;
use super::{now_ms, Turns};
use crate::bus::Lost;
use crate::records::turn::Turn;
use crate::store::rows;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// First and longest wait between two attempts to write after a fault.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Turns stopped because their events could not be stored, waiting for the database.
#[derive(Default)]
pub struct StorageWatch {
    /// turn id → session id
    stopped: Mutex<HashMap<String, String>>,
}

impl StorageWatch {
    /// Whether the turn was stopped for lost events (its worker must not land it).
    pub fn is_stopped(&self, tid: &str) -> bool {
        self.stopped.lock().contains_key(tid)
    }
}

/// The terminal of a turn whose worker ended after some of its events were lost.
fn storage_error_at_end() -> Terminal {
    Terminal::Failed {
        code: "storage_error".into(),
        message: "the database could not store some events of this turn (is the disk full?), \
                  so it did not complete; they are missing from its stream and transcript"
            .into(),
    }
}

fn storage_error(lost: &Lost) -> Terminal {
    Terminal::Failed {
        code: "storage_error".into(),
        message: format!(
            "the database could not store {} event(s) of this session (seq {}..{}; is the disk \
             full?), so the turn was stopped; it is failed now that writes succeed again",
            lost.count, lost.first, lost.last
        ),
    }
}

impl Turns {
    /// Starts the storage watcher (one task per gateway; ends when the gateway is dropped).
    pub fn watch_storage(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let lost = self.bus.lost().clone();
        tokio::spawn(async move {
            loop {
                lost.wait().await;
                let Some(gw) = weak.upgrade() else { return };
                gw.settle_lost().await;
            }
        });
    }

    /// A worker's terminal, unless events of its session were lost after the turn started:
    /// then it fails `storage_error`. The store is flushed first, so the fate of every event
    /// the turn published is known.
    pub async fn checked_terminal(&self, sid: &str, tid: &str, terminal: Terminal) -> Terminal {
        self.store.flush().await;
        let started = self.sessions.loaded(sid).and_then(|shared| {
            let st = shared.lock();
            st.running
                .as_ref()
                .filter(|r| r.turn.tid == tid)
                .map(|r| r.started_seq)
        });
        match started {
            Some(seq) if self.bus.lost().lost_after(sid, seq - 1) => {
                tracing::error!(
                    session = sid,
                    turn = tid,
                    "events of this turn could not be stored; it fails instead of completing"
                );
                storage_error_at_end()
            }
            _ => terminal,
        }
    }

    /// Stops the turns that lost events, waits for the database, fails them; again while
    /// more events are lost meanwhile.
    async fn settle_lost(self: &Arc<Self>) {
        let mut all: HashMap<String, Lost> = HashMap::new();
        // A round whose own writes were lost again (room for the probe, not for the turn's
        // terminal) waits longer before the next one.
        let mut pause = Duration::ZERO;
        loop {
            let lost = self.bus.lost().take();
            if lost.is_empty() {
                return;
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            pause = (pause * 2).clamp(RETRY_FIRST, RETRY_MAX);
            self.stop_and_merge(lost, &mut all);
            if !self.wait_for_writes(&mut all).await {
                return;
            }
            for (sid, l) in std::mem::take(&mut all) {
                self.fail_for_lost(&sid, &l).await;
            }
            // The terminals are stored (or lost again, which the next round sees).
            self.store.flush().await;
        }
    }

    /// Stops the turns of `lost`'s sessions and adds their losses to `all`.
    fn stop_and_merge(&self, lost: HashMap<String, Lost>, all: &mut HashMap<String, Lost>) {
        for (sid, l) in lost {
            self.stop_for_lost(&sid, &l);
            let e = all.entry(sid).or_default();
            let fresh = e.count == 0;
            e.first = if fresh { l.first } else { e.first.min(l.first) };
            e.last = e.last.max(l.last);
            e.count += l.count;
            e.terminals.extend(l.terminals);
        }
    }

    /// Stops the session's running turn if it was running when the events were lost.
    fn stop_for_lost(&self, sid: &str, lost: &Lost) {
        let Some(shared) = self.sessions.loaded(sid) else {
            return;
        };
        let mut st = shared.lock();
        let Some(r) = st.running.as_mut() else {
            return;
        };
        if r.started_seq > lost.last {
            return; // started after the loss: its own events are stored
        }
        tracing::error!(
            session = sid,
            turn = %r.turn.tid,
            lost = lost.count,
            "events of a running turn could not be stored; the turn is stopped until the database takes writes"
        );
        self.storage
            .stopped
            .lock()
            .insert(r.turn.tid.clone(), sid.to_string());
        r.cancel.cancel();
    }

    /// Retries a write until the database takes it (or the gateway is stopping). The write
    /// records every lost seq as used, so a restart never hands one out again. Sessions that
    /// lose events meanwhile are stopped at once and join `lost`.
    async fn wait_for_writes(&self, lost: &mut HashMap<String, Lost>) -> bool {
        let mut wait = RETRY_FIRST;
        loop {
            let used: Vec<(String, i64)> = lost
                .keys()
                .filter_map(|sid| self.bus.high_water(sid).map(|h| (sid.clone(), h)))
                .collect();
            let wrote = self
                .store
                .with(move |db| {
                    db.atomically(|db| {
                        used.iter()
                            .try_for_each(|(sid, high)| rows::bump_high_water(db, sid, *high))
                    })
                })
                .await;
            if wrote.is_ok() {
                tracing::warn!("the database takes writes again; failing the stopped turns");
                return true;
            }
            let until = tokio::time::Instant::now() + wait;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => break,
                    _ = self.shutdown.wait() => return false,
                    _ = self.bus.lost().wait() => {
                        let more = self.bus.lost().take();
                        self.stop_and_merge(more, lost);
                    }
                }
            }
            wait = (wait * 2).min(RETRY_MAX);
        }
    }

    /// Lands `storage_error` for the session's stopped turn and for every turn whose terminal
    /// was lost and that is still stored unsettled.
    async fn fail_for_lost(self: &Arc<Self>, sid: &str, lost: &Lost) {
        let stopped: Vec<String> = {
            let mut map = self.storage.stopped.lock();
            let tids: Vec<String> = map
                .iter()
                .filter(|(_, s)| s.as_str() == sid)
                .map(|(t, _)| t.clone())
                .collect();
            tids.iter().for_each(|t| {
                map.remove(t);
            });
            tids
        };
        if let Some(shared) = self.sessions.loaded(sid) {
            let stopping = self.shutdown.is_stopping();
            for tid in &stopped {
                let terminal = storage_error(lost);
                self.transition(&shared, |st| {
                    ((), st.finish(tid, terminal, now_ms(), stopping))
                });
            }
        }
        let done: HashSet<&String> = stopped.iter().collect();
        for tid in lost.terminals.iter().filter(|t| !done.contains(t)) {
            self.fail_unsettled(sid, tid, lost).await;
        }
    }

    /// A turn whose terminal was lost is still stored as queued or running (its record is
    /// written with its terminal): it lands `storage_error` from that record, as a restart
    /// lands `interrupted`.
    async fn fail_unsettled(self: &Arc<Self>, sid: &str, tid: &str, lost: &Lost) {
        let (s, t) = (sid.to_string(), tid.to_string());
        let Ok(Some(rec)) = self.store.with(move |db| rows::turn_of(db, &s, &t)).await else {
            return;
        };
        let Ok(turn) = serde_json::from_str::<Turn>(&rec) else {
            return;
        };
        if turn.status.is_terminal() {
            return;
        }
        let Ok(shared) = self.sessions.get(sid).await else {
            return;
        };
        self.settle_stored(&shared, turn, Vec::new(), storage_error(lost));
    }

    /// A turn record as a store write, for writing it in one transaction with an event (the
    /// seq it is given is not used).
    pub fn turn_row(&self, t: &Turn) -> Option<crate::bus::SeqRow> {
        let (tid, sid, ord, status, key) = (
            t.tid.clone(),
            t.sid.clone(),
            t.ord,
            t.status.as_str(),
            t.idempotency_key.clone(),
        );
        let rec = serde_json::to_string(t).ok()?;
        Some(Box::new(move |db, _| {
            rows::put_turn(db, &tid, &sid, ord, status, key.as_deref(), &rec)
        }))
    }
}
