//! Live views (`vis.live`): opening, patching (the tree ops are in `tree.rs`) and closing a
//! view, coalesced publishing, and the HTTP side (views, log window, focus, interrupt).

use super::tree::*;
use super::{HiError, HumanInput, LIVENESS_POLL};
use crate::extensions::client::DoorError;
use crate::extensions::{DoorWorker, SessionCtx};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use vis_companion_api::events::{Event, LiveClose, LiveOpen, LivePatch, LivePatchOps};
use vis_companion_api::sse::now_ms;
use vis_companion_api::wire::{LiveFocused, LiveInterrupted, LiveLog, LiveViews};

/// Closed live views kept per session (their logs stay readable).
const CLOSED_VIEWS_KEPT: usize = 64;
/// Live patches are coalesced at most this long.
const COALESCE_MAX_MS: u64 = 100;
struct PendingPatch {
    first_seq: u64,
    ops: Vec<Value>,
}

pub(super) struct View {
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
                Event::HumanInputLivePatch(LivePatch {
                    view_id: view.id.clone(),
                    first_seq: p.first_seq,
                    patch: LivePatchOps {
                        view_id: view.id.clone(),
                        seq: view.seq,
                        ops: p.ops,
                    },
                }),
            );
        }
    }

    pub(super) fn close_view(
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
            Event::HumanInputLiveClose(LiveClose {
                view_id: vid.to_string(),
                result,
            }),
        );
        true
    }

    pub(super) async fn live_door(
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
            Event::HumanInputLiveOpen(LiveOpen {
                view_id: vid.to_string(),
                view: wire,
            }),
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

    /// The open views of a session.
    pub fn live_views(&self, sid: &str) -> LiveViews {
        let views: Vec<Value> = self
            .sessions
            .lock()
            .get(sid)
            .map(|s| s.views.iter().map(|v| v.lock().wire()).collect())
            .unwrap_or_default();
        LiveViews { views }
    }

    /// A window of a log node's lines from the view's record (also after close).
    pub fn live_log(
        &self,
        sid: &str,
        vid: &str,
        nid: &str,
        from: usize,
        limit: usize,
    ) -> Result<LiveLog, HiError> {
        let view = self
            .find_view(sid, vid, true)
            .ok_or(HiError::ViewNotFound)?;
        let v = view.lock();
        let (dropped, lines) = v.logs.get(nid).cloned().unwrap_or_default();
        let total = dropped + lines.len();
        let from = from.max(dropped);
        let start = (from - dropped).min(lines.len());
        let end = (start + limit.min(LOG_WINDOW)).min(lines.len());
        Ok(LiveLog {
            node_id: nid.to_string(),
            from,
            total,
            lines: lines[start..end].to_vec(),
        })
    }

    /// Focuses items of a view's node (the human's selection).
    pub fn live_focus(&self, sid: &str, vid: &str, body: &Value) -> Result<LiveFocused, HiError> {
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
        Ok(LiveFocused {
            focused_ids: focused,
            node_id: node_id.to_string(),
            view_id: v.id.clone(),
        })
    }

    /// Interrupts a view on behalf of the human.
    pub fn live_interrupt(
        &self,
        sid: &str,
        vid: &str,
        note: Option<String>,
    ) -> Result<LiveInterrupted, HiError> {
        let view = self
            .find_view(sid, vid, true)
            .ok_or(HiError::ViewNotFound)?;
        let mut v = view.lock();
        if v.result.is_some() {
            return Ok(LiveInterrupted {
                is_interrupted: false,
                view_id: v.id.clone(),
            });
        }
        v.is_interrupted = true;
        if note.is_some() {
            v.note = note;
        }
        v.human_version += 1;
        v.changed.notify_waiters();
        Ok(LiveInterrupted {
            is_interrupted: true,
            view_id: v.id.clone(),
        })
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
