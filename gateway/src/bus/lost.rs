//! Seqs whose journal write failed (a full disk, an I/O error). The bus records them on the
//! store thread instead of delivering their frames; the engine's storage watcher
//! (`engine/storage.rs`) takes them, stops the sessions' running turns and fails them once
//! the database takes writes again.

use parking_lot::Mutex;
use std::collections::HashMap;
use tokio::sync::Notify;
use vis_companion_api::events::EventKind;

/// The seqs of one session lost since the watcher last looked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lost {
    pub first: i64,
    pub last: i64,
    pub count: u64,
    /// Turns whose terminal event was among them.
    pub terminals: Vec<String>,
}

/// The `turn_id` of an event's JSON.
fn turn_id(data: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Turn {
        turn_id: String,
    }
    serde_json::from_str::<Turn>(data).ok().map(|t| t.turn_id)
}

#[derive(Default)]
pub struct LostSeqs {
    by_session: Mutex<HashMap<String, Lost>>,
    /// The highest seq each session ever lost (kept after [`LostSeqs::take`]), so a turn
    /// about to land can ask whether it lost one, whoever took the loss first.
    highest: Mutex<HashMap<String, i64>>,
    notify: Notify,
}

impl LostSeqs {
    /// Records a lost event (`kind`, its JSON `data`) and wakes the watcher. Runs on the
    /// store thread, so it only parses the JSON of a lost terminal.
    pub fn record(&self, sid: &str, seq: i64, kind: EventKind, data: &str) {
        crate::metrics::event_lost();
        let terminal = kind.is_turn_terminal().then(|| turn_id(data)).flatten();
        let first = {
            let mut map = self.by_session.lock();
            let new = !map.contains_key(sid);
            let l = map.entry(sid.to_string()).or_insert(Lost {
                first: seq,
                last: seq,
                ..Default::default()
            });
            l.first = l.first.min(seq);
            l.last = l.last.max(seq);
            l.count += 1;
            l.terminals.extend(terminal);
            new
        };
        {
            let mut highest = self.highest.lock();
            let h = highest.entry(sid.to_string()).or_insert(seq);
            *h = (*h).max(seq);
        }
        if first {
            tracing::error!(
                session = sid,
                seq,
                "an event could not be stored; it is not delivered and the session's running turn will fail"
            );
        }
        self.notify.notify_one();
    }

    /// Whether the session lost an event with a seq above `seq` (recorded so far: a caller
    /// flushes the store first to learn the fate of every event published before it).
    pub fn lost_after(&self, sid: &str, seq: i64) -> bool {
        self.highest.lock().get(sid).is_some_and(|&h| h > seq)
    }

    /// Everything lost since the last call.
    pub fn take(&self) -> HashMap<String, Lost> {
        std::mem::take(&mut *self.by_session.lock())
    }

    /// Waits until a seq is lost (returns at once if one was lost since the last wait).
    pub async fn wait(&self) {
        self.notify.notified().await
    }
}
