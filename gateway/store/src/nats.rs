//! Events across nodes on NATS JetStream.
//!
//! Every committed event is published on `<prefix>.<sid>` in one stream (the journal hands
//! it to [`Nats::publisher`]'s task after the commit, in commit order). Publishing is
//! best effort: the event is already durable, and a follower that misses one refills it
//! from the journal. [`Nats::follow`] is how a node serves a session homed elsewhere: it
//! replays from the journal and follows the stream live, joined at the high-water mark.

mod follow;

pub use follow::{FollowStats, Followed, Follower, IDLE_CHECK};

use crate::types::{CommitSink, Committed};
use crate::{Journal, StoreError, StoreResult};
use async_nats::jetstream::{self, message::PublishMessage, stream};
use futures::stream::{FuturesUnordered, StreamExt};
use std::time::Duration;
use tokio::sync::mpsc;

/// Header carrying the event's seq.
pub const SEQ_HEADER: &str = "Vis-Seq";
/// Header carrying the event's type.
pub const TYPE_HEADER: &str = "Vis-Type";
/// Committed events waiting to be published before new ones are dropped (and refilled).
const PUBLISH_QUEUE: usize = 65_536;
/// Publish acknowledgements awaited at once.
const ACKS_IN_FLIGHT: usize = 4096;

fn nats_error(e: impl std::fmt::Display) -> StoreError {
    StoreError::Nats(e.to_string())
}

/// Whether `s` can be one subject token or a stream name as this crate uses them: letters,
/// digits, `-` and `_` (no dots, wildcards or spaces).
pub fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// One JetStream stream holding every session's events.
#[derive(Clone)]
pub struct Nats {
    js: jetstream::Context,
    stream: String,
    prefix: String,
}

impl Nats {
    /// Connects and makes sure the stream `stream` (subjects `<prefix>.>`) exists.
    pub async fn connect(url: &str, stream: &str, prefix: &str) -> StoreResult<Nats> {
        let client = async_nats::connect(url).await.map_err(nats_error)?;
        let js = jetstream::new(client);
        js.get_or_create_stream(stream::Config {
            name: stream.to_string(),
            subjects: vec![format!("{prefix}.>")],
            max_age: Duration::from_secs(24 * 3600),
            ..Default::default()
        })
        .await
        .map_err(nats_error)?;
        Ok(Nats {
            js,
            stream: stream.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// The subject of a session's events.
    pub fn subject(&self, sid: &str) -> StoreResult<String> {
        if !is_token(sid) {
            return Err(StoreError::BadSessionId(sid.to_string()));
        }
        Ok(format!("{}.{sid}", self.prefix))
    }

    /// Starts the publisher task; hand the sink to [`crate::JournalOptions::commits`].
    pub fn publisher(&self) -> CommitSink {
        self.start_publisher().0
    }

    /// [`Nats::publisher`], with a handle that waits for the task to drain once every
    /// clone of the sink is dropped (a node that stops publishes what it committed).
    pub fn start_publisher(&self) -> (CommitSink, Publisher) {
        let (tx, rx) = mpsc::channel(PUBLISH_QUEUE);
        let task = tokio::spawn(publish_loop(self.clone(), rx));
        (tx, Publisher { task })
    }

    /// Replays `sid` from the journal after `after_seq`, then follows it live (see
    /// [`Follower`]).
    pub async fn follow(
        &self,
        journal: Journal,
        sid: &str,
        after_seq: i64,
    ) -> StoreResult<Follower> {
        follow::start(self, journal, sid, after_seq).await
    }

    /// How many messages the stream holds now.
    pub async fn held(&self) -> StoreResult<u64> {
        let mut stream = self.js.get_stream(&self.stream).await.map_err(nats_error)?;
        let info = stream.info().await.map_err(nats_error)?;
        Ok(info.state.messages)
    }

    /// Removes the stream (tests and tear-down).
    pub async fn delete_stream(&self) -> StoreResult<()> {
        self.js
            .delete_stream(&self.stream)
            .await
            .map(|_| ())
            .map_err(nats_error)
    }
}

/// The publisher task of [`Nats::start_publisher`].
pub struct Publisher {
    task: tokio::task::JoinHandle<()>,
}

impl Publisher {
    /// Waits up to `within` for the task to end, which it does once every sender is
    /// dropped and every event queued before is published and acknowledged (or failed).
    /// False when the time ran out first (the rest is still in the journal).
    pub async fn drained(self, within: Duration) -> bool {
        matches!(tokio::time::timeout(within, self.task).await, Ok(Ok(())))
    }
}

/// Publishes committed events in the order they come, keeping many acknowledgements in
/// flight. A failure is logged and the event left to the journal.
async fn publish_loop(nats: Nats, mut rx: mpsc::Receiver<Committed>) {
    let mut acks = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            Some(ack) = acks.next(), if !acks.is_empty() => {
                if let Err(e) = ack {
                    tracing::warn!(error = %e, "event not acknowledged by JetStream; followers refill from the journal");
                }
            }
            next = rx.recv(), if acks.len() < ACKS_IN_FLIGHT => {
                let Some(c) = next else { break };
                let Ok(subject) = nats.subject(&c.sid) else {
                    tracing::warn!(session = c.sid, "session id cannot name a subject; not published");
                    continue;
                };
                let msg = PublishMessage::build()
                    .payload(c.event.data.into())
                    .message_id(format!("{}:{}", c.sid, c.event.seq))
                    .header(SEQ_HEADER, c.event.seq.to_string().as_str())
                    .header(TYPE_HEADER, c.event.kind.as_str());
                match nats.js.send_publish(subject, msg).await {
                    Ok(ack) => acks.push(std::future::IntoFuture::into_future(ack)),
                    Err(e) => tracing::warn!(error = %e, "event not published; followers refill from the journal"),
                }
            }
        }
    }
    while let Some(ack) = acks.next().await {
        if let Err(e) = ack {
            tracing::warn!(error = %e, "event not acknowledged by JetStream");
        }
    }
}
