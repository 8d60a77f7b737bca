//! Human input: `vis.ask` forms, `vis.live` views, the
//! per-session secret store behind `vis-secret:` handles, and the extension shell doors.
//!
//! The extension host reaches this module through [`HumanDoors`]; the HTTP routes through
//! the human-input area (`engine/areas/human_input.rs`). State is per session and in memory (a pending form
//! belongs to a blocked worker call, which does not survive a restart either).
//!
//! * A form (`request_input` door) is registered, published as the stored event
//!   `human_input.request{request}` and waits for settlement: an accepted submit, a cancel,
//!   its timeout (default 300 000 ms, 0 = forever), or the calling worker going away (turn
//!   cancelled → `cancelled`; session deleted → `undeliverable`). Every settlement publishes
//!   `human_input.close{request_id, reason}`. Custom validators run in the worker, as a
//!   nested `callback` request while the door is pending.
//! * A live view (`live` door) keeps its current tree; patches are applied to it and
//!   published coalesced (≤ 100 ms per view, merged log appends ≤ 500 lines).
//! * Shells run as sandbox children of the session (proxy environment and token), so their
//!   traffic is decided and reported under the session.
//!
//! [`HumanDoors`]: crate::extensions::HumanDoors

mod confirm;
mod doors;
mod live;
mod shells;
#[cfg(test)]
mod tests;
mod tree;
mod validate;

use super::configuration::Configuration;
use super::now_ms;
use super::sessions::Sessions;
use crate::bus::Bus;
use crate::extensions::client::DoorError;
use crate::extensions::{DoorWorker, SessionCtx};
pub use confirm::{Answer, Question};
use live::View;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use shells::Proc;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::oneshot;
use validate::{field_name, field_type, flatten_fields, is_blank, validate};
use vis_companion_api::events::{Event, HumanInputClose, HumanInputRequest};
use vis_companion_api::wire::{HumanInputCancelled, HumanInputList, HumanInputSubmitted};

/// Default form timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 300_000;
/// Settled request ids remembered per session (a late submit answers `is_accepted:false`).
const SETTLED_KEPT: usize = 512;
/// How often a waiting door checks that its worker is still there.
const LIVENESS_POLL: Duration = Duration::from_millis(200);

/// Errors of the HTTP side (mapped to API errors in `engine/areas/human_input.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HiError {
    RequestNotFound,
    NotCancellable,
    ViewNotFound,
    InvalidFocus(String),
}

// ---------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------

struct Outcome {
    reason: String,
    values: Option<Map<String, Value>>,
}

struct Pending {
    id: String,
    view: Value,
    /// Field nodes, flattened out of groups, in declaration order.
    fields: Vec<Value>,
    /// Field names with custom validators (run in the worker).
    validated: Vec<String>,
    run_validator: Value,
    worker: Arc<dyn DoorWorker>,
    is_cancellable: bool,
    tx: Mutex<Option<oneshot::Sender<Outcome>>>,
    /// One submit at a time (validators run in the worker).
    submit: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Session {
    /// Oldest first.
    pending: Vec<Arc<Pending>>,
    /// (request id, reason), oldest first.
    settled: VecDeque<(String, String)>,
    secrets: HashMap<String, String>,
    /// Open live views, oldest first.
    views: Vec<Arc<Mutex<View>>>,
    closed: VecDeque<Arc<Mutex<View>>>,
    procs: HashMap<String, Arc<Proc>>,
}

/// The gateway's human-input registry. Also the host's [`HumanDoors`].
///
/// [`HumanDoors`]: crate::extensions::HumanDoors
pub struct HumanInput {
    bus: Arc<Bus>,
    /// What the extension shells run with (`None`: shells are refused).
    shells: Option<ShellContext>,
    /// The egress proxy and child runner, installed once it runs.
    sandbox: OnceLock<Arc<crate::sandbox::Sandbox>>,
    sessions: Mutex<HashMap<String, Session>>,
    me: Weak<HumanInput>,
}

/// What the extension shells need of the rest of the gateway.
pub struct ShellContext {
    /// The folder a shell without a session works in.
    pub default_root: PathBuf,
    /// Each project's configuration, re-read at each spawn.
    pub configuration: Arc<Configuration>,
    /// The loaded sessions (a door whose session is gone is `undeliverable`).
    pub sessions: Arc<Sessions>,
}

impl HumanInput {
    pub fn new(bus: Arc<Bus>, shells: Option<ShellContext>) -> Arc<HumanInput> {
        Arc::new_cyclic(|me| HumanInput {
            bus,
            shells,
            sandbox: OnceLock::new(),
            sessions: Mutex::new(HashMap::new()),
            me: me.clone(),
        })
    }

