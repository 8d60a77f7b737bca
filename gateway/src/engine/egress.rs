//! The stored egress decisions of a session, newest first (`GET /v1/sessions/:sid/egress`).
//! Each row is the decision record as the egress sink serialized it, sent as stored.

use crate::store::{rows, Store, StoreResult};
use vis_companion_api::wire::{EgressPage, StoredJson};

pub struct EgressLog {
    store: Store,
}

impl EgressLog {
    pub fn new(store: Store) -> EgressLog {
        EgressLog { store }
    }

    /// Up to `limit` decisions with a row seq below `before` (all when `None`).
    pub async fn page(
        &self,
        sid: &str,
        limit: usize,
        before: Option<i64>,
    ) -> StoreResult<EgressPage> {
        let id = sid.to_string();
        let mut rows = self
            .store
            .with(move |db| rows::egress_page(db, &id, before, limit))
            .await?;
        let has_more = rows.len() > limit;
        rows.truncate(limit);
        let next_before = if has_more {
            rows.last().map(|(s, _)| *s)
        } else {
            None
        };
        let decisions = rows
            .into_iter()
            .filter_map(|(_, d)| StoredJson::parse(d))
            .collect();
        Ok(EgressPage {
            decisions,
            has_more,
            next_before,
        })
    }
}
