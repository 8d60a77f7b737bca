//! Human input (companion-api §6.9, C23–C29): `vis.ask` forms, `vis.live` views, the
//! per-session secret store behind `vis-secret:` handles, and the extension shell doors.
//!
//! The extension host reaches this module through [`HumanDoors`]; the HTTP routes through
//! the `Engine` methods in `api.rs`. State is per session and in memory (a pending form
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

use super::{now_ms, Gateway};
use crate::bus::{payload, Bus};
use crate::extensions::client::DoorError;
use crate::extensions::{DoorWorker, HumanDoors, SessionCtx};
use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch, Notify};

/// Default form timeout (§6.9).
pub const DEFAULT_TIMEOUT_MS: u64 = 300_000;
/// Settled request ids remembered per session (a late submit answers `is_accepted:false`).
const SETTLED_KEPT: usize = 512;
/// Closed live views kept per session (their logs stay readable).
const CLOSED_VIEWS_KEPT: usize = 64;
/// Lines of a log node carried in the view tree (the window).
const LOG_WINDOW: usize = 2000;

/// The `lines` of a log node or an `append` op as text (non-strings as their JSON).
fn log_lines(v: &Value) -> Vec<String> {
    v.get("lines")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|l| {
                    l.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| l.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}
/// Lines of a log node kept in the view's record (older ones are dropped).
const LOG_KEPT: usize = 100_000;
/// Live patches are coalesced at most this long.
const COALESCE_MAX_MS: u64 = 100;
/// Lines per merged `append`.
const MERGED_APPEND_MAX: usize = 500;
const MAX_NODES: usize = 32;
const MAX_TABLE_ROWS: usize = 5000;
const MAX_TABLE_ROWS_PER_PATCH: usize = 200;
const MAX_STATS: usize = 32;
const MAX_STEPS: usize = 200;
const MAX_LINKS: usize = 32;
/// How often a waiting door checks that its worker is still there.
const LIVENESS_POLL: Duration = Duration::from_millis(200);
/// Combined output kept per shell child.
const SHELL_OUT_CAP: usize = 8 * 1024 * 1024;
const SHELL_DEFAULT_TIMEOUT_SECS: u64 = 120;

const LIVE_NODE_TYPES: &[&str] = &[
    "status", "progress", "stat", "steps", "log", "table", "link",
];

/// Errors of the HTTP side (mapped to API errors in `api.rs`).
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
pub struct HumanInput {
    bus: Arc<Bus>,
    /// Bound after the `Arc<Gateway>` exists ([`HumanInput::bind`]); the shells need it.
    gw: OnceLock<Weak<Gateway>>,
    sessions: Mutex<HashMap<String, Session>>,
    me: Weak<HumanInput>,
}

impl HumanInput {
    pub fn new(bus: Arc<Bus>) -> Arc<HumanInput> {
        Arc::new_cyclic(|me| HumanInput {
            bus,
            gw: OnceLock::new(),
            sessions: Mutex::new(HashMap::new()),
            me: me.clone(),
        })
    }

    /// Late binding: the extension host (which holds this object) is built inside
    /// `Gateway::new`, before the `Arc<Gateway>` exists.
    pub fn bind(&self, gw: &Arc<Gateway>) {
        let _ = self.gw.set(Arc::downgrade(gw));
    }

    fn gateway(&self) -> Option<Arc<Gateway>> {
        self.gw.get().and_then(Weak::upgrade)
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
    pub fn list(&self, sid: &str) -> Value {
        let requests: Vec<Value> = self
            .sessions
            .lock()
            .get(sid)
            .map(|s| s.pending.iter().map(|p| p.view.clone()).collect())
            .unwrap_or_default();
        json!({ "requests": requests })
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
            "human_input.close",
            payload(json!({"request_id": rid, "reason": reason})),
        );
        true
    }

    /// C24. `Err(RequestNotFound)` for an id this session never had pending.
    pub async fn submit(
        &self,
        sid: &str,
        rid: &str,
        values: Map<String, Value>,
    ) -> Result<Value, HiError> {
        let p = match self.find(sid, rid) {
            Ok(p) => p,
            Err(Some(reason)) => {
                return Ok(json!({"is_accepted": false, "request_id": rid,
                    "reason": format!("the request is already settled ({reason})")}))
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
            return Ok(json!({"is_accepted": false, "request_id": rid, "errors": errors}));
        }
        let answer = self.hide_secrets(sid, &p.fields, coerced);
        if self.settle(sid, rid, "submitted", Some(answer)) {
            Ok(json!({"is_accepted": true, "request_id": rid}))
        } else {
            Ok(json!({"is_accepted": false, "request_id": rid,
                "reason": "the request is already settled"}))
        }
    }

    /// C25.
    pub fn cancel(&self, sid: &str, rid: &str) -> Result<Value, HiError> {
        let p = match self.find(sid, rid) {
            Ok(p) => p,
            Err(Some(_)) => return Ok(json!({"is_cancelled": false, "request_id": rid})),
            Err(None) => return Err(HiError::RequestNotFound),
        };
        if !p.is_cancellable {
            return Err(HiError::NotCancellable);
        }
        let done = self.settle(sid, rid, "cancelled", None);
        Ok(json!({"is_cancelled": done, "request_id": rid}))
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
            "human_input.request",
            payload(json!({ "request": view })),
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
        match self.gateway() {
            Some(gw) if gw.loaded().iter().any(|(k, _)| k == sid) => "cancelled",
            _ => "undeliverable",
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

// ---------------------------------------------------------------------------------------
// Validation and coercion (pure)
// ---------------------------------------------------------------------------------------

fn field_type(f: &Value) -> &str {
    f.get("type").and_then(Value::as_str).unwrap_or("plaintext")
}

fn field_name(f: &Value) -> &str {
    f.get("name")
        .or_else(|| f.get("id"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn flatten_fields(nodes: &[Value], out: &mut Vec<Value>) {
    for n in nodes {
        match n.get("type").and_then(Value::as_str) {
            Some("group") => {
                if let Some(c) = n.get("fields").and_then(Value::as_array) {
                    flatten_fields(c, out);
                }
            }
            Some("heading") | Some("paragraph") => {}
            _ => out.push(n.clone()),
        }
    }
}

fn is_blank(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn num(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

fn option_values(f: &Value) -> Vec<Value> {
    f.get("options")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|o| o.get("value").cloned().unwrap_or_else(|| o.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The option a submitted value designates (JSON-equal, or equal as text: `"3"` picks 3).
fn pick_option(options: &[Value], v: &Value) -> Option<Value> {
    if let Some(o) = options.iter().find(|o| *o == v) {
        return Some(o.clone());
    }
    let as_text = |x: &Value| match x {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let t = as_text(v);
    options.iter().find(|o| as_text(o) == t).cloned()
}

fn length_error(f: &Value, len: usize, unit: &str) -> Option<String> {
    let min = f.get("min_length").and_then(Value::as_u64);
    let max = f.get("max_length").and_then(Value::as_u64);
    if let Some(m) = min.filter(|m| (len as u64) < *m) {
        return Some(format!("must be at least {m} {unit}"));
    }
    if let Some(m) = max.filter(|m| (len as u64) > *m) {
        return Some(format!("must be at most {m} {unit}"));
    }
    None
}

/// Coerces and checks one field's submitted value: `Ok(value)` or `Err(message)`.
fn check_field(f: &Value, raw: Option<&Value>) -> Result<Value, String> {
    let required = f
        .get("is_required")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let raw = match raw {
        Some(v) => v.clone(),
        None => f.get("default").cloned().unwrap_or(Value::Null),
    };
    match field_type(f) {
        "checkbox" => {
            let b = match &raw {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64().unwrap_or(0.0) != 0.0,
                Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                    "true" | "on" | "yes" | "1" => true,
                    "false" | "off" | "no" | "0" | "" => false,
                    _ => return Err("must be true or false".into()),
                },
                _ => return Err("must be true or false".into()),
            };
            if required && !b {
                return Err("is required".into());
            }
            Ok(Value::Bool(b))
        }
        "select" => {
            if is_blank(&raw) {
                return if required {
                    Err("is required".into())
                } else {
                    Ok(Value::Null)
                };
            }
            pick_option(&option_values(f), &raw).ok_or_else(|| "must be one of the options".into())
        }
        "multiselect" => {
            let chosen: Vec<Value> = match &raw {
                Value::Null => Vec::new(),
                Value::Array(a) => a.clone(),
                Value::String(s) if s.is_empty() => Vec::new(),
                other => vec![other.clone()],
            };
            let options = option_values(f);
            let mut picked = Vec::new();
            for c in &chosen {
                match pick_option(&options, c) {
                    Some(o) => picked.push(o),
                    None => return Err("must be a list of the options".into()),
                }
            }
            if required && picked.is_empty() {
                return Err("is required".into());
            }
            // Declaration order, no duplicates.
            Ok(Value::Array(
                options.into_iter().filter(|o| picked.contains(o)).collect(),
            ))
        }
        "range" => {
            let x = match &raw {
                Value::Null => None,
                Value::String(s) if s.trim().is_empty() => None,
                Value::Number(n) => n.as_f64(),
                Value::String(s) => Some(
                    s.trim()
                        .parse::<f64>()
                        .map_err(|_| "must be a number".to_string())?,
                ),
                _ => return Err("must be a number".into()),
            };
            let Some(x) = x.filter(|x| x.is_finite()) else {
                return if required {
                    Err("is required".into())
                } else {
                    Ok(Value::Null)
                };
            };
            let min = num(f.get("min")).unwrap_or(0.0);
            let max = num(f.get("max")).unwrap_or(100.0);
            let step = num(f.get("step")).unwrap_or(1.0);
            if x < min || x > max {
                return Err(format!(
                    "must be between {} and {}",
                    fmt_num(min),
                    fmt_num(max)
                ));
            }
            if step > 0.0 {
                let k = (x - min) / step;
                if (k - k.round()).abs() > 1e-9 {
                    return Err(format!(
                        "must be {} plus a multiple of {}",
                        fmt_num(min),
                        fmt_num(step)
                    ));
                }
            }
            let integral = [min, max, step, x].iter().all(|n| n.fract() == 0.0);
            Ok(if integral {
                Value::from(x as i64)
            } else {
                Value::from(x)
            })
        }
        "otp" => {
            let s = match &raw {
                Value::Null => String::new(),
                Value::String(s) => s.chars().filter(|c| !c.is_whitespace()).collect(),
                Value::Number(n) if n.is_u64() => n.to_string(),
                _ => return Err("must be digits".into()),
            };
            if s.is_empty() {
                return if required {
                    Err("is required".into())
                } else {
                    Ok(Value::Null)
                };
            }
            if !s.chars().all(|c| c.is_ascii_digit()) {
                return Err("must contain only digits".into());
            }
            let min = f.get("min_length").and_then(Value::as_u64).unwrap_or(6);
            let max = f.get("max_length").and_then(Value::as_u64).unwrap_or(6);
            let n = s.len() as u64;
            if n < min || n > max {
                return Err(if min == max {
                    format!("must be {min} digits")
                } else {
                    format!("must be {min} to {max} digits")
                });
            }
            Ok(Value::String(s))
        }
        // plaintext, multiline, password (and unknown types, as text)
        _ => {
            let s = match &raw {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err("must be text".into()),
            };
            if s.trim().is_empty() {
                if required {
                    return Err("is required".into());
                }
                return Ok(if s.is_empty() {
                    Value::Null
                } else {
                    Value::String(s)
                });
            }
            if let Some(e) = length_error(f, s.chars().count(), "characters") {
                return Err(e);
            }
            Ok(Value::String(s))
        }
    }
}

/// Coerces every field of a form: `Ok(values)` (every field present) or `Err(errors)`.
fn validate(
    fields: &[Value],
    values: &Map<String, Value>,
) -> Result<Map<String, Value>, Map<String, Value>> {
    let mut out = Map::new();
    let mut errors = Map::new();
    for f in fields {
        let name = field_name(f);
        match check_field(f, values.get(name)) {
            Ok(v) => {
                out.insert(name.to_string(), v);
            }
            Err(e) => {
                errors.insert(name.to_string(), Value::String(e));
            }
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

// ---------------------------------------------------------------------------------------
// Live views
// ---------------------------------------------------------------------------------------

struct PendingPatch {
    first_seq: u64,
    ops: Vec<Value>,
}

struct View {
    id: String,
    session_id: String,
    title: String,
    description: Option<Value>,
    source: Value,
    nodes: Vec<Value>,
    created_at: i64,
    seq: u64,
    /// The record of each log node: (lines dropped from the front, kept lines).
    logs: HashMap<String, (usize, Vec<String>)>,
    result: Option<Value>,
    is_interrupted: bool,
    note: Option<String>,
    focus: BTreeMap<String, Vec<String>>,
    /// Bumped on every human action (focus, interrupt); `state` waits on it.
    human_version: u64,
    changed: Arc<Notify>,
    pending: Option<PendingPatch>,
    flush_ms: u64,
}

impl View {
    fn wire(&self) -> Value {
        let mut v = json!({
            "id": self.id, "title": self.title, "nodes": self.nodes, "timeout_ms": 0,
            "seq": self.seq, "created_at": self.created_at, "session_id": self.session_id,
            "source": self.source,
        });
        if let Some(d) = &self.description {
            v["description"] = d.clone();
        }
        v
    }
}

fn find_node_mut<'a>(nodes: &'a mut [Value], id: &str) -> Option<&'a mut Value> {
    for n in nodes.iter_mut() {
        if n.get("id").and_then(Value::as_str) == Some(id) {
            return Some(n);
        }
        if let Some(children) = n.get_mut("fields").and_then(Value::as_array_mut) {
            if let Some(found) = find_node_mut(children, id) {
                return Some(found);
            }
        }
    }
    None
}

fn remove_node(nodes: &mut Vec<Value>, id: &str) -> bool {
    if let Some(i) = nodes
        .iter()
        .position(|n| n.get("id").and_then(Value::as_str) == Some(id))
    {
        nodes.remove(i);
        return true;
    }
    nodes.iter_mut().any(|n| {
        n.get_mut("fields")
            .and_then(Value::as_array_mut)
            .is_some_and(|c| remove_node(c, id))
    })
}

fn insert_after(nodes: &mut Vec<Value>, after: &str, node: Value) -> Result<(), Value> {
    if let Some(i) = nodes
        .iter()
        .position(|n| n.get("id").and_then(Value::as_str) == Some(after))
    {
        nodes.insert(i + 1, node);
        return Ok(());
    }
    let mut node = node;
    for n in nodes.iter_mut() {
        if let Some(c) = n.get_mut("fields").and_then(Value::as_array_mut) {
            match insert_after(c, after, node) {
                Ok(()) => return Ok(()),
                Err(back) => node = back,
            }
        }
    }
    Err(node)
}

fn leaf_nodes(nodes: &[Value], out: &mut Vec<Value>) {
    for n in nodes {
        if n.get("type").and_then(Value::as_str) == Some("group") {
            if let Some(c) = n.get("fields").and_then(Value::as_array) {
                leaf_nodes(c, out);
            }
        } else {
            out.push(n.clone());
        }
    }
}

fn check_nodes(nodes: &[Value]) -> Result<(), String> {
    let mut leaves = Vec::new();
    leaf_nodes(nodes, &mut leaves);
    if leaves.len() > MAX_NODES {
        return Err(format!("a live view holds at most {MAX_NODES} nodes"));
    }
    let mut seen = std::collections::HashSet::new();
    for n in &leaves {
        let t = n.get("type").and_then(Value::as_str).unwrap_or("");
        if !LIVE_NODE_TYPES.contains(&t) {
            return Err(format!("unknown live node type '{t}'"));
        }
        let Some(id) = n.get("id").and_then(Value::as_str) else {
            return Err("every live node needs an id".into());
        };
        if !seen.insert(id.to_string()) {
            return Err(format!("live node id '{id}' is used twice"));
        }
    }
    Ok(())
}

fn upsert(list: &mut Vec<Value>, item: Value, cap: usize, what: &str) -> Result<(), String> {
    let id = item.get("id").cloned().unwrap_or(Value::Null);
    if let Some(slot) = list.iter_mut().find(|x| x.get("id") == Some(&id)) {
        if let (Some(dst), Some(src)) = (slot.as_object_mut(), item.as_object()) {
            for (k, v) in src {
                dst.insert(k.clone(), v.clone());
            }
        }
        return Ok(());
    }
    if list.len() >= cap {
        return Err(format!("a live {what} holds at most {cap} items"));
    }
    list.push(item);
    Ok(())
}

fn array_mut<'a>(node: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !node.get(key).is_some_and(Value::is_array) {
        node[key] = json!([]);
    }
    node[key].as_array_mut().expect("just set")
}

/// Applies one op to a view's tree and log records.
fn apply_op(
    nodes: &mut Vec<Value>,
    logs: &mut HashMap<String, (usize, Vec<String>)>,
    op: &Value,
) -> Result<(), String> {
    let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
    let node_id = op.get("node_id").and_then(Value::as_str).unwrap_or("");
    let fields = |skip: &[&str]| -> Map<String, Value> {
        op.as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| {
                        !["op", "node_id"].contains(&k.as_str()) && !skip.contains(&k.as_str())
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    match kind {
        "add-node" => {
            let node = op.get("node").cloned().unwrap_or(Value::Null);
            let mut probe = nodes.clone();
            probe.push(node.clone());
            check_nodes(&probe)?;
            match op.get("after").and_then(Value::as_str) {
                Some(after) => {
                    if let Err(node) = insert_after(nodes, after, node) {
                        nodes.push(node);
                    }
                }
                None => nodes.push(node),
            }
            return Ok(());
        }
        "remove-node" => {
            if !remove_node(nodes, node_id) {
                return Err(format!("live view has no node '{node_id}'"));
            }
            logs.remove(node_id);
            return Ok(());
        }
        _ => {}
    }
    let node = find_node_mut(nodes, node_id)
        .ok_or_else(|| format!("live view has no node '{node_id}'"))?;
    let ntype = node
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match (kind, ntype.as_str()) {
        ("set", "stat") | ("set", "steps") => {
            let mut item = fields(&["item_id"]);
            let id = op.get("item_id").cloned().unwrap_or(Value::Null);
            item.insert("id".into(), id);
            let (cap, what) = if ntype == "stat" {
                (MAX_STATS, "stat")
            } else {
                (MAX_STEPS, "steps node")
            };
            upsert(array_mut(node, "items"), Value::Object(item), cap, what)
        }
        ("set", "table") => {
            let row = op.get("row").cloned().ok_or("a table set needs a row")?;
            upsert(array_mut(node, "rows"), row, MAX_TABLE_ROWS, "table")
        }
        ("set", _) => {
            if let Some(obj) = node.as_object_mut() {
                for (k, v) in fields(&[]) {
                    obj.insert(k, v);
                }
            }
            Ok(())
        }
        ("append", "log") => {
            let lines = log_lines(op);
            let window = array_mut(node, "lines");
            window.extend(lines.iter().cloned().map(Value::String));
            if window.len() > LOG_WINDOW {
                let cut = window.len() - LOG_WINDOW;
                window.drain(..cut);
            }
            let rec = logs.entry(node_id.to_string()).or_default();
            rec.1.extend(lines);
            if rec.1.len() > LOG_KEPT {
                let cut = rec.1.len() - LOG_KEPT;
                rec.1.drain(..cut);
                rec.0 += cut;
            }
            Ok(())
        }
        ("append", "link") => {
            let item = op
                .get("item")
                .cloned()
                .ok_or("a link append needs an item")?;
            upsert(array_mut(node, "items"), item, MAX_LINKS, "link")
        }
        ("clear", "log") => {
            node["lines"] = json!([]);
            logs.insert(node_id.to_string(), (0, Vec::new()));
            Ok(())
        }
        ("clear", "table") => {
            node["rows"] = json!([]);
            Ok(())
        }
        ("clear", _) => {
            node["items"] = json!([]);
            Ok(())
        }
        ("remove", t) => {
            let id = op.get("item_id").cloned().unwrap_or(Value::Null);
            let key = if t == "table" { "rows" } else { "items" };
            array_mut(node, key).retain(|x| x.get("id") != Some(&id));
            Ok(())
        }
        (k, t) => Err(format!("live op '{k}' does not apply to a {t} node")),
    }
}

/// Adds ops to a coalescing buffer; consecutive appends of lines to the same log node merge
/// (up to [`MERGED_APPEND_MAX`] lines per merged append).
fn coalesce_into(buf: &mut Vec<Value>, op: Value) {
    let is_lines_append = |o: &Value| {
        o.get("op").and_then(Value::as_str) == Some("append") && o.get("lines").is_some()
    };
    if is_lines_append(&op) {
        if let Some(last) = buf.last_mut() {
            let same = is_lines_append(last)
                && last.get("node_id") == op.get("node_id")
                && last.get("tone") == op.get("tone");
            let (n_last, n_new) = (
                last["lines"].as_array().map_or(0, Vec::len),
                op["lines"].as_array().map_or(0, Vec::len),
            );
            if same && n_last + n_new <= MERGED_APPEND_MAX {
                if let (Some(dst), Some(src)) =
                    (last["lines"].as_array_mut(), op["lines"].as_array())
                {
                    dst.extend(src.iter().cloned());
                }
                return;
            }
        }
    }
    buf.push(op);
}

impl HumanInput {
    fn find_view(&self, sid: &str, vid: &str, closed_too: bool) -> Option<Arc<Mutex<View>>> {
        let map = self.sessions.lock();
        let s = map.get(sid)?;
        let hit = s.views.iter().find(|v| v.lock().id == vid).cloned();
        if hit.is_some() || !closed_too {
            return hit;
        }
        s.closed.iter().find(|v| v.lock().id == vid).cloned()
    }

    fn find_view_any(&self, vid: &str) -> Option<Arc<Mutex<View>>> {
        let map = self.sessions.lock();
        map.values()
            .find_map(|s| s.views.iter().find(|v| v.lock().id == vid).cloned())
    }

    /// Publishes the buffered ops of a view (if any).
    fn flush(&self, view: &mut View) {
        if let Some(p) = view.pending.take() {
            if p.ops.is_empty() {
                return;
            }
            self.bus.publish(
                &view.session_id,
                "human_input.live.patch",
                payload(json!({"view_id": view.id, "first_seq": p.first_seq,
                    "patch": {"view_id": view.id, "seq": view.seq, "ops": p.ops}})),
            );
        }
    }

    fn close_view(
        &self,
        view: &Arc<Mutex<View>>,
        reason: &str,
        extra: &Map<String, Value>,
    ) -> bool {
        let (sid, result) = {
            let mut v = view.lock();
            if v.result.is_some() {
                return false;
            }
            self.flush(&mut v);
            let mut result = json!({
                "view_id": v.id, "is_completed": reason == "completed", "reason": reason,
                "is_from_human": v.is_interrupted, "view": v.wire(),
            });
            if let Some(n) = &v.note {
                result["note"] = json!(n);
            }
            for k in ["summary", "error", "artifact_id"] {
                if let Some(x) = extra.get(k).filter(|x| !x.is_null()) {
                    result[k] = x.clone();
                }
            }
            v.result = Some(result.clone());
            v.changed.notify_waiters();
            (v.session_id.clone(), result)
        };
        self.with(&sid, |s| {
            s.views.retain(|x| !Arc::ptr_eq(x, view));
            s.closed.push_back(view.clone());
            while s.closed.len() > CLOSED_VIEWS_KEPT {
                s.closed.pop_front();
            }
        });
        let vid = result["view_id"].clone();
        self.bus.publish(
            &sid,
            "human_input.live.close",
            payload(json!({"view_id": vid, "result": result})),
        );
        true
    }

    async fn live_door(
        &self,
        session: Option<&SessionCtx>,
        extension: &str,
        env: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        let op = env.get("op").and_then(Value::as_str).unwrap_or("");
        if op == "open" {
            let sid = session
                .map(|s| s.id.clone())
                .or_else(|| {
                    env.get("session_id")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .ok_or_else(|| {
                    DoorError::new("vis.live is available only while handling a session")
                })?;
            return self.open_view(&sid, extension, &env, worker);
        }
        let vid = env
            .get("view_id")
            .and_then(Value::as_str)
            .ok_or_else(|| DoorError::typed("ValueError", "a live envelope needs a view_id"))?;
        let view = match session {
            Some(s) => self.find_view(&s.id, vid, true),
            None => self.find_view_any(vid),
        }
        .ok_or_else(|| DoorError::typed("KeyError", format!("no live view {vid}")))?;
        match op {
            "patch" => self.patch_view(&view, &env),
            "state" => self.view_state(&view, &env, worker).await,
            "close" => {
                let reason = env
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("completed")
                    .to_string();
                let extra = env.as_object().cloned().unwrap_or_default();
                self.close_view(&view, &reason, &extra);
                let v = view.lock();
                Ok(json!({"seq": v.seq, "view_id": v.id}))
            }
            other => Err(DoorError::typed(
                "ValueError",
                format!("unknown live envelope op '{other}'"),
            )),
        }
    }

    fn open_view(
        &self,
        sid: &str,
        extension: &str,
        env: &Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        let nodes = env
            .get("nodes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        check_nodes(&nodes).map_err(|e| DoorError::typed("ValueError", e))?;
        let mut nodes = nodes;
        let mut logs = HashMap::new();
        // Initial log lines are part of the record too.
        let mut leaves = Vec::new();
        leaf_nodes(&nodes, &mut leaves);
        for n in &leaves {
            if n.get("type").and_then(Value::as_str) == Some("log") {
                let id = n["id"].as_str().unwrap_or("").to_string();
                let lines = log_lines(n);
                if let Some(node) = find_node_mut(&mut nodes, &id) {
                    let w: Vec<Value> = lines
                        .iter()
                        .skip(lines.len().saturating_sub(LOG_WINDOW))
                        .cloned()
                        .map(Value::String)
                        .collect();
                    node["lines"] = Value::Array(w);
                }
                logs.insert(id, (0, lines));
            }
        }
        let flush_ms = env
            .get("flush_ms")
            .and_then(Value::as_u64)
            .unwrap_or(COALESCE_MAX_MS)
            .min(COALESCE_MAX_MS);
        let view = View {
            id: uuid::Uuid::new_v4().to_string(),
            session_id: sid.to_string(),
            title: env
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            description: env.get("description").filter(|d| !d.is_null()).cloned(),
            source: env
                .get("source")
                .filter(|d| !d.is_null())
                .cloned()
                .unwrap_or_else(|| json!(extension)),
            nodes,
            created_at: now_ms(),
            seq: 0,
            logs,
            result: None,
            is_interrupted: false,
            note: None,
            focus: BTreeMap::new(),
            human_version: 0,
            changed: Arc::new(Notify::new()),
            pending: None,
            flush_ms,
        };
        let (vid, wire) = (view.id.clone(), view.wire());
        let view = Arc::new(Mutex::new(view));
        self.with(sid, |s| s.views.push(view.clone()));
        self.bus.publish(
            sid,
            "human_input.live.open",
            payload(json!({"view_id": vid, "view": wire})),
        );
        // A view whose worker went away can never be updated or closed by it.
        let me = self.me.clone();
        let watched = Arc::downgrade(&view);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let (Some(me), Some(view)) = (me.upgrade(), watched.upgrade()) else {
                    return;
                };
                if view.lock().result.is_some() {
                    return;
                }
                if !worker.is_alive() {
                    me.close_view(&view, "undeliverable", &Map::new());
                    return;
                }
            }
        });
        Ok(json!({"view_id": vid, "seq": 0}))
    }

    fn patch_view(&self, view: &Arc<Mutex<View>>, env: &Value) -> Result<Value, DoorError> {
        let ops = env
            .get("ops")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let rows = ops.iter().filter(|o| o.get("row").is_some()).count();
        if rows > MAX_TABLE_ROWS_PER_PATCH {
            return Err(DoorError::typed(
                "ValueError",
                format!("a live patch carries at most {MAX_TABLE_ROWS_PER_PATCH} table rows"),
            ));
        }
        let mut v = view.lock();
        if v.result.is_some() {
            return Err(DoorError::new(format!("live view {} is closed", v.id)));
        }
        if v.is_interrupted {
            return Ok(interrupted_reply(&v));
        }
        // All or nothing: apply on copies first.
        let (mut nodes, mut logs) = (v.nodes.clone(), v.logs.clone());
        for op in &ops {
            apply_op(&mut nodes, &mut logs, op).map_err(|e| DoorError::typed("ValueError", e))?;
        }
        v.nodes = nodes;
        v.logs = logs;
        v.seq += 1;
        let seq = v.seq;
        let immediate = v.flush_ms == 0;
        let schedule = v.pending.is_none() && !immediate;
        let buf = v.pending.get_or_insert(PendingPatch {
            first_seq: seq,
            ops: Vec::new(),
        });
        for op in ops {
            coalesce_into(&mut buf.ops, op);
        }
        if immediate {
            self.flush(&mut v);
        } else if schedule {
            let delay = Duration::from_millis(v.flush_ms);
            let me = self.me.clone();
            let weak = Arc::downgrade(view);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let (Some(me), Some(view)) = (me.upgrade(), weak.upgrade()) {
                    let mut v = view.lock();
                    me.flush(&mut v);
                }
            });
        }
        Ok(json!({"seq": seq}))
    }

    async fn view_state(
        &self,
        view: &Arc<Mutex<View>>,
        env: &Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        let timeout = env.get("timeout_ms").and_then(Value::as_u64).unwrap_or(0);
        let (start, notify, done) = {
            let v = view.lock();
            (
                v.human_version,
                v.changed.clone(),
                v.is_interrupted || v.result.is_some(),
            )
        };
        if timeout > 0 && !done {
            let _hold = worker.hold();
            let deadline = Instant::now() + Duration::from_millis(timeout);
            loop {
                let notified = notify.notified();
                {
                    let v = view.lock();
                    if v.human_version != start || v.result.is_some() {
                        break;
                    }
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let _ = tokio::time::timeout(left.min(LIVENESS_POLL * 5), notified).await;
                if !worker.is_alive() {
                    break;
                }
            }
        }
        let v = view.lock();
        let mut out = json!({
            "seq": v.seq, "changed": v.human_version != start, "interrupted": v.is_interrupted,
            "is_from_human": v.is_interrupted, "nodes": v.nodes, "focus": v.focus,
            "is_closed": v.result.is_some(),
        });
        if let Some(n) = &v.note {
            out["note"] = json!(n);
        }
        Ok(out)
    }

    /// C26: open views of a session.
    pub fn live_views(&self, sid: &str) -> Value {
        let views: Vec<Value> = self
            .sessions
            .lock()
            .get(sid)
            .map(|s| s.views.iter().map(|v| v.lock().wire()).collect())
            .unwrap_or_default();
        json!({ "views": views })
    }

    /// C27: a window of a log node's lines from the view's record (also after close).
    pub fn live_log(
        &self,
        sid: &str,
        vid: &str,
        nid: &str,
        from: usize,
        limit: usize,
    ) -> Result<Value, HiError> {
        let view = self
            .find_view(sid, vid, true)
            .ok_or(HiError::ViewNotFound)?;
        let v = view.lock();
        let (dropped, lines) = v.logs.get(nid).cloned().unwrap_or_default();
        let total = dropped + lines.len();
        let from = from.max(dropped);
        let start = (from - dropped).min(lines.len());
        let end = (start + limit.min(LOG_WINDOW)).min(lines.len());
        Ok(json!({"node_id": nid, "from": from, "total": total, "lines": lines[start..end]}))
    }

    /// C28.
    pub fn live_focus(&self, sid: &str, vid: &str, body: &Value) -> Result<Value, HiError> {
        let view = self
            .find_view(sid, vid, false)
            .ok_or(HiError::ViewNotFound)?;
        let bad = |m: &str| HiError::InvalidFocus(m.to_string());
        let node_id = body
            .get("node_id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("node_id must be a string"))?;
        let ids = body
            .get("item_ids")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("item_ids must be a list of strings"))?;
        let mut focused = Vec::new();
        for i in ids {
            let s = i
                .as_str()
                .ok_or_else(|| bad("item_ids must be a list of strings"))?;
            focused.push(s.to_string());
        }
        let mut v = view.lock();
        let mut nodes = v.nodes.clone();
        let node = find_node_mut(&mut nodes, node_id)
            .ok_or_else(|| bad(&format!("the view has no node '{node_id}'")))?;
        let items: Vec<String> = ["rows", "items"]
            .iter()
            .filter_map(|k| node.get(*k).and_then(Value::as_array))
            .flatten()
            .filter_map(|x| x.get("id").and_then(Value::as_str).map(str::to_string))
            .collect();
        if let Some(unknown) = focused.iter().find(|f| !items.contains(f)) {
            return Err(bad(&format!("node '{node_id}' has no item '{unknown}'")));
        }
        v.focus.insert(node_id.to_string(), focused.clone());
        v.human_version += 1;
        v.changed.notify_waiters();
        Ok(json!({"focused_ids": focused, "node_id": node_id, "view_id": v.id}))
    }

    /// C29.
    pub fn live_interrupt(
        &self,
        sid: &str,
        vid: &str,
        note: Option<String>,
    ) -> Result<Value, HiError> {
        let view = self
            .find_view(sid, vid, true)
            .ok_or(HiError::ViewNotFound)?;
        let mut v = view.lock();
        if v.result.is_some() {
            return Ok(json!({"is_interrupted": false, "view_id": v.id}));
        }
        v.is_interrupted = true;
        if note.is_some() {
            v.note = note;
        }
        v.human_version += 1;
        v.changed.notify_waiters();
        Ok(json!({"is_interrupted": true, "view_id": v.id}))
    }
}

fn interrupted_reply(v: &View) -> Value {
    let mut r = json!({"seq": v.seq, "interrupted": true, "reason": "interrupted",
        "is_from_human": true});
    if let Some(n) = &v.note {
        r["note"] = json!(n);
    }
    r
}

// ---------------------------------------------------------------------------------------
// Shells
// ---------------------------------------------------------------------------------------

/// (status, exit code, finished_at, duration_ms) of a background child.
type ProcStatus = (String, Option<i32>, Option<i64>, Option<u64>);

/// One background child of an extension.
struct Proc {
    id: String,
    command: String,
    cwd: PathBuf,
    pid: Option<u32>,
    started_at: i64,
    started: Instant,
    timeout_secs: Option<u64>,
    out: Mutex<(String, usize)>,
    status: Mutex<ProcStatus>,
    done: watch::Receiver<bool>,
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl Proc {
    fn kill(&self) {
        if let Some(tx) = self.stop.lock().take() {
            let _ = tx.send(());
        }
    }

    fn record(&self, window: Option<(i64, Option<u64>)>) -> Value {
        let (status, exit, finished_at, duration) = self.status.lock().clone();
        let finished = status != "running";
        let (text, omitted) = self.out.lock().clone();
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len();
        let (offset, limit) = window.unwrap_or((0, None));
        let offset = if offset < 0 {
            total.saturating_sub(offset.unsigned_abs() as usize)
        } else {
            (offset as usize).min(total)
        };
        let end = limit
            .map(|l| (offset + l as usize).min(total))
            .unwrap_or(total);
        let out = lines[offset..end].join("\n");
        json!({
            "stage": if finished { "finished" } else { "running" },
            "id": self.id, "cwd": self.cwd.to_string_lossy(), "command": self.command,
            "status": status, "pid": self.pid, "exit": exit,
            "duration_ms": duration, "uptime_ms": self.started.elapsed().as_millis() as u64,
            "started_at": self.started_at, "finished_at": finished_at, "log_path": null,
            "cpu_ms": null, "cpu_percent": null, "rss_bytes": null,
            "timed_out": status == "timed_out", "timeout_secs": self.timeout_secs,
            "out": out, "out_omitted_chars": omitted, "offset": offset, "next_offset": end,
            "is_eof": finished && end >= total, "attach": null, "already_running": false,
            "keys": null, "note": null,
        })
    }
}

fn shell_quote(a: &str) -> String {
    if !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

fn command_line(opts: &Value) -> Result<String, DoorError> {
    match opts.get("command") {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::Array(a)) if !a.is_empty() => Ok(a
            .iter()
            .map(|x| shell_quote(x.as_str().unwrap_or("")))
            .collect::<Vec<_>>()
            .join(" ")),
        _ => Err(DoorError::typed(
            "ValueError",
            "shell needs 'command': a string or a list of strings",
        )),
    }
}

/// Environment of an extension child with no session (`vis.shell` from a provider
/// callback): the basics only, no proxy.
fn plain_env() -> BTreeMap<String, String> {
    [
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "TERM",
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
    .collect()
}

fn append_capped(buf: &Mutex<(String, usize)>, chunk: &str) {
    let mut b = buf.lock();
    let room = SHELL_OUT_CAP.saturating_sub(b.0.len());
    if chunk.len() <= room {
        b.0.push_str(chunk);
    } else {
        let mut cut = room;
        while cut > 0 && !chunk.is_char_boundary(cut) {
            cut -= 1;
        }
        b.0.push_str(&chunk[..cut]);
        b.1 += chunk.len() - cut;
    }
}

impl HumanInput {
    fn proc_of(&self, sid: &str, id: &str) -> Option<Arc<Proc>> {
        self.sessions.lock().get(sid)?.procs.get(id).cloned()
    }

    async fn shell_door(
        &self,
        door: &str,
        session: Option<&SessionCtx>,
        extension: &str,
        opts: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        if !opts.is_object() {
            return Err(DoorError::typed(
                "TypeError",
                "shell takes one options map — use shell({'command': 'ls'})",
            ));
        }
        if door == "jailed_shell_session" && session.is_none() {
            return Err(DoorError::new(
                "jailed_shell_session is available only while handling a session",
            ));
        }
        let key = session.map(|s| s.id.clone()).unwrap_or_default();
        let op = opts.get("op").and_then(Value::as_str).unwrap_or("run");
        if matches!(op, "logs" | "wait" | "send" | "stop") {
            let id = opts.get("id").and_then(Value::as_str).unwrap_or("");
            let p = self.proc_of(&key, id).ok_or_else(|| {
                DoorError::typed("KeyError", format!("no shell process with id '{id}'"))
            })?;
            return match op {
                "logs" => {
                    let offset = opts.get("offset").and_then(Value::as_i64).unwrap_or(0);
                    let limit = opts.get("limit").and_then(Value::as_u64);
                    Ok(p.record(Some((offset, limit))))
                }
                "wait" => {
                    let secs = opts.get("seconds").and_then(Value::as_f64).unwrap_or(120.0);
                    let _hold = worker.hold();
                    let mut done = p.done.clone();
                    let _ = tokio::time::timeout(
                        Duration::from_secs_f64(secs.clamp(0.0, 86_400.0)),
                        done.wait_for(|d| *d),
                    )
                    .await;
                    Ok(p.record(None))
                }
                "send" => {
                    let mut text = opts
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    if opts
                        .get("is_enter")
                        .and_then(Value::as_bool)
                        .unwrap_or(true)
                    {
                        text.push('\n');
                    }
                    use tokio::io::AsyncWriteExt;
                    let mut stdin = p.stdin.lock().await;
                    let Some(w) = stdin.as_mut() else {
                        return Err(DoorError::new("the process's input is closed"));
                    };
                    w.write_all(text.as_bytes())
                        .await
                        .map_err(|e| DoorError::new(format!("cannot write to the process: {e}")))?;
                    let _ = w.flush().await;
                    Ok(p.record(None))
                }
                _ => {
                    p.kill();
                    let mut done = p.done.clone();
                    let _ =
                        tokio::time::timeout(Duration::from_secs(5), done.wait_for(|d| *d)).await;
                    Ok(p.record(None))
                }
            };
        }
        if !matches!(op, "run" | "background") {
            return Err(DoorError::typed(
                "ValueError",
                format!("shell op '{op}' is not supported"),
            ));
        }
        let gw = self
            .gateway()
            .ok_or_else(|| DoorError::new("the gateway is shutting down"))?;
        let command = command_line(&opts)?;
        let root = session
            .map(|s| s.workspace_root.clone())
            .unwrap_or_else(|| gw.default_root.clone());
        let cwd = match opts.get("cwd").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => {
                let p = Path::new(c);
                if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    root.join(p)
                }
            }
            _ => root.clone(),
        };
        if !cwd.is_dir() {
            return Err(DoorError::typed(
                "FileNotFoundError",
                format!("shell cwd {} is not a directory", cwd.display()),
            ));
        }
        // `shell`: the session's proxy environment (its traffic is decided and reported
        // under the session), no jail. `jailed_shell` / `jailed_shell_session`: the same plus
        // the kernel jail when the configuration enables it. Without a session, `shell` gets
        // a plain environment and `jailed_shell` acts for a principal named after the
        // extension (`ext:<name>`, configuration of the gateway's default root).
        let is_jailed = door != "shell";
        let principal = match session {
            Some(s) => Some((
                s.id.clone(),
                s.project_root.clone().unwrap_or_else(|| root.clone()),
            )),
            // A fresh principal (and proxy token) per spawn, revoked when the child ends.
            None if is_jailed => Some((
                format!("ext:{extension}:{}", uuid::Uuid::new_v4()),
                gw.default_root.clone(),
            )),
            None => None,
        };
        let mut jail: Vec<String> = Vec::new();
        let spawn_token = principal
            .as_ref()
            .filter(|_| session.is_none())
            .map(|(pid, _)| pid.clone());
        let mut env = match principal {
            Some((pid, project)) => {
                // Re-read at each spawn; an invalid configuration refuses (fail closed).
                let cfg = gw.project_config(&project).await.map_err(|e| {
                    DoorError::typed(
                        "PermissionError",
                        format!("{door} refused: the configuration is invalid: {e}"),
                    )
                })?;
                let sandbox = gw.sandbox.get().cloned().ok_or_else(|| {
                    DoorError::new(format!("{door}: the session sandbox is not running"))
                })?;
                if is_jailed {
                    let (sb, r, c) = (sandbox.clone(), root.clone(), cfg.clone());
                    let prefix = tokio::task::spawn_blocking(move || sb.jail_prefix(&r, &c))
                        .await
                        .map_err(|e| DoorError::new(format!("{door}: {e}")))?
                        .map_err(|e| {
                            DoorError::typed("PermissionError", format!("{door} refused: {e}"))
                        })?;
                    jail = prefix.unwrap_or_default();
                }
                sandbox.child_env(&pid, &root, &cfg)
            }
            None => plain_env(),
        };
        if let Some(extra) = opts.get("env").and_then(Value::as_object) {
            for (k, v) in extra {
                if let Some(v) = v.as_str() {
                    env.insert(k.clone(), v.to_string());
                }
            }
        }
        let timeout_secs = opts.get("timeout_secs").and_then(Value::as_u64);
        let stdin = opts
            .get("stdin")
            .and_then(Value::as_str)
            .map(str::to_string);
        tracing::debug!(target: "vis::extension", extension, door, session = %key, "{command}");
        // `run` waits (bounded by `timeout_secs`, default 120 s); `background` returns at once.
        let timeout_secs = match op {
            "run" => Some(timeout_secs.unwrap_or(SHELL_DEFAULT_TIMEOUT_SECS)),
            _ => timeout_secs,
        };
        let spawned = spawn_proc(&command, &cwd, &env, &jail, timeout_secs, stdin.as_deref());
        if let (Some(pid), Some(sandbox)) = (spawn_token, gw.sandbox.get().cloned()) {
            let done = spawned.as_ref().ok().map(|p| p.done.clone());
            tokio::spawn(async move {
                if let Some(mut done) = done {
                    let _ = done.wait_for(|d| *d).await;
                }
                sandbox.tokens.revoke(&pid);
            });
        }
        let p = spawned
            .map_err(|e| DoorError::typed("OSError", format!("cannot start the command: {e}")))?;
        if op == "run" {
            let _hold = worker.hold();
            let mut done = p.done.clone();
            let _ = done.wait_for(|d| *d).await;
            return Ok(p.record(None));
        }
        self.with(&key, |s| s.procs.insert(p.id.clone(), p.clone()));
        Ok(p.record(None))
    }
}

fn spawn_proc(
    command: &str,
    cwd: &Path,
    env: &BTreeMap<String, String>,
    jail: &[String],
    timeout_secs: Option<u64>,
    stdin_text: Option<&str>,
) -> std::io::Result<Arc<Proc>> {
    use std::process::Stdio;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut child =
        crate::sandbox::run::sh_command(command, cwd, env, jail, Stdio::piped()).spawn()?;
    let pid = child.id();
    let (done_tx, done_rx) = watch::channel(false);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let mut stdin = child.stdin.take();
    // Given `stdin` text is written then the input is closed (EOF); otherwise the input stays
    // open for `send`.
    if let Some(text) = stdin_text {
        if let Some(mut w) = stdin.take() {
            let text = text.to_string();
            tokio::spawn(async move {
                let _ = w.write_all(text.as_bytes()).await;
            });
        }
    }
    let p = Arc::new(Proc {
        id: uuid::Uuid::new_v4().to_string(),
        command: command.to_string(),
        cwd: cwd.to_path_buf(),
        pid,
        started_at: now_ms(),
        started: Instant::now(),
        timeout_secs,
        out: Mutex::new((String::new(), 0)),
        status: Mutex::new(("running".into(), None, None, None)),
        done: done_rx,
        stdin: tokio::sync::Mutex::new(stdin),
        stop: Mutex::new(Some(stop_tx)),
    });
    let mut readers = Vec::new();
    let streams: Vec<Box<dyn tokio::io::AsyncRead + Unpin + Send>> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
    ]
    .into_iter()
    .flatten()
    .collect();
    for mut r in streams {
        let p = p.clone();
        readers.push(tokio::spawn(async move {
            let mut chunk = [0u8; 8192];
            loop {
                match r.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => append_capped(&p.out, &String::from_utf8_lossy(&chunk[..n])),
                }
            }
        }));
    }
    let waiter = p.clone();
    tokio::spawn(async move {
        let kill = |pid: Option<u32>| {
            if let Some(pid) = pid {
                // SAFETY: signalling the process group created for this child.
                unsafe {
                    libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
                }
            }
        };
        let limit = timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(Duration::MAX);
        let sleep = tokio::time::sleep(limit.min(Duration::from_secs(86_400 * 365)));
        let (state, code) = tokio::select! {
            s = child.wait() => ("exited", s.ok().and_then(|s| s.code())),
            _ = sleep => { kill(pid); let _ = child.wait().await; ("timed_out", None) }
            _ = stop_rx => { kill(pid); let _ = child.wait().await; ("stopped", None) }
        };
        for r in readers {
            let _ = tokio::time::timeout(Duration::from_secs(2), r).await;
        }
        *waiter.status.lock() = (
            state.to_string(),
            code,
            Some(now_ms()),
            Some(waiter.started.elapsed().as_millis() as u64),
        );
        let _ = done_tx.send(true);
    });
    Ok(p)
}

// ---------------------------------------------------------------------------------------
// The host's door implementation
// ---------------------------------------------------------------------------------------

#[async_trait]
impl HumanDoors for HumanInput {
    async fn request_input(
        &self,
        session: Option<&SessionCtx>,
        extension: &str,
        payload: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        let Some(session) = session else {
            return Err(DoorError::new(
                "vis.ask is available only while handling a session (a tool, slash command \
                 or hook call)",
            ));
        };
        self.ask(session, extension, payload, worker).await
    }

    async fn live(
        &self,
        session: Option<&SessionCtx>,
        extension: &str,
        envelope: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        self.live_door(session, extension, envelope, worker).await
    }

    async fn shell(
        &self,
        door: &str,
        session: Option<&SessionCtx>,
        extension: &str,
        opts: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        self.shell_door(door, session, extension, opts, worker)
            .await
    }

    fn reveal_secret(&self, session_id: Option<&str>, handle: &str) -> Option<String> {
        self.reveal(session_id, handle)
    }

    fn forget_secret(&self, session_id: Option<&str>, handle: &str) -> bool {
        self.forget(session_id, handle)
    }

    fn session_disposed(&self, session_id: &str) {
        self.drop_session(session_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A worker double: alive until told otherwise; validators reject the text "bad".
    struct FakeWorker {
        alive: AtomicBool,
    }

    #[async_trait]
    impl DoorWorker for FakeWorker {
        async fn callback(&self, _: &Value, args: Vec<Value>) -> Result<Value, String> {
            Ok(if args.get(1) == Some(&json!("bad")) {
                json!("is bad")
            } else {
                Value::Null
            })
        }
        fn is_alive(&self) -> bool {
            self.alive.load(Ordering::SeqCst)
        }
        fn hold(&self) -> Box<dyn Send + Sync> {
            Box::new(())
        }
    }

    fn fixture() -> (Arc<HumanInput>, Arc<Bus>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("vis-hi-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let store = crate::store::Store::open(&dir.join("db.sqlite")).expect("store");
        let bus = Arc::new(Bus::new(store, 1000));
        bus.open("s", 0);
        (HumanInput::new(bus.clone()), bus, dir)
    }

    fn session() -> SessionCtx {
        SessionCtx {
            id: "s".into(),
            project_root: None,
            workspace_root: std::env::temp_dir(),
        }
    }

    fn worker() -> Arc<FakeWorker> {
        Arc::new(FakeWorker {
            alive: AtomicBool::new(true),
        })
    }

    fn f(v: Value) -> Value {
        v
    }

    #[test]
    fn every_field_type_is_coerced_and_checked() {
        let opts = json!([{"value": "a", "label": "A"}, {"value": 3, "label": "three"}]);
        let cb = f(json!({"type": "checkbox", "name": "c"}));
        assert_eq!(check_field(&cb, Some(&json!("on"))), Ok(json!(true)));
        assert_eq!(check_field(&cb, None), Ok(json!(false)));
        assert!(check_field(&cb, Some(&json!({}))).is_err());
        let req_cb = f(json!({"type": "checkbox", "name": "c", "is_required": true}));
        assert_eq!(
            check_field(&req_cb, Some(&json!(false))),
            Err("is required".into())
        );

        let sel = json!({"type": "select", "name": "s", "options": opts});
        assert_eq!(check_field(&sel, Some(&json!("3"))), Ok(json!(3)));
        assert_eq!(check_field(&sel, Some(&json!("a"))), Ok(json!("a")));
        assert!(check_field(&sel, Some(&json!("zz"))).is_err());
        assert_eq!(check_field(&sel, None), Ok(Value::Null));

        let ms = json!({"type": "multiselect", "name": "m", "options": opts, "is_required": true});
        assert_eq!(
            check_field(&ms, Some(&json!([3, "a", 3]))),
            Ok(json!(["a", 3]))
        );
        assert_eq!(check_field(&ms, Some(&json!("a"))), Ok(json!(["a"])));
        assert!(check_field(&ms, Some(&json!(["nope"]))).is_err());
        assert_eq!(
            check_field(&ms, Some(&json!([]))),
            Err("is required".into())
        );

        let rg = json!({"type": "range", "name": "r", "min": 0, "max": 10, "step": 2});
        assert_eq!(check_field(&rg, Some(&json!(4))), Ok(json!(4)));
        assert_eq!(check_field(&rg, Some(&json!("6"))), Ok(json!(6)));
        assert!(check_field(&rg, Some(&json!(5))).is_err(), "off step");
        assert!(check_field(&rg, Some(&json!(12))).is_err(), "out of bounds");
        assert!(check_field(&rg, Some(&json!("x"))).is_err());
        let frac = json!({"type": "range", "name": "r", "min": 0, "max": 1, "step": 0.25});
        assert_eq!(check_field(&frac, Some(&json!(0.5))), Ok(json!(0.5)));

        let txt = json!({"type": "plaintext", "name": "t", "min_length": 2, "max_length": 4, "is_required": true});
        assert_eq!(check_field(&txt, Some(&json!("abc"))), Ok(json!("abc")));
        assert!(check_field(&txt, Some(&json!("a"))).is_err());
        assert!(check_field(&txt, Some(&json!("abcde"))).is_err());
        assert_eq!(
            check_field(&txt, Some(&json!(""))),
            Err("is required".into())
        );
        assert!(check_field(&txt, Some(&json!([1]))).is_err());
        let ml = json!({"type": "multiline", "name": "ml"});
        assert_eq!(check_field(&ml, None), Ok(Value::Null));
        let pw = json!({"type": "password", "name": "p", "default": "dflt"});
        assert_eq!(check_field(&pw, None), Ok(json!("dflt")));

        let otp = json!({"type": "otp", "name": "o", "min_length": 6, "max_length": 6});
        assert_eq!(
            check_field(&otp, Some(&json!("123 456"))),
            Ok(json!("123456"))
        );
        assert!(check_field(&otp, Some(&json!("12345"))).is_err());
        assert!(check_field(&otp, Some(&json!("12a456"))).is_err());
    }

    #[test]
    fn a_form_reports_every_invalid_field_by_name() {
        let fields = vec![
            json!({"type": "plaintext", "name": "a", "is_required": true}),
            json!({"type": "checkbox", "name": "b"}),
        ];
        let errs = validate(&fields, &Map::new()).expect_err("a is required");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs["a"], "is required");
        let ok = validate(&fields, json!({"a": "x"}).as_object().unwrap()).expect("valid");
        assert_eq!(Value::Object(ok), json!({"a": "x", "b": false}));
    }

    fn ask_payload(extra: Value) -> Value {
        let mut request = json!({"title": "T", "fields": [
            {"type": "group", "direction": "row", "fields": [
                {"type": "plaintext", "name": "name", "is_required": true}]},
            {"type": "password", "name": "pw"}]});
        if let (Some(r), Some(e)) = (request.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                r.insert(k.clone(), v.clone());
            }
        }
        json!({"request": request, "validators": {"name": [1]},
            "run_validator": {"__vis_callback__": "run_validator", "id": "cb1"}})
    }

    async fn pending_id(hi: &HumanInput) -> String {
        for _ in 0..200 {
            if let Some(id) = hi.list("s")["requests"][0]["id"].as_str() {
                return id.to_string();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("no pending request");
    }

    #[tokio::test]
    async fn a_submit_is_validated_then_settles_the_form_with_secret_handles() {
        let (hi, _bus, dir) = fixture();
        let w = worker();
        let h = hi.clone();
        let door =
            tokio::spawn(async move { h.ask(&session(), "ext", ask_payload(json!({})), w).await });
        let rid = pending_id(&hi).await;
        assert!(hi.is_awaiting("s"));
        assert_eq!(
            hi.list("s")["requests"][0]["timeout_ms"],
            DEFAULT_TIMEOUT_MS
        );
        let r = hi.submit("s", &rid, Map::new()).await.expect("known");
        assert_eq!(r["is_accepted"], false);
        assert_eq!(r["errors"]["name"], "is required");
        let bad = json!({"name": "bad"}).as_object().cloned().unwrap();
        let r = hi.submit("s", &rid, bad).await.expect("known");
        assert_eq!(
            r["errors"]["name"], "is bad",
            "the custom validator ran: {r}"
        );
        assert!(hi.is_awaiting("s"), "the form stays pending");
        let good = json!({"name": "Ann", "pw": "hunter2"})
            .as_object()
            .cloned()
            .unwrap();
        let r = hi.submit("s", &rid, good.clone()).await.expect("known");
        assert_eq!(r["is_accepted"], true);
        let answer = door.await.expect("join").expect("answer");
        assert_eq!(answer["status"], "submitted");
        assert_eq!(answer["values"]["name"], "Ann");
        let handle = answer["values"]["pw"].as_str().expect("handle");
        assert!(handle.starts_with("vis-secret:"), "{handle}");
        assert_eq!(hi.reveal(Some("s"), handle).as_deref(), Some("hunter2"));
        assert!(hi.forget(Some("s"), handle));
        assert_eq!(hi.reveal(Some("s"), handle), None);
        assert!(!hi.is_awaiting("s"));
        let late = hi.submit("s", &rid, good).await.expect("remembered");
        assert_eq!(late["is_accepted"], false);
        assert_eq!(
            hi.submit("s", "nope", Map::new()).await,
            Err(HiError::RequestNotFound)
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn cancel_timeout_and_a_vanished_worker_settle_with_their_reasons() {
        let (hi, _bus, dir) = fixture();
        // Not cancellable → refused; then a timeout settles it.
        let h = hi.clone();
        let door = tokio::spawn(async move {
            h.ask(
                &session(),
                "ext",
                ask_payload(json!({"is_cancellable": false, "timeout_ms": 150})),
                worker(),
            )
            .await
        });
        let rid = pending_id(&hi).await;
        assert_eq!(hi.cancel("s", &rid), Err(HiError::NotCancellable));
        let a = door.await.expect("join").expect("answer");
        assert_eq!(
            (a["status"].as_str(), a["reason"].as_str()),
            (Some("timeout"), Some("timeout"))
        );
        // Cancellable → cancelled.
        let h = hi.clone();
        let door = tokio::spawn(async move {
            h.ask(&session(), "ext", ask_payload(json!({})), worker())
                .await
        });
        let rid = pending_id(&hi).await;
        assert_eq!(hi.cancel("s", &rid).expect("ok")["is_cancelled"], true);
        assert_eq!(
            door.await.expect("join").expect("answer")["reason"],
            "cancelled"
        );
        assert_eq!(
            hi.cancel("s", &rid).expect("settled")["is_cancelled"],
            false
        );
        // The worker goes away (no gateway bound: the session counts as gone).
        let w = worker();
        let (h, w2) = (hi.clone(), w.clone());
        let door =
            tokio::spawn(async move { h.ask(&session(), "ext", ask_payload(json!({})), w2).await });
        pending_id(&hi).await;
        w.alive.store(false, Ordering::SeqCst);
        assert_eq!(
            door.await.expect("join").expect("answer")["reason"],
            "undeliverable"
        );
        assert!(!hi.is_awaiting("s"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn consecutive_log_appends_merge_up_to_the_cap() {
        let mut buf = Vec::new();
        coalesce_into(
            &mut buf,
            json!({"op": "append", "node_id": "l", "lines": ["a"]}),
        );
        coalesce_into(
            &mut buf,
            json!({"op": "append", "node_id": "l", "lines": ["b", "c"]}),
        );
        assert_eq!(buf.len(), 1);
        assert_eq!(buf[0]["lines"], json!(["a", "b", "c"]));
        coalesce_into(
            &mut buf,
            json!({"op": "append", "node_id": "other", "lines": ["x"]}),
        );
        assert_eq!(buf.len(), 2);
        let many: Vec<String> = (0..MERGED_APPEND_MAX).map(|i| i.to_string()).collect();
        coalesce_into(
            &mut buf,
            json!({"op": "append", "node_id": "other", "lines": many}),
        );
        assert_eq!(
            buf.len(),
            3,
            "a merge may not exceed {MERGED_APPEND_MAX} lines"
        );
    }

    #[tokio::test]
    async fn live_patches_within_the_window_publish_once_and_logs_stay_readable() {
        let (hi, bus, dir) = fixture();
        let w = worker();
        let nodes = json!([{"type": "log", "id": "out", "lines": []},
            {"type": "table", "id": "t", "columns": [], "rows": []}]);
        let open = hi
            .live_door(
                Some(&session()),
                "ext",
                json!({"op": "open", "title": "Job", "nodes": nodes}),
                w.clone(),
            )
            .await
            .expect("open");
        let vid = open["view_id"].as_str().unwrap().to_string();
        let before = bus.high_water("s").unwrap();
        for i in 0..5 {
            let env = json!({"op": "patch", "view_id": vid,
                "ops": [{"op": "append", "node_id": "out", "lines": [format!("line {i}")]}]});
            hi.live_door(Some(&session()), "ext", env, w.clone())
                .await
                .expect("patch");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(
            bus.high_water("s").unwrap(),
            before + 1,
            "one coalesced patch event"
        );
        let log = hi.live_log("s", &vid, "out", 1, 2).expect("log");
        assert_eq!(log["total"], 5);
        assert_eq!(log["lines"], json!(["line 1", "line 2"]));
        let bad = hi
            .live_door(
                Some(&session()),
                "ext",
                json!({"op": "patch", "view_id": vid, "ops": [{"op": "set", "node_id": "nope"}]}),
                w.clone(),
            )
            .await;
        assert!(bad.is_err());
        let env = json!({"op": "patch", "view_id": vid,
            "ops": [{"op": "set", "node_id": "t", "row": {"id": "r1", "cells": {"a": 1}}}]});
        hi.live_door(Some(&session()), "ext", env, w.clone())
            .await
            .expect("row");
        assert_eq!(
            hi.live_focus("s", &vid, &json!({"node_id": "t", "item_ids": ["r1"]}))
                .expect("focus")["focused_ids"],
            json!(["r1"])
        );
        assert!(matches!(
            hi.live_focus("s", &vid, &json!({"node_id": "t", "item_ids": ["zz"]})),
            Err(HiError::InvalidFocus(_))
        ));
        assert_eq!(
            hi.live_interrupt("s", &vid, Some("stop".into()))
                .expect("ok")["is_interrupted"],
            true
        );
        let env = json!({"op": "patch", "view_id": vid,
            "ops": [{"op": "append", "node_id": "out", "lines": ["more"]}]});
        let r = hi
            .live_door(Some(&session()), "ext", env, w.clone())
            .await
            .expect("patch");
        assert_eq!(r["interrupted"], true);
        assert_eq!(r["note"], "stop");
        hi.live_door(
            Some(&session()),
            "ext",
            json!({"op": "close", "view_id": vid, "reason": "interrupted"}),
            w,
        )
        .await
        .expect("close");
        assert_eq!(hi.live_views("s")["views"], json!([]));
        assert_eq!(
            hi.live_log("s", &vid, "out", 0, 10).expect("after close")["total"],
            5
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn background_children_answer_logs_send_wait_and_stop_by_id() {
        let (hi, _bus, dir) = fixture();
        let env: BTreeMap<String, String> =
            [("PATH".to_string(), "/usr/bin:/bin".to_string())].into();
        let p = spawn_proc(
            "read x; echo got $x; sleep 30",
            &std::env::temp_dir(),
            &env,
            &[],
            None,
            None,
        )
        .expect("spawn");
        let id = p.id.clone();
        hi.with("s", |s| s.procs.insert(id.clone(), p));
        let w: Arc<dyn DoorWorker> = worker();
        let door = |op: Value| {
            let (hi, w) = (hi.clone(), w.clone());
            async move {
                hi.shell_door("shell", Some(&session()), "ext", op, w)
                    .await
                    .expect("door")
            }
        };
        let r = door(json!({"op": "send", "id": id, "text": "abc"})).await;
        assert_eq!(r["status"], "running");
        let r = door(json!({"op": "wait", "id": id, "seconds": 0.5})).await;
        assert_eq!(r["status"], "running", "{r}");
        assert_eq!(r["out"], "got abc");
        let r = door(json!({"op": "stop", "id": id})).await;
        assert_eq!(
            (r["status"].as_str(), r["is_eof"].as_bool()),
            (Some("stopped"), Some(true))
        );
        assert!(hi
            .shell_door(
                "shell",
                Some(&session()),
                "ext",
                json!({"op": "logs", "id": "nope"}),
                w.clone()
            )
            .await
            .is_err());

        let p = spawn_proc(
            "echo a; echo b; exit 3",
            &std::env::temp_dir(),
            &env,
            &[],
            Some(10),
            None,
        )
        .expect("spawn");
        let id = p.id.clone();
        hi.with("s", |s| s.procs.insert(id.clone(), p));
        let r = door(json!({"op": "wait", "id": id, "seconds": 10})).await;
        assert_eq!(
            (r["status"].as_str(), r["exit"].as_i64()),
            (Some("exited"), Some(3))
        );
        let r = door(json!({"op": "logs", "id": id, "offset": -1})).await;
        assert_eq!(r["out"], "b");
        assert_eq!(
            (r["offset"].as_u64(), r["next_offset"].as_u64()),
            (Some(1), Some(2))
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn disposing_a_session_settles_its_forms_and_closes_its_views() {
        let (hi, bus, dir) = fixture();
        let h = hi.clone();
        let door = tokio::spawn(async move {
            h.ask(&session(), "ext", ask_payload(json!({})), worker())
                .await
        });
        pending_id(&hi).await;
        let env = json!({"op": "open", "title": "J", "nodes": [{"type": "log", "id": "l"}]});
        hi.live_door(Some(&session()), "ext", env, worker())
            .await
            .expect("open");
        let before = bus.high_water("s").unwrap();
        hi.session_disposed("s");
        let a = door.await.expect("join").expect("answer");
        assert_eq!(a["reason"], "undeliverable");
        assert_eq!(
            bus.high_water("s").unwrap(),
            before + 2,
            "close + live.close"
        );
        assert!(!hi.is_awaiting("s"));
        assert_eq!(hi.live_views("s")["views"], json!([]));
        let _ = std::fs::remove_dir_all(dir);
    }
}
