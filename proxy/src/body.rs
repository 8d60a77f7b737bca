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
