//! Turn lifecycle: submit → (queue | start) → run → exactly one terminal → queue policy.

use super::runner::Progress;
use super::turn::{error_block, preview, Status, Turn};
use super::{now_ms, Gateway, Running, SessionState};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use vis_companion_api::events::{
    BlockCompleted, ContextUpdated, Event, QueuePaused, QueueResumed, TitleUpdated, TurnQueued,
    TurnQueuedDeleted, TurnRef, TurnSettled, TurnStarted,
};
use vis_companion_api::wire::TurnRecord;
use vis_companion_api::{ApiError, ApiResult, SubmitTurn};

/// How long a cancelled worker gets to land its terminal before the gateway lands it.
pub(super) const CANCEL_BACKSTOP: Duration = Duration::from_secs(30);

/// A turn to launch once the session lock is released.
pub struct Launch {
    pub(super) sid: String,
    pub(super) tid: String,
    pub(super) cancel: CancellationToken,
    pub(super) progress: Arc<Mutex<Progress>>,
}

pub enum Terminal {
    Completed { content: Vec<Value> },
    Failed { code: String, message: String },
    Cancelled,
}

impl Gateway {
    pub async fn submit(
        self: &Arc<Self>,
        sid: &str,
        req: SubmitTurn,
    ) -> ApiResult<(bool, TurnRecord)> {
        let request = match &req.request {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            _ => {
                return Err(ApiError::bad_request(
                    "invalid-request",
                    "request must be a non-blank string",
                ))
            }
        };
        let attachments = super::companion::attachments::check(&req)?;
        let shared = self.sessions.get(sid).await?;
        let replay = req
            .idempotency_key
            .as_ref()
            .and_then(|k| shared.lock().keys.get(k).cloned());
        if let Some(tid) = replay {
            return Ok((true, self.turn_record(sid, &tid).await?));
        }
        let launch;
        let record;
        {
            let mut st = shared.lock();
            if let Some(tid) = req
                .idempotency_key
                .as_ref()
                .and_then(|k| st.keys.get(k).cloned())
            {
                let rec = st
                    .running
                    .as_ref()
                    .filter(|r| r.turn.tid == tid)
                    .map(|r| r.turn.record())
                    .or_else(|| st.queue.iter().find(|q| q.tid == tid).map(|q| q.record()));
                if let Some(rec) = rec {
                    return Ok((true, rec));
                }
            }
            let now = now_ms();
            let tid = uuid::Uuid::new_v4().to_string();
            let mut t = Turn {
                tid: tid.clone(),
                sid: sid.to_string(),
                ord: self.sessions.next_ord(),
                // One id on every surface (submit answer, events, transcript, trace, forks).
                engine_turn_id: tid.clone(),
                status: Status::Queued,
                request,
                display_request: req.display_request.clone().filter(|d| !d.trim().is_empty()),
                idempotency_key: req.idempotency_key.clone(),
                model: req.model.clone().filter(|m| !m.trim().is_empty()),
                reasoning_default: req.reasoning_default.clone(),
                extra_body: req
                    .extra_body
                    .as_ref()
                    .and_then(|v| v.as_object())
                    .filter(|m| !m.is_empty())
                    .cloned(),
                created_at: now,
                queued_at: None,
                started_at: None,
                completed_at: None,
                cancelling_at: None,
                attachments,
                content: vec![],
                error: None,
                iterations: vec![],
                provider: None,
                tokens: Default::default(),
                duration_ms: None,
                utilization: None,
                is_slash: false,
                context_tokens: None,
                context_window: None,
                compactions: 0,
            };
            if let Some(k) = &t.idempotency_key {
                st.keys.insert(k.clone(), tid.clone());
            }
            // An idle session's unpaused stored backlog (left by a stop) keeps its order: the
            // new turn queues behind it and the backlog's head starts.
            let behind_backlog = st.running.is_none() && Self::drainable(&st, false).is_some();
            if st.running.is_some() || behind_backlog {
                t.queued_at = Some(now);
                self.save_turn(&t);
                let ev = TurnQueued {
                    turn_id: t.tid.clone(),
                    request: t.request.clone(),
                    request_preview: preview(&t.request),
                    idempotency_key: t.idempotency_key.clone(),
                    display_request: t.display_request.clone(),
                };
                record = Some(t.record());
                st.queue.push_back(t);
                self.bus.publish(sid, Event::TurnQueued(ev));
                launch = if behind_backlog {
                    self.drain_locked(&mut st, false)
                } else {
                    None
                };
            } else {
                let l = self.start_locked(&mut st, t, false);
                record = st.running.as_ref().map(|r| r.turn.record());
                launch = Some(l);
            }
        }
        if let Some(l) = launch {
            self.spawn(l);
        }
        let record = record.ok_or_else(|| ApiError::engine("the turn did not start"))?;
        Ok((false, record))
    }

