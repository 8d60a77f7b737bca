//! Row-level operations on sessions, turns, the event journal, egress records and extension
//! state, run on the store thread, each with its SQLite and its PostgreSQL form.

use super::pg::{get, PgConn};
use super::{on_engine, Db, StoreResult};
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

/// The session columns, the high-water including egress rows (which keep their seq).
macro_rules! session_cols {
    ($max:literal) => {
        concat!(
            "id, channel, title, external_id, workspace_id, root, owner_id, created_at, modified_at, \
             last_active_at, turn_count, first_request, favorite_rank, model_pref, ",
            $max,
            "(last_seq, COALESCE((SELECT MAX(e.seq) FROM egress e WHERE e.sid = sessions.id), 0)), \
             trimmed_through, last_status, queue_paused, cancel_floor"
        )
    };
}

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

fn session_from_pg(r: &tokio_postgres::Row) -> StoreResult<SessionRow> {
    let pref: Option<String> = get(r, 13)?;
    Ok(SessionRow {
        id: get(r, 0)?,
        channel: get(r, 1)?,
        title: get(r, 2)?,
        external_id: get(r, 3)?,
        workspace_id: get(r, 4)?,
        root: get(r, 5)?,
        owner_id: get(r, 6)?,
        created_at: get(r, 7)?,
        modified_at: get(r, 8)?,
        last_active_at: get(r, 9)?,
        turn_count: get(r, 10)?,
        first_request: get(r, 11)?,
        favorite_rank: get(r, 12)?,
        model_pref: pref.and_then(|p| serde_json::from_str(&p).ok()),
        last_seq: get(r, 14)?,
        trimmed_through: get(r, 15)?,
        last_status: get(r, 16)?,
        queue_paused: get(r, 17)?,
        cancel_floor: get(r, 18)?,
    })
}

/// Writes the whole session row (insert or replace), keeping the event counters stored
/// by `insert_event`, which the caller does not own.
pub fn put_session(db: &mut Db, s: &SessionRow) -> StoreResult<()> {
    let pref = s.model_pref.as_ref().map(|v| v.to_string());
    on_engine!(db, c => {
        c.prepare_cached(
            "INSERT INTO sessions (id, channel, title, external_id, workspace_id, root, owner_id, created_at, modified_at, \
             last_active_at, turn_count, first_request, favorite_rank, model_pref, last_status, queue_paused, cancel_floor) \
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17) \
             ON CONFLICT(id) DO UPDATE SET channel=?2, title=?3, external_id=?4, workspace_id=?5, root=?6, owner_id=?7, \
             modified_at=?9, last_active_at=?10, turn_count=?11, first_request=?12, favorite_rank=?13, model_pref=?14, \
             last_status=?15, queue_paused=?16, cancel_floor=?17",
        )?
        .execute(params![
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
            pref,
            s.last_status,
            s.queue_paused as i64,
            s.cancel_floor,
        ])?;
        Ok(())
    }, p => {
        p.execute(
            "INSERT INTO sessions (id, channel, title, external_id, workspace_id, root, owner_id, created_at, modified_at, \
             last_active_at, turn_count, first_request, favorite_rank, model_pref, last_status, queue_paused, cancel_floor) \
             VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17) \
             ON CONFLICT(id) DO UPDATE SET channel=$2, title=$3, external_id=$4, workspace_id=$5, root=$6, owner_id=$7, \
             modified_at=$9, last_active_at=$10, turn_count=$11, first_request=$12, favorite_rank=$13, model_pref=$14, \
             last_status=$15, queue_paused=$16, cancel_floor=$17",
            &[
                &s.id,
                &s.channel,
                &s.title,
                &s.external_id,
                &s.workspace_id,
                &s.root,
                &s.owner_id,
                &s.created_at,
                &s.modified_at,
                &s.last_active_at,
                &s.turn_count,
                &s.first_request,
                &s.favorite_rank,
                &pref,
                &s.last_status,
                &s.queue_paused,
                &s.cancel_floor,
            ],
        )?;
        Ok(())
    })
}

pub fn get_session(db: &mut Db, id: &str) -> StoreResult<Option<SessionRow>> {
    on_engine!(db, c => Ok(c
        .prepare_cached(concat!("SELECT ", session_cols!("MAX"), " FROM sessions WHERE id = ?1"))?
        .query_row([id], session_from)
        .optional()?),
    p => p
        .query_opt(concat!("SELECT ", session_cols!("GREATEST"), " FROM sessions WHERE id = $1"), &[&id])?
        .as_ref()
        .map(session_from_pg)
        .transpose())
}

