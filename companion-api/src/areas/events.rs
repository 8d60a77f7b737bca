//! A session's events: the resumable stream, its polling fallbacks, the egress records.

use crate::error::ApiResult;
use crate::live::Frame;
use crate::wire::*;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

/// What `subscription.ready` says.
#[derive(Debug, Clone)]
pub struct Ready {
    pub cursor: i64,
    pub current_turn_id: Option<String>,
    pub is_live: bool,
}

/// An atomic subscription: replay captured together with the live registration.
pub struct Subscription {
    pub session_id: String,
    pub ready: Ready,
    /// `(from, to)` when the cursor is older than what is retained.
    pub gap: Option<(i64, i64)>,
    pub replay: Vec<Frame>,
    /// The pages of the replay after `replay`, read as the client takes them (`None`: the
    /// replay is complete).
    pub rest: Option<Box<dyn crate::replay::ReplayRest>>,
    pub live: crate::live::LiveRx,
}

/// A requested cursor (`None` = not given, treated as 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor(pub i64);

#[async_trait]
pub trait EventsApi: Send + Sync + 'static {
    /// Registers a live sink atomically with the replay capture. The engine cancels `kick`
    /// when the subscriber falls 1024 frames behind; the connection then closes.
    async fn subscribe(
        &self,
        sid: &str,
        cursor: Cursor,
        kick: CancellationToken,
    ) -> ApiResult<Subscription>;
    async fn since(&self, sid: &str, cursor: i64) -> ApiResult<Vec<JournalEntry>>;
    async fn seq(&self, sid: &str) -> ApiResult<i64>;
    /// The session's stored egress decisions, newest first.
    async fn egress(&self, sid: &str, limit: usize, before: Option<i64>) -> ApiResult<EgressPage>;
}
