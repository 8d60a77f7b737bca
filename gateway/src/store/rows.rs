//! Row-level operations on sessions, turns, the event journal, egress records and extension
//! state, run on the store thread, on either engine: one statement where the dialects
//! agree, both side by side (`Db::pick`) where they do not.

use super::sql::{borrowed, AnyRow, OwnedParam, Param};
use super::{Db, StoreError, StoreResult, Written};
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

impl SessionRow {
    /// A session with only its id, channel and root set (for tests and fixtures).
    #[cfg(test)]
    pub fn bare(id: &str) -> SessionRow {
        SessionRow {
            id: id.into(),
            channel: "web".into(),
            root: "/".into(),
            last_status: "idle".into(),
            ..Default::default()
        }
    }
}

/// The select of session rows (`$max` is the engine's two-argument maximum), the
/// high-water including egress rows (which keep their seq).
macro_rules! select_sessions {
    ($max:literal, $rest:literal) => {
        concat!(
            "SELECT id, channel, title, external_id, workspace_id, root, owner_id, created_at, \
             modified_at, last_active_at, turn_count, first_request, favorite_rank, model_pref, ",
            $max,
            "(last_seq, COALESCE((SELECT MAX(e.seq) FROM egress e WHERE e.sid = sessions.id), 0)), \
             trimmed_through, last_status, queue_paused, cancel_floor FROM sessions",
            $rest
        )
    };
}

fn session_from(r: &AnyRow) -> StoreResult<SessionRow> {
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
        queue_paused: r.get(17)?,
        cancel_floor: r.get(18)?,
    })
}

/// Writes the whole session row (insert or update), keeping the event counters stored by
/// `insert_event`, which the caller does not own.
pub fn put_session(db: &mut Db, s: &SessionRow) -> StoreResult<()> {
    let (sql, args) = session_write(db, s);
    db.beside_events(|db| db.exec(sql, &borrowed(&args)))?;
    Ok(())
}

/// [`put_session`] as the job's only write (see [`Db::write_alone`]).
pub fn put_session_alone(db: &mut Db, s: &SessionRow) -> StoreResult<()> {
    let (sql, args) = session_write(db, s);
    db.write_alone("session", sql, args)
}

/// The session row's upsert and its arguments. A cluster node homes the sessions it makes
/// (C4), in the same statement.
fn session_write(db: &Db, s: &SessionRow) -> (&'static str, Vec<Box<dyn OwnedParam>>) {
    let mut args: Vec<Box<dyn OwnedParam>> = vec![
        Box::new(s.id.clone()),
        Box::new(s.channel.clone()),
        Box::new(s.title.clone()),
        Box::new(s.external_id.clone()),
        Box::new(s.workspace_id.clone()),
        Box::new(s.root.clone()),
        Box::new(s.owner_id.clone()),
        Box::new(s.created_at),
        Box::new(s.modified_at),
        Box::new(s.last_active_at),
        Box::new(s.turn_count),
        Box::new(s.first_request.clone()),
        Box::new(s.favorite_rank),
        Box::new(s.model_pref.as_ref().map(|v| v.to_string())),
        Box::new(s.last_status.clone()),
        Box::new(s.queue_paused),
        Box::new(s.cancel_floor),
    ];
    match db.fence() {
        Some(w) => {
            args.extend([
                Box::new(w.node.as_str().to_string()) as Box<dyn OwnedParam>,
                Box::new(w.epoch),
            ]);
            (PUT_SESSION_HOMED, args)
        }
        None => (PUT_SESSION, args),
    }
}