pub fn all_sessions(db: &mut Db) -> StoreResult<Vec<SessionRow>> {
    on_engine!(db, c => {
        let mut st = c.prepare_cached(concat!("SELECT ", session_cols!("MAX"), " FROM sessions"))?;
        let rows = st.query_map([], session_from)?.collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }, p => p
        .query(concat!("SELECT ", session_cols!("GREATEST"), " FROM sessions"), &[])?
        .iter()
        .map(session_from_pg)
        .collect())
}

pub fn delete_session(db: &mut Db, id: &str) -> StoreResult<()> {
    on_engine!(db, c => {
        c.execute("DELETE FROM events WHERE sid = ?1", [id])?;
        c.execute("DELETE FROM egress WHERE sid = ?1", [id])?;
        c.execute("DELETE FROM turns WHERE sid = ?1", [id])?;
        c.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
        Ok(())
    }, p => {
        p.execute("DELETE FROM events WHERE sid = $1", &[&id])?;
        p.execute("DELETE FROM egress WHERE sid = $1", &[&id])?;
        p.execute("DELETE FROM turns WHERE sid = $1", &[&id])?;
        p.execute("DELETE FROM sessions WHERE id = $1", &[&id])?;
        Ok(())
    })
}

/// Stores a turn record (JSON) with its indexed columns.
pub fn put_turn(
    db: &mut Db,
    tid: &str,
    sid: &str,
    ord: i64,
    status: &str,
    key: Option<&str>,
    record: &str,
) -> StoreResult<()> {
    on_engine!(db, c => {
        c.prepare_cached(
            "INSERT INTO turns (tid, sid, ord, status, idempotency_key, record) VALUES (?1,?2,?3,?4,?5,?6) \
             ON CONFLICT(tid) DO UPDATE SET status=?4, record=?6",
        )?
        .execute(params![tid, sid, ord, status, key, record])?;
        Ok(())
    }, p => {
        p.execute(
            "INSERT INTO turns (tid, sid, ord, status, idempotency_key, record) VALUES ($1,$2,$3,$4,$5,$6) \
             ON CONFLICT(tid) DO UPDATE SET status=$4, record=$6",
            &[&tid, &sid, &ord, &status, &key, &record],
        )?;
        Ok(())
    })
}

pub fn delete_turn(db: &mut Db, tid: &str) -> StoreResult<()> {
    on_engine!(db, c => {
        c.execute("DELETE FROM turns WHERE tid = ?1", [tid])?;
        Ok(())
    }, p => {
        p.execute("DELETE FROM turns WHERE tid = $1", &[&tid])?;
        Ok(())
    })
}

/// One turn record of a session.
pub fn turn_of(db: &mut Db, sid: &str, tid: &str) -> StoreResult<Option<String>> {
    on_engine!(db, c => Ok(c
        .prepare_cached("SELECT record FROM turns WHERE sid = ?1 AND tid = ?2")?
        .query_row([sid, tid], |r| r.get(0))
        .optional()?),
    p => p
        .query_opt("SELECT record FROM turns WHERE sid = $1 AND tid = $2", &[&sid, &tid])?
        .map(|r| get(&r, 0))
        .transpose())
}

/// The first column of every row, as text.
fn texts_pg(p: &mut PgConn, sql: &'static str, arg: &str) -> StoreResult<Vec<String>> {
    p.query(sql, &[&arg])?.iter().map(|r| get(r, 0)).collect()
}

