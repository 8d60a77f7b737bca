//! One subscriber's live queue: the engine pushes frames, the SSE body drains them.
//!
//! A bounded FIFO behind a short, uncontended lock and one waker. Cheaper than a general
//! channel for SSE fan-out, where one publisher fills thousands of these per event: a push is
//! a lock, a `push_back` and a wake; the body takes everything that is queued in one lock.

use bytes::Bytes;
use futures::task::AtomicWaker;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

/// One pre-formatted SSE frame of a session's stream.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The event's per-session seq (0 for control frames).
    pub seq: i64,
    /// `id: …\nevent: …\ndata: …\n\n`, ready to write.
    pub bytes: Bytes,
}

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// The subscriber is `cap` frames behind: it is too slow and should be dropped.
    Full,
    /// The subscriber is gone.
    Closed,
}

struct State {
    frames: VecDeque<Frame>,
    /// The sending side is gone: the stream ends once the queue is drained.
    tx_gone: bool,
    rx_gone: bool,
}

struct Shared {
    cap: usize,
    state: Mutex<State>,
    waker: AtomicWaker,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the queue inconsistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The engine's end of a subscriber's queue.
pub struct LiveTx(Arc<Shared>);

/// The SSE body's end of a subscriber's queue.
pub struct LiveRx(Arc<Shared>);

/// A queue holding at most `cap` undelivered frames.
pub fn channel(cap: usize) -> (LiveTx, LiveRx) {
    let shared = Arc::new(Shared {
        cap,
        state: Mutex::new(State {
            frames: VecDeque::new(),
            tx_gone: false,
            rx_gone: false,
        }),
        waker: AtomicWaker::new(),
    });
    (LiveTx(shared.clone()), LiveRx(shared))
}

impl LiveTx {
    /// Queues one frame and wakes the subscriber.
    pub fn push(&self, frame: Frame) -> Result<(), PushError> {
        {
            let mut st = self.0.lock();
            if st.rx_gone {
                return Err(PushError::Closed);
            }
            if st.frames.len() >= self.0.cap {
                return Err(PushError::Full);
            }
            st.frames.push_back(frame);
        }
        self.0.waker.wake();
        Ok(())
    }
}

impl Drop for LiveTx {
    fn drop(&mut self) {
        self.0.lock().tx_gone = true;
        self.0.waker.wake();
    }
}

impl LiveRx {
    /// Hands every queued frame to `take`, in order. `Ready(None)`: the sender is gone and
    /// nothing is left; `Ready(Some(()))`: at least one frame was taken; `Pending`: nothing
    /// yet (the task is woken on the next push).
    pub fn poll_drain(
        &mut self,
        cx: &mut Context<'_>,
        take: &mut impl FnMut(Frame),
    ) -> Poll<Option<()>> {
        self.poll_drain_upto(cx, usize::MAX, take)
    }

    /// [`LiveRx::poll_drain`], taking frames only until `max_bytes` are taken (at least one
    /// frame): the rest stays queued, where it still counts against the queue's cap, so a
    /// subscriber whose socket does not drain is dropped at the cap instead of handing its
    /// whole queue to the connection's write buffer.
    pub fn poll_drain_upto(
        &mut self,
        cx: &mut Context<'_>,
        max_bytes: usize,
        take: &mut impl FnMut(Frame),
    ) -> Poll<Option<()>> {
        if let ready @ Poll::Ready(_) = self.drain(max_bytes, take) {
            return ready;
        }
        // Register only before waiting (a poll that finds frames needs no wake-up), then look
        // again so a push that raced the registration is not missed.
        self.0.waker.register(cx.waker());
        self.drain(max_bytes, take)
    }

