//! The drafts' and forks' rows, run on the store thread.

use super::{Draft, DraftState};
use crate::store::{StoreError, StoreResult};
use rusqlite::{params, Connection, OptionalExtension};

fn decode(rec: String) -> StoreResult<Draft> {
    serde_json::from_str(&rec).map_err(|e| StoreError::Other(format!("a draft record: {e}")))
}

/// Writes (inserts or replaces) a draft.
pub fn put(c: &Connection, d: &Draft) -> StoreResult<()> {
    let rec = serde_json::to_string(d).map_err(|e| StoreError::Other(e.to_string()))?;
    // Only an active draft may hold a label or a session pin.
    let pinned = (d.state == DraftState::Active)
        .then_some(d.session_id.as_deref())
        .flatten();
    c.execute(
        "INSERT OR REPLACE INTO drafts (id, repo_root, label, state, session_id, created_at, record) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            d.workspace_id,
            d.repo_root.to_string_lossy(),
            d.label,
            d.state.as_str(),
            pinned,
            d.fork_ms,
            rec
        ],
    )?;
    Ok(())
}

pub fn get(c: &Connection, id: &str) -> StoreResult<Option<Draft>> {
    let rec: Option<String> = c
        .query_row("SELECT record FROM drafts WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .optional()?;
    rec.map(decode).transpose()
}

/// Active drafts of a repository, newest first.
pub fn active_of_repo(c: &Connection, repo_root: &str) -> StoreResult<Vec<Draft>> {
    let mut st = c.prepare(
        "SELECT record FROM drafts WHERE repo_root = ?1 AND state = 'active' \
         ORDER BY created_at DESC, id",
    )?;
    let recs = st
        .query_map([repo_root], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    recs.into_iter().map(decode).collect()
}

/// Every active draft a session is inside (for the in-memory pins at start).
pub fn pinned(c: &Connection) -> StoreResult<Vec<Draft>> {
    let mut st =
        c.prepare("SELECT record FROM drafts WHERE state = 'active' AND session_id IS NOT NULL")?;
    let recs = st
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    recs.into_iter().map(decode).collect()
}

/// One fork of a session.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ForkRow {
    pub session_id: String,
    pub through_turn_id: Option<String>,
    pub created_at: i64,
}

pub fn put_fork(
    c: &Connection,
    child: &str,
    parent: &str,
    through: Option<&str>,
    at: i64,
) -> StoreResult<()> {
    c.execute(
        "INSERT OR REPLACE INTO forks (child, parent, through_tid, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![child, parent, through, at],
    )?;
    Ok(())
}

/// The forks cut from `parent` that still exist, oldest first.
pub fn forks_of(c: &Connection, parent: &str) -> StoreResult<Vec<ForkRow>> {
    let mut st = c.prepare(
        "SELECT f.child, f.through_tid, f.created_at FROM forks f \
         JOIN sessions s ON s.id = f.child WHERE f.parent = ?1 ORDER BY f.created_at, f.child",
    )?;
    let rows = st
        .query_map([parent], |r| {
            Ok(ForkRow {
                session_id: r.get(0)?,
                through_turn_id: r.get(1)?,
                created_at: r.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}
