//! The events area of the Companion boundary: the bus's subscriptions and the journal.

use super::GatewayAreas;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use vis_companion_api::wire::*;
use vis_companion_api::{ApiError, ApiResult, Cursor, EventsApi, Subscription};

#[async_trait]
impl EventsApi for GatewayAreas {
    async fn subscribe(
        &self,
        sid: &str,
        cursor: Cursor,
        kick: CancellationToken,
    ) -> ApiResult<Subscription> {
        let shared = self.0.sessions.get(sid).await?;
        let running = if self.0.bus.is_remote(sid) {
            // Running on the session's home node: the store says which turn, and how far.
            let id = sid.to_string();
            let (stored, running) = self
                .0
                .store
                .with(move |db| {
                    let stored =
                        crate::store::rows::get_session(db, &id)?.map_or(0, |r| r.last_seq);
                    Ok((stored, crate::store::rows::running_turn(db, &id)?))
                })
                .await?;
            self.0.bus.catch_up_remote(sid, stored);
            running
        } else {
            shared
                .lock()
                .running
                .as_ref()
                .map(|r| (r.turn.tid.clone(), r.started_seq))
        };
        self.0
            .bus
            .try_subscribe(sid, cursor.0, running, kick)
            .await?
            .ok_or_else(|| ApiError::session_not_found(sid))
    }

    async fn since(&self, sid: &str, cursor: i64) -> ApiResult<Vec<JournalEntry>> {
        if self.0.sessions.get(sid).await.is_err() {
            return if uuid::Uuid::parse_str(sid).is_ok() {
                Ok(vec![])
            } else {
                Err(ApiError::session_not_found(sid))
            };
        }
        Ok(self.0.bus.since(sid, cursor).await)
    }

    async fn seq(&self, sid: &str) -> ApiResult<i64> {
        // 404 only for an unparsable sid; a valid unknown one has seen nothing yet.
        if self.0.sessions.get(sid).await.is_err() {
            return if uuid::Uuid::parse_str(sid).is_ok() {
                Ok(0)
            } else {
                Err(ApiError::session_not_found(sid))
            };
        }
        if self.0.bus.is_remote(sid) {
            let id = sid.to_string();
            let stored = self
                .0
                .store
                .with(move |db| crate::store::rows::get_session(db, &id))
                .await?;
            return Ok(stored.map_or(0, |r| r.last_seq));
        }
        self.0
            .bus
            .durable_high_water(sid)
            .ok_or_else(|| ApiError::session_not_found(sid))
    }

    async fn egress(&self, sid: &str, limit: usize, before: Option<i64>) -> ApiResult<EgressPage> {
        self.0.sessions.get(sid).await?;
        Ok(self.0.egress.page(sid, limit, before).await?)
    }
}
