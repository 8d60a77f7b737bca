//! A relayed body that counts its bytes and holds the flow's decision record until the
//! body ends (the record is emitted then, with the final byte counts).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Body, Frame, SizeHint};

use crate::body::{BoxError, ProxyBody};
use crate::record::AllowRecord;

/// Wraps a streaming body: counts data bytes into `counter` and, when the
/// body ends or is dropped, drops `record` (which emits the decision).
pub struct Metered<B> {
    inner: B,
    counter: Arc<AtomicU64>,
    record: Option<AllowRecord>,
    /// The record was reported as an open flow (or needs no check any more).
    opened: bool,
    /// Data frames seen: a one-frame (small) response never reads the clock.
    frames: u32,
}

impl<B> Metered<B> {
    /// Count into `counter`; hold `record` until the end.
    pub fn new(inner: B, counter: Arc<AtomicU64>, record: Option<AllowRecord>) -> Self {
        Metered {
            inner,
            counter,
            record,
            opened: false,
            frames: 0,
        }
    }
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError> + std::fmt::Display,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    self.counter.fetch_add(d.len() as u64, Ordering::Relaxed);
                }
                // a response that keeps streaming becomes visible while it runs
                self.frames = self.frames.saturating_add(1);
                if !self.opened && self.frames > 1 {
                    if let Some(r) = &self.record {
                        if r.is_long() {
                            r.open();
                            self.opened = true;
                        }
                    }
                }
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(r) = self.record.take() {
                    // the upstream closed (or broke) the response before its end
                    r.set_failure(
                        crate::deny::kind::UPSTREAM_INCOMPLETE,
                        format!("the upstream's response ended before its body was complete: {e}"),
                    );
                }
            }
            Poll::Ready(None) => {
                self.record.take();
            }
            Poll::Pending => {}
        }
        r.map(|o| o.map(|res| res.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Box a metered body.
pub fn metered<B>(inner: B, counter: Arc<AtomicU64>, record: Option<AllowRecord>) -> ProxyBody
where
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<BoxError> + std::fmt::Display,
{
    UnsyncBoxBody::new(Metered::new(inner, counter, record))
}