    /// Marks `t` running, publishes `turn.started`, and returns what to spawn.
    fn start_locked(
        self: &Arc<Self>,
        st: &mut SessionState,
        mut t: Turn,
        is_queued: bool,
    ) -> Launch {
        let now = now_ms();
        t.status = Status::Streaming;
        t.started_at = Some(now);
        let row = &mut st.row;
        row.turn_count += 1;
        row.modified_at = Some(now);
        row.last_active_at = now;
        row.last_status = "running".into();
        if row.first_request.is_none() {
            row.first_request = Some(preview(&t.request));
        }
        let title = if row.title.as_deref().is_none_or(|s| s.trim().is_empty()) {
            let mut title: String = preview(t.display_request.as_deref().unwrap_or(&t.request))
                .chars()
                .take(60)
                .collect();
            title = title.trim_end_matches('…').trim().to_string();
            (!title.is_empty()).then(|| {
                row.title = Some(title.clone());
                title
            })
        } else {
            None
        };
        self.save_row(row);
        self.save_turn(&t);
        let ev = TurnStarted {
            turn_id: t.tid.clone(),
            request: t
                .display_request
                .clone()
                .unwrap_or_else(|| t.request.clone()),
            display_request: t.display_request.clone(),
            started_at: now,
            is_queued: is_queued.then_some(true),
            idempotency_key: t.idempotency_key.clone(),
            attachments: (!t.attachments.is_empty()).then(|| t.attachments.clone()),
        };
        let seq = self.bus.publish(&t.sid, Event::TurnStarted(ev));
        tracing::info!(session = %t.sid, turn = %t.tid, seq, queued = is_queued, "turn started");
        if let Some(title) = title {
            self.publish_title(&t.sid, &title);
        }
        self.counters.turns_total.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let progress = Arc::new(Mutex::new(Progress::default()));
        let launch = Launch {
            sid: t.sid.clone(),
            tid: t.tid.clone(),
            cancel: cancel.clone(),
            progress: progress.clone(),
        };
        st.running = Some(Running {
            turn: t,
            cancel,
            started_seq: seq,
            progress,
        });
        launch
    }

    /// `session.title_updated` on the session, and a copy on every other open session.
    pub fn publish_title(&self, sid: &str, title: &str) {
        let update = |titled_session_id: Option<String>| {
            Event::SessionTitleUpdated(TitleUpdated {
                titled_session_id,
                title: title.to_string(),
            })
        };
        self.bus.publish(sid, update(None));
        for other in self.bus.open_sessions() {
            if other != sid {
                self.bus.publish(&other, update(Some(sid.to_string())));
            }
        }
    }