    /// What is queued (up to `max_bytes`), under one lock: `Ready(Some)` with frames,
    /// `Ready(None)` when the sender is gone and nothing is left, `Pending` otherwise.
    fn drain(&mut self, max_bytes: usize, take: &mut impl FnMut(Frame)) -> Poll<Option<()>> {
        let mut st = self.0.lock();
        if st.frames.is_empty() {
            return if st.tx_gone {
                Poll::Ready(None)
            } else {
                Poll::Pending
            };
        }
        let mut bytes = 0usize;
        while bytes < max_bytes {
            let Some(f) = st.frames.pop_front() else {
                break;
            };
            bytes += f.bytes.len();
            take(f);
        }
        Poll::Ready(Some(()))
    }
}

impl Drop for LiveRx {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.rx_gone = true;
        st.frames.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::task::noop_waker_ref;

    fn frame(seq: i64) -> Frame {
        Frame {
            seq,
            bytes: Bytes::from(seq.to_string()),
        }
    }

    fn drain(rx: &mut LiveRx) -> Poll<Option<Vec<i64>>> {
        let mut cx = Context::from_waker(noop_waker_ref());
        let mut got = Vec::new();
        rx.poll_drain(&mut cx, &mut |f| got.push(f.seq))
            .map(|o| o.map(|()| got))
    }

    #[test]
    fn frames_come_out_in_order_and_all_at_once() {
        let (tx, mut rx) = channel(8);
        assert_eq!(drain(&mut rx), Poll::Pending);
        for s in 1..=3 {
            tx.push(frame(s)).unwrap();
        }
        assert_eq!(drain(&mut rx), Poll::Ready(Some(vec![1, 2, 3])));
        assert_eq!(drain(&mut rx), Poll::Pending);
    }

    #[test]
    fn a_full_queue_refuses_instead_of_growing() {
        let (tx, mut rx) = channel(2);
        tx.push(frame(1)).unwrap();
        tx.push(frame(2)).unwrap();
        assert_eq!(tx.push(frame(3)), Err(PushError::Full));
        assert_eq!(drain(&mut rx), Poll::Ready(Some(vec![1, 2])));
        assert_eq!(tx.push(frame(3)), Ok(()));
    }

    #[test]
    fn a_drain_stops_at_its_byte_budget_and_the_rest_still_counts_against_the_cap() {
        let (tx, mut rx) = channel(3);
        for s in 1..=3 {
            tx.push(frame(s * 11)).unwrap();
        }
        let mut cx = Context::from_waker(noop_waker_ref());
        let mut got = Vec::new();
        let _ = rx.poll_drain_upto(&mut cx, 3, &mut |f| got.push(f.seq));
        assert_eq!(got, vec![11, 22], "2 + 2 bytes reach the budget of 3");
        tx.push(frame(44)).unwrap();
        tx.push(frame(55)).unwrap();
        assert_eq!(
            tx.push(frame(66)),
            Err(PushError::Full),
            "33 is still queued"
        );
        assert_eq!(drain(&mut rx), Poll::Ready(Some(vec![33, 44, 55])));
    }

    #[test]
    fn the_stream_ends_after_the_sender_is_dropped_and_the_queue_drained() {
        let (tx, mut rx) = channel(4);
        tx.push(frame(1)).unwrap();
        drop(tx);
        assert_eq!(drain(&mut rx), Poll::Ready(Some(vec![1])));
        assert_eq!(drain(&mut rx), Poll::Ready(None));
    }

    #[test]
    fn pushing_to_a_dropped_subscriber_says_closed() {
        let (tx, rx) = channel(4);
        assert_eq!(tx.push(frame(1)), Ok(()));
        drop(rx);
        assert_eq!(tx.push(frame(1)), Err(PushError::Closed));
    }

    #[tokio::test]
    async fn a_push_wakes_the_waiting_subscriber() {
        let (tx, mut rx) = channel(4);
        let waiter = tokio::spawn(async move {
            std::future::poll_fn(|cx| {
                let mut got = Vec::new();
                rx.poll_drain(cx, &mut |f| got.push(f.seq))
                    .map(|o| o.map(|()| got))
            })
            .await
        });
        tokio::task::yield_now().await;
        tx.push(frame(7)).unwrap();
        assert_eq!(waiter.await.unwrap(), Some(vec![7]));
    }
}
