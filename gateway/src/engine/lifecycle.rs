//! The shell around the turn's state machine (`turn_machine/`): a transition runs under the
//! session's lock and its effects are carried out in order before the lock is released
//! (store writes queued, events published), then the workers and cancel backstops start.

use super::turn_machine::{Count, Effect, Effects, Launch, SessionState, Terminal, TurnError};
use super::{now_ms, Shared, Turns};
use crate::companion::errors::AttachmentError;
use crate::records::turn::{Status, Turn};
use crate::records::{SessionError, SessionResult};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use vis_companion_api::events::{Event, TitleUpdated};
use vis_companion_api::wire::TurnRecord;
use vis_companion_api::SubmitTurn;

/// How long a cancelled worker gets to land its terminal before the gateway lands it.
pub(super) const CANCEL_BACKSTOP: Duration = Duration::from_secs(30);

/// Why a request on a session's turns was refused: the state machine's refusal, the session
/// or turn lookup's failure, or an upload checked at submit. The turns area maps it.
#[derive(Debug, thiserror::Error)]
pub enum TurnRequestError {
    #[error(transparent)]
    Turn(#[from] TurnError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Attachment(#[from] AttachmentError),
}

pub type TurnResult<T> = Result<T, TurnRequestError>;

/// What a transition leaves to do once the session's lock is released.
#[derive(Default)]
pub(super) struct After {
    launches: Vec<Launch>,
    backstops: Vec<(String, String)>,
}

impl Turns {
    /// Runs the transition `f` on the session under its lock, carries out its effects, and
    /// answers what `f` answered.
    pub(super) fn transition<R>(
        self: &Arc<Self>,
        shared: &Shared,
        f: impl FnOnce(&mut SessionState) -> (R, Effects),
    ) -> R {
        let (out, after) = {
            let mut st = shared.lock();
            let (out, fx) = f(&mut st);
            let after = self.apply(&mut st, fx);
            (out, after)
        };
        self.after(after);
        out
    }

    /// Carries out effects under the session's lock, in order.
    fn apply(self: &Arc<Self>, st: &mut SessionState, fx: Effects) -> After {
        let sid = st.row.id.clone();
        let mut after = After::default();
        for effect in fx {
            match effect {
                Effect::SaveRow(row) => self.save_row(&row),
                Effect::SaveTurn(t) => self.save_turn(&t),
                Effect::DeleteTurn(tid) => self.store.queue("turn-delete", move |db| {
                    crate::store::rows::delete_turn(db, &tid)
                }),
                Effect::Publish(ev) => {
                    self.bus.publish(&sid, ev);
                }
                Effect::PublishStarted(ev) => {
                    let seq = self.bus.publish(&sid, ev);
                    if let Some(r) = st.running.as_mut() {
                        r.started_seq = seq;
                        tracing::info!(session = %sid, turn = %r.turn.tid, seq, "turn started");
                    }
                }
                Effect::PublishTerminal(ev, t) => {
                    // The terminal and the settled record are stored together or not at all,
                    // so a turn whose terminal was lost is still stored as running
                    // (storage.rs fails it again).
                    match self.turn_row(&t) {
                        Some(row) => self.bus.publish_together(&sid, ev, row),
                        None => self.bus.publish(&sid, ev),
                    };
                    tracing::info!(
                        session = %sid,
                        turn = %t.tid,
                        status = t.status.as_str(),
                        duration_ms = t.duration_ms.unwrap_or(0),
                        error = t.error.as_deref().unwrap_or(""),
                        "turn ended"
                    );
                }
                Effect::Title(title) => self.publish_title(&sid, &title),
                Effect::Spawn(l) => after.launches.push(l),
                Effect::CancelBackstop(tid) => after.backstops.push((sid.clone(), tid)),
                Effect::Count(c) => self.count(c),
            }
        }
        after
    }

