//! The live half of a stream of a session homed on another node (docs/decisions.md, C4).
//!
//! The first subscriber of such a session starts one relay task for its channel. With NATS
//! the task follows the session's subject from the channel's high-water (the journal read
//! first, then live, joined by seq with no gap and no duplicate: `vis_store::nats`);
//! without NATS it reads the shared journal every [`POLL`]. Each event becomes the frame its
//! home node would have sent, handed to the channel's sinks as a local commit would be. The
//! task ends when the channel goes (the session is taken over here, or dropped) or has had
//! no subscriber for [`IDLE`].

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use vis_companion_api::Frame;
use vis_store::nats::{Followed, Nats};
use vis_store::{Event, Journal};

/// How often the journal is read for a remote session's events without NATS.
const POLL: Duration = Duration::from_millis(250);
/// How long a relay outlives its channel's last subscriber.
const IDLE: Duration = Duration::from_secs(30);
/// Events read per journal query.
const PAGE: usize = 512;

/// What a relay feeds: a remote session's channel (the bus implements it).
pub trait Target: Send + Sync + 'static {
    /// Hands one of the home node's events, as its frame, to the channel's streams.
    fn hand(&self, frame: Frame);
    /// Whether a stream listens now.
    fn listened(&self) -> bool;
    /// The events through `to` were trimmed from the journal before they were read.
    fn skipped(&self, to: i64);
    /// The relay stopped: a new subscriber starts another.
    fn stopped(&self);
}

type Fed = Weak<dyn Target>;

/// Where a cluster node takes other nodes' events from.
#[derive(Clone)]
pub struct Relay {
    pub journal: Journal,
    pub nats: Option<Nats>,
}

impl Relay {
    /// Starts feeding `chan` (session `sid`) with the events after `from`.
    pub fn start(&self, sid: &str, chan: &Arc<dyn Target>, from: i64) {
        let (this, sid, weak) = (self.clone(), sid.to_string(), Arc::downgrade(chan));
        tokio::spawn(async move {
            let why = match &this.nats {
                Some(nats) => follow(nats, &this.journal, &sid, &weak, from).await,
                None => poll(&this.journal, &sid, &weak, from).await,
            };
            if let Some(chan) = weak.upgrade() {
                chan.stopped();
            }
            tracing::debug!(session = sid, why, "relay of a remote session stopped");
        });
    }
}

/// Hands one of the home node's events to the channel's streams; false once the channel
/// is gone or idle (the relay ends).
fn hand(weak: &Fed, ev: Event, idle_since: &mut Option<Instant>) -> bool {
    let Some(chan) = weak.upgrade() else {
        return false;
    };
    let bytes = vis_events::format_frame(Some(ev.seq), &ev.kind, &ev.data);
    chan.hand(Frame { seq: ev.seq, bytes });
    still_wanted(chan.as_ref(), idle_since)
}

/// Whether someone still listens (or stopped less than [`IDLE`] ago).
fn still_wanted(chan: &dyn Target, idle_since: &mut Option<Instant>) -> bool {
    if chan.listened() {
        *idle_since = None;
        return true;
    }
    let since = idle_since.get_or_insert_with(Instant::now);
    since.elapsed() < IDLE
}

async fn follow(nats: &Nats, journal: &Journal, sid: &str, weak: &Fed, from: i64) -> &'static str {
    let mut follower = match nats.follow(journal.clone(), sid, from).await {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(session = sid, error = %e, "cannot follow the session on NATS; reading the journal");
            return poll(journal, sid, weak, from).await;
        }
    };
    let mut idle_since = None;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(1), follower.next()).await;
        match next {
            Ok(Some(Ok(Followed::Event(ev)))) => {
                if !hand(weak, ev, &mut idle_since) {
                    return "no subscriber";
                }
            }
            Ok(Some(Ok(Followed::Gap { to, .. }))) => {
                // Trimmed before it was read: a reconnecting client is told by its replay.
                let Some(chan) = weak.upgrade() else {
                    return "channel closed";
                };
                chan.skipped(to);
            }
            Ok(Some(Err(e))) => {
                tracing::warn!(session = sid, error = %e, "following the session failed");
                return "journal failed";
            }
            Ok(None) => return "follower ended",
            Err(_) => {
                let Some(chan) = weak.upgrade() else {
                    return "channel closed";
                };
                if !still_wanted(chan.as_ref(), &mut idle_since) {
                    return "no subscriber";
                }
            }
        }
    }
}

async fn poll(journal: &Journal, sid: &str, weak: &Fed, mut last: i64) -> &'static str {
    let mut idle_since = None;
    loop {
        match journal.range(sid, last, PAGE).await {
            Ok(range) => {
                let full = range.events.len() == PAGE;
                for ev in range.events {
                    last = last.max(ev.seq);
                    if !hand(weak, ev, &mut idle_since) {
                        return "no subscriber";
                    }
                }
                if full {
                    continue;
                }
            }
            Err(e) => tracing::warn!(session = sid, error = %e, "reading the journal failed"),
        }
        let Some(chan) = weak.upgrade() else {
            return "channel closed";
        };
        if !still_wanted(chan.as_ref(), &mut idle_since) {
            return "no subscriber";
        }
        drop(chan);
        tokio::time::sleep(POLL).await;
    }
}