fn texts(c: &Connection, sql: &str, arg: &str) -> StoreResult<Vec<String>> {
    let mut st = c.prepare_cached(sql)?;
    let rows = st
        .query_map([arg], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Turn records of a session, oldest first.
pub fn turns_of(db: &mut Db, sid: &str) -> StoreResult<Vec<String>> {
    on_engine!(db, c => texts(c, "SELECT record FROM turns WHERE sid = ?1 ORDER BY ord", sid),
        p => texts_pg(p, "SELECT record FROM turns WHERE sid = $1 ORDER BY ord", sid))
}

/// Turn records with one of the given statuses, across sessions, oldest first.
pub fn turns_with_status(db: &mut Db, status: &str) -> StoreResult<Vec<String>> {
    on_engine!(db, c => texts(c, "SELECT record FROM turns WHERE status = ?1 ORDER BY ord", status),
        p => texts_pg(p, "SELECT record FROM turns WHERE status = $1 ORDER BY ord", status))
}

pub fn max_turn_ord(db: &mut Db) -> StoreResult<i64> {
    on_engine!(db, c => Ok(c.query_row("SELECT COALESCE(MAX(ord), 0) FROM turns", [], |r| r.get(0))?),
        p => get(&p.query("SELECT COALESCE(MAX(ord), 0)::BIGINT FROM turns", &[])?[0], 0))
}

/// Raises the session's stored seq high-water to `seq`.
pub fn bump_high_water(db: &mut Db, sid: &str, seq: i64) -> StoreResult<()> {
    on_engine!(db, c => {
        c.prepare_cached("UPDATE sessions SET last_seq = MAX(last_seq, ?2) WHERE id = ?1")?
            .execute(params![sid, seq])?;
        Ok(())
    }, p => {
        p.execute("UPDATE sessions SET last_seq = GREATEST(last_seq, $2) WHERE id = $1", &[&sid, &seq])?;
        Ok(())
    })
}

/// Records an event: bumps the session's seq high-water (unless `seq_kept` says a row
/// written with the event keeps the seq: egress rows, which the session's high-water on
/// load includes) and, for stored events, appends it to the journal and trims the journal
/// to `retain` rows.
pub fn insert_event(
    db: &mut Db,
    sid: &str,
    seq: i64,
    kind: &str,
    data: Option<&str>,
    retain: i64,
    seq_kept: bool,
) -> StoreResult<()> {
    if !seq_kept || data.is_some() {
        bump_high_water(db, sid, seq)?;
    }
    let Some(data) = data else { return Ok(()) };
    on_engine!(db, c => {
        c.prepare_cached(
            "INSERT OR REPLACE INTO events (sid, seq, type, data) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![sid, seq, kind, data])?;
    }, p => {
        p.execute(
            "INSERT INTO events (sid, seq, type, data) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (sid, seq) DO UPDATE SET type = EXCLUDED.type, data = EXCLUDED.data",
            &[&sid, &seq, &kind, &data],
        )?;
    });
    // Trim in steps so the delete runs once per `step` inserts, not on every event.
    let step = (retain / 16).max(1);
    if seq % step == 0 {
        trim(db, sid, retain)?;
    }
    Ok(())
}

/// Keeps the session's newest `retain` journal rows and records how far it trimmed.
fn trim(db: &mut Db, sid: &str, retain: i64) -> StoreResult<()> {
    on_engine!(db, c => {
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
        Ok(())
    }, p => {
        let cutoff = p.query_opt(
            "SELECT seq FROM events WHERE sid = $1 ORDER BY seq DESC LIMIT 1 OFFSET $2",
            &[&sid, &retain],
        )?;
        if let Some(row) = cutoff {
            let cut: i64 = get(&row, 0)?;
            p.execute("DELETE FROM events WHERE sid = $1 AND seq <= $2", &[&sid, &cut])?;
            p.execute(
                "UPDATE sessions SET trimmed_through = GREATEST(trimmed_through, $2) WHERE id = $1",
                &[&sid, &cut],
            )?;
        }
        Ok(())
    })
}

/// A stored event as `(seq, type, data)`.
pub type StoredEvent = (i64, String, String);

/// Stored events with `after < seq <= upto`, plus the session's `trimmed_through`.
pub fn events_between(
    db: &mut Db,
    sid: &str,
    after: i64,
    upto: i64,
) -> StoreResult<(i64, Vec<StoredEvent>)> {
    on_engine!(db, c => {
        let trimmed: i64 = c
            .prepare_cached("SELECT trimmed_through FROM sessions WHERE id = ?1")?
            .query_row([sid], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        let mut st = c.prepare_cached(
            "SELECT seq, type, data FROM events WHERE sid = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq",
        )?;
        let rows = st
            .query_map(params![sid, after, upto], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok((trimmed, rows))
    }, p => {
        let trimmed = match p.query_opt("SELECT trimmed_through FROM sessions WHERE id = $1", &[&sid])? {
            Some(r) => get(&r, 0)?,
            None => 0,
        };
        let rows = p
            .query(
                "SELECT seq, type, data FROM events WHERE sid = $1 AND seq > $2 AND seq <= $3 ORDER BY seq",
                &[&sid, &after, &upto],
            )?
            .iter()
            .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?)))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok((trimmed, rows))
    })
}

pub fn count_events(db: &mut Db) -> StoreResult<i64> {
    on_engine!(db, c => Ok(c.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))?),
        p => get(&p.query("SELECT COUNT(*) FROM events", &[])?[0], 0))
}

