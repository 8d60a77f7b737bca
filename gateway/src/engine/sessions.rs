//! The loaded sessions: each session's state behind its own mutex, loaded from the store on
//! first use (with its queued turns and idempotency keys), the turn order counter, and the
//! reads of a session's turns with the running and queued ones overlaid.

use super::{SessionState, Shared};
use crate::bus::Bus;
use crate::records::turn::{self, Turn};
use crate::records::{SessionError, SessionResult};
use crate::store::rows;
use crate::store::Store;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};

/// The channel of the gateway's own sessions (where MCP server tests run): never listed.
pub const INTERNAL_CHANNEL: &str = "system";
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

pub struct Sessions {
    store: Store,
    bus: Arc<Bus>,
    map: Mutex<HashMap<String, Shared>>,
    next_ord: AtomicI64,
}

impl Sessions {
    /// `next_ord`: the order the next turn gets (one past the highest stored).
    pub fn new(store: Store, bus: Arc<Bus>, next_ord: i64) -> Sessions {
        Sessions {
            store,
            bus,
            map: Mutex::new(HashMap::new()),
            next_ord: AtomicI64::new(next_ord),
        }
    }

    /// The order of a new turn (increasing across sessions).
    pub fn next_ord(&self) -> i64 {
        self.next_ord.fetch_add(1, Ordering::Relaxed)
    }

    /// A session already in memory (no store read).
    pub fn loaded(&self, sid: &str) -> Option<Shared> {
        self.map.lock().get(sid).cloned()
    }

    /// Every session in memory.
    pub fn all(&self) -> Vec<(String, Shared)> {
        self.map
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Publishes `event` on the stream of every session in memory: how a change that is not
    /// a session's own (providers, MCP servers) reaches every connected client.
    pub fn broadcast(&self, event: vis_companion_api::events::Event) {
        for (sid, _) in self.all() {
            self.bus.publish(&sid, event.clone());
        }
    }

    /// Sessions with a running turn.
    pub fn running_count(&self) -> usize {
        self.all()
            .iter()
            .filter(|(_, s)| s.lock().running.is_some())
            .count()
    }

    /// The session's state, loading it from the store on first use (404 when unknown).
    pub async fn get(&self, sid: &str) -> SessionResult<Shared> {
        if let Some(s) = self.map.lock().get(sid) {
            return Ok(s.clone());
        }
        let id = sid.to_string();
        let loaded = self
            .store
            .with(move |db| {
                let Some(row) = rows::get_session(db, &id)? else {
                    return Ok(None);
                };
                let remote = rows::homed_elsewhere(db, &id)?;
                Ok(Some((row, rows::turns_of(db, &id)?, remote)))
            })
            .await?;
        let Some((row, records, remote)) = loaded else {
            return Err(SessionError::not_found(sid));
        };
        let mut keys = HashMap::new();
        let mut queue = VecDeque::new();
        for rec in records {
            let Ok(t) = serde_json::from_str::<Turn>(&rec) else {
                continue;
            };
            if let Some(k) = &t.idempotency_key {
                keys.insert(k.clone(), t.tid.clone());
            }
            if t.status == turn::Status::Queued {
                queue.push_back(t);
            }
        }
        let mut map = self.map.lock();
        if let Some(s) = map.get(sid) {
            return Ok(s.clone());
        }
        if remote {
            self.bus.open_remote(sid, row.last_seq);
        } else {
            self.bus.open(sid, row.last_seq);
        }
        let mut state = SessionState::new(row);
        state.queue = queue;
        state.keys = keys;
        let st = Arc::new(Mutex::new(state));
        map.insert(sid.to_string(), st.clone());
        Ok(st)
    }

    /// A turn as stored (404 when the session has no such turn).
    pub async fn stored_turn(&self, sid: &str, tid: &str) -> SessionResult<Turn> {
        let (s, t) = (sid.to_string(), tid.to_string());
        let rec = self.store.with(move |db| rows::turn_of(db, &s, &t)).await?;
        rec.and_then(|r| serde_json::from_str::<Turn>(&r).ok())
            .ok_or_else(|| SessionError::TurnNotFound {
                tid: tid.to_string(),
            })
    }

    /// The freshest copy of a turn: running or queued in memory, else the store.
    pub async fn turn(&self, sid: &str, tid: &str) -> SessionResult<Turn> {
        let shared = self.get(sid).await?;
        {
            let st = shared.lock();
            if let Some(r) = st.running.as_ref().filter(|r| r.turn.tid == tid) {
                let mut t = r.turn.clone();
                t.iterations = r.progress.lock().iterations.clone();
                return Ok(t);
            }
            if let Some(q) = st.queue.iter().find(|q| q.tid == tid) {
                return Ok(q.clone());
            }
        }
        self.stored_turn(sid, tid).await
    }

    /// Every turn of a session, oldest first, with the live overlay.
    pub async fn turns(&self, sid: &str) -> SessionResult<Vec<Turn>> {
        let shared = self.get(sid).await?;
        let id = sid.to_string();
        let recs = self.store.with(move |db| rows::turns_of(db, &id)).await?;
        let mut turns: Vec<Turn> = recs
            .iter()
            .filter_map(|r| serde_json::from_str(r).ok())
            .collect();
        let st = shared.lock();
        for t in turns.iter_mut() {
            if let Some(r) = st.running.as_ref().filter(|r| r.turn.tid == t.tid) {
                *t = r.turn.clone();
                t.iterations = r.progress.lock().iterations.clone();
            } else if let Some(q) = st.queue.iter().find(|q| q.tid == t.tid) {
                *t = q.clone();
            }
        }
        Ok(turns)
    }

    /// Moves the next turn order past `ord` (turns of sessions taken over from another
    /// node keep sorting after their earlier turns).
    pub fn raise_ord(&self, ord: i64) {
        self.next_ord.fetch_max(ord, Ordering::Relaxed);
    }

    /// Drops a session from memory and closes its streams.
    pub fn forget(&self, sid: &str) {
        self.map.lock().remove(sid);
        self.bus.close(sid);
    }
}

#[async_trait::async_trait]
impl crate::records::SessionReader for Sessions {
    async fn row(&self, sid: &str) -> SessionResult<rows::SessionRow> {
        Ok(self.get(sid).await?.lock().row.clone())
    }

    async fn turns(&self, sid: &str) -> SessionResult<Vec<Turn>> {
        Sessions::turns(self, sid).await
    }

    async fn turn(&self, sid: &str, tid: &str) -> SessionResult<Turn> {
        Sessions::turn(self, sid, tid).await
    }
}

impl crate::human_input::Roster for Sessions {
    fn is_loaded(&self, sid: &str) -> bool {
        self.loaded(sid).is_some()
    }
}