    /// The sandbox, once the gateway started it: shells get the session's proxy environment.
    pub fn install_sandbox(&self, sandbox: Arc<crate::sandbox::Sandbox>) {
        let _ = self.sandbox.set(sandbox);
    }

    fn with<T>(&self, sid: &str, f: impl FnOnce(&mut Session) -> T) -> T {
        let mut map = self.sessions.lock();
        f(map.entry(sid.to_string()).or_default())
    }

    /// The Soul's `is_awaiting_input`.
    pub fn is_awaiting(&self, sid: &str) -> bool {
        self.sessions
            .lock()
            .get(sid)
            .is_some_and(|s| !s.pending.is_empty())
    }

    // -- forms ------------------------------------------------------------------------

    /// `GET …/human-input`: pending requests, oldest first.
    pub fn list(&self, sid: &str) -> HumanInputList {
        let requests: Vec<Value> = self
            .sessions
            .lock()
            .get(sid)
            .map(|s| s.pending.iter().map(|p| p.view.clone()).collect())
            .unwrap_or_default();
        HumanInputList { requests }
    }

    fn find(&self, sid: &str, rid: &str) -> Result<Arc<Pending>, Option<String>> {
        let map = self.sessions.lock();
        let Some(s) = map.get(sid) else {
            return Err(None);
        };
        if let Some(p) = s.pending.iter().find(|p| p.id == rid) {
            return Ok(p.clone());
        }
        Err(s
            .settled
            .iter()
            .find(|(id, _)| id == rid)
            .map(|(_, r)| r.clone()))
    }

    /// Settles a pending request once: removes it, answers the door, publishes
    /// `human_input.close`. `false` when it was not pending (already settled).
    fn settle(
        &self,
        sid: &str,
        rid: &str,
        reason: &str,
        values: Option<Map<String, Value>>,
    ) -> bool {
        let found = {
            let mut map = self.sessions.lock();
            let Some(s) = map.get_mut(sid) else {
                return false;
            };
            let Some(i) = s.pending.iter().position(|p| p.id == rid) else {
                return false;
            };
            let p = s.pending.remove(i);
            s.settled.push_back((rid.to_string(), reason.to_string()));
            while s.settled.len() > SETTLED_KEPT {
                s.settled.pop_front();
            }
            p
        };
        if let Some(tx) = found.tx.lock().take() {
            let _ = tx.send(Outcome {
                reason: reason.to_string(),
                values,
            });
        }
        self.bus.publish(
            sid,
            Event::HumanInputClose(HumanInputClose {
                request_id: rid.to_string(),
                reason: reason.to_string(),
            }),
        );
        true
    }

