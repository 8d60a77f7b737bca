//! Row-level operations, run on the store thread.

use super::StoreResult;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use vis_companion_api::events::EventKind;

/// A stored session.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct SessionRow {
    pub id: String,
    pub channel: String,
    pub title: Option<String>,
    pub external_id: Option<String>,
    pub workspace_id: Option<String>,
    pub root: String,
    pub owner_id: Option<String>,
    pub created_at: i64,
    pub modified_at: Option<i64>,
    pub last_active_at: i64,
    pub turn_count: i64,
    pub first_request: Option<String>,
    pub favorite_rank: Option<i64>,
    pub model_pref: Option<Value>,
    pub last_seq: i64,
    pub trimmed_through: i64,
    pub last_status: String,
    pub queue_paused: bool,
    pub cancel_floor: Option<i64>,
}

const SESSION_COLS: &str = "id, channel, title, external_id, workspace_id, root, owner_id, created_at, modified_at, \
    last_active_at, turn_count, first_request, favorite_rank, model_pref, \
    MAX(last_seq, COALESCE((SELECT MAX(e.seq) FROM egress e WHERE e.sid = sessions.id), 0)), trimmed_through, last_status, \
    queue_paused, cancel_floor";

fn session_from(r: &Row) -> rusqlite::Result<SessionRow> {
    let pref: Option<String> = r.get(13)?;
    Ok(SessionRow {
        id: r.get(0)?,
        channel: r.get(1)?,
        title: r.get(2)?,
        external_id: r.get(3)?,
        workspace_id: r.get(4)?,
        root: r.get(5)?,
        owner_id: r.get(6)?,
        created_at: r.get(7)?,
        modified_at: r.get(8)?,
        last_active_at: r.get(9)?,
        turn_count: r.get(10)?,
        first_request: r.get(11)?,
        favorite_rank: r.get(12)?,
        model_pref: pref.and_then(|p| serde_json::from_str(&p).ok()),
        last_seq: r.get(14)?,
        trimmed_through: r.get(15)?,
        last_status: r.get(16)?,
        queue_paused: r.get::<_, i64>(17)? != 0,
        cancel_floor: r.get(18)?,
    })
}

/// Writes the whole session row (insert or replace), keeping the event counters stored
/// by `insert_event`, which the caller does not own.
pub fn put_session(c: &Connection, s: &SessionRow) -> StoreResult<()> {
    c.execute(
        "INSERT INTO sessions (id, channel, title, external_id, workspace_id, root, owner_id, created_at, modified_at, \
         last_active_at, turn_count, first_request, favorite_rank, model_pref, last_status, queue_paused, cancel_floor) \
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17) \
         ON CONFLICT(id) DO UPDATE SET channel=?2, title=?3, external_id=?4, workspace_id=?5, root=?6, owner_id=?7, \
         modified_at=?9, last_active_at=?10, turn_count=?11, first_request=?12, favorite_rank=?13, model_pref=?14, \
         last_status=?15, queue_paused=?16, cancel_floor=?17",
        params![
            s.id,
            s.channel,
            s.title,
            s.external_id,
            s.workspace_id,
            s.root,
            s.owner_id,
            s.created_at,
            s.modified_at,
            s.last_active_at,
            s.turn_count,
            s.first_request,
            s.favorite_rank,
            s.model_pref.as_ref().map(|v| v.to_string()),
            s.last_status,
            s.queue_paused as i64,
            s.cancel_floor,
        ],
    )?;
    Ok(())
}

pub fn get_session(c: &Connection, id: &str) -> StoreResult<Option<SessionRow>> {
    Ok(c.query_row(
        &format!("SELECT {SESSION_COLS} FROM sessions WHERE id = ?1"),
        [id],
        session_from,
    )
    .optional()?)
}

