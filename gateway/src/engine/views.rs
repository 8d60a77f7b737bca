//! Read models: the Soul (§6.1), the session list (§6.2), turn history and the transcript (§6.4).

use super::turn::{Status, Turn};
use super::{now_ms, Gateway, SessionState};
use crate::store::rows::{self, SessionRow};
use serde_json::{json, Value};
use std::collections::HashMap;
use vis_companion_api::{ApiError, ApiResult, SessionListQuery};

/// Live facts of a loaded session.
#[derive(Default, Clone)]
pub struct Live {
    pub running: Option<(String, String, i64)>,
    pub queued: usize,
}

pub fn live_of(st: &SessionState) -> Live {
    Live {
        running: st.running.as_ref().map(|r| {
            (
                r.turn.tid.clone(),
                r.turn.request.clone(),
                r.turn.started_at.unwrap_or(0),
            )
        }),
        queued: st.queue.len(),
    }
}

/// Byte cap of a windowed transcript page (`VIS_GATEWAY_TRANSCRIPT_PAGE_MAX_BYTES`, default 2 MiB).
fn transcript_page_max_bytes() -> usize {
    std::env::var("VIS_GATEWAY_TRANSCRIPT_PAGE_MAX_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(2 * 1024 * 1024)
}

impl Gateway {
    pub fn soul(&self, row: &SessionRow, live: &Live) -> Value {
        let model = self.providers.read().pick(None).map(|(_, m)| m);
        let status = if live.running.is_some() {
            "running"
        } else if row.last_status == "suspended" {
            "suspended"
        } else {
            "idle"
        };
        let mut s = json!({
            "id": row.id, "channel": row.channel, "title": row.title, "external_id": row.external_id, "owner_id": row.owner_id,
            "model": model, "created_at": row.created_at, "modified_at": row.modified_at, "last_active_at": row.last_active_at,
            "turn_count": row.turn_count, "project_id": super::companion::project_id(&row.root), "project_name": label(&row.root), "project_position": null,
            "favorite_rank": row.favorite_rank, "status": status, "live": live.running.is_some(), "is_awaiting_input": self.human_input.is_awaiting(&row.id),
            "current_turn_id": live.running.as_ref().map(|r| &r.0), "server_time_ms": now_ms(),
        });
        let m = s.as_object_mut().expect("json! object");
        if let Some(p) = &row.model_pref {
            m.insert("model_pref".into(), p.clone());
        }
        if let Some((_, req, at)) = &live.running {
            m.insert("running_request".into(), json!(super::turn::preview(req)));
            m.insert("running_started_at".into(), json!(at));
        }
        if let Some(f) = &row.first_request {
            m.insert("first_request".into(), json!(f));
        }
        m.insert(
            "workspace".into(),
            json!(self.workspace_view(&row.id, &row.root)),
        );
        s
    }

    fn live_map(&self) -> HashMap<String, Live> {
        self.loaded()
            .into_iter()
            .map(|(k, s)| (k, live_of(&s.lock())))
            .collect()
    }

    pub async fn list_sessions(&self, q: SessionListQuery) -> ApiResult<Value> {
        let rows = self
            .store
            .call(rows::all_sessions)
            .await
            .map_err(|e| ApiError::engine(e.to_string()))?;
        let live = self.live_map();
        let root_filter = q
            .root
            .as_deref()
            .map(|r| r.trim_end_matches('/').to_string())
            .filter(|r| !r.is_empty());
        let mut listed: Vec<(i64, i64, &SessionRow)> = rows
            .iter()
            .filter(|r| {
                root_filter
                    .as_deref()
                    .is_none_or(|root| r.root.trim_end_matches('/') == root)
            })
            .filter(|r| {
                let l = live.get(&r.id);
                r.title.as_deref().is_some_and(|t| !t.trim().is_empty())
                    || r.turn_count > 0
                    || l.is_some_and(|l| l.running.is_some())
                    || r.favorite_rank.is_some()
                    || q.dirty.contains(&r.id)
            })
            .map(|r| {
                let (band, key) = if let Some(rank) = r.favorite_rank {
                    (0, rank)
                } else if q.dirty.contains(&r.id) {
                    (1, -r.modified_at.unwrap_or(r.created_at))
                } else {
                    (2, -r.modified_at.unwrap_or(r.created_at))
                };
                (band, key, r)
            })
            .collect();
        listed.sort_by(|a, b| (a.0, a.1, &a.2.id).cmp(&(b.0, b.1, &b.2.id)));
        let total = listed.len();
        let start = match &q.after {
            None => 0,
            Some((band, key, id)) => listed
                .iter()
                .position(|(b, k, r)| (*b, *k, &r.id) > (*band, *key, id))
                .unwrap_or(total),
        };
        let end = q.limit.map(|l| (start + l).min(total)).unwrap_or(total);
        let empty = Live::default();
        let soul_of = |r: &SessionRow| self.soul(r, live.get(&r.id).unwrap_or(&empty));
        let page: Vec<Value> = listed[start..end]
            .iter()
            .map(|(_, _, r)| soul_of(r))
            .collect();
        let has_more = end < total;
        let next_cursor = if has_more {
            listed
                .get(end - 1)
                .map(|(b, k, r)| format!("{b}:{k}:{}", r.id))
        } else {
            None
        };
        let after = q.after.as_ref().map(|(b, k, i)| format!("{b}:{k}:{i}"));
        let mut body = json!({
            "sessions": page, "awaiting": [], "root": q.root, "total": total, "limit": q.limit,
            "after": after, "next_cursor": next_cursor, "has_more": has_more,
        });
        if q.after.is_none() {
            body["overview"] = overview(
                &listed.iter().map(|(_, _, r)| *r).collect::<Vec<_>>(),
                &live,
            );
        }
        Ok(body)
    }

    /// Every turn of a session, oldest first, with the live overlay.
    pub async fn all_turns(&self, sid: &str) -> ApiResult<Vec<Turn>> {
        let shared = self.session(sid).await?;
        let id = sid.to_string();
        let recs = self
            .store
            .call(move |c| rows::turns_of(c, &id))
            .await
            .map_err(|e| ApiError::engine(e.to_string()))?;
        let mut turns: Vec<Turn> = recs
            .iter()
            .filter_map(|r| serde_json::from_str(r).ok())
            .collect();
        let st = shared.lock();
        for t in turns.iter_mut() {
            if let Some(r) = st.running.as_ref().filter(|r| r.turn.tid == t.tid) {
                *t = r.turn.clone();
                t.iterations = r.progress.lock().iterations.clone();
            } else if let Some(q) = st.queue.iter().find(|q| q.tid == t.tid) {
                *t = q.clone();
            }
        }
        Ok(turns)
    }

    pub async fn transcript(
        &self,
        sid: &str,
        limit: Option<usize>,
        offset: Option<usize>,
    ) -> ApiResult<Value> {
        let turns = match self.all_turns(sid).await {
            Ok(t) => t,
            Err(e) if e.kind == "session-not-found" => vec![],
            Err(e) => return Err(e),
        };
        let rows: Vec<Value> = turns
            .iter()
            .filter(|t| t.status != Status::Queued)
            .map(Turn::transcript_row)
            .collect();
        Ok(window(rows, limit, offset, transcript_page_max_bytes()))
    }
}

/// The transcript window (§6.4): positions in the oldest-first list, filled newest-first and
/// cut after the row that crosses the byte cap.
pub fn window(rows: Vec<Value>, limit: Option<usize>, offset: Option<usize>, cap: usize) -> Value {
    let total = rows.len();
    if limit.is_none() && offset.is_none() {
        return json!({"turns": rows, "total": total, "offset": 0, "has_more": false});
    }
    let limit = limit.unwrap_or(total);
    let offset = offset.unwrap_or(total.saturating_sub(limit)).min(total);
    let end = (offset + limit).min(total);
    let mut bytes = 0;
    let mut first = end;
    while first > offset {
        bytes += rows[first - 1].to_string().len();
        first -= 1;
        if bytes > cap {
            break;
        }
    }
    let page: Vec<Value> = rows[first..end].to_vec();
    json!({"turns": page, "total": total, "offset": first, "has_more": first > 0})
}

fn label(root: &str) -> String {
    std::path::Path::new(root)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| root.to_string())
}