    /// Submits a form's values. `Err(RequestNotFound)` for an id this session never had pending.
    pub async fn submit(
        &self,
        sid: &str,
        rid: &str,
        values: Map<String, Value>,
    ) -> Result<HumanInputSubmitted, HiError> {
        let answer = |is_accepted: bool| HumanInputSubmitted {
            is_accepted,
            request_id: rid.to_string(),
            ..Default::default()
        };
        let p = match self.find(sid, rid) {
            Ok(p) => p,
            Err(Some(reason)) => {
                return Ok(HumanInputSubmitted {
                    reason: Some(format!("the request is already settled ({reason})")),
                    ..answer(false)
                })
            }
            Err(None) => return Err(HiError::RequestNotFound),
        };
        let _one = p.submit.lock().await;
        let (coerced, mut errors) = match validate(&p.fields, &values) {
            Ok(c) => (c, Map::new()),
            Err(e) => (Map::new(), e),
        };
        if errors.is_empty() {
            let all = Value::Object(coerced.clone());
            for name in &p.validated {
                let v = coerced.get(name).cloned().unwrap_or(Value::Null);
                if is_blank(&v) {
                    continue;
                }
                let args = vec![Value::String(name.clone()), v, all.clone()];
                match p.worker.callback(&p.run_validator, args).await {
                    Ok(Value::String(msg)) => {
                        errors.insert(name.clone(), Value::String(msg));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        errors.insert(
                            name.clone(),
                            Value::String(format!("could not be validated: {e}")),
                        );
                    }
                }
            }
        }
        if !errors.is_empty() {
            return Ok(HumanInputSubmitted {
                errors: Some(errors),
                ..answer(false)
            });
        }
        let values = self.hide_secrets(sid, &p.fields, coerced);
        if self.settle(sid, rid, "submitted", Some(values)) {
            Ok(answer(true))
        } else {
            Ok(HumanInputSubmitted {
                reason: Some("the request is already settled".into()),
                ..answer(false)
            })
        }
    }

    /// Cancels a pending form (when its extension allows it).
    pub fn cancel(&self, sid: &str, rid: &str) -> Result<HumanInputCancelled, HiError> {
        let answer = |is_cancelled| HumanInputCancelled {
            is_cancelled,
            request_id: rid.to_string(),
        };
        let p = match self.find(sid, rid) {
            Ok(p) => p,
            Err(Some(_)) => return Ok(answer(false)),
            Err(None) => return Err(HiError::RequestNotFound),
        };
        if !p.is_cancellable {
            return Err(HiError::NotCancellable);
        }
        let done = self.settle(sid, rid, "cancelled", None);
        Ok(answer(done))
    }

    /// Password and OTP answers become `vis-secret:<uuid>` handles.
    fn hide_secrets(
        &self,
        sid: &str,
        fields: &[Value],
        mut values: Map<String, Value>,
    ) -> Map<String, Value> {
        for f in fields {
            if !matches!(field_type(f), "password" | "otp") {
                continue;
            }
            let name = field_name(f);
            if let Some(Value::String(plain)) = values.get(name) {
                if plain.is_empty() {
                    continue;
                }
                let handle = format!("vis-secret:{}", uuid::Uuid::new_v4());
                let plain = plain.clone();
                self.with(sid, |s| s.secrets.insert(handle.clone(), plain));
                values.insert(name.to_string(), Value::String(handle));
            }
        }
        values
    }

