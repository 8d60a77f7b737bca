//! The rest of a subscription's replay, fetched page by page while the client reads: a
//! client that stops reading holds one page of its history instead of all of it, and its live frames wait in its bounded live queue meanwhile.

use crate::live::Frame;
use futures::future::BoxFuture;

/// One page of stored events.
#[derive(Debug, Default)]
pub struct ReplayPage {
    /// Written before the frames: retention trimmed `(from, to)` before this page was read.
    pub gap: Option<(i64, i64)>,
    pub frames: Vec<Frame>,
    /// The last seq this page covers: the next page reads after it.
    pub through: i64,
    /// The replay is complete.
    pub done: bool,
}

/// Reads the pages of a replay after the first.
pub trait ReplayRest: Send + Sync + 'static {
    /// The page of stored events after `after` (up to the subscription's high-water).
    fn page(&self, after: i64) -> BoxFuture<'static, Result<ReplayPage, String>>;
}
