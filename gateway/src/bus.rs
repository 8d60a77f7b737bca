//! The event bus: per-session monotonic `seq`, the envelope, fan-out to SSE sinks, and the
//! durable journal (docs/decisions.md, G2).
//!
//! `publish` assigns the seq, serializes the event once in its `vis_events::Envelope` (the
//! text the live frame carries is the text the journal stores) and queues the journal write
//! under the session's lock, so journal order is seq order. The store thread offers the frame to every
//! sink once the write is committed (durable before live), without blocking: a full sink is
//! dropped and its connection killed. A frame whose write failed (a full disk, an I/O error)
//! reaches no sink: it is recorded as lost, and the engine fails the session's running turn
//! once the database takes writes again (`engine/storage.rs`). `subscribe` registers a sink
//! under the same lock, with the high-water it joined at, and then reads the first page of
//! the replay through the store thread, whose FIFO order guarantees the replay includes every
//! event published before the registration; the sink takes only later frames live, and the
//! rest of the replay is read page by page as the client takes it (`replay.rs`).
//!
//! With a commit sink (`--nats-url`), every committed event (live-only ones included) is also
//! handed to it in commit order, with the envelope text the journal stores: the NATS
//! publisher puts it on the session's subject (docs/decisions.md, C2).

use crate::store::{rows, Db, Store, Written};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use vis_companion_api::events::{Event, EventKind};
use vis_companion_api::live::{self, LiveTx, PushError};
use vis_companion_api::sse::SSE_QUEUE_CAP;
use vis_companion_api::wire::{JournalEntry, StoredJson, StreamGap};
use vis_companion_api::{Frame, Ready, Subscription};
use vis_events::{now_ms, Envelope};
use vis_store::{CommitSink, Committed};

mod lost;
mod relay;
mod replay;
pub use lost::{Lost, LostSeqs};
pub use relay::Relay;

/// A store row written together with an event, given the event's seq.
pub type SeqRow = Box<dyn FnOnce(&mut Db, i64) -> crate::store::StoreResult<()> + Send>;

struct Sink {
    tx: LiveTx,
    kick: CancellationToken,
    /// The high-water when the sink joined: frames up to it come from its replay.
    from: i64,
}

struct Channel {
    /// The last seq handed to an event (in memory; may be ahead of the store).
    seq: i64,
    /// The last seq whose write is committed: a seq at or below it is never handed out again.
    durable: i64,
    sinks: Vec<Sink>,
    /// Homed on another node of the cluster: nothing is published here, and the live
    /// frames come from that node's events (`relay.rs`).
    remote: bool,
    /// A relay task feeds this (remote) channel.
    relaying: bool,
}

/// How an event's extra row relates to its seq.
enum Row {
    None,
    /// Keeps the seq (egress rows): the session's high-water on load includes it, so the
    /// event does not bump `sessions.last_seq` itself.
    KeepsSeq(SeqRow),
    /// Written in the same transaction as the event (a turn's record with its terminal).
    Alongside(SeqRow),
}

pub struct Bus {
    store: Store,
    retain: i64,
    channels: Mutex<HashMap<String, Arc<Mutex<Channel>>>>,
    lost: Arc<LostSeqs>,
    /// Where committed events also go (the NATS publisher); `None` once publishing stopped.
    commits: Mutex<Option<CommitSink>>,
    /// Where other nodes' events come from, on a cluster node.
    relay: std::sync::OnceLock<Relay>,
}

impl Bus {
    #[cfg(test)]
    pub fn new(store: Store, retain: i64) -> Self {
        Self::with_commits(store, retain, None)
    }

    /// A bus that also hands every committed event to `commits`, in commit order.
    pub fn with_commits(store: Store, retain: i64, commits: Option<CommitSink>) -> Self {
        Self {
            store,
            retain,
            channels: Mutex::new(HashMap::new()),
            lost: Arc::new(LostSeqs::default()),
            commits: Mutex::new(commits),
            relay: std::sync::OnceLock::new(),
        }
    }

