//! The event bus: per-session monotonic `seq`, the envelope, fan-out to SSE sinks, and the
//! durable journal (decision G2).
//!
//! `publish` assigns the seq, formats the frame once and queues the journal write under the
//! session's lock, so journal order is seq order. The store thread offers the frame to every
//! sink once the write is committed (durable before live), without blocking: a full sink is
//! dropped and its connection killed. `subscribe` registers a sink under the same lock, with
//! the high-water it joined at, and then reads the replay through the store thread, whose FIFO
//! order guarantees the replay includes every event published before the registration; the
//! sink takes only later frames live.

use crate::store::{rows, Store};
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use vis_companion_api::live::{self, LiveTx, PushError};
use vis_companion_api::sse::{format_frame, now_ms, SSE_QUEUE_CAP};
use vis_companion_api::{Frame, Ready, Subscription};

/// A store row written together with an event, given the event's seq.
pub type SeqRow =
    Box<dyn FnOnce(&rusqlite::Connection, i64) -> crate::store::StoreResult<()> + Send>;

/// Events that consume a seq but are never stored or replayed.
pub const LIVE_ONLY: &[&str] = &[
    "activity",
    "turn.queued",
    "turn.queued.updated",
    "turn.queued.deleted",
    "turn.queued.drained",
    "session.model_updated",
    "egress.decision",
    "notification",
];

pub fn is_live_only(kind: &str) -> bool {
    LIVE_ONLY.contains(&kind)
}

struct Sink {
    tx: LiveTx,
    kick: CancellationToken,
    /// The high-water when the sink joined: frames up to it come from its replay.
    from: i64,
}

struct Channel {
    seq: i64,
    sinks: Vec<Sink>,
}

pub struct Bus {
    store: Store,
    retain: i64,
    channels: Mutex<HashMap<String, Arc<Mutex<Channel>>>>,
}