/// Stores an egress decision record under its seq.
pub fn insert_egress(db: &mut Db, sid: &str, seq: i64, data: &str) -> StoreResult<()> {
    on_engine!(db, c => {
        c.prepare_cached("INSERT OR REPLACE INTO egress (sid, seq, data) VALUES (?1, ?2, ?3)")?
            .execute(params![sid, seq, data])?;
        Ok(())
    }, p => {
        p.execute(
            "INSERT INTO egress (sid, seq, data) VALUES ($1, $2, $3) \
             ON CONFLICT (sid, seq) DO UPDATE SET data = EXCLUDED.data",
            &[&sid, &seq, &data],
        )?;
        Ok(())
    })
}

/// Egress records newest first, `seq < before`, at most `limit + 1` (to tell `has_more`).
pub fn egress_page(
    db: &mut Db,
    sid: &str,
    before: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<(i64, String)>> {
    let (before, n) = (before.unwrap_or(i64::MAX), (limit + 1) as i64);
    on_engine!(db, c => {
        let mut st = c.prepare_cached(
            "SELECT seq, data FROM egress WHERE sid = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
        )?;
        let rows = st
            .query_map(params![sid, before, n], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }, p => p
        .query(
            "SELECT seq, data FROM egress WHERE sid = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3",
            &[&sid, &before, &n],
        )?
        .iter()
        .map(|r| Ok((get(r, 0)?, get(r, 1)?)))
        .collect())
}

/// `(type, id)` of a session's journal events of the given types, in seq order; the SQL
/// picks the id out of the event's JSON.
fn typed_ids(
    db: &mut Db,
    sqlite: &str,
    pg: &'static str,
    args: &[&str],
) -> StoreResult<Vec<(String, Option<String>)>> {
    on_engine!(db, c => {
        let mut st = c.prepare_cached(sqlite)?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }, p => {
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            args.iter().map(|a| a as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
        p.query(pg, &params)?
            .iter()
            .map(|r| Ok((get(r, 0)?, get(r, 1)?)))
            .collect()
    })
}

/// Content blocks of a turn that the journal shows opened but never completed.
pub fn open_blocks(db: &mut Db, sid: &str, tid: &str) -> StoreResult<Vec<String>> {
    let (started, completed) = (
        EventKind::ContentBlockStarted.as_str(),
        EventKind::ContentBlockCompleted.as_str(),
    );
    let rows = typed_ids(
        db,
        "SELECT type, COALESCE(json_extract(data, '$.block.id'), json_extract(data, '$.block_id')) FROM events \
         WHERE sid = ?1 AND type IN (?3, ?4) \
         AND json_extract(data, '$.turn_id') = ?2 ORDER BY seq",
        "SELECT type, COALESCE(data::jsonb #>> '{block,id}', data::jsonb ->> 'block_id') FROM events \
         WHERE sid = $1 AND type IN ($3, $4) \
         AND data::jsonb ->> 'turn_id' = $2 ORDER BY seq",
        &[sid, tid, started, completed],
    )?;
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
pub fn dangling_human_input(db: &mut Db, sid: &str) -> StoreResult<Vec<(bool, String)>> {
    let kinds = [
        EventKind::HumanInputRequest,
        EventKind::HumanInputClose,
        EventKind::HumanInputLiveOpen,
        EventKind::HumanInputLiveClose,
    ]
    .map(EventKind::as_str);
    let rows = typed_ids(
        db,
        "SELECT type, COALESCE(json_extract(data, '$.request.id'), json_extract(data, '$.request_id'), \
         json_extract(data, '$.view_id')) FROM events WHERE sid = ?1 AND type IN (?2, ?3, ?4, ?5) \
         ORDER BY seq",
        "SELECT type, COALESCE(data::jsonb #>> '{request,id}', data::jsonb ->> 'request_id', \
         data::jsonb ->> 'view_id') FROM events WHERE sid = $1 AND type IN ($2, $3, $4, $5) \
         ORDER BY seq",
        &[sid, kinds[0], kinds[1], kinds[2], kinds[3]],
    )?;
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
pub fn state_get(db: &mut Db, ext: &str, key: &str) -> StoreResult<Option<String>> {
    on_engine!(db, c => Ok(c
        .prepare_cached("SELECT value FROM extension_state WHERE extension = ?1 AND key = ?2")?
        .query_row(params![ext, key], |r| r.get(0))
        .optional()?),
    p => p
        .query_opt("SELECT value FROM extension_state WHERE extension = $1 AND key = $2", &[&ext, &key])?
        .map(|r| get(&r, 0))
        .transpose())
}

pub fn state_put(db: &mut Db, ext: &str, key: &str, value: &str) -> StoreResult<()> {
    on_engine!(db, c => {
        c.prepare_cached(
            "INSERT OR REPLACE INTO extension_state (extension, key, value) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![ext, key, value])?;
        Ok(())
    }, p => {
        p.execute(
            "INSERT INTO extension_state (extension, key, value) VALUES ($1, $2, $3) \
             ON CONFLICT (extension, key) DO UPDATE SET value = EXCLUDED.value",
            &[&ext, &key, &value],
        )?;
        Ok(())
    })
}

pub fn state_delete(db: &mut Db, ext: &str, key: &str) -> StoreResult<()> {
    on_engine!(db, c => {
        c.prepare_cached("DELETE FROM extension_state WHERE extension = ?1 AND key = ?2")?
            .execute(params![ext, key])?;
        Ok(())
    }, p => {
        p.execute("DELETE FROM extension_state WHERE extension = $1 AND key = $2", &[&ext, &key])?;
        Ok(())
    })
}

pub fn state_keys(db: &mut Db, ext: &str) -> StoreResult<Vec<String>> {
    on_engine!(db, c => texts(c, "SELECT key FROM extension_state WHERE extension = ?1 ORDER BY key", ext),
        p => texts_pg(p, "SELECT key FROM extension_state WHERE extension = $1 ORDER BY key", ext))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::each_engine;
    use crate::store::Store;

    async fn with_session(store: &Store) {
        store
            .with(|db| {
                put_session(
                    db,
                    &SessionRow {
                        id: "s".into(),
                        channel: "web".into(),
                        root: "/".into(),
                        last_status: "idle".into(),
                        created_at: 1,
                        ..Default::default()
                    },
                )
            })
            .await
            .expect("session");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retention_trims_the_oldest_events_and_remembers_how_far() {
        for (store, _keep) in each_engine("rows").await {
            with_session(&store).await;
            let (trimmed, rows) = store
                .with(|db| {
                    for seq in 1..=100 {
                        insert_event(db, "s", seq, "x", Some("{}"), 32, false)?;
                    }
                    events_between(db, "s", 0, 100)
                })
                .await
                .expect("events");
            assert!(
                (100 - 32 - 2..100 - 32 + 2).contains(&trimmed),
                "trimmed {trimmed}"
            );
            assert_eq!(rows.first().expect("rows").0, trimmed + 1);
            assert_eq!(rows.last().expect("rows").0, 100);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn live_only_events_move_the_high_water_without_a_journal_row() {
        for (store, _keep) in each_engine("rows").await {
            with_session(&store).await;
            let (high, stored) = store
                .with(|db| {
                    insert_event(db, "s", 1, "x", Some("{}"), 100, false)?;
                    insert_event(db, "s", 2, "activity", None, 100, false)?;
                    let high = get_session(db, "s")?.expect("session").last_seq;
                    Ok((high, events_between(db, "s", 0, 10)?.1.len()))
                })
                .await
                .expect("events");
            assert_eq!((high, stored), (2, 1));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_egress_row_keeps_the_high_water_of_the_live_event_it_was_published_with() {
        for (store, _keep) in each_engine("rows").await {
            with_session(&store).await;
            let highs = store
                .with(|db| {
                    insert_event(db, "s", 1, "x", Some("{}"), 100, false)?;
                    insert_event(db, "s", 2, "egress.decision", None, 100, true)?;
                    insert_egress(db, "s", 2, "{}")?;
                    let one = get_session(db, "s")?.expect("session").last_seq;
                    let all = all_sessions(db)?[0].last_seq;
                    insert_event(db, "s", 3, "activity", None, 100, false)?;
                    let later = get_session(db, "s")?.expect("session").last_seq;
                    Ok((one, all, later))
                })
                .await
                .expect("events");
            assert_eq!(highs, (2, 2, 3));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_row_and_its_turns_read_back_as_written_on_either_engine() {
        for (store, _keep) in each_engine("rows").await {
            let row = SessionRow {
                id: "s".into(),
                channel: "web".into(),
                title: Some("Plan".into()),
                root: "/w".into(),
                created_at: 5,
                last_active_at: 6,
                favorite_rank: Some(2),
                model_pref: Some(serde_json::json!({"model": "m"})),
                last_status: "idle".into(),
                queue_paused: true,
                cancel_floor: Some(3),
                ..Default::default()
            };
            let written = row.clone();
            let (back, turns, one, queued, max_ord) = store
                .with(move |db| {
                    put_session(db, &written)?;
                    put_turn(db, "t2", "s", 2, "queued", Some("k2"), "{\"n\":2}")?;
                    put_turn(db, "t1", "s", 1, "completed", None, "{\"n\":1}")?;
                    put_turn(db, "t1", "s", 1, "completed", None, "{\"n\":11}")?;
                    Ok((
                        get_session(db, "s")?,
                        turns_of(db, "s")?,
                        turn_of(db, "s", "t2")?,
                        turns_with_status(db, "queued")?,
                        max_turn_ord(db)?,
                    ))
                })
                .await
                .expect("rows");
            let back = back.expect("the session");
            assert_eq!(
                serde_json::to_value(&back).expect("json"),
                serde_json::to_value(&row).expect("json")
            );
            assert_eq!(turns, ["{\"n\":11}", "{\"n\":2}"], "oldest first, replaced");
            assert_eq!(one.as_deref(), Some("{\"n\":2}"));
            assert_eq!(queued, ["{\"n\":2}"]);
            assert_eq!(max_ord, 2);
            let after = store
                .with(|db| {
                    delete_turn(db, "t2")?;
                    let left = turns_of(db, "s")?.len();
                    delete_session(db, "s")?;
                    Ok((
                        left,
                        get_session(db, "s")?.is_none(),
                        turns_of(db, "s")?.len(),
                    ))
                })
                .await
                .expect("deletes");
            assert_eq!(after, (1, true, 0));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_journal_shows_blocks_and_forms_left_open_on_either_engine() {
        for (store, _keep) in each_engine("rows").await {
            with_session(&store).await;
            let (blocks, dangling) = store
                .with(|db| {
                    let events = [
                        (
                            "content.block.started",
                            r#"{"turn_id":"t","block":{"id":"b1"}}"#,
                        ),
                        (
                            "content.block.started",
                            r#"{"turn_id":"t","block":{"id":"b2"}}"#,
                        ),
                        (
                            "content.block.completed",
                            r#"{"turn_id":"t","block_id":"b1"}"#,
                        ),
                        (
                            "content.block.started",
                            r#"{"turn_id":"u","block":{"id":"b3"}}"#,
                        ),
                        ("human_input.request", r#"{"request":{"id":"f1"}}"#),
                        ("human_input.request", r#"{"request":{"id":"f2"}}"#),
                        ("human_input.close", r#"{"request_id":"f1"}"#),
                        ("human_input.live.open", r#"{"view_id":"v1"}"#),
                    ];
                    for (i, (kind, data)) in events.iter().enumerate() {
                        insert_event(db, "s", i as i64 + 1, kind, Some(data), 100, false)?;
                    }
                    Ok((open_blocks(db, "s", "t")?, dangling_human_input(db, "s")?))
                })
                .await
                .expect("journal");
            assert_eq!(blocks, ["b2"]);
            assert_eq!(
                dangling,
                [(false, "f2".to_string()), (true, "v1".to_string())]
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn egress_pages_and_extension_state_work_alike_on_either_engine() {
        for (store, _keep) in each_engine("rows").await {
            with_session(&store).await;
            let (page, state, keys, gone) = store
                .with(|db| {
                    for seq in 1..=5 {
                        insert_egress(db, "s", seq, &format!("{{\"n\":{seq}}}"))?;
                    }
                    insert_egress(db, "s", 5, "{\"n\":55}")?;
                    let page = egress_page(db, "s", Some(5), 2)?;
                    state_put(db, "ext", "b", "2")?;
                    state_put(db, "ext", "a", "1")?;
                    state_put(db, "ext", "a", "11")?;
                    let state = state_get(db, "ext", "a")?;
                    let keys = state_keys(db, "ext")?;
                    state_delete(db, "ext", "a")?;
                    Ok((page, state, keys, state_get(db, "ext", "a")?))
                })
                .await
                .expect("rows");
            assert_eq!(
                page,
                [
                    (4, "{\"n\":4}".into()),
                    (3, "{\"n\":3}".into()),
                    (2, "{\"n\":2}".into())
                ],
                "newest first, one more than asked"
            );
            assert_eq!(state.as_deref(), Some("11"));
            assert_eq!(keys, ["a", "b"]);
            assert_eq!(gone, None);
        }
    }
}
