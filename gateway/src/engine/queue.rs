//! Requests on a session's turns: cancel (one, or the running one by its key), read a turn,
//! edit or delete a queued one, resume a paused queue, drain it.

use super::lifecycle::{Terminal, CANCEL_BACKSTOP};
use super::turn::preview;
use super::{now_ms, Gateway, Running};
use serde_json::Value;
use std::sync::Arc;
use vis_companion_api::events::{Event, QueueResumed, TurnQueuedDeleted, TurnQueuedUpdated};
use vis_companion_api::wire::TurnRecord;
use vis_companion_api::{ApiError, ApiResult};

impl Gateway {
    pub async fn cancel(self: &Arc<Self>, sid: &str, tid: &str) -> ApiResult<()> {
        let shared = self.sessions.get(sid).await?;
        {
            let mut st = shared.lock();
            if let Some(r) = st.running.as_mut().filter(|r| r.turn.tid == tid) {
                self.fire_cancel(sid, r);
                return Ok(());
            }
            if st.queue.iter().any(|q| q.tid == tid) {
                return Err(not_running(tid, "queued"));
            }
        }
        let status = self.stored_status(sid, tid).await?;
        Err(not_running(tid, &status))
    }

    pub async fn cancel_current(
        self: &Arc<Self>,
        sid: &str,
        key: Option<String>,
    ) -> ApiResult<String> {
        let shared = self.sessions.get(sid).await?;
        let mut st = shared.lock();
        let Some(r) = st.running.as_mut() else {
            return Err(ApiError::conflict(
                "no-running-turn",
                "no turn is running in this session",
            ));
        };
        let tid = r.turn.tid.clone();
        if key.is_none() || r.turn.idempotency_key != key {
            return Err(ApiError::conflict(
                "not-owner",
                "the idempotency key does not match the running turn",
            )
            .with("turn_id", tid));
        }
        self.fire_cancel(sid, r);
        Ok(tid)
    }

    fn fire_cancel(self: &Arc<Self>, sid: &str, r: &mut Running) {
        if r.turn.cancelling_at.is_none() {
            r.turn.cancelling_at = Some(now_ms());
        }
        r.cancel.cancel();
        let (gw, sid, tid) = (self.clone(), sid.to_string(), r.turn.tid.clone());
        tokio::spawn(async move {
            tokio::time::sleep(CANCEL_BACKSTOP).await;
            gw.finish(&sid, &tid, Terminal::Cancelled);
        });
    }

    async fn stored_status(&self, sid: &str, tid: &str) -> ApiResult<String> {
        let rec = self.sessions.stored_turn(sid, tid).await?;
        Ok(rec.status.as_str().to_string())
    }

    /// The freshest record of a turn: running or queued in memory, else the store.
    pub async fn turn_record(&self, sid: &str, tid: &str) -> ApiResult<TurnRecord> {
        Ok(self.sessions.turn(sid, tid).await?.record())
    }

    pub async fn edit(
        self: &Arc<Self>,
        sid: &str,
        tid: &str,
        request: Option<Value>,
    ) -> ApiResult<TurnRecord> {
        let shared = self.sessions.get(sid).await?;
        {
            let mut st = shared.lock();
            if let Some(q) = st.queue.iter_mut().find(|q| q.tid == tid) {
                let Some(Value::String(text)) =
                    request.filter(|r| r.as_str().is_some_and(|s| !s.trim().is_empty()))
                else {
                    return Err(ApiError::conflict(
                        "invalid-request",
                        "request must be a non-blank string",
                    ));
                };
                q.request = text;
                q.display_request = None;
                let t = q.clone();
                self.save_turn(&t);
                self.bus.publish(
                    sid,
                    Event::TurnQueuedUpdated(TurnQueuedUpdated {
                        turn_id: t.tid.clone(),
                        request: t.request.clone(),
                        request_preview: preview(&t.request),
                    }),
                );
                return Ok(t.record());
            }
            if let Some(r) = st.running.as_ref().filter(|r| r.turn.tid == tid) {
                return Err(not_queued(tid, r.turn.status.as_str()));
            }
        }
        let status = self.stored_status(sid, tid).await?;
        Err(not_queued(tid, &status))
    }

    pub async fn delete_queued(self: &Arc<Self>, sid: &str, tid: &str) -> ApiResult<()> {
        let shared = self.sessions.get(sid).await?;
        {
            let mut st = shared.lock();
            if let Some(i) = st.queue.iter().position(|q| q.tid == tid) {
                if let Some(k) = st.queue.remove(i).and_then(|q| q.idempotency_key) {
                    st.keys.remove(&k);
                }
                let t = tid.to_string();
                self.store.submit("turn-delete", move |c| {
                    crate::store::rows::delete_turn(c, &t)
                });
                self.bus.publish(
                    sid,
                    Event::TurnQueuedDeleted(TurnQueuedDeleted {
                        turn_id: tid.to_string(),
                        request: None,
                        reason: None,
                    }),
                );
                return Ok(());
            }
            if let Some(r) = st.running.as_ref().filter(|r| r.turn.tid == tid) {
                return Err(not_queued(tid, r.turn.status.as_str()));
            }
        }
        let status = self.stored_status(sid, tid).await?;
        Err(not_queued(tid, &status))
    }

    pub async fn resume_queue(self: &Arc<Self>, sid: &str) -> ApiResult<Option<TurnRecord>> {
        let shared = self.sessions.get(sid).await?;
        let (launch, record) = {
            let mut st = shared.lock();
            if !st.row.queue_paused {
                return Ok(None);
            }
            st.row.queue_paused = false;
            st.row.cancel_floor = None;
            self.bus
                .publish(sid, Event::QueueResumed(QueueResumed { is_auto: false }));
            let l = self.drain_locked(&mut st, true);
            self.save_row(&st.row);
            let rec = match &l {
                Some(_) => st.running.as_ref().map(|r| r.turn.record()),
                None => st.queue.front().map(|q| q.record()),
            };
            (l, rec)
        };
        if let Some(l) = launch {
            self.spawn(l);
        }
        Ok(record)
    }

    pub async fn drain_queue(self: &Arc<Self>, sid: &str) -> ApiResult<Option<TurnRecord>> {
        let shared = self.sessions.get(sid).await?;
        let (launch, record) = {
            let mut st = shared.lock();
            if st.row.queue_paused {
                return Ok(None);
            }
            let l = self.drain_locked(&mut st, false);
            let rec = l
                .as_ref()
                .and_then(|_| st.running.as_ref().map(|r| r.turn.record()));
            (l, rec)
        };
        if let Some(l) = launch {
            self.spawn(l);
        }
        Ok(record)
    }
}

fn not_running(tid: &str, status: &str) -> ApiError {
    ApiError::conflict(
        "not-running",
        format!("turn {tid} is not running ({status})"),
    )
    .with("turn_id", tid)
    .with("turn_status", status)
}

fn not_queued(tid: &str, status: &str) -> ApiError {
    ApiError::conflict("not-queued", format!("turn {tid} is not queued ({status})"))
        .with("turn_id", tid)
        .with("turn_status", status)
}
