//! SSE framing and the per-connection stream: `subscription.ready` → `stream.gap` →
//! replay → live, deduplicated per session, with a `: ping` heartbeat and the
//! anti-buffering pad.

use crate::areas::Subscription;
use crate::events::EventKind;
use crate::live::Frame;
use crate::live::LiveRx;
use crate::replay::{ReplayPage, ReplayRest};
use crate::serve_stats::SseGuard;
use bytes::{BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::{BoxStream, Stream, StreamExt};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Quiet time after which a `: ping` comment is written.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// Frames a subscriber may fall behind before it is dropped.
pub const SSE_QUEUE_CAP: usize = 1024;
const PING: &[u8] = b": ping\n\n";

/// The frame format and the clock live in `vis-events`, shared with the event bus.
pub use vis_events::{format_frame, now_ms};

fn control(value: Value, event_type: &str) -> Bytes {
    format_frame(None, event_type, &value.to_string())
}

/// The control frames and replay of one subscription, in order.
fn prelude(sub: &Subscription) -> Vec<(usize, Frame)> {
    let mut out = Vec::with_capacity(sub.replay.len() + 2);
    let ready = json!({
        "type": EventKind::SubscriptionReady.as_str(), "session_id": sub.session_id, "cursor": sub.ready.cursor,
        "current_turn_id": sub.ready.current_turn_id, "is_live": sub.ready.is_live,
        "server_time_ms": now_ms(),
    });
    out.push((
        usize::MAX,
        Frame {
            seq: 0,
            bytes: control(ready, EventKind::SubscriptionReady.as_str()),
        },
    ));
    if let Some((from, to)) = sub.gap {
        let gap = json!({"type": EventKind::StreamGap.as_str(), "session_id": sub.session_id, "from": from, "to": to});
        out.push((
            usize::MAX,
            Frame {
                seq: 0,
                bytes: control(gap, EventKind::StreamGap.as_str()),
            },
        ));
    }
    out
}

/// Most bytes written in one body chunk when frames are batched.
const BATCH_BYTES: usize = 64 * 1024;

/// What one poll writes: nothing, one frame as it is (no copy), or several frames joined.
#[derive(Default)]
enum Chunk {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Chunk {
    fn len(&self) -> usize {
        match self {
            Chunk::Empty => 0,
            Chunk::One(b) => b.len(),
            Chunk::Many(b) => b.len(),
        }
    }

    fn push(&mut self, bytes: Bytes) {
        *self = match std::mem::take(self) {
            Chunk::Empty => Chunk::One(bytes),
            Chunk::One(first) => {
                let mut b = BytesMut::with_capacity(first.len() + bytes.len());
                b.put_slice(&first);
                b.put_slice(&bytes);
                Chunk::Many(b)
            }
            Chunk::Many(mut b) => {
                b.put_slice(&bytes);
                Chunk::Many(b)
            }
        };
    }

    fn into_bytes(self) -> Option<Bytes> {
        match self {
            Chunk::Empty => None,
            Chunk::One(b) => Some(b),
            Chunk::Many(b) => Some(b.freeze()),
        }
    }
}

/// Appends a frame unless it repeats one already written for its session.
fn take(last: &mut [i64], out: &mut Chunk, i: usize, f: Frame) {
    if i != usize::MAX {
        if f.seq <= last[i] {
            return;
        }
        last[i] = f.seq;
    }
    out.push(f.bytes);
}

/// A subscription whose replay has pages left to read.
struct Replaying {
    rest: Box<dyn ReplayRest>,
    /// The last seq read so far: the next page starts after it.
    after: i64,
}

type PageFuture = BoxFuture<'static, Result<ReplayPage, String>>;

/// The SSE body of one connection. Frames that are ready together (a replay page, or a burst
/// of live events) are written as one chunk, so a burst costs one socket write per subscriber.
///
/// The replay is read page by page (`ReplayRest`): the next page is fetched only when
/// everything queued is written, and hyper polls the body only when the socket takes data,
/// so a client that stops reading holds one page. A subscription's live frames wait in its
/// bounded live queue until its replay is complete (a full queue drops the subscriber, as for
/// any slow client).
///
/// Per-frame work is kept to the minimum because one event is written to every subscriber:
/// no clock read or timer reset per frame (the heartbeat timer ticks every
/// `HEARTBEAT / 2` and pings when a whole tick passed without a frame, so a quiet stream
/// gets a ping after 7.5–15 s), and no kill-switch poll (a dropped subscriber's whole
/// connection is aborted by [`crate::serve`]).
struct SseBody {
    queue: VecDeque<(usize, Frame)>,
    /// Per subscription: its live queue, and its replay's pages still to read.
    live: Vec<LiveRx>,
    replaying: Vec<Option<Replaying>>,
    sessions: Vec<String>,
    fetch: Option<(usize, PageFuture)>,
    /// A page could not be read: end the stream (the client reconnects with its cursor).
    failed: bool,
    last: Vec<i64>,
    tick: Pin<Box<Sleep>>,
    wrote: bool,
    finished: bool,
    _counted: SseGuard,
}

impl SseBody {
    /// Moves frames into `out`: the queue first, then the next replay page once the queue is
    /// written. Stops when `out` is full, a page is pending, or no replay is left.
    fn fill(&mut self, cx: &mut Context<'_>, out: &mut Chunk) {
        loop {
            while out.len() < BATCH_BYTES {
                let Some((i, f)) = self.queue.pop_front() else {
                    break;
                };
                take(&mut self.last, out, i, f);
            }
            if !self.queue.is_empty() {
                return;
            }
            if self.fetch.is_none() {
                let Some(i) = self.replaying.iter().position(Option::is_some) else {
                    return;
                };
                if let Some(r) = &self.replaying[i] {
                    self.fetch = Some((i, r.rest.page(r.after)));
                }
            }
            let Some((i, fut)) = self.fetch.as_mut() else {
                return;
            };
            let i = *i;
            let page = match fut.as_mut().poll(cx) {
                Poll::Pending => return,
                Poll::Ready(p) => p,
            };
            self.fetch = None;
            let page = match page {
                Ok(p) => p,
                Err(_) => {
                    self.failed = true;
                    return;
                }
            };
            if let Some((from, to)) = page.gap {
                let gap = json!({"type": EventKind::StreamGap.as_str(), "session_id": self.sessions[i],
                    "from": from, "to": to});
                self.queue.push_back((
                    usize::MAX,
                    Frame {
                        seq: 0,
                        bytes: control(gap, EventKind::StreamGap.as_str()),
                    },
                ));
            }
            if let Some(r) = self.replaying[i].as_mut() {
                r.after = r.after.max(page.through);
            }
            self.queue.extend(page.frames.into_iter().map(|f| (i, f)));
            if page.done {
                self.replaying[i] = None;
            }
        }
    }
}

impl Stream for SseBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        let mut out = Chunk::Empty;
        if !this.failed {
            this.fill(cx, &mut out);
        }
        let mut ended = 0;
        if this.queue.is_empty() {
            // Live frames once everything queued is written, one chunk's worth per poll: the
            // rest stays in the live queue, where it counts against its cap. A
            // subscription still replaying leaves its live frames there until its replay is
            // complete.
            let last = &mut this.last;
            for (i, rx) in this.live.iter_mut().enumerate() {
                if this.replaying[i].is_some() {
                    continue;
                }
                let room = BATCH_BYTES.saturating_sub(out.len());
                if room == 0 {
                    break; // written now; the next poll takes more
                }
                let taken = rx.poll_drain_upto(cx, room, &mut |f| take(last, &mut out, i, f));
                if let Poll::Ready(None) = taken {
                    ended += 1;
                }
            }
        }
        if let Some(bytes) = out.into_bytes() {
            this.wrote = true;
            return Poll::Ready(Some(Ok(bytes)));
        }
        if this.failed {
            this.finished = true;
            return Poll::Ready(Some(Err(std::io::Error::other(
                "the replay could not be read",
            ))));
        }
        if ended == this.live.len() && this.queue.is_empty() {
            // Every sink was closed by the engine (session deleted, slow subscriber dropped,
            // or shutdown): end with an error so the socket closes.
            this.finished = true;
            return Poll::Ready(Some(Err(std::io::Error::other("stream closed"))));
        }
        while this.tick.as_mut().poll(cx).is_ready() {
            this.tick.as_mut().reset(Instant::now() + HEARTBEAT / 2);
            if !std::mem::take(&mut this.wrote) {
                return Poll::Ready(Some(Ok(Bytes::from_static(PING))));
            }
        }
        Poll::Pending
    }
}

