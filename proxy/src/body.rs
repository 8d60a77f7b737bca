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

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, SizeHint};

use crate::h1_watch::RequestWatch;

/// A client's request body with an inactivity limit: nothing for `idle` ends it with a
/// [`BodyStalled`] error (the send fails with a 408), so a client that declares a body and then drips or sends
/// nothing cannot hold a connection and its upstream forever. A live body pays no timer:
/// the timer is armed only while the body has nothing ready. With its connection's
/// framing watch ([`crate::h1_watch`]), a body that declared an absurd chunk size ends at
/// once with [`ChunkTooLarge`] (a 400).
pub struct Paced<B> {
    inner: B,
    idle: std::time::Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    watch: Option<RequestWatch>,
}

impl<B> Paced<B> {
    /// Wrap `inner`; `watch` is its request's view of the connection's framing watch.
    pub fn new(inner: B, idle: std::time::Duration, watch: Option<RequestWatch>) -> Self {
        Paced {
            inner,
            idle,
            timer: None,
            watch,
        }
    }
}

/// The error a request body ends with when it declared a chunk above
/// [`crate::h1_watch::MAX_CHUNK_SIZE`].
#[derive(Debug)]
pub struct ChunkTooLarge(pub u64);

impl std::fmt::Display for ChunkTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body declared a chunk of {} bytes (0x{:x}); the proxy takes chunks of at most {} bytes",
            self.0,
            self.0,
            crate::h1_watch::MAX_CHUNK_SIZE
        )
    }
}

impl std::error::Error for ChunkTooLarge {}

/// The error a stalled request body ends with.
#[derive(Debug)]
pub struct BodyStalled(pub std::time::Duration);

impl std::fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no request body bytes for {} s", self.0.as_secs())
    }
}

impl std::error::Error for BodyStalled {}

impl<B> Body for Paced<B>
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
        let this = &mut *self;
        if let Some(w) = &this.watch {
            if let Some(n) = w.too_large() {
                return Poll::Ready(Some(Err(Box::new(ChunkTooLarge(n)))));
            }
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.timer = None;
                Poll::Ready(r.map(|res| res.map_err(Into::into)))
            }
            Poll::Pending => {
                // the chunk-size line may be read while the body waits for its data
                if let Some(n) = this.watch.as_ref().and_then(|w| w.poll_too_large(cx)) {
                    return Poll::Ready(Some(Err(Box::new(ChunkTooLarge(n)))));
                }
                let idle = this.idle;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyStalled(idle))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