    fn after(self: &Arc<Self>, after: After) {
        for l in after.launches {
            self.spawn(l);
        }
        for (sid, tid) in after.backstops {
            let gw = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(CANCEL_BACKSTOP).await;
                gw.finish(&sid, &tid, Terminal::Cancelled);
            });
        }
    }

    fn count(&self, c: Count) {
        let n = &self.counters;
        match c {
            Count::Started => n.turns_total.fetch_add(1, Ordering::Relaxed),
            Count::Failed => n.turns_failed.fetch_add(1, Ordering::Relaxed),
            Count::Settled {
                duration_ms,
                tokens_in,
                tokens_out,
            } => {
                n.tokens_in.fetch_add(tokens_in, Ordering::Relaxed);
                n.tokens_out.fetch_add(tokens_out, Ordering::Relaxed);
                n.duration_ms.fetch_add(duration_ms, Ordering::Relaxed)
            }
        };
    }

    pub async fn submit(
        self: &Arc<Self>,
        sid: &str,
        req: SubmitTurn,
    ) -> TurnResult<(bool, TurnRecord)> {
        let request = match &req.request {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            _ => return Err(TurnError::BlankRequest.into()),
        };
        let attachments = crate::companion::attachments::check(&req)?;
        let shared = self.sessions.get(sid).await?;
        let key = req.idempotency_key.as_deref();
        let replay = shared.lock().replay(key);
        if let Some(r) = replay {
            return self.replayed(sid, r).await;
        }
        let now = now_ms();
        let tid = uuid::Uuid::new_v4().to_string();
        let mut t = Turn::new(tid, sid, self.sessions.next_ord(), request, now);
        t.display_request = req.display_request.filter(|d| !d.trim().is_empty());
        t.idempotency_key = req.idempotency_key.clone();
        t.model = req.model.filter(|m| !m.trim().is_empty());
        t.reasoning_default = req.reasoning_default;
        t.extra_body = req
            .extra_body
            .as_ref()
            .and_then(|v| v.as_object())
            .filter(|m| !m.is_empty())
            .cloned();
        t.attachments = attachments;
        let key = req.idempotency_key;
        let answer = self.transition(&shared, |st| {
            // A submit with the same key may have landed since the check above.
            if let Some(r) = st.replay(key.as_deref()) {
                return (Err(r), Vec::new());
            }
            let s = st.submit(t, now);
            (Ok(s.record), s.effects)
        });
        match answer {
            Ok(record) => {
                // Answered once the turn's row is committed: an accepted turn (and its
                // idempotency key) survives a crash or a node's loss right after the answer.
                self.store.flush().await;
                Ok((false, record))
            }
            Err(r) => self.replayed(sid, r).await,
        }
    }

    async fn replayed(
        &self,
        sid: &str,
        r: super::turn_machine::Replay,
    ) -> TurnResult<(bool, TurnRecord)> {
        match r {
            super::turn_machine::Replay::Live(rec) => Ok((true, *rec)),
            super::turn_machine::Replay::Stored(tid) => {
                Ok((true, self.turn_record(sid, &tid).await?))
            }
        }
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
        if self.storage.is_stopped(tid) {
            return; // its events were lost: the storage watcher lands it (storage.rs)
        }
        let stopping = self.shutdown.is_stopping();
        self.transition(&shared, |st| {
            ((), st.finish(tid, terminal, now_ms(), stopping))
        });
    }

    /// Lands a turn stored as unsettled that has no worker, from its stored record.
    pub(super) fn settle_stored(
        self: &Arc<Self>,
        shared: &Shared,
        turn: Turn,
        open_blocks: Vec<String>,
        terminal: Terminal,
    ) {
        let stopping = self.shutdown.is_stopping();
        self.transition(shared, |st| {
            if st.running.as_ref().is_some_and(|r| r.turn.tid == turn.tid) {
                return ((), Vec::new()); // running again: not the turn that was stored
            }
            let fx = st.settle_stored(turn, open_blocks, terminal, now_ms(), stopping);
            ((), fx)
        });
    }

    /// The status of a turn that is not running or queued here.
    pub(super) async fn stored_status(&self, sid: &str, tid: &str) -> SessionResult<Status> {
        Ok(self.sessions.stored_turn(sid, tid).await?.status)
    }
}