    /// Lands the terminal of `tid` exactly once, then applies the queue policy.
    pub fn finish(self: &Arc<Self>, sid: &str, tid: &str, terminal: Terminal) {
        let Some(shared) = self.sessions.loaded(sid) else {
            return;
        };
        let launch = {
            let mut st = shared.lock();
            if st.running.as_ref().is_none_or(|r| r.turn.tid != tid) {
                return; // already landed (cancel backstop or shutdown raced the worker)
            }
            if self.storage.is_stopped(tid) {
                return; // its events were lost: the storage watcher lands it (storage.rs)
            }
            let Some(run) = st.running.take() else { return };
            self.land(&mut st, run, terminal)
        };
        if let Some(l) = launch {
            self.spawn(l);
        }
    }

    pub(super) fn land(
        self: &Arc<Self>,
        st: &mut SessionState,
        run: Running,
        terminal: Terminal,
    ) -> Option<Launch> {
        let now = now_ms();
        let mut t = run.turn;
        let progress = std::mem::take(&mut *run.progress.lock());
        for id in &progress.open_blocks {
            self.bus.publish(
                &t.sid,
                Event::ContentBlockCompleted(BlockCompleted {
                    turn_id: t.tid.clone(),
                    block_id: id.clone(),
                    iteration: None,
                }),
            );
        }
        t.iterations = progress.iterations;
        t.tokens = progress.tokens;
        t.provider = progress.provider.or(t.provider);
        if t.model.is_none() {
            t.model = progress.model;
        }
        t.completed_at = Some(now);
        t.duration_ms = t.started_at.map(|s| now - s);
        // The fill level: the last request's size against the model's window.
        t.context_tokens = progress.context.map(|c| c.0);
        t.context_window = progress.context.map(|c| c.1);
        t.compactions = progress.compactions;
        t.utilization = Some(
            progress
                .context
                .map_or(0.0, |(used, window)| used as f64 / window.max(1) as f64)
                .min(1.0),
        );
        let (kind, status) = match terminal {
            Terminal::Completed { content } => {
                t.content = content;
                (
                    Event::TurnCompleted as fn(TurnSettled) -> Event,
                    Status::Completed,
                )
            }
            Terminal::Failed { code, message } => {
                t.content.push(error_block(&t.tid, &code, &message));
                t.error = Some(message);
                self.counters.turns_failed.fetch_add(1, Ordering::Relaxed);
                (
                    Event::TurnFailed as fn(TurnSettled) -> Event,
                    Status::Failed,
                )
            }
            Terminal::Cancelled => {
                t.content.push(json!({"id": format!("{}:notice", t.tid), "type": "notice", "code": "turn_cancelled",
                    "message": "The turn was cancelled."}));
                self.counters.turns_failed.fetch_add(1, Ordering::Relaxed);
                (
                    Event::TurnCancelled as fn(TurnSettled) -> Event,
                    Status::Cancelled,
                )
            }
        };
        t.status = status;
        self.counters
            .duration_ms
            .fetch_add(t.duration_ms.unwrap_or(0).max(0) as u64, Ordering::Relaxed);
        self.counters
            .tokens_in
            .fetch_add(t.tokens.input, Ordering::Relaxed);
        self.counters
            .tokens_out
            .fetch_add(t.tokens.output, Ordering::Relaxed);
        let mut ev = TurnSettled {
            turn_id: t.tid.clone(),
            status: status.wire(),
            idempotency_key: t.idempotency_key.clone(),
            content: None,
            error: None,
        };
        match status {
            Status::Completed => {
                ev.content = Some(
                    t.content
                        .iter()
                        .filter(|b| matches!(b["type"].as_str(), Some("prose" | "speech")))
                        .cloned()
                        .collect(),
                );
            }
            Status::Failed => {
                ev.content = Some(t.content.clone());
                ev.error = Some(t.error.clone());
            }
            _ => {}
        }
        let ev = kind(ev);
        // The terminal and the settled record are stored together or not at all, so a turn
        // whose terminal was lost is still stored as running (storage.rs fails it again).
        match self.turn_row(&t) {
            Some(row) => self.bus.publish_together(&t.sid, ev, row),
            None => self.bus.publish(&t.sid, ev),
        };
        tracing::info!(
            session = %t.sid,
            turn = %t.tid,
            status = status.as_str(),
            duration_ms = t.duration_ms.unwrap_or(0),
            error = t.error.as_deref().unwrap_or(""),
            "turn ended"
        );
        self.bus.publish(
            &t.sid,
            Event::ContextUpdated(ContextUpdated {
                turn_id: t.tid.clone(),
                utilization: t.utilization,
            }),
        );
        st.row.last_status = if status == Status::Suspended {
            "suspended".into()
        } else {
            "idle".into()
        };
        st.row.modified_at = Some(now);
        let launch = self.queue_policy(st, &t);
        self.save_row(&st.row);
        launch
    }