/// Builds the body stream for one or more subscriptions on one connection.
pub fn body_stream(
    subs: Vec<Subscription>,
    pad: bool,
) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
    let mut queue = VecDeque::new();
    if pad {
        let mut p = BytesMut::with_capacity(8200);
        p.put_slice(b": ");
        p.put_bytes(b' ', 8192);
        p.put_slice(b"\n\n");
        queue.push_back((
            usize::MAX,
            Frame {
                seq: 0,
                bytes: p.freeze(),
            },
        ));
    }
    let n = subs.len();
    let (mut live, mut replaying) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut last, mut sessions) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for (i, mut sub) in subs.into_iter().enumerate() {
        queue.extend(prelude(&sub));
        last.push(sub.ready.cursor);
        let replay = std::mem::take(&mut sub.replay);
        let after = replay.last().map_or(sub.ready.cursor, |f| f.seq);
        queue.extend(replay.into_iter().map(|f| (i, f)));
        replaying.push(sub.rest.take().map(|rest| Replaying { rest, after }));
        sessions.push(sub.session_id);
        live.push(sub.live);
    }
    SseBody {
        queue,
        live,
        replaying,
        sessions,
        fetch: None,
        failed: false,
        last,
        tick: Box::pin(tokio::time::sleep(HEARTBEAT / 2)),
        wrote: false,
        finished: false,
        _counted: SseGuard::new(),
    }
    .boxed()
}

/// Whether the request came through a proxy that may buffer (the pad rule).
pub fn wants_pad(h: &axum::http::HeaderMap) -> bool {
    ["cf-ray", "cf-connecting-ip", "x-forwarded-for", "via"]
        .iter()
        .any(|n| h.contains_key(*n))
}

#[cfg(test)]
mod tests;
