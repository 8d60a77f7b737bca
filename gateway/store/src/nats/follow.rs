//! Following a session from another node: the journal first, then JetStream live.
//!
//! The live subscription (an ordered consumer on the session's subject, delivering only
//! what is published after it exists) is in place BEFORE the journal is read, so an event
//! is either in that read (committed before it) or published after the subscription began
//! (every event is published after its commit). The join is by seq: a live event at or
//! below the last one handed out is a duplicate and skipped; one that leaves a hole (its
//! publish was lost, or it overtook one) makes the follower read the journal after the last
//! seq first. A session that goes quiet is checked against the journal's high-water every
//! [`IDLE_CHECK`], so an event whose publish failed still arrives, and with NATS gone the
//! follower goes on from the journal alone.

use super::{nats_error, Nats, SEQ_HEADER, TYPE_HEADER};
use crate::types::Event;
use crate::{Journal, StoreError, StoreResult};
use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use futures::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Stored events read per journal query.
const PAGE: usize = 512;
/// How long a quiet session goes before the journal is asked for events the stream missed.
pub const IDLE_CHECK: Duration = Duration::from_millis(500);
/// Followed items waiting for their reader.
const QUEUE: usize = 1024;

/// What a follower hands out, in seq order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followed {
    Event(Event),
    /// Retention removed the journal's events `from..=to` before they were read (the
    /// stream's `stream.gap`).
    Gap {
        from: i64,
        to: i64,
    },
}

/// How a follower's events reached it so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowStats {
    /// Read from the journal (the replay, holes, a quiet session's check).
    pub from_journal: u64,
    /// Taken from the live stream.
    pub live: u64,
}

#[derive(Default)]
struct Counts {
    from_journal: AtomicU64,
    live: AtomicU64,
}

/// A session followed from the journal and then live. Dropping it stops the following.
pub struct Follower {
    rx: mpsc::Receiver<StoreResult<Followed>>,
    task: JoinHandle<()>,
    counts: Arc<Counts>,
}

impl Follower {
    /// The next event (or gap) in seq order; `None` once following has stopped, after an
    /// error was handed out.
    pub async fn next(&mut self) -> Option<StoreResult<Followed>> {
        self.rx.recv().await
    }

    pub fn stats(&self) -> FollowStats {
        FollowStats {
            from_journal: self.counts.from_journal.load(Ordering::Relaxed),
            live: self.counts.live.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Live = pull::Ordered;

pub(super) async fn start(
    nats: &Nats,
    journal: Journal,
    sid: &str,
    after: i64,
) -> StoreResult<Follower> {
    let subject = nats.subject(sid)?;
    let stream = nats.js.get_stream(&nats.stream).await.map_err(nats_error)?;
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: subject,
            deliver_policy: DeliverPolicy::New,
            ..Default::default()
        })
        .await
        .map_err(nats_error)?;
    let live = consumer.messages().await.map_err(nats_error)?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let counts = Arc::new(Counts::default());
    let join = Join {
        journal,
        sid: sid.to_string(),
        last: after,
        tx,
        counts: counts.clone(),
    };
    let task = tokio::spawn(join.run(live));
    Ok(Follower { rx, task, counts })
}

struct Join {
    journal: Journal,
    sid: String,
    /// The last seq handed out (or known to hold nothing the journal keeps).
    last: i64,
    tx: mpsc::Sender<StoreResult<Followed>>,
    counts: Arc<Counts>,
}

/// Why following stops: the reader went, or the journal failed (handed to the reader).
enum Stop {
    Closed,
    Failed(StoreError),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Failed(e)
    }
}

impl Join {
    async fn run(mut self, live: Live) {
        if let Err(Stop::Failed(e)) = self.follow(live).await {
            let _ = self.tx.send(Err(e)).await;
        }
    }

    async fn follow(&mut self, live: Live) -> Result<(), Stop> {
        self.catch_up(None).await?;
        let mut live = Some(live);
        loop {
            let next = match live.as_mut() {
                Some(l) => tokio::time::timeout(IDLE_CHECK, l.next()).await.ok(),
                None => {
                    tokio::time::sleep(IDLE_CHECK).await;
                    None
                }
            };
            match next {
                // Quiet for a while: ask the journal.
                None => self.catch_up(None).await?,
                Some(Some(Ok(msg))) => self.live(&msg).await?,
                Some(Some(Err(e))) => {
                    tracing::warn!(session = self.sid, error = %e, "live events interrupted; following the journal");
                }
                Some(None) => {
                    tracing::warn!(
                        session = self.sid,
                        "live events ended; following the journal"
                    );
                    live = None;
                }
            }
        }
    }

    async fn emit(&mut self, item: Followed) -> Result<(), Stop> {
        self.tx.send(Ok(item)).await.map_err(|_| Stop::Closed)
    }

    /// Hands out every stored event after `last`, then moves `last` up to the high-water
    /// the journal had before the read (the seqs between are live-only events), but not
    /// past `ceiling`.
    async fn catch_up(&mut self, ceiling: Option<i64>) -> Result<(), Stop> {
        let high = self.journal.high_water(&self.sid).await?.unwrap_or(0);
        loop {
            let range = self.journal.range(&self.sid, self.last, PAGE).await?;
            if range.trimmed_through > self.last {
                let gap = Followed::Gap {
                    from: self.last + 1,
                    to: range.trimmed_through,
                };
                self.last = range.trimmed_through;
                self.emit(gap).await?;
            }
            let full = range.events.len() == PAGE;
            for e in range.events {
                if e.seq > self.last {
                    self.last = e.seq;
                    self.counts.from_journal.fetch_add(1, Ordering::Relaxed);
                    self.emit(Followed::Event(e)).await?;
                }
            }
            if !full {
                break;
            }
        }
        self.last = self.last.max(ceiling.map_or(high, |c| high.min(c)));
        Ok(())
    }

    async fn live(&mut self, msg: &async_nats::jetstream::Message) -> Result<(), Stop> {
        let headers = msg.headers.as_ref();
        let seq = headers
            .and_then(|h| h.get(SEQ_HEADER))
            .and_then(|v| v.as_str().parse::<i64>().ok());
        let kind = headers
            .and_then(|h| h.get(TYPE_HEADER))
            .map(|v| v.as_str().to_string());
        let data = std::str::from_utf8(&msg.payload).ok();
        let (Some(seq), Some(kind), Some(data)) = (seq, kind, data) else {
            // Not one of ours; the journal has whatever it should have been.
            return Ok(());
        };
        if seq > self.last + 1 {
            // A hole before this event: what the journal has of it first.
            self.catch_up(Some(seq - 1)).await?;
        }
        if seq <= self.last {
            return Ok(());
        }
        self.last = seq;
        self.counts.live.fetch_add(1, Ordering::Relaxed);
        self.emit(Followed::Event(Event {
            seq,
            kind,
            data: data.to_string(),
        }))
        .await
    }
}
