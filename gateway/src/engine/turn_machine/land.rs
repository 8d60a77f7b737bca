//! Landing a turn: exactly one terminal, the settled record stored with it, then the queue
//! policy (success drains and clears a pause, failure pauses a backlog, cancel sweeps the turns
//! queued before it; a stopping gateway leaves the queue stored for the next start).

use super::{Count, Effect, Effects, Running, SessionState};
use crate::engine::runner::Progress;
use crate::records::turn::{error_block, Status, Turn};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use vis_companion_api::events::{
    BlockCompleted, ContextUpdated, Event, QueuePaused, QueueResumed, TurnQueuedDeleted,
    TurnSettled,
};

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Terminal {
    Completed { content: Vec<Value> },
    Failed { code: String, message: String },
    Cancelled,
}

impl Terminal {
    /// The terminal of a turn the gateway's stop interrupted (found running at the next start).
    pub fn interrupted() -> Terminal {
        Terminal::Failed {
            code: "interrupted".into(),
            message: "the gateway stopped while this turn was running".into(),
        }
    }
}

impl SessionState {
    /// The worker of `tid` reports its terminal: lands it unless it already landed (a cancel
    /// backstop or a stop raced the worker).
    pub fn finish(&mut self, tid: &str, terminal: Terminal, now: i64, stopping: bool) -> Effects {
        match self.running.take_if(|r| r.turn.tid == tid) {
            Some(run) => self.land(run, terminal, now, stopping),
            None => Vec::new(),
        }
    }

    /// Lands a turn that is stored as unsettled but has no worker (found running at a start,
    /// or its terminal was lost): from its stored record, with the blocks the journal shows
    /// open.
    pub fn settle_stored(
        &mut self,
        turn: Turn,
        open_blocks: Vec<String>,
        terminal: Terminal,
        now: i64,
        stopping: bool,
    ) -> Effects {
        let progress = Progress {
            iterations: turn.iterations.clone(),
            open_blocks,
            ..Default::default()
        };
        let run = Running {
            turn: Turn {
                status: Status::Streaming,
                ..turn
            },
            cancel: CancellationToken::new(),
            started_seq: 0,
            progress: Arc::new(Mutex::new(progress)),
        };
        self.land(run, terminal, now, stopping)
    }

    /// Lands `run` (already taken off the session) with `terminal`, then applies the queue
    /// policy.
    pub fn land(&mut self, run: Running, terminal: Terminal, now: i64, stopping: bool) -> Effects {
        let mut fx = Vec::new();
        let mut t = run.turn;
        let progress = std::mem::take(&mut *run.progress.lock());
        for id in &progress.open_blocks {
            fx.push(Effect::Publish(Event::ContentBlockCompleted(
                BlockCompleted {
                    turn_id: t.tid.clone(),
                    block_id: id.clone(),
                    iteration: None,
                },
            )));
        }
        settle(&mut t, progress, now);
        let status = match terminal {
            Terminal::Completed { content } => {
                t.content = content;
                Status::Completed
            }
            Terminal::Failed { code, message } => {
                t.content.push(error_block(&t.tid, &code, &message));
                t.error = Some(message);
                Status::Failed
            }
            Terminal::Cancelled => {
                t.content
                    .push(json!({"id": format!("{}:notice", t.tid), "type": "notice",
                    "code": "turn_cancelled", "message": "The turn was cancelled."}));
                Status::Cancelled
            }
        };
        t.status = status;
        if matches!(status, Status::Failed | Status::Cancelled) {
            fx.push(Effect::Count(Count::Failed));
        }
        fx.push(Effect::Count(Count::Settled {
            duration_ms: t.duration_ms.unwrap_or(0).max(0) as u64,
            tokens_in: t.tokens.input,
            tokens_out: t.tokens.output,
        }));
        fx.push(Effect::PublishTerminal(
            terminal_event(&t),
            Box::new(t.clone()),
        ));
        fx.push(Effect::Publish(Event::ContextUpdated(ContextUpdated {
            turn_id: t.tid.clone(),
            utilization: t.utilization,
        })));
        self.row.modified_at = Some(now);
        if !stopping {
            self.queue_policy(&t, now, &mut fx);
        }
        self.row.last_status = if self.running.is_some() {
            "running"
        } else if status == Status::Suspended {
            "suspended"
        } else {
            "idle"
        }
        .into();
        fx.push(Effect::SaveRow(self.row.clone()));
        fx
    }

    fn queue_policy(&mut self, t: &Turn, now: i64, fx: &mut Effects) {
        match t.status {
            Status::Failed => {
                if !self.queue.is_empty() {
                    self.row.queue_paused = true;
                    fx.push(Effect::Publish(Event::QueuePaused(QueuePaused {
                        reason: "turn_failed".into(),
                        held: self.queue.len(),
                    })));
                }
            }
            Status::Cancelled => {
                let floor = t.cancelling_at.unwrap_or(now);
                let (swept, kept): (Vec<Turn>, Vec<Turn>) = self
                    .queue
                    .drain(..)
                    .partition(|q| q.queued_at.unwrap_or(0) < floor);
                self.queue = kept.into();
                for q in swept {
                    if let Some(k) = &q.idempotency_key {
                        self.keys.remove(k);
                    }
                    fx.push(Effect::DeleteTurn(q.tid.clone()));
                    fx.push(Effect::Publish(Event::TurnQueuedDeleted(
                        TurnQueuedDeleted {
                            turn_id: q.tid,
                            request: Some(q.request),
                            reason: Some("cancelled".into()),
                        },
                    )));
                }
                self.row.cancel_floor = Some(floor);
                if !self.row.queue_paused {
                    self.drain_into(false, now, fx);
                }
            }
            _ => {
                if self.row.queue_paused {
                    self.row.queue_paused = false;
                    fx.push(Effect::Publish(Event::QueueResumed(QueueResumed {
                        is_auto: true,
                    })));
                }
                self.drain_into(false, now, fx);
            }
        }
    }
}

/// What the worker produced goes onto the turn: iterations, tokens, model, timing, fill.
fn settle(t: &mut Turn, progress: Progress, now: i64) {
    t.iterations = progress.iterations;
    t.tokens = progress.tokens;
    t.provider = progress.provider.or(t.provider.take());
    if t.model.is_none() {
        t.model = progress.model;
    }
    t.completed_at = Some(now);
    t.duration_ms = t.started_at.map(|s| now - s);
    // The fill level: the last request's size against the model's window.
    t.context_tokens = progress.context.map(|c| c.0);
    t.context_window = progress.context.map(|c| c.1);
    t.compactions = progress.compactions;
    let fill = progress
        .context
        .map_or(0.0, |(used, window)| used as f64 / window.max(1) as f64);
    t.utilization = Some(fill.min(1.0));
}

fn terminal_event(t: &Turn) -> Event {
    let mut ev = TurnSettled {
        turn_id: t.tid.clone(),
        status: t.status.wire(),
        idempotency_key: t.idempotency_key.clone(),
        content: None,
        error: None,
    };
    match t.status {
        Status::Completed => {
            let shown = t
                .content
                .iter()
                .filter(|b| matches!(b["type"].as_str(), Some("prose" | "speech")));
            ev.content = Some(shown.cloned().collect());
            Event::TurnCompleted(ev)
        }
        Status::Failed => {
            ev.content = Some(t.content.clone());
            ev.error = Some(t.error.clone());
            Event::TurnFailed(ev)
        }
        _ => Event::TurnCancelled(ev),
    }
}
