//! The body type used for every response the proxy produces or relays.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};

/// Boxed body error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every request/response the proxy hands to hyper.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// An empty body.
pub fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A body from bytes.
pub fn full(b: impl Into<Bytes>) -> ProxyBody {
    Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, SizeHint};

use crate::record::AllowRecord;

/// Wraps a streaming body: counts data bytes into `counter` and, when the
/// body ends or is dropped, drops `record` (which emits the decision).
pub struct Metered<B> {
    inner: B,
    counter: Arc<AtomicU64>,
    record: Option<AllowRecord>,
}

impl<B> Metered<B> {
    /// Count into `counter`; hold `record` until the end.
    pub fn new(inner: B, counter: Arc<AtomicU64>, record: Option<AllowRecord>) -> Self {
        Metered {
            inner,
            counter,
            record,
        }
    }
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
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
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
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
    B::Error: Into<BoxError>,
{
    UnsyncBoxBody::new(Metered::new(inner, counter, record))
}