/// The session row's upsert; the arguments add columns to the insert and to the update.
macro_rules! put_session {
    ($columns:literal, $values:literal, $update:literal) => {
        concat!(
            "INSERT INTO sessions (id, channel, title, external_id, workspace_id, root, owner_id, \
             created_at, modified_at, last_active_at, turn_count, first_request, favorite_rank, \
             model_pref, last_status, queue_paused, cancel_floor",
            $columns,
            ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17",
            $values,
            ") ON CONFLICT (id) DO UPDATE SET channel = ?2, title = ?3, external_id = ?4, \
             workspace_id = ?5, root = ?6, owner_id = ?7, modified_at = ?9, last_active_at = ?10, \
             turn_count = ?11, first_request = ?12, favorite_rank = ?13, model_pref = ?14, \
             last_status = ?15, queue_paused = ?16, cancel_floor = ?17",
            $update
        )
    };
}
const PUT_SESSION: &str = put_session!("", "", "");
/// A cluster node's (PostgreSQL): a session homed nowhere is homed here (`?18` node, `?19`
/// lease epoch); one homed anywhere keeps its home.
const PUT_SESSION_HOMED: &str = put_session!(
    ", home_node, home_epoch",
    ",?18,?19",
    ", home_node = COALESCE(sessions.home_node, ?18), \
     home_epoch = CASE WHEN sessions.home_node IS NULL THEN ?19 ELSE sessions.home_epoch END"
);

pub fn get_session(db: &mut Db, id: &str) -> StoreResult<Option<SessionRow>> {
    let sql = db.pick(
        select_sessions!("MAX", " WHERE id = ?1"),
        select_sessions!("GREATEST", " WHERE id = ?1"),
    );
    db.row(sql, &[&id], session_from)
}

pub fn all_sessions(db: &mut Db) -> StoreResult<Vec<SessionRow>> {
    let sql = db.pick(
        select_sessions!("MAX", ""),
        select_sessions!("GREATEST", ""),
    );
    db.rows(sql, &[], session_from)
}

pub fn delete_session(db: &mut Db, id: &str) -> StoreResult<()> {
    db.exec("DELETE FROM events WHERE sid = ?1", &[&id])?;
    db.exec("DELETE FROM egress WHERE sid = ?1", &[&id])?;
    db.exec("DELETE FROM turns WHERE sid = ?1", &[&id])?;
    db.exec("DELETE FROM sessions WHERE id = ?1", &[&id])?;
    Ok(())
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
    db.beside_events(|db| db.exec(PUT_TURN, &[&tid, &sid, &ord, &status, &key, &record]))?;
    Ok(())
}

/// [`put_turn`] as the job's only write (see [`Db::write_alone`]).
pub fn put_turn_alone(
    db: &mut Db,
    tid: &str,
    sid: &str,
    ord: i64,
    status: &str,
    key: Option<&str>,
    record: String,
) -> StoreResult<()> {
    let args: Vec<Box<dyn OwnedParam>> = vec![
        Box::new(tid.to_string()),
        Box::new(sid.to_string()),
        Box::new(ord),
        Box::new(status.to_string()),
        Box::new(key.map(str::to_string)),
        Box::new(record),
    ];
    db.write_alone("turn", PUT_TURN, args)
}

const PUT_TURN: &str = "INSERT INTO turns (tid, sid, ord, status, idempotency_key, record) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
     ON CONFLICT (tid) DO UPDATE SET status = ?4, record = ?6";

pub fn delete_turn(db: &mut Db, tid: &str) -> StoreResult<()> {
    db.exec("DELETE FROM turns WHERE tid = ?1", &[&tid])?;
    Ok(())
}

/// One turn record of a session.
pub fn turn_of(db: &mut Db, sid: &str, tid: &str) -> StoreResult<Option<String>> {
    db.value(
        "SELECT record FROM turns WHERE sid = ?1 AND tid = ?2",
        &[&sid, &tid],
    )
}

/// Turn records of a session, oldest first.
pub fn turns_of(db: &mut Db, sid: &str) -> StoreResult<Vec<String>> {
    db.column(
        "SELECT record FROM turns WHERE sid = ?1 ORDER BY ord",
        &[&sid],
    )
}

/// Turn records with one of the given statuses, across sessions, oldest first.
pub fn turns_with_status(db: &mut Db, status: &str) -> StoreResult<Vec<String>> {
    db.column(
        "SELECT record FROM turns WHERE status = ?1 ORDER BY ord",
        &[&status],
    )
}

