//! The gateway's own questions to the user: a form with one choice, approve or decline
//! (the model's `draft_approve`, docs/decisions.md W1). It goes through the same pending
//! list, events and routes as a `vis.ask` form, so the phone shows and answers it the same
//! way; nothing but an explicit approval counts as yes.

use super::{HumanInput, DEFAULT_TIMEOUT_MS};
use crate::extensions::{DoorWorker, SessionCtx};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What to ask.
pub struct Question {
    pub title: String,
    /// Markdown: what approving does.
    pub description: String,
    /// Who asks (shown as the form's source).
    pub source: String,
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Approved,
    /// Declined, cancelled, timed out or undeliverable: the settlement's reason.
    Declined(String),
}

/// The value of the form's one field that approves.
pub const APPROVE: &str = "approve";

/// The asker behind a gateway form: no validators, alive until its question is dropped.
#[derive(Default)]
struct Asker {
    gone: AtomicBool,
}

#[async_trait::async_trait]
impl DoorWorker for Asker {
    async fn callback(&self, _callable: &Value, _args: Vec<Value>) -> Result<Value, String> {
        Err("a gateway form has no validators".into())
    }
    fn is_alive(&self) -> bool {
        !self.gone.load(Ordering::Relaxed)
    }
    fn hold(&self) -> Box<dyn Send + Sync> {
        Box::new(())
    }
}

/// Settles the form as cancelled when the question is dropped before an answer (the turn
/// that asked was cancelled), so no form is left pending with nobody waiting.
struct Waiting<'a> {
    hi: &'a HumanInput,
    sid: String,
    asker: Arc<Asker>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.asker.gone.store(true, Ordering::Relaxed);
        let ours = Arc::as_ptr(&self.asker) as *const ();
        let pending: Vec<String> = self
            .hi
            .sessions
            .lock()
            .get(&self.sid)
            .map(|s| {
                s.pending
                    .iter()
                    .filter(|p| Arc::as_ptr(&p.worker) as *const () == ours)
                    .map(|p| p.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        for rid in pending {
            self.hi.settle(&self.sid, &rid, "cancelled", None);
        }
    }
}

impl HumanInput {
    /// Asks the session's user to approve or decline; waits for the answer (or the form's
    /// timeout, which declines).
    pub async fn confirm(&self, sid: &str, q: Question) -> Answer {
        let asker = Arc::new(Asker::default());
        let _waiting = Waiting {
            hi: self,
            sid: sid.to_string(),
            asker: asker.clone(),
        };
        let session = SessionCtx {
            id: sid.to_string(),
            project_root: None,
            workspace_root: Default::default(),
        };
        let door = json!({"request": {
            "title": q.title,
            "description": q.description,
            "fields": [{"type": "select", "name": "decision", "label": "Decision",
                "is_required": true, "default": APPROVE,
                "options": [{"label": "Approve", "value": APPROVE},
                            {"label": "Decline", "value": "decline"}]}],
            "submit_label": "Submit",
            "cancel_label": "Decline",
            "is_cancellable": true,
            "timeout_ms": DEFAULT_TIMEOUT_MS,
            "source": q.source,
        }});
        let out = self.ask(&session, &q.source, door, asker).await;
        match out {
            Ok(v) if v["status"] == "submitted" && v["values"]["decision"] == APPROVE => {
                Answer::Approved
            }
            Ok(v) if v["status"] == "submitted" => Answer::Declined("declined".into()),
            Ok(v) => Answer::Declined(v["status"].as_str().unwrap_or("declined").to_string()),
            Err(e) => Answer::Declined(e.message),
        }
    }
}
