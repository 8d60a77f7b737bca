//! Restart recovery: a turn still stored as running when the gateway starts failed with the
//! process, and so did the forms and live views its tools had open.

use super::turn_machine::Terminal;
use super::{now_ms, Turns};
use crate::records::turn::Turn;
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;
use vis_companion_api::events::{Event, HumanInputClose, LiveClose};

impl Turns {
    /// Every turn still stored as running gets `turn.failed` (interrupted) (docs/decisions.md, G3).
    pub async fn recover(self: &Arc<Self>) -> anyhow::Result<usize> {
        self.recover_in(None).await
    }

    /// Sessions just homed here from a node whose lease ran out (docs/decisions.md, C4):
    /// their state is read afresh from the store, their running turns end as interrupted
    /// (as after a crash) and their queues go on here.
    pub async fn adopt(self: &Arc<Self>, sids: &[String]) {
        for sid in sids {
            self.sessions.forget(sid);
        }
        match self.store.with(crate::store::rows::max_turn_ord).await {
            Ok(ord) => self.sessions.raise_ord(ord + 1),
            Err(e) => tracing::warn!(error = %e, "cannot read the turn order"),
        }
        let only: HashSet<String> = sids.iter().cloned().collect();
        match self.recover_in(Some(&only)).await {
            Ok(n) if n > 0 => {
                tracing::warn!(
                    turns = n,
                    "turns running on the lost node were marked failed"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot settle the lost node's turns"),
        }
        if let Err(e) = self.resume_backlogs_in(Some(&only)).await {
            tracing::error!(error = %e, "cannot resume the lost node's queued turns");
        }
    }

    async fn recover_in(self: &Arc<Self>, only: Option<&HashSet<String>>) -> anyhow::Result<usize> {
        let records = self
            .store
            .with(|db| crate::store::rows::turns_with_status(db, "streaming"))
            .await?;
        let mut n = 0;
        for rec in records {
            let Ok(t) = serde_json::from_str::<Turn>(&rec) else {
                continue;
            };
            if only.is_some_and(|o| !o.contains(&t.sid)) {
                continue;
            }
            let Ok(shared) = self.sessions.get(&t.sid).await else {
                continue;
            };
            if self.bus.is_remote(&t.sid) {
                continue; // running on its own node
            }
            let (sid, tid) = (t.sid.clone(), t.tid.clone());
            let open_blocks = self
                .store
                .with(move |db| crate::store::rows::open_blocks(db, &sid, &tid))
                .await
                .unwrap_or_default();
            self.close_dangling_human_input(&t.sid).await;
            self.settle_stored(&shared, t, open_blocks, Terminal::interrupted());
            n += 1;
        }
        Ok(n)
    }
}

impl Turns {
    /// Turns a graceful stop left queued (no running turn, queue not paused) run where they
    /// left off: each such session drains its oldest queued turn, so nothing submitted after
    /// the start overtakes them. Call once the sandbox runs, before the API serves.
    pub async fn resume_backlogs(self: &Arc<Self>) -> anyhow::Result<usize> {
        self.resume_backlogs_in(None).await
    }

    async fn resume_backlogs_in(
        self: &Arc<Self>,
        only: Option<&HashSet<String>>,
    ) -> anyhow::Result<usize> {
        let records = self
            .store
            .with(|db| crate::store::rows::turns_with_status(db, "queued"))
            .await?;
        let mut sids: Vec<String> = Vec::new();
        for t in records
            .iter()
            .filter_map(|r| serde_json::from_str::<Turn>(r).ok())
        {
            if !sids.contains(&t.sid) && only.is_none_or(|o| o.contains(&t.sid)) {
                sids.push(t.sid);
            }
        }
        let mut n = 0;
        for sid in sids {
            let Ok(shared) = self.sessions.get(&sid).await else {
                continue;
            };
            if self.bus.is_remote(&sid) {
                continue; // its own node runs its queue
            }
            let now = now_ms();
            if self.transition(&shared, |st| st.drain(now)).is_some() {
                n += 1;
            }
        }
        Ok(n)
    }
}

impl Turns {
    /// Forms and live views the journal shows open when the gateway stopped can never be
    /// answered or updated (the extension call that owned them died with the process): each
    /// gets its closing event with reason `interrupted`, so no client keeps showing it.
    async fn close_dangling_human_input(&self, sid: &str) {
        let owned = sid.to_string();
        let dangling = self
            .store
            .with(move |db| crate::store::rows::dangling_human_input(db, &owned))
            .await
            .unwrap_or_default();
        for (is_view, id) in dangling {
            if is_view {
                let result = json!({"view_id": id, "is_completed": false, "reason": "interrupted",
                    "is_from_human": false});
                self.bus.publish(
                    sid,
                    Event::HumanInputLiveClose(LiveClose {
                        view_id: id,
                        result,
                    }),
                );
            } else {
                self.bus.publish(
                    sid,
                    Event::HumanInputClose(HumanInputClose {
                        request_id: id,
                        reason: "interrupted".into(),
                    }),
                );
            }
        }
    }
}