pub fn max_turn_ord(db: &mut Db) -> StoreResult<i64> {
    Ok(db
        .value::<Option<i64>>("SELECT MAX(ord) FROM turns", &[])?
        .flatten()
        .unwrap_or(0))
}

/// Whether the session is homed on another node than this one (a cluster node's store;
/// always false on a single node, and for a session no node owns yet).
pub fn homed_elsewhere(db: &mut Db, sid: &str) -> StoreResult<bool> {
    let Some(me) = db.fence().map(|w| w.node.as_str().to_string()) else {
        return Ok(false);
    };
    let home: Option<Option<String>> =
        db.value("SELECT home_node FROM sessions WHERE id = ?1", &[&sid])?;
    Ok(home.flatten().is_some_and(|n| n != me))
}

/// The session's running turn as the store has it: its id and the seq of the last
/// `turn.started` (what a stream of a session running on another node joins at).
pub fn running_turn(db: &mut Db, sid: &str) -> StoreResult<Option<(String, i64)>> {
    let tid: Option<String> = db.value(
        "SELECT tid FROM turns WHERE sid = ?1 AND status = 'streaming' ORDER BY ord DESC LIMIT 1",
        &[&sid],
    )?;
    let Some(tid) = tid else { return Ok(None) };
    let started: Option<Option<i64>> = db.value(
        "SELECT MAX(seq) FROM events WHERE sid = ?1 AND type = 'turn.started'",
        &[&sid],
    )?;
    Ok(Some((tid, started.flatten().unwrap_or(0))))
}

/// The fenced high-water update of a cluster node (docs/decisions.md, C4): it changes the
/// row only while the session is homed on this node at its lease epoch (a session no node
/// owns yet is claimed), so no matched row means the write must be refused.
const FENCED_BUMP: &str = "UPDATE sessions SET last_seq = GREATEST(last_seq, ?2), \
     home_node = COALESCE(home_node, ?3), \
     home_epoch = CASE WHEN home_node IS NULL THEN ?4 ELSE home_epoch END \
     WHERE id = ?1 AND (home_node IS NULL OR (home_node = ?3 AND home_epoch = ?4))";
const BUMP_SQLITE: &str = "UPDATE sessions SET last_seq = MAX(last_seq, ?2) WHERE id = ?1";
const BUMP_POSTGRES: &str = "UPDATE sessions SET last_seq = GREATEST(last_seq, ?2) WHERE id = ?1";
const INSERT_EVENT: &str = "INSERT INTO events (sid, seq, type, data) VALUES (?1, ?2, ?3, ?4) \
     ON CONFLICT (sid, seq) DO UPDATE SET type = excluded.type, data = excluded.data";
/// The cluster node's insert, sent in the same round trip as [`FENCED_BUMP`]: it writes
/// only while the session is homed here at this epoch, so a refused bump never leaves its
/// event behind (inside or outside a transaction). PostgreSQL only.
const FENCED_INSERT: &str = "INSERT INTO events (sid, seq, type, data) \
     SELECT ?1::text, ?2::bigint, ?3::text, ?4::text \
     WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?1 AND home_node = ?5 AND home_epoch = ?6) \
     ON CONFLICT (sid, seq) DO UPDATE SET type = excluded.type, data = excluded.data";

/// Raises the session's stored seq high-water to `seq`; on a cluster node this is the
/// fence: [`StoreError::Fenced`] when the session is not homed here, and nothing changes.
pub fn bump_high_water(db: &mut Db, sid: &str, seq: i64) -> StoreResult<()> {
    insert_event(db, sid, seq, "", None, 0, false)
}