impl Bus {
    pub fn new(store: Store, retain: i64) -> Self {
        Self {
            store,
            retain,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// Registers a session's channel with its stored high-water (idempotent).
    pub fn open(&self, sid: &str, last_seq: i64) {
        self.channels
            .lock()
            .entry(sid.to_string())
            .or_insert_with(|| {
                Arc::new(Mutex::new(Channel {
                    seq: last_seq,
                    sinks: Vec::new(),
                }))
            });
    }

    fn channel(&self, sid: &str) -> Option<Arc<Mutex<Channel>>> {
        self.channels.lock().get(sid).cloned()
    }

    /// Sessions with an open channel.
    pub fn open_sessions(&self) -> Vec<String> {
        self.channels.lock().keys().cloned().collect()
    }

    /// Drops a session's channel and closes its streams.
    pub fn close(&self, sid: &str) {
        self.channels.lock().remove(sid);
    }

    pub fn high_water(&self, sid: &str) -> Option<i64> {
        self.channel(sid).map(|c| c.lock().seq)
    }

    /// Publishes one event; returns its seq (0 if the session has no channel).
    pub fn publish(&self, sid: &str, kind: &str, payload: Map<String, Value>) -> i64 {
        self.publish_with_row(sid, kind, payload, None)
    }

    /// [`Bus::publish`], plus a row that needs the event's seq, written by the same store
    /// job as the event (one store wake-up and one transaction for both). The row must keep
    /// the seq: the session's high-water on load is read from `sessions.last_seq` and the
    /// egress rows (`rows::get_session`), and is not bumped separately for such events.
    pub fn publish_with_row(
        &self,
        sid: &str,
        kind: &str,
        payload: Map<String, Value>,
        row: Option<SeqRow>,
    ) -> i64 {
        self.publish_core(sid, kind, row, |seq| {
            let mut ev = payload;
            ev.insert("schema".into(), Value::from(1));
            ev.insert("seq".into(), Value::from(seq));
            ev.insert("ts".into(), Value::from(now_ms()));
            ev.insert("session_id".into(), Value::from(sid));
            ev.insert("type".into(), Value::from(kind));
            Value::Object(ev).to_string()
        })
    }

    /// [`Bus::publish_with_row`] for a payload already serialized: `members` is the text of
    /// a JSON object's members after its `{` (closing `}` included, e.g. `"a":1}`), and must
    /// not contain the envelope's own keys (`schema`, `seq`, `ts`, `session_id`, `type`).
    /// The hot path of egress decisions: no `Value` tree is built.
    pub fn publish_members_with_row(
        &self,
        sid: &str,
        kind: &str,
        members: &str,
        row: Option<SeqRow>,
    ) -> i64 {
        self.publish_core(sid, kind, row, |seq| {
            let (sid, kind) = (Value::from(sid), Value::from(kind));
            let sep = if members.starts_with('}') { "" } else { "," };
            format!(
                "{{\"schema\":1,\"seq\":{seq},\"ts\":{},\"session_id\":{sid},\"type\":{kind}{sep}{members}",
                now_ms()
            )
        })
    }

    /// Assigns the seq, builds the event's JSON with `data(seq)` and queues the journal write
    /// (and `row`) under the session's lock; the store thread hands the frame to the live
    /// sinks once that write is committed.
    fn publish_core(
        &self,
        sid: &str,
        kind: &str,
        row: Option<SeqRow>,
        data: impl FnOnce(i64) -> String,
    ) -> i64 {
        let Some(chan) = self.channel(sid) else {
            tracing::warn!(
                session = sid,
                kind,
                "event for a session without a channel dropped"
            );
            return 0;
        };
        let mut ch = chan.lock();
        ch.seq += 1;
        let seq = ch.seq;
        let data = data(seq);
        let frame = Frame {
            seq,
            bytes: format_frame(Some(seq), kind, &data),
        };
        let live = chan.clone();
        let stored = !is_live_only(kind);
        // A row written with the event keeps its seq (egress rows), so the session's
        // high-water needs no update of its own.
        let seq_kept = row.is_some();
        let (sid_owned, kind_owned, retain) = (sid.to_string(), kind.to_string(), self.retain);
        self.store.submit("event", move |c| {
            let out = crate::store::atomically(c, |c| {
                rows::insert_event(
                    c,
                    &sid_owned,
                    seq,
                    &kind_owned,
                    stored.then_some(data.as_str()),
                    retain,
                    seq_kept,
                )?;
                match row {
                    Some(row) => row(c, seq),
                    None => Ok(()),
                }
            });
            if out.is_err() && seq_kept {
                // The row that would have kept the seq is gone; the seq is still handed
                // out (live), so record it where the next start reads the high-water.
                let _ = rows::bump_high_water(c, &sid_owned, seq);
            }
            // Live streams get the frame once it is committed: a client never sees an event
            // that a crash could take back. Jobs commit in seq order, so frames stay in order.
            crate::store::after_commit(move || deliver(&live, frame));
            out
        });
        // Queued while the lock is held: the store runs the jobs, and so delivers the
        // frames, in seq order.
        drop(ch);
        seq
    }

    /// Subscribes with replay. `running_start` is the running turn's `turn.started` seq.
    pub async fn subscribe(
        &self,
        sid: &str,
        cursor: i64,
        running: Option<(String, i64)>,
        kick: CancellationToken,
    ) -> Option<Subscription> {
        let chan = self.channel(sid)?;
        let (tx, rx) = live::channel(SSE_QUEUE_CAP);
        let (high, effective) = {
            let mut ch = chan.lock();
            let high = ch.seq;
            let effective = if cursor < 0 || cursor > high {
                running.as_ref().map(|(_, s)| s - 1).unwrap_or(high)
            } else {
                cursor
            };
            ch.sinks.push(Sink {
                tx,
                kick,
                from: high,
            });
            (high, effective)
        };
        let sid_owned = sid.to_string();
        let (trimmed, rows) = self
            .store
            .call(move |c| rows::events_between(c, &sid_owned, effective, high))
            .await
            .unwrap_or_default();
        let replay = rows
            .into_iter()
            .map(|(seq, kind, data)| Frame {
                seq,
                bytes: format_frame(Some(seq), &kind, &data),
            })
            .collect();
        let is_live = running.is_some();
        Some(Subscription {
            session_id: sid.to_string(),
            ready: Ready {
                cursor: effective,
                current_turn_id: running.map(|(t, _)| t),
                is_live,
            },
            gap: (effective < trimmed).then_some((effective + 1, trimmed)),
            replay,
            live: rx,
        })
    }

    /// Stored events after `cursor` as JSON, preceded by a `stream.gap` object if needed.
    pub async fn since(&self, sid: &str, cursor: i64) -> Vec<Value> {
        let sid_owned = sid.to_string();
        let (trimmed, rows) = self
            .store
            .call(move |c| rows::events_between(c, &sid_owned, cursor, i64::MAX))
            .await
            .unwrap_or_default();
        let mut out = Vec::with_capacity(rows.len() + 1);
        if cursor < trimmed {
            out.push(serde_json::json!({"type": "stream.gap", "session_id": sid, "from": cursor + 1, "to": trimmed}));
        }
        out.extend(
            rows.into_iter()
                .filter_map(|(_, _, d)| serde_json::from_str(&d).ok()),
        );
        out
    }
}

/// Hands a committed frame to every live stream of the channel that joined before it; a
/// stream whose queue is full is dropped and its connection killed.
fn deliver(chan: &Mutex<Channel>, frame: Frame) {
    chan.lock().sinks.retain(|s| {
        if frame.seq <= s.from {
            return true;
        }
        match s.tx.push(frame.clone()) {
            Ok(()) => true,
            Err(PushError::Full) => {
                s.kick.cancel();
                false
            }
            Err(PushError::Closed) => false,
        }
    });
}

/// Convenience for building payload maps.
pub fn payload(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Context;

    fn fixture() -> (Arc<Bus>, Store, tempfile::TempDir) {
        let (store, dir) = crate::store::test_support::temp_store("bus");
        let bus = Arc::new(Bus::new(store.clone(), 100));
        bus.open("s", 0);
        (bus, store, dir)
    }

    fn drain(rx: &mut live::LiveRx) -> Vec<i64> {
        let mut seqs = Vec::new();
        let waker = futures::task::noop_waker();
        let _ = rx.poll_drain(&mut Context::from_waker(&waker), &mut |f| seqs.push(f.seq));
        seqs
    }

    #[tokio::test]
    async fn a_live_stream_gets_an_event_only_once_the_store_has_committed_it() {
        let (bus, store, _dir) = fixture();
        let mut sub = bus
            .subscribe("s", 0, None, CancellationToken::new())
            .await
            .expect("subscription");
        let hold = crate::store::test_support::hold(&store);
        bus.publish("s", "x.one", Map::new());
        bus.publish("s", "x.two", Map::new());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(
            drain(&mut sub.live),
            Vec::<i64>::new(),
            "nothing before the commit"
        );
        drop(hold);
        store.flush().await;
        assert_eq!(drain(&mut sub.live), vec![1, 2], "both, in seq order");
        let stored = store
            .call(|c| rows::events_between(c, "s", 0, 10))
            .await
            .expect("read")
            .1;
        assert_eq!(stored.len(), 2);
    }

    #[tokio::test]
    async fn an_event_published_before_a_subscription_comes_once_in_its_replay_not_live() {
        let (bus, store, _dir) = fixture();
        let hold = crate::store::test_support::hold(&store);
        bus.publish("s", "x.one", Map::new());
        let subscribing = {
            let bus = bus.clone();
            tokio::spawn(async move { bus.subscribe("s", 0, None, CancellationToken::new()).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        drop(hold);
        let mut sub = subscribing.await.expect("task").expect("subscription");
        assert_eq!(
            sub.replay.iter().map(|f| f.seq).collect::<Vec<_>>(),
            vec![1]
        );
        bus.publish("s", "x.two", Map::new());
        store.flush().await;
        assert_eq!(drain(&mut sub.live), vec![2], "seq 1 is not repeated live");
    }

    #[tokio::test]
    async fn a_seq_whose_row_failed_still_reaches_the_stored_high_water() {
        let (bus, store, _dir) = fixture();
        store
            .call(|c| {
                rows::put_session(
                    c,
                    &rows::SessionRow {
                        id: "s".into(),
                        channel: "web".into(),
                        root: "/".into(),
                        last_status: "idle".into(),
                        ..Default::default()
                    },
                )
            })
            .await
            .expect("session");
        let kept: SeqRow = Box::new(|c, seq| rows::insert_egress(c, "s", seq, "{}"));
        assert_eq!(
            bus.publish_with_row("s", "egress.decision", Map::new(), Some(kept)),
            1
        );
        let failing: SeqRow =
            Box::new(|_, _| Err(crate::store::StoreError::Other("the row failed".into())));
        assert_eq!(
            bus.publish_with_row("s", "egress.decision", Map::new(), Some(failing)),
            2
        );
        let high = store
            .call(|c| Ok(rows::get_session(c, "s")?.map(|r| r.last_seq)))
            .await
            .expect("read");
        assert_eq!(
            high,
            Some(2),
            "the next start must not hand out seq 2 again"
        );
    }
}