    async fn ask(
        &self,
        session: &SessionCtx,
        extension: &str,
        door: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        let sid = session.id.clone();
        let request = door
            .get("request")
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| DoorError::typed("TypeError", "request_input needs a request"))?;
        let nodes = request
            .get("fields")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut fields = Vec::new();
        flatten_fields(&nodes, &mut fields);
        if fields.is_empty() {
            return Err(DoorError::typed(
                "ValueError",
                "vis.ask needs at least one field",
            ));
        }
        let timeout_ms = request
            .get("timeout_ms")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_TIMEOUT_MS);
        let is_cancellable = request
            .get("is_cancellable")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let rid = uuid::Uuid::new_v4().to_string();
        let text = |k: &str, d: &str| {
            request
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or(d)
                .to_string()
        };
        let mut view = json!({
            "id": rid,
            "title": text("title", "Input needed"),
            "fields": nodes,
            "submit_label": text("submit_label", "Submit"),
            "cancel_label": text("cancel_label", "Cancel"),
            "is_cancellable": is_cancellable,
            "timeout_ms": timeout_ms,
            "session_id": sid,
            "created_at": now_ms(),
            "source": request.get("source").cloned().unwrap_or_else(|| json!(extension)),
        });
        if let Some(d) = request.get("description").filter(|d| !d.is_null()) {
            view["description"] = d.clone();
        }
        let validated: Vec<String> = door
            .get("validators")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let (tx, mut rx) = oneshot::channel();
        let pending = Arc::new(Pending {
            id: rid.clone(),
            view: view.clone(),
            fields,
            validated,
            run_validator: door.get("run_validator").cloned().unwrap_or(Value::Null),
            worker: worker.clone(),
            is_cancellable,
            tx: Mutex::new(Some(tx)),
            submit: tokio::sync::Mutex::new(()),
        });
        self.with(&sid, |s| s.pending.push(pending));
        self.bus.publish(
            &sid,
            Event::HumanInputRequest(HumanInputRequest { request: view }),
        );
        // A human is answering: the worker call does not time out meanwhile.
        let _hold = worker.hold();
        let deadline = (timeout_ms > 0)
            .then(|| tokio::time::Instant::now() + Duration::from_millis(timeout_ms));
        let outcome = loop {
            tokio::select! {
                o = &mut rx => break o.ok(),
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)).await }, if deadline.is_some() => {
                    self.settle(&sid, &rid, "timeout", None);
                }
                _ = tokio::time::sleep(LIVENESS_POLL) => {
                    if !worker.is_alive() {
                        let reason = self.gone_reason(&sid);
                        self.settle(&sid, &rid, reason, None);
                    }
                }
            }
        };
        let outcome = outcome.unwrap_or(Outcome {
            reason: "undeliverable".into(),
            values: None,
        });
        let submitted = outcome.reason == "submitted";
        Ok(json!({
            "status": outcome.reason,
            "values": outcome.values.map(Value::Object).unwrap_or_else(|| json!({})),
            "request_id": rid,
            "reason": if submitted { Value::Null } else { Value::String(outcome.reason.clone()) },
        }))
    }

    /// Why a waiting door's worker went away: the session was deleted (`undeliverable`),
    /// or its call was abandoned (turn cancelled: `cancelled`).
    fn gone_reason(&self, sid: &str) -> &'static str {
        let loaded = self
            .shells
            .as_ref()
            .is_some_and(|c| c.sessions.loaded(sid).is_some());
        if loaded {
            "cancelled"
        } else {
            "undeliverable"
        }
    }

    // -- secrets ------------------------------------------------------------------------

    fn reveal(&self, sid: Option<&str>, handle: &str) -> Option<String> {
        let map = self.sessions.lock();
        match sid {
            Some(sid) => map.get(sid)?.secrets.get(handle).cloned(),
            None => map.values().find_map(|s| s.secrets.get(handle).cloned()),
        }
    }

    fn forget(&self, sid: Option<&str>, handle: &str) -> bool {
        let mut map = self.sessions.lock();
        match sid {
            Some(sid) => map
                .get_mut(sid)
                .is_some_and(|s| s.secrets.remove(handle).is_some()),
            None => map.values_mut().any(|s| s.secrets.remove(handle).is_some()),
        }
    }

    /// Drops everything of a deleted session (pending forms settle `undeliverable`, open
    /// views close `undeliverable`, background children are killed).
    pub fn drop_session(&self, sid: &str) {
        let (pending, views) = {
            let map = self.sessions.lock();
            match map.get(sid) {
                Some(s) => (
                    s.pending.iter().map(|p| p.id.clone()).collect::<Vec<_>>(),
                    s.views.clone(),
                ),
                None => return,
            }
        };
        for rid in pending {
            self.settle(sid, &rid, "undeliverable", None);
        }
        for v in views {
            self.close_view(&v, "undeliverable", &Map::new());
        }
        if let Some(s) = self.sessions.lock().remove(sid) {
            for p in s.procs.values() {
                p.kill();
            }
        }
    }
}
