//! Requests on a session's turns: cancel (one, or the running one by its key), read a turn,
//! edit or delete a queued one, resume a paused queue, drain it. Each is one transition of
//! the turn's state machine; a turn that is not where the request needs it is looked up in
//! the store for the refusal's status.

use super::lifecycle::{TurnRequestError, TurnResult};
use super::turn_machine::{Elsewhere, TurnError};
use super::{now_ms, Turns};
use crate::records::SessionResult;
use serde_json::Value;
use std::sync::Arc;
use vis_companion_api::wire::TurnRecord;

impl Turns {
    pub async fn cancel(self: &Arc<Self>, sid: &str, tid: &str) -> TurnResult<()> {
        let shared = self.sessions.get(sid).await?;
        let now = now_ms();
        let refused = self.transition(&shared, |st| match st.cancel(tid, now) {
            Ok(fx) => (None, fx),
            Err(where_) => (Some(where_), Vec::new()),
        });
        match refused {
            None => Ok(()),
            Some(where_) => Err(self.refusal(sid, tid, where_, Refusal::NotRunning).await),
        }
    }

    pub async fn cancel_current(
        self: &Arc<Self>,
        sid: &str,
        key: Option<String>,
    ) -> TurnResult<String> {
        let shared = self.sessions.get(sid).await?;
        let now = now_ms();
        let answer = self.transition(&shared, |st| match st.cancel_current(key.as_deref(), now) {
            Ok((tid, fx)) => (Ok(tid), fx),
            Err(e) => (Err(e), Vec::new()),
        });
        Ok(answer?)
    }

    /// The freshest record of a turn: running or queued in memory, else the store.
    pub async fn turn_record(&self, sid: &str, tid: &str) -> SessionResult<TurnRecord> {
        Ok(self.sessions.turn(sid, tid).await?.record())
    }

    pub async fn edit(
        self: &Arc<Self>,
        sid: &str,
        tid: &str,
        request: Option<Value>,
    ) -> TurnResult<TurnRecord> {
        let shared = self.sessions.get(sid).await?;
        let text = match request {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let answer = self.transition(&shared, |st| match st.edit(tid, text) {
            Ok(Ok((record, fx))) => (Ok(Ok(record)), fx),
            Ok(Err(where_)) => (Ok(Err(where_)), Vec::new()),
            Err(e) => (Err(e), Vec::new()),
        });
        match answer? {
            Ok(record) => Ok(record),
            Err(where_) => Err(self.refusal(sid, tid, where_, Refusal::NotQueued).await),
        }
    }

    pub async fn delete_queued(self: &Arc<Self>, sid: &str, tid: &str) -> TurnResult<()> {
        let shared = self.sessions.get(sid).await?;
        let refused = self.transition(&shared, |st| match st.delete_queued(tid) {
            Ok(fx) => (None, fx),
            Err(where_) => (Some(where_), Vec::new()),
        });
        match refused {
            None => Ok(()),
            Some(where_) => Err(self.refusal(sid, tid, where_, Refusal::NotQueued).await),
        }
    }

    pub async fn resume_queue(self: &Arc<Self>, sid: &str) -> TurnResult<Option<TurnRecord>> {
        let shared = self.sessions.get(sid).await?;
        let now = now_ms();
        Ok(self.transition(&shared, |st| st.resume(now)))
    }

    pub async fn drain_queue(self: &Arc<Self>, sid: &str) -> TurnResult<Option<TurnRecord>> {
        let shared = self.sessions.get(sid).await?;
        let now = now_ms();
        Ok(self.transition(&shared, |st| st.drain(now)))
    }

    /// The refusal of a request on a turn that is not running (or not queued), with the
    /// status it has: in memory, else as stored (a 404 when the session has no such turn).
    async fn refusal(
        &self,
        sid: &str,
        tid: &str,
        where_: Elsewhere,
        refusal: Refusal,
    ) -> TurnRequestError {
        let status = match where_ {
            Elsewhere::Here(s) => s,
            Elsewhere::Stored => match self.stored_status(sid, tid).await {
                Ok(s) => s,
                Err(e) => return e.into(),
            },
        };
        let (tid, status) = (tid.to_string(), status.as_str().to_string());
        match refusal {
            Refusal::NotRunning => TurnError::NotRunning { tid, status },
            Refusal::NotQueued => TurnError::NotQueued { tid, status },
        }
        .into()
    }
}

enum Refusal {
    NotRunning,
    NotQueued,
}
