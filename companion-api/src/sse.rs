//! SSE framing (§4.2) and the per-connection stream: `subscription.ready` → `stream.gap` →
//! replay → live, deduplicated per session, with a `: ping` heartbeat and the
//! anti-buffering pad.

use crate::engine::{Frame, Subscription};
use bytes::{BufMut, Bytes, BytesMut};
use futures::stream::{BoxStream, SelectAll, Stream, StreamExt};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Quiet time after which a `: ping` comment is written.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// Frames a subscriber may fall behind before it is dropped.
pub const SSE_QUEUE_CAP: usize = 1024;
const PING: &[u8] = b": ping\n\n";

/// Formats one frame: `id: <seq>` (empty for control frames), `event: <type>`, one-line data.
pub fn format_frame(seq: Option<i64>, event_type: &str, data: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(data.len() + event_type.len() + 32);
    b.put_slice(b"id: ");
    if let Some(s) = seq {
        b.put_slice(s.to_string().as_bytes());
    }
    b.put_slice(b"\nevent: ");
    b.put_slice(event_type.as_bytes());
    b.put_slice(b"\ndata: ");
    b.put_slice(data.as_bytes());
    b.put_slice(b"\n\n");
    b.freeze()
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn control(value: Value, event_type: &str) -> Bytes {
    format_frame(None, event_type, &value.to_string())
}

/// The control frames and replay of one subscription, in order.
fn prelude(sub: &Subscription) -> Vec<(usize, Frame)> {
    let mut out = Vec::with_capacity(sub.replay.len() + 2);
    let ready = json!({
        "type": "subscription.ready", "session_id": sub.session_id, "cursor": sub.ready.cursor,
        "current_turn_id": sub.ready.current_turn_id, "is_live": sub.ready.is_live,
        "server_time_ms": now_ms(),
    });
    out.push((
        usize::MAX,
        Frame {
            seq: 0,
            bytes: control(ready, "subscription.ready"),
        },
    ));
    if let Some((from, to)) = sub.gap {
        let gap =
            json!({"type": "stream.gap", "session_id": sub.session_id, "from": from, "to": to});
        out.push((
            usize::MAX,
            Frame {
                seq: 0,
                bytes: control(gap, "stream.gap"),
            },
        ));
    }
    out
}

/// Most bytes written in one body chunk when frames are batched.
const BATCH_BYTES: usize = 64 * 1024;

/// The SSE body of one connection. Frames that are ready together (a replay, or a burst of
/// live events) are written as one chunk, so a burst costs one socket write per subscriber.
struct SseBody {
    queue: VecDeque<(usize, Frame)>,
    live: SelectAll<BoxStream<'static, (usize, Frame)>>,
    last: Vec<i64>,
    kill: Pin<Box<WaitForCancellationFutureOwned>>,
    heartbeat: Pin<Box<Sleep>>,
    live_ended: bool,
    finished: bool,
}

impl SseBody {
    /// Appends a frame unless it repeats one already written for its session.
    fn take(&mut self, out: &mut BytesMut, (i, f): (usize, Frame)) {
        if i != usize::MAX {
            if f.seq <= self.last[i] {
                return;
            }
            self.last[i] = f.seq;
        }
        out.put_slice(&f.bytes);
    }
}

impl Stream for SseBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        if this.kill.as_mut().poll(cx).is_ready() {
            this.finished = true;
            return Poll::Ready(Some(Err(std::io::Error::other("subscriber dropped"))));
        }
        let mut out = BytesMut::new();
        while out.len() < BATCH_BYTES {
            let Some(item) = this.queue.pop_front() else {
                break;
            };
            this.take(&mut out, item);
        }
        while out.len() < BATCH_BYTES && !this.live_ended {
            match this.live.poll_next_unpin(cx) {
                Poll::Ready(Some(item)) => this.take(&mut out, item),
                Poll::Ready(None) => this.live_ended = true,
                Poll::Pending => break,
            }
        }
        if !out.is_empty() {
            this.heartbeat.as_mut().reset(Instant::now() + HEARTBEAT);
            return Poll::Ready(Some(Ok(out.freeze())));
        }
        if this.live_ended && this.queue.is_empty() {
            // Every sink was closed by the engine (session deleted or shutdown).
            this.finished = true;
            return Poll::Ready(Some(Err(std::io::Error::other("stream closed"))));
        }
        if this.heartbeat.as_mut().poll(cx).is_ready() {
            this.heartbeat.as_mut().reset(Instant::now() + HEARTBEAT);
            return Poll::Ready(Some(Ok(Bytes::from_static(PING))));
        }
        Poll::Pending
    }
}

/// Builds the body stream for one or more subscriptions on one connection.
pub fn body_stream(
    subs: Vec<Subscription>,
    pad: bool,
    kill: CancellationToken,
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
    let mut live = SelectAll::new();
    let mut last = Vec::with_capacity(subs.len());
    for (i, mut sub) in subs.into_iter().enumerate() {
        queue.extend(prelude(&sub));
        last.push(sub.ready.cursor);
        for f in std::mem::take(&mut sub.replay) {
            queue.push_back((i, f));
        }
        let rx = ReceiverStream::new(sub.live).map(move |f| (i, f)).boxed();
        live.push(rx);
    }
    SseBody {
        queue,
        live,
        last,
        kill: Box::pin(kill.cancelled_owned()),
        heartbeat: Box::pin(tokio::time::sleep(HEARTBEAT)),
        live_ended: false,
        finished: false,
    }
    .boxed()
}

/// Whether the request came through a proxy that may buffer (§4.1 pad rule).
pub fn wants_pad(h: &axum::http::HeaderMap) -> bool {
    ["cf-ray", "cf-connecting-ip", "x-forwarded-for", "via"]
        .iter()
        .any(|n| h.contains_key(*n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_has_id_event_and_one_data_line() {
        let f = format_frame(Some(7), "turn.started", r#"{"a":1}"#);
        assert_eq!(&f[..], b"id: 7\nevent: turn.started\ndata: {\"a\":1}\n\n");
    }

    fn frame(seq: i64) -> Frame {
        Frame {
            seq,
            bytes: format_frame(Some(seq), "x", "{}"),
        }
    }

    #[tokio::test]
    async fn frames_ready_together_are_written_once_without_duplicates() {
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let sub = Subscription {
            session_id: "s".into(),
            ready: crate::engine::Ready {
                cursor: 1,
                current_turn_id: None,
                is_live: false,
            },
            gap: Some((1, 1)),
            replay: vec![frame(2), frame(3)],
            live: rx,
        };
        tx.send(frame(3)).await.unwrap();
        tx.send(frame(4)).await.unwrap();
        let kill = CancellationToken::new();
        let mut body = body_stream(vec![sub], false, kill.clone());
        let first = body.next().await.unwrap().unwrap();
        let text = String::from_utf8_lossy(&first);
        assert!(
            text.starts_with("id: \nevent: subscription.ready"),
            "{text}"
        );
        assert!(text.contains("event: stream.gap"));
        assert_eq!(
            text.matches("id: 3\n").count(),
            1,
            "seq 3 replayed and live must be written once: {text}"
        );
        assert!(text.contains("id: 2\n") && text.contains("id: 4\n"));
        kill.cancel();
        assert!(
            body.next().await.unwrap().is_err(),
            "a killed subscriber ends with an error so the socket closes"
        );
    }

    #[test]
    fn a_control_frame_has_an_empty_id_line() {
        let f = format_frame(None, "subscription.ready", "{}");
        assert!(f.starts_with(b"id: \nevent: subscription.ready\n"));
    }
}