fn overview(rows: &[&SessionRow], live: &HashMap<String, Live>) -> Value {
    let mut projects: std::collections::BTreeMap<&str, (usize, usize, i64)> = Default::default();
    let mut live_count = 0;
    for r in rows {
        let is_live = live.get(&r.id).is_some_and(|l| l.running.is_some());
        live_count += is_live as usize;
        let e = projects.entry(r.root.as_str()).or_default();
        e.0 += 1;
        e.1 += is_live as usize;
        e.2 = e.2.max(r.modified_at.unwrap_or(r.created_at));
    }
    let list: Vec<Value> = projects
        .iter()
        .map(|(root, (n, l, last))| {
            json!({"root": root, "project_id": super::companion::project_id(root), "name": label(root), "session_count": n,
            "live_count": l, "awaiting_count": 0, "last_activity_ms": last})
        })
        .collect();
    json!({"projects": list, "project_count": projects.len(), "session_count": rows.len(), "live_count": live_count,
        "awaiting_count": 0, "server_time_ms": now_ms()})
}

#[cfg(test)]
mod tests {
    use super::window;
    use serde_json::json;

    fn rows(n: usize) -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| json!({"id": i, "pad": "x".repeat(100)}))
            .collect()
    }

    #[test]
    fn no_parameters_return_everything() {
        let w = window(rows(3), None, None, 1000);
        assert_eq!(w["turns"].as_array().unwrap().len(), 3);
        assert_eq!(w["has_more"], false);
    }

    #[test]
    fn a_limit_alone_returns_the_newest_rows() {
        let w = window(rows(10), Some(4), None, 1 << 20);
        assert_eq!(w["offset"], 6);
        assert_eq!(w["turns"][0]["id"], 6);
        assert_eq!(w["has_more"], true);
    }

    #[test]
    fn the_byte_cap_keeps_the_crossing_row_and_raises_the_offset() {
        let w = window(rows(10), Some(10), Some(0), 250);
        let page = w["turns"].as_array().unwrap();
        assert_eq!(page.len(), 3);
        assert_eq!(w["offset"], 7);
        assert_eq!(w["has_more"], true);
    }
}