/// Records an event: bumps the session's seq high-water (unless `seq_kept` says a row
/// written with the event keeps the seq: egress rows, which the session's high-water on
/// load includes; a cluster node always runs its fenced bump, which is what refuses the
/// write) and, for stored events, appends it to the journal (in the same round trip on
/// PostgreSQL) and trims the journal to `retain` rows.
pub fn insert_event(
    db: &mut Db,
    sid: &str,
    seq: i64,
    kind: &str,
    data: Option<&str>,
    retain: i64,
    seq_kept: bool,
) -> StoreResult<()> {
    let fence = db.fence().map(|w| (w.node.as_str().to_string(), w.epoch));
    let bump_sql = match fence {
        Some(_) => FENCED_BUMP,
        None => db.pick(BUMP_SQLITE, BUMP_POSTGRES),
    };
    let fenced_args;
    let bump: (&'static str, &[&dyn Param]) = match &fence {
        Some((node, epoch)) => {
            fenced_args = [&sid as &dyn Param, &seq, node, epoch];
            (bump_sql, &fenced_args)
        }
        None => (bump_sql, &[&sid, &seq]),
    };
    let plain_args;
    let fenced_insert_args;
    let insert: Option<(&'static str, &[&dyn Param])> = match (&data, &fence) {
        (None, _) => None,
        (Some(d), None) => {
            plain_args = [&sid as &dyn Param, &seq, &kind, d];
            Some((INSERT_EVENT, &plain_args))
        }
        (Some(d), Some((node, epoch))) => {
            fenced_insert_args = [&sid as &dyn Param, &seq, &kind, d, node, epoch];
            Some((FENCED_INSERT, &fenced_insert_args))
        }
    };
    let mut stmts: Vec<(&'static str, &[&dyn Param])> = Vec::with_capacity(2);
    if !seq_kept || data.is_some() || fence.is_some() {
        stmts.push(bump);
    }
    stmts.extend(insert);
    let changed = db.beside_events(|db| db.exec_all(&stmts))?;
    if fence.is_some() && changed.first() == Some(&0) {
        return Err(StoreError::Fenced {
            sid: sid.to_string(),
        });
    }
    if data.is_some() && trims_at(seq, retain) {
        trim(db, sid, retain)?;
    }
    Ok(())
}

/// Whether storing event `seq` trims the journal: in steps, so the delete runs once per
/// `retain / 16` inserts, not on every event.
fn trims_at(seq: i64, retain: i64) -> bool {
    seq % (retain / 16).max(1) == 0
}

/// Stores an event that has no row alongside it. On PostgreSQL, inside a batch, its write
/// goes out with the batch's other events in one statement (`pg/events.rs`), and the answer
/// says whether it went in once that statement ran; an event whose write trims the journal
/// is written at once, like on SQLite.
pub fn store_event(
    db: &mut Db,
    sid: &str,
    seq: i64,
    kind: &str,
    data: Option<&str>,
    retain: i64,
) -> StoreResult<Written> {
    let trims = data.is_some() && trims_at(seq, retain);
    if let (Db::Postgres(p), false) = (&mut *db, trims) {
        if let Some(written) = p.defer_event(sid, seq, kind, data) {
            return Ok(written);
        }
    }
    db.atomically(|db| insert_event(db, sid, seq, kind, data, retain, false))?;
    Ok(Written::new(true))
}

/// Keeps the session's newest `retain` journal rows and records how far it trimmed.
fn trim(db: &mut Db, sid: &str, retain: i64) -> StoreResult<()> {
    let cutoff: Option<i64> = db.value(
        "SELECT seq FROM events WHERE sid = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2",
        &[&sid, &retain],
    )?;
    if let Some(cut) = cutoff {
        db.exec(
            "DELETE FROM events WHERE sid = ?1 AND seq <= ?2",
            &[&sid, &cut],
        )?;
        let sql = db.pick(
            "UPDATE sessions SET trimmed_through = MAX(trimmed_through, ?2) WHERE id = ?1",
            "UPDATE sessions SET trimmed_through = GREATEST(trimmed_through, ?2) WHERE id = ?1",
        );
        db.exec(sql, &[&sid, &cut])?;
    }
    Ok(())
}

/// How far retention trimmed the session's journal (0 when nothing was trimmed).
pub fn trimmed_through(db: &mut Db, sid: &str) -> StoreResult<i64> {
    Ok(db
        .value(
            "SELECT trimmed_through FROM sessions WHERE id = ?1",
            &[&sid],
        )?
        .unwrap_or(0))
}

/// A stored event as `(seq, type, data)`.
pub type StoredEvent = (i64, String, String);

/// A journal row as a [`StoredEvent`].
pub fn stored_event(r: &AnyRow) -> StoreResult<StoredEvent> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
}