pub fn all_sessions(c: &Connection) -> StoreResult<Vec<SessionRow>> {
    let mut st = c.prepare_cached(&format!("SELECT {SESSION_COLS} FROM sessions"))?;
    let rows = st
        .query_map([], session_from)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

pub fn delete_session(c: &Connection, id: &str) -> StoreResult<()> {
    c.execute("DELETE FROM events WHERE sid = ?1", [id])?;
    c.execute("DELETE FROM egress WHERE sid = ?1", [id])?;
    c.execute("DELETE FROM turns WHERE sid = ?1", [id])?;
    c.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
    Ok(())
}

/// Stores a turn record (JSON) with its indexed columns.
pub fn put_turn(
    c: &Connection,
    tid: &str,
    sid: &str,
    ord: i64,
    status: &str,
    key: Option<&str>,
    record: &str,
) -> StoreResult<()> {
    c.prepare_cached(
        "INSERT INTO turns (tid, sid, ord, status, idempotency_key, record) VALUES (?1,?2,?3,?4,?5,?6) \
         ON CONFLICT(tid) DO UPDATE SET status=?4, record=?6",
    )?
    .execute(params![tid, sid, ord, status, key, record])?;
    Ok(())
}

pub fn delete_turn(c: &Connection, tid: &str) -> StoreResult<()> {
    c.execute("DELETE FROM turns WHERE tid = ?1", [tid])?;
    Ok(())
}

/// One turn record of a session.
pub fn turn_of(c: &Connection, sid: &str, tid: &str) -> StoreResult<Option<String>> {
    Ok(
        c.prepare_cached("SELECT record FROM turns WHERE sid = ?1 AND tid = ?2")?
            .query_row([sid, tid], |r| r.get(0))
            .optional()?,
    )
}

/// Turn records of a session, oldest first.
pub fn turns_of(c: &Connection, sid: &str) -> StoreResult<Vec<String>> {
    let mut st = c.prepare_cached("SELECT record FROM turns WHERE sid = ?1 ORDER BY ord")?;
    let rows = st
        .query_map([sid], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Turn records with one of the given statuses, across sessions, oldest first.
pub fn turns_with_status(c: &Connection, status: &str) -> StoreResult<Vec<String>> {
    let mut st = c.prepare_cached("SELECT record FROM turns WHERE status = ?1 ORDER BY ord")?;
    let rows = st
        .query_map([status], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

pub fn max_turn_ord(c: &Connection) -> StoreResult<i64> {
    Ok(c.query_row("SELECT COALESCE(MAX(ord), 0) FROM turns", [], |r| r.get(0))?)
}

/// Raises the session's stored seq high-water to `seq`.
pub fn bump_high_water(c: &Connection, sid: &str, seq: i64) -> StoreResult<()> {
    c.prepare_cached("UPDATE sessions SET last_seq = MAX(last_seq, ?2) WHERE id = ?1")?
        .execute(params![sid, seq])?;
    Ok(())
}

/// Records an event: bumps the session's seq high-water (unless `seq_kept` says a row
/// written with the event keeps the seq: egress rows, which the session's high-water on
/// load includes) and, for stored events, appends it to the journal and trims the journal
/// to `retain` rows.
pub fn insert_event(
    c: &Connection,
    sid: &str,
    seq: i64,
    kind: &str,
    data: Option<&str>,
    retain: i64,
    seq_kept: bool,
) -> StoreResult<()> {
    if !seq_kept || data.is_some() {
        bump_high_water(c, sid, seq)?;
    }
    let Some(data) = data else { return Ok(()) };
    c.prepare_cached(
        "INSERT OR REPLACE INTO events (sid, seq, type, data) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![sid, seq, kind, data])?;
    // Trim in steps so the delete runs once per `step` inserts, not on every event.
    let step = (retain / 16).max(1);
    if seq % step == 0 {
        let cutoff: Option<i64> = c
            .prepare_cached(
                "SELECT seq FROM events WHERE sid = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2",
            )?
            .query_row(params![sid, retain], |r| r.get(0))
            .optional()?;
        if let Some(cut) = cutoff {
            c.prepare_cached("DELETE FROM events WHERE sid = ?1 AND seq <= ?2")?
                .execute(params![sid, cut])?;
            c.prepare_cached(
                "UPDATE sessions SET trimmed_through = MAX(trimmed_through, ?2) WHERE id = ?1",
            )?
            .execute(params![sid, cut])?;
        }
    }
    Ok(())
}

/// A stored event as `(seq, type, data)`.
pub type StoredEvent = (i64, String, String);

/// Stored events with `after < seq <= upto`, plus the session's `trimmed_through`.
pub fn events_between(
    c: &Connection,
    sid: &str,
    after: i64,
    upto: i64,
) -> StoreResult<(i64, Vec<StoredEvent>)> {
    let trimmed: i64 = c
        .query_row(
            "SELECT trimmed_through FROM sessions WHERE id = ?1",
            [sid],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0);
    let mut st = c.prepare_cached(
        "SELECT seq, type, data FROM events WHERE sid = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq",
    )?;
    let rows = st
        .query_map(params![sid, after, upto], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok((trimmed, rows))
}

pub fn count_events(c: &Connection) -> StoreResult<i64> {
    Ok(c.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))?)
}

/// Stores an egress decision record under its seq.
pub fn insert_egress(c: &Connection, sid: &str, seq: i64, data: &str) -> StoreResult<()> {
    c.prepare_cached("INSERT OR REPLACE INTO egress (sid, seq, data) VALUES (?1, ?2, ?3)")?
        .execute(params![sid, seq, data])?;
    Ok(())
}

/// Egress records newest first, `seq < before`, at most `limit + 1` (to tell `has_more`).
pub fn egress_page(
    c: &Connection,
    sid: &str,
    before: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<(i64, String)>> {
    let mut st = c.prepare_cached(
        "SELECT seq, data FROM egress WHERE sid = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
    )?;
    let rows = st
        .query_map(
            params![sid, before.unwrap_or(i64::MAX), (limit + 1) as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Content blocks of a turn that the journal shows opened but never completed.
pub fn open_blocks(c: &Connection, sid: &str, tid: &str) -> StoreResult<Vec<String>> {
    let mut st = c.prepare_cached(
        "SELECT type, COALESCE(json_extract(data, '$.block.id'), json_extract(data, '$.block_id')) FROM events \
         WHERE sid = ?1 AND type IN (?3, ?4) \
         AND json_extract(data, '$.turn_id') = ?2 ORDER BY seq",
    )?;
    let (started, completed) = (
        EventKind::ContentBlockStarted.as_str(),
        EventKind::ContentBlockCompleted.as_str(),
    );
    let rows = st
        .query_map(params![sid, tid, started, completed], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut open: Vec<String> = Vec::new();
    for (kind, id) in rows {
        let Some(id) = id else { continue };
        if kind == started {
            open.push(id);
        } else {
            open.retain(|o| *o != id);
        }
    }
    Ok(open)
}

/// What the journal shows a session opened for a human and never closed: `vis.ask` forms
/// (`human_input.request` without `human_input.close`) and live views (`human_input.live.open`
/// without `human_input.live.close`), as `(is_view, id)` in opening order.
pub fn dangling_human_input(c: &Connection, sid: &str) -> StoreResult<Vec<(bool, String)>> {
    let mut st = c.prepare_cached(
        "SELECT type, COALESCE(json_extract(data, '$.request.id'), json_extract(data, '$.request_id'), \
         json_extract(data, '$.view_id')) FROM events WHERE sid = ?1 AND type IN (?2, ?3, ?4, ?5) \
         ORDER BY seq",
    )?;
    let kinds = [
        EventKind::HumanInputRequest,
        EventKind::HumanInputClose,
        EventKind::HumanInputLiveOpen,
        EventKind::HumanInputLiveClose,
    ]
    .map(EventKind::as_str);
    let rows = st
        .query_map(params![sid, kinds[0], kinds[1], kinds[2], kinds[3]], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut open: Vec<(bool, String)> = Vec::new();
    for (kind, id) in rows {
        let Some(id) = id else { continue };
        match EventKind::parse(&kind) {
            Some(EventKind::HumanInputRequest) => open.push((false, id)),
            Some(EventKind::HumanInputLiveOpen) => open.push((true, id)),
            Some(EventKind::HumanInputClose) => open.retain(|o| *o != (false, id.clone())),
            _ => open.retain(|o| *o != (true, id.clone())),
        }
    }
    Ok(open)
}

/// Extension state (docs/decisions.md, E6), keyed by extension name; values are JSON text.
pub fn state_get(c: &Connection, ext: &str, key: &str) -> StoreResult<Option<String>> {
    Ok(
        c.prepare_cached("SELECT value FROM extension_state WHERE extension = ?1 AND key = ?2")?
            .query_row(params![ext, key], |r| r.get(0))
            .optional()?,
    )
}

pub fn state_put(c: &Connection, ext: &str, key: &str, value: &str) -> StoreResult<()> {
    c.prepare_cached(
        "INSERT OR REPLACE INTO extension_state (extension, key, value) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![ext, key, value])?;
    Ok(())
}

pub fn state_delete(c: &Connection, ext: &str, key: &str) -> StoreResult<()> {
    c.prepare_cached("DELETE FROM extension_state WHERE extension = ?1 AND key = ?2")?
        .execute(params![ext, key])?;
    Ok(())
}

pub fn state_keys(c: &Connection, ext: &str) -> StoreResult<Vec<String>> {
    let mut st =
        c.prepare_cached("SELECT key FROM extension_state WHERE extension = ?1 ORDER BY key")?;
    let rows = st
        .query_map([ext], |r| r.get(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        crate::store::migrations::apply(&c).unwrap();
        put_session(
            &c,
            &SessionRow {
                id: "s".into(),
                channel: "web".into(),
                root: "/".into(),
                last_status: "idle".into(),
                ..Default::default()
            },
        )
        .unwrap();
        c
    }

    #[test]
    fn retention_trims_the_oldest_events_and_remembers_how_far() {
        let c = db();
        for seq in 1..=100 {
            insert_event(&c, "s", seq, "x", Some("{}"), 32, false).unwrap();
        }
        let (trimmed, rows) = events_between(&c, "s", 0, 100).unwrap();
        assert!(
            (100 - 32 - 2..100 - 32 + 2).contains(&trimmed),
            "trimmed {trimmed}"
        );
        assert_eq!(rows.first().unwrap().0, trimmed + 1);
        assert_eq!(rows.last().unwrap().0, 100);
    }

    #[test]
    fn live_only_events_move_the_high_water_without_a_journal_row() {
        let c = db();
        insert_event(&c, "s", 1, "x", Some("{}"), 100, false).unwrap();
        insert_event(&c, "s", 2, "activity", None, 100, false).unwrap();
        assert_eq!(get_session(&c, "s").unwrap().unwrap().last_seq, 2);
        assert_eq!(events_between(&c, "s", 0, 10).unwrap().1.len(), 1);
    }

    #[test]
    fn an_egress_row_keeps_the_high_water_of_the_live_event_it_was_published_with() {
        let c = db();
        insert_event(&c, "s", 1, "x", Some("{}"), 100, false).unwrap();
        insert_event(&c, "s", 2, "egress.decision", None, 100, true).unwrap();
        insert_egress(&c, "s", 2, "{}").unwrap();
        assert_eq!(get_session(&c, "s").unwrap().unwrap().last_seq, 2);
        assert_eq!(all_sessions(&c).unwrap()[0].last_seq, 2);
        insert_event(&c, "s", 3, "activity", None, 100, false).unwrap();
        assert_eq!(get_session(&c, "s").unwrap().unwrap().last_seq, 3);
    }
}
