//! Read models: the session record, the session list, turn history and the transcript.

use super::{now_ms, SessionState, Turns};
use crate::records::turn::{Status, Turn};
use crate::records::{SessionError, SessionResult};
use crate::store::rows::{self, SessionRow};
use crate::store::StoreResult;
use serde::Serialize;
use std::collections::HashMap;
use vis_companion_api::wire::{
    Overview, ProjectOverview, SessionList, SessionRecord, SessionStatus, Transcript, TranscriptRow,
};
use vis_companion_api::SessionListQuery;

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

impl Turns {
    pub fn soul(&self, row: &SessionRow, live: &Live) -> SessionRecord {
        let model = self.configuration.pick(None).map(|(_, m)| m);
        let status = if live.running.is_some() {
            SessionStatus::Running
        } else if row.last_status == "suspended" {
            SessionStatus::Suspended
        } else {
            SessionStatus::Idle
        };
        SessionRecord {
            id: row.id.clone(),
            channel: row.channel.clone(),
            title: row.title.clone(),
            external_id: row.external_id.clone(),
            owner_id: row.owner_id.clone(),
            model,
            created_at: row.created_at,
            modified_at: row.modified_at,
            last_active_at: row.last_active_at,
            turn_count: row.turn_count,
            project_id: crate::companion::project_id(&row.root),
            project_name: label(&row.root),
            project_position: None,
            favorite_rank: row.favorite_rank,
            status,
            live: live.running.is_some(),
            is_awaiting_input: self.human_input.is_awaiting(&row.id),
            current_turn_id: live.running.as_ref().map(|r| r.0.clone()),
            server_time_ms: now_ms(),
            model_pref: row.model_pref.clone(),
            running_request: live
                .running
                .as_ref()
                .map(|(_, req, _)| crate::records::turn::preview(req)),
            running_started_at: live.running.as_ref().map(|r| r.2),
            first_request: row.first_request.clone(),
            workspace: Some(self.workspaces.view(&row.id, &row.root)),
            queued_turns: None,
        }
    }

    fn live_map(&self) -> HashMap<String, Live> {
        self.sessions
            .all()
            .into_iter()
            .map(|(k, s)| (k, live_of(&s.lock())))
            .collect()
    }

    pub async fn list_sessions(&self, q: SessionListQuery) -> StoreResult<SessionList> {
        let rows = self.store.with(rows::all_sessions).await?;
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
            // The gateway's own sessions (the MCP server tests) are not the user's: listed
            // only when their channel is asked for.
            .filter(|r| match q.channel.as_deref() {
                Some(c) => r.channel == c,
                None => r.channel != super::sessions::INTERNAL_CHANNEL,
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
        let sessions = listed[start..end]
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
        let overview = q.after.is_none().then(|| {
            overview(
                &listed.iter().map(|(_, _, r)| *r).collect::<Vec<_>>(),
                &live,
            )
        });
        Ok(SessionList {
            sessions,
            awaiting: Vec::new(),
            root: q.root,
            total,
            limit: q.limit,
            after: q.after.as_ref().map(|(b, k, i)| format!("{b}:{k}:{i}")),
            next_cursor,
            has_more,
            overview,
        })
    }

    pub async fn transcript(
        &self,
        sid: &str,
        limit: Option<usize>,
        offset: Option<usize>,
    ) -> SessionResult<Transcript> {
        let turns = match self.sessions.turns(sid).await {
            Ok(t) => t,
            Err(SessionError::NotFound { .. }) => vec![],
            Err(e) => return Err(e),
        };
        let rows: Vec<TranscriptRow> = turns
            .iter()
            .filter(|t| t.status != Status::Queued)
            .map(Turn::transcript_row)
            .collect();
        let total = rows.len();
        let (turns, offset) = window(rows, limit, offset, transcript_page_max_bytes());
        Ok(Transcript {
            has_more: offset > 0,
            turns,
            total,
            offset,
        })
    }
}

/// The transcript window: positions in the oldest-first list, filled newest-first and cut
/// after the row that crosses the byte cap. Returns the page and its offset.
pub fn window<T: Serialize + Clone>(
    rows: Vec<T>,
    limit: Option<usize>,
    offset: Option<usize>,
    cap: usize,
) -> (Vec<T>, usize) {
    let total = rows.len();
    if limit.is_none() && offset.is_none() {
        return (rows, 0);
    }
    let limit = limit.unwrap_or(total);
    let offset = offset.unwrap_or(total.saturating_sub(limit)).min(total);
    let end = (offset + limit).min(total);
    let mut bytes = 0;
    let mut first = end;
    while first > offset {
        bytes += serde_json::to_string(&rows[first - 1]).map_or(0, |s| s.len());
        first -= 1;
        if bytes > cap {
            break;
        }
    }
    (rows[first..end].to_vec(), first)
}

fn label(root: &str) -> String {
    std::path::Path::new(root)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| root.to_string())
}

fn overview(rows: &[&SessionRow], live: &HashMap<String, Live>) -> Overview {
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
    Overview {
        project_count: projects.len(),
        projects: projects
            .iter()
            .map(|(root, (n, l, last))| ProjectOverview {
                root: root.to_string(),
                project_id: crate::companion::project_id(root),
                name: label(root),
                session_count: *n,
                live_count: *l,
                awaiting_count: 0,
                last_activity_ms: *last,
            })
            .collect(),
        session_count: rows.len(),
        live_count,
        awaiting_count: 0,
        server_time_ms: now_ms(),
    }
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
        let (page, offset) = window(rows(3), None, None, 1000);
        assert_eq!(page.len(), 3);
        assert_eq!(offset, 0, "nothing before the page");
    }

    #[test]
    fn a_limit_alone_returns_the_newest_rows() {
        let (page, offset) = window(rows(10), Some(4), None, 1 << 20);
        assert_eq!(offset, 6);
        assert_eq!(page[0]["id"], 6);
    }

    #[test]
    fn the_byte_cap_keeps_the_crossing_row_and_raises_the_offset() {
        let (page, offset) = window(rows(10), Some(10), Some(0), 250);
        assert_eq!(page.len(), 3);
        assert_eq!(offset, 7);
    }
}