    /// Makes this bus a cluster node's: channels of sessions homed elsewhere are fed by
    /// `relay`. Set once, before sessions are loaded.
    pub fn set_relay(&self, relay: Relay) {
        let _ = self.relay.set(relay);
    }

    /// Stops handing events to the commit sink (at shutdown, once the store is flushed):
    /// the bus's sender is dropped, so the publisher drains and ends.
    pub fn stop_commits(&self) {
        self.commits.lock().take();
    }

    /// Registers a session's channel with its stored high-water (idempotent).
    pub fn open(&self, sid: &str, last_seq: i64) {
        self.open_channel(sid, last_seq, false);
    }

    /// Registers the channel of a session homed on another node (idempotent): publishing
    /// on it does nothing; its streams replay the journal and then take that node's events.
    pub fn open_remote(&self, sid: &str, last_seq: i64) {
        self.open_channel(sid, last_seq, true);
    }

    /// Whether the session's channel is another node's session's.
    pub fn is_remote(&self, sid: &str) -> bool {
        self.channel(sid).is_some_and(|c| c.lock().remote)
    }

    /// Raises a remote channel's high-water to what the journal holds, unless a relay is
    /// feeding it: a stream joining then replays up to there and takes the rest live.
    pub fn catch_up_remote(&self, sid: &str, stored: i64) {
        if let Some(chan) = self.channel(sid) {
            let mut ch = chan.lock();
            if ch.remote && !ch.relaying {
                ch.seq = ch.seq.max(stored);
                ch.durable = ch.durable.max(stored);
            }
        }
    }