    /// Queue policy after a terminal: success drains (clearing a pause), failure pauses a backlog, cancel sweeps the
    /// turns queued before it and sets the cancel floor.
    fn queue_policy(self: &Arc<Self>, st: &mut SessionState, t: &Turn) -> Option<Launch> {
        let sid = t.sid.clone();
        if self.shutdown.is_stopping() {
            // A gateway stop is not a user cancel: queued turns stay stored for the next start.
            return None;
        }
        match t.status {
            Status::Failed => {
                if !st.queue.is_empty() {
                    st.row.queue_paused = true;
                    self.bus.publish(
                        &sid,
                        Event::QueuePaused(QueuePaused {
                            reason: "turn_failed".into(),
                            held: st.queue.len(),
                        }),
                    );
                }
                None
            }
            Status::Cancelled => {
                let floor = t.cancelling_at.unwrap_or_else(now_ms);
                let (swept, kept): (Vec<Turn>, Vec<Turn>) = st
                    .queue
                    .drain(..)
                    .partition(|q| q.queued_at.unwrap_or(0) < floor);
                st.queue = kept.into();
                for q in swept {
                    if let Some(k) = &q.idempotency_key {
                        st.keys.remove(k);
                    }
                    let q_tid = q.tid.clone();
                    self.store.submit("turn-delete", move |c| {
                        crate::store::rows::delete_turn(c, &q_tid)
                    });
                    self.bus.publish(
                        &sid,
                        Event::TurnQueuedDeleted(TurnQueuedDeleted {
                            turn_id: q.tid,
                            request: Some(q.request),
                            reason: Some("cancelled".into()),
                        }),
                    );
                }
                st.row.cancel_floor = Some(floor);
                if st.row.queue_paused {
                    None
                } else {
                    self.drain_locked(st, false)
                }
            }
            _ => {
                if st.row.queue_paused {
                    st.row.queue_paused = false;
                    self.bus
                        .publish(&sid, Event::QueueResumed(QueueResumed { is_auto: true }));
                }
                self.drain_locked(st, false)
            }
        }
    }

    /// The position of the oldest queued turn a drain may start: an unpaused queue's turns
    /// queued after the cancel floor (`force`: any turn).
    pub(super) fn drainable(st: &SessionState, force: bool) -> Option<usize> {
        if st.row.queue_paused && !force {
            return None;
        }
        let floor = if force { None } else { st.row.cancel_floor };
        st.queue
            .iter()
            .position(|q| floor.is_none_or(|f| q.queued_at.unwrap_or(0) >= f))
    }

    /// Starts the oldest drainable queued turn if the session is idle.
    pub(super) fn drain_locked(
        self: &Arc<Self>,
        st: &mut SessionState,
        force: bool,
    ) -> Option<Launch> {
        if st.running.is_some() {
            return None;
        }
        let idx = Self::drainable(st, force)?;
        let t = st.queue.remove(idx)?;
        self.bus.publish(
            &t.sid,
            Event::TurnQueuedDrained(TurnRef {
                turn_id: t.tid.clone(),
            }),
        );
        Some(self.start_locked(st, t, true))
    }
}