/// Stored events with `after < seq <= upto`, plus the session's `trimmed_through`.
pub fn events_between(
    db: &mut Db,
    sid: &str,
    after: i64,
    upto: i64,
) -> StoreResult<(i64, Vec<StoredEvent>)> {
    let trimmed = trimmed_through(db, sid)?;
    let rows = db.rows(
        "SELECT seq, type, data FROM events WHERE sid = ?1 AND seq > ?2 AND seq <= ?3 \
         ORDER BY seq",
        &[&sid, &after, &upto],
        stored_event,
    )?;
    Ok((trimmed, rows))
}

pub fn count_events(db: &mut Db) -> StoreResult<i64> {
    Ok(db
        .value::<i64>("SELECT COUNT(*) FROM events", &[])?
        .unwrap_or(0))
}

/// Stores an egress decision record under its seq.
pub fn insert_egress(db: &mut Db, sid: &str, seq: i64, data: &str) -> StoreResult<()> {
    db.exec(
        "INSERT INTO egress (sid, seq, data) VALUES (?1, ?2, ?3) \
         ON CONFLICT (sid, seq) DO UPDATE SET data = excluded.data",
        &[&sid, &seq, &data],
    )?;
    Ok(())
}

/// Egress records newest first, `seq < before`, at most `limit + 1` (to tell `has_more`).
pub fn egress_page(
    db: &mut Db,
    sid: &str,
    before: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<(i64, String)>> {
    let (before, n) = (before.unwrap_or(i64::MAX), (limit + 1) as i64);
    db.rows(
        "SELECT seq, data FROM egress WHERE sid = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
        &[&sid, &before, &n],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// `(type, id)` of a session's journal events of the given types, in seq order; the SQL
/// (SQLite's `json_extract` or PostgreSQL's jsonb operators) picks the id out of the
/// event's JSON.
fn typed_ids(
    db: &mut Db,
    sqlite: &'static str,
    pg: &'static str,
    args: &[&str],
) -> StoreResult<Vec<(String, Option<String>)>> {
    let sql = db.pick(sqlite, pg);
    let args: Vec<&dyn super::sql::Param> =
        args.iter().map(|a| a as &dyn super::sql::Param).collect();
    db.rows(sql, &args, |r| Ok((r.get(0)?, r.get(1)?)))
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
    db.value(
        "SELECT value FROM extension_state WHERE extension = ?1 AND key = ?2",
        &[&ext, &key],
    )
}

pub fn state_put(db: &mut Db, ext: &str, key: &str, value: &str) -> StoreResult<()> {
    db.exec(
        "INSERT INTO extension_state (extension, key, value) VALUES (?1, ?2, ?3) \
         ON CONFLICT (extension, key) DO UPDATE SET value = excluded.value",
        &[&ext, &key, &value],
    )?;
    Ok(())
}

pub fn state_delete(db: &mut Db, ext: &str, key: &str) -> StoreResult<()> {
    db.exec(
        "DELETE FROM extension_state WHERE extension = ?1 AND key = ?2",
        &[&ext, &key],
    )?;
    Ok(())
}

pub fn state_keys(db: &mut Db, ext: &str) -> StoreResult<Vec<String>> {
    db.column(
        "SELECT key FROM extension_state WHERE extension = ?1 ORDER BY key",
        &[&ext],
    )
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