    fn open_channel(&self, sid: &str, last_seq: i64, remote: bool) {
        self.channels
            .lock()
            .entry(sid.to_string())
            .or_insert_with(|| {
                Arc::new(Mutex::new(Channel {
                    seq: last_seq,
                    durable: last_seq,
                    sinks: Vec::new(),
                    remote,
                    relaying: false,
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

    /// The last seq handed to an event of the session (committed or not).
    pub fn high_water(&self, sid: &str) -> Option<i64> {
        self.channel(sid).map(|c| c.lock().seq)
    }

    /// The last seq of the session whose write is committed.
    pub fn durable_high_water(&self, sid: &str) -> Option<i64> {
        self.channel(sid).map(|c| c.lock().durable)
    }

    /// Events the store could not write, by session (see [`LostSeqs`]).
    pub fn lost(&self) -> &Arc<LostSeqs> {
        &self.lost
    }

    /// Publishes one event; returns its seq (0 if the session has no channel).
    pub fn publish(&self, sid: &str, event: Event) -> i64 {
        self.publish_value(sid, event, Row::None)
    }

    /// [`Bus::publish`], with `row` written in the same transaction as the event: both are
    /// stored, or neither (a turn's terminal and its record).
    pub fn publish_together(&self, sid: &str, event: Event, row: SeqRow) -> i64 {
        self.publish_value(sid, event, Row::Alongside(row))
    }

    fn publish_value(&self, sid: &str, event: Event, row: Row) -> i64 {
        self.publish_core(sid, event.kind(), &event, row)
    }

    /// Publishes an `egress.decision` whose payload is the egress record, with the row that
    /// keeps its seq. The payload's members sit beside the envelope's (a member named like
    /// an envelope key, such as the decision's own `ts`, is left out of the event).
    pub fn publish_egress(&self, sid: &str, payload: impl Serialize, row: Option<SeqRow>) -> i64 {
        let row = row.map_or(Row::None, Row::KeepsSeq);
        self.publish_core(sid, EventKind::EgressDecision, payload, row)
    }

    /// Assigns the seq, serializes the event once in its [`Envelope`] and queues the
    /// journal write (and `row`) under the session's lock; the store thread hands the frame
    /// (the same text the journal stores) to the live sinks once that write is committed, or
    /// records the seq as lost if it is not.
    fn publish_core(&self, sid: &str, kind: EventKind, payload: impl Serialize, row: Row) -> i64 {
        let Some(chan) = self.channel(sid) else {
            tracing::warn!(
                session = sid,
                kind = kind.as_str(),
                "event for a session without a channel dropped"
            );
            return 0;
        };
        let mut ch = chan.lock();
        if ch.remote {
            tracing::debug!(
                session = sid,
                kind = kind.as_str(),
                "event for a session homed on another node not published here"
            );
            return 0;
        }
        ch.seq += 1;
        let seq = ch.seq;
        let envelope = Envelope::new(seq, now_ms(), sid, kind.as_str(), payload);
        let data = envelope.to_json();
        let frame = Frame {
            seq,
            bytes: envelope.frame(&data),
        };
        let live = chan.clone();
        let stored = !kind.is_live_only();
        let seq_kept = matches!(row, Row::KeepsSeq(_));
        let (sid_owned, retain) = (sid.to_string(), self.retain);
        let lost = self.lost.clone();
        let commits = self.commits.lock().clone();
        self.store.queue("event", move |db| {
            let stored_data = stored.then_some(data.as_str());
            let (out, written) = match row {
                Row::None => {
                    match rows::store_event(db, &sid_owned, seq, kind.as_str(), stored_data, retain)
                    {
                        Ok(written) => (Ok(()), written),
                        Err(e) => (Err(e), Written::new(false)),
                    }
                }
                Row::KeepsSeq(row) | Row::Alongside(row) => {
                    let out = db.atomically(|db| {
                        rows::insert_event(
                            db,
                            &sid_owned,
                            seq,
                            kind.as_str(),
                            stored_data,
                            retain,
                            seq_kept,
                        )?;
                        row(db, seq)
                    });
                    let written = Written::new(out.is_ok());
                    (out, written)
                }
            };
            if !written.get() && seq_kept {
                // The row that would have kept the seq is gone; record the seq where the
                // next start reads the high-water (if the database takes that write).
                let _ = rows::bump_high_water(db, &sid_owned, seq);
            }
            // Live streams get the frame once it is committed: a client never sees an event
            // that a crash could take back. Jobs commit in seq order, so frames stay in order.
            crate::store::after_commit(move || {
                if written.get() && crate::store::committed() {
                    deliver(&live, frame);
                    if let Some(sink) = commits {
                        hand_on(&sink, sid_owned, seq, kind, data);
                    }
                } else {
                    lost.record(&sid_owned, seq, kind, &data);
                }
            });
            out
        });
        // Queued while the lock is held: the store runs the jobs, and so delivers the
        // frames, in seq order.
        drop(ch);
        seq
    }

    /// [`Bus::try_subscribe`], `None` also when the store could not be read.
    #[cfg(test)]
    pub async fn subscribe(
        &self,
        sid: &str,
        cursor: i64,
        running: Option<(String, i64)>,
        kick: CancellationToken,
    ) -> Option<Subscription> {
        self.try_subscribe(sid, cursor, running, kick)
            .await
            .ok()
            .flatten()
    }

    /// Subscribes with replay. `running` is the running turn and its `turn.started` seq.
    /// `Ok(None)`: the session has no channel; `Err`: the store could not be read.
    pub async fn try_subscribe(
        &self,
        sid: &str,
        cursor: i64,
        running: Option<(String, i64)>,
        kick: CancellationToken,
    ) -> crate::store::StoreResult<Option<Subscription>> {
        let Some(chan) = self.channel(sid) else {
            return Ok(None);
        };
        let (tx, rx) = live::channel(SSE_QUEUE_CAP);
        let (high, start_relay) = {
            let mut ch = chan.lock();
            let high = ch.seq;
            ch.sinks.push(Sink {
                tx,
                kick,
                from: high,
            });
            let start = ch.remote && !ch.relaying;
            ch.relaying |= start;
            (high, start)
        };
        if start_relay {
            match self.relay.get() {
                Some(relay) => {
                    let target: Arc<dyn relay::Target> = chan.clone();
                    relay.start(sid, &target, high)
                }
                None => chan.lock().relaying = false,
            }
        }
        // Queued behind every journal write published before the registration (FIFO), so the
        // stored high-water it reads is the fate of every seq up to `high`.
        let (sid_owned, start) = (sid.to_string(), running.as_ref().map(|(_, s)| *s));
        let (effective, page) = self
            .store
            .with(move |db| {
                let stored = rows::get_session(db, &sid_owned)?.map_or(0, |r| r.last_seq);
                let durable = stored.min(high);
                // A cursor past the durable high-water (or none): the running turn's start,
                // else the tail. Never past `durable`: a seq above it may be lost and handed
                // out again after a restart, and a client adopting it would miss that event.
                let effective = if cursor < 0 || cursor > durable {
                    start.map_or(durable, |s| s - 1).min(durable)
                } else {
                    cursor
                };
                Ok((
                    effective,
                    replay::read_page(db, &sid_owned, effective, high)?,
                ))
            })
            .await?;
        let is_live = running.is_some();
        let gap = (effective < page.trimmed).then_some((effective + 1, page.trimmed));
        let rest = (!page.done).then(|| replay::Rest::boxed(self.store.clone(), sid, high));
        Ok(Some(Subscription {
            session_id: sid.to_string(),
            ready: Ready {
                cursor: effective,
                current_turn_id: running.map(|(t, _)| t),
                is_live,
            },
            gap,
            replay: page.frames,
            rest,
            live: rx,
        }))
    }

    /// Stored events after `cursor` as stored, preceded by a `stream.gap` entry if needed.
    pub async fn since(&self, sid: &str, cursor: i64) -> Vec<JournalEntry> {
        let sid_owned = sid.to_string();
        let (trimmed, rows) = self
            .store
            .with(move |db| rows::events_between(db, &sid_owned, cursor, i64::MAX))
            .await
            .unwrap_or_default();
        let mut out = Vec::with_capacity(rows.len() + 1);
        if cursor < trimmed {
            out.push(JournalEntry::Gap(StreamGap {
                kind: EventKind::StreamGap.as_str().into(),
                session_id: sid.to_string(),
                from: cursor + 1,
                to: trimmed,
            }));
        }
        out.extend(
            rows.into_iter()
                .filter_map(|(_, _, d)| StoredJson::parse(d).map(JournalEntry::Event)),
        );
        out
    }
}

/// Hands a committed event to the commit sink without waiting: when its queue is full the
/// event is not published (it stays in the journal, and is counted).
fn hand_on(sink: &CommitSink, sid: String, seq: i64, kind: EventKind, data: String) {
    let event = vis_store::Event {
        seq,
        kind: kind.as_str().to_string(),
        data,
    };
    if sink.try_send(Committed { sid, event }).is_err() {
        crate::metrics::event_not_published();
    }
}

/// Hands a committed frame to every live stream of the channel that joined before it; a
/// stream whose queue is full is dropped and its connection killed.
fn deliver(chan: &Mutex<Channel>, frame: Frame) {
    let mut ch = chan.lock();
    ch.durable = ch.durable.max(frame.seq);
    ch.sinks.retain(|s| {
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

/// A remote session's channel, fed by its relay.
impl relay::Target for Mutex<Channel> {
    fn hand(&self, frame: Frame) {
        {
            let mut ch = self.lock();
            ch.seq = ch.seq.max(frame.seq);
        }
        deliver(self, frame);
    }

    fn listened(&self) -> bool {
        !self.lock().sinks.is_empty()
    }

    fn skipped(&self, to: i64) {
        let mut ch = self.lock();
        ch.seq = ch.seq.max(to);
        ch.durable = ch.durable.max(to);
    }

    fn stopped(&self) {
        self.lock().relaying = false;
    }
}

#[cfg(test)]
mod tests;
