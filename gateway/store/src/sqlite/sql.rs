//! The SQLite engine's schema and statements, run on its thread.

use crate::pending::{Pending, Stamped};
use crate::types::{EgressRecord, Event, Home, Keep, Lease, NodeId, Range, Writer};
use crate::{StoreError, StoreResult};
use rusqlite::{params, Connection, OptionalExtension};

/// The database clock in epoch milliseconds (leases use it, not the caller's).
const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

const MIGRATIONS: &[&str] = &[
    // 1: sessions with their home and seq high-water, the journal, egress rows, leases.
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        home_node TEXT,
        home_epoch INTEGER NOT NULL DEFAULT 0,
        last_seq INTEGER NOT NULL DEFAULT 0,
        trimmed_through INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX sessions_by_home ON sessions(home_node);
    CREATE TABLE events (
        sid TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (sid, seq)
    ) WITHOUT ROWID;
    CREATE TABLE egress (
        sid TEXT NOT NULL,
        seq INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (sid, seq)
    ) WITHOUT ROWID;
    CREATE TABLE leases (
        node TEXT PRIMARY KEY,
        address TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    );",
];

/// Applies the migrations not applied yet, each in its own transaction, tracked by
/// `PRAGMA user_version`.
pub fn migrate(c: &Connection) -> rusqlite::Result<()> {
    let current: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate() {
        let version = i as i64 + 1;
        if version > current {
            c.execute_batch(&format!(
                "BEGIN IMMEDIATE; {sql}; PRAGMA user_version = {version}; COMMIT;"
            ))?;
        }
    }
    Ok(())
}

fn exec(c: &Connection, sql: &str) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute([])
}

/// One append inside the open batch transaction, in a savepoint: the fence and the seq in
/// one statement on the session row, then the rows the event keeps. Refused or failed
/// appends leave nothing behind and are answered at once.
pub fn append(c: &Connection, p: Pending, retain: i64) -> Option<Stamped> {
    if let Err(e) = exec(c, "SAVEPOINT append") {
        p.refuse(e.into());
        return None;
    }
    let claimed = c
        .prepare_cached(
            "UPDATE sessions SET last_seq = last_seq + 1 \
             WHERE id = ?1 AND home_node = ?2 AND home_epoch = ?3 RETURNING last_seq, trimmed_through",
        )
        .and_then(|mut st| {
            st.query_row(
                params![p.sid, p.writer.node.as_str(), p.writer.epoch],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
            .optional()
        });
    let (seq, trimmed) = match claimed {
        Ok(Some(v)) => v,
        Ok(None) => {
            let why = refusal(c, &p.sid);
            let _ = exec(c, "RELEASE append");
            p.refuse(why);
            return None;
        }
        Err(e) => {
            undo(c);
            p.refuse(e.into());
            return None;
        }
    };
    let stamped = p.stamp(seq);
    match keep_rows(c, &stamped, trimmed, retain).and_then(|_| exec(c, "RELEASE append")) {
        Ok(_) => Some(stamped),
        Err(e) => {
            undo(c);
            stamped.settle(Err(e.into()), None);
            None
        }
    }
}

fn undo(c: &Connection) {
    let _ = exec(c, "ROLLBACK TO append").and_then(|_| exec(c, "RELEASE append"));
}

fn keep_rows(c: &Connection, s: &Stamped, trimmed: i64, retain: i64) -> rusqlite::Result<()> {
    match &s.keep {
        Keep::Journal => {
            c.prepare_cached("INSERT INTO events (sid, seq, type, data) VALUES (?1, ?2, ?3, ?4)")?
                .execute(params![s.sid, s.seq, s.kind, s.data])?;
            let step = (retain / 16).max(1);
            let cut = s.seq - retain;
            if s.seq % step == 0 && cut > trimmed {
                c.prepare_cached("DELETE FROM events WHERE sid = ?1 AND seq <= ?2")?
                    .execute(params![s.sid, cut])?;
                c.prepare_cached("UPDATE sessions SET trimmed_through = ?2 WHERE id = ?1")?
                    .execute(params![s.sid, cut])?;
            }
        }
        Keep::LiveOnly => {}
        Keep::Egress(record) => {
            c.prepare_cached("INSERT INTO egress (sid, seq, data) VALUES (?1, ?2, ?3)")?
                .execute(params![s.sid, s.seq, record.as_str()])?;
        }
        Keep::EgressUpdate { row, record } => {
            c.prepare_cached("UPDATE egress SET data = ?3 WHERE sid = ?1 AND seq = ?2")?
                .execute(params![s.sid, row, record.as_str()])?;
        }
    }
    Ok(())
}

/// Why an append found no session row homed on its writer.
fn refusal(c: &Connection, sid: &str) -> StoreError {
    match home(c, sid) {
        Ok(Some(home)) => StoreError::Fenced {
            sid: sid.to_string(),
            home,
        },
        Ok(None) => StoreError::UnknownSession(sid.to_string()),
        Err(e) => e,
    }
}

pub fn home(c: &Connection, sid: &str) -> StoreResult<Option<Home>> {
    Ok(
        c.prepare_cached("SELECT home_node, home_epoch FROM sessions WHERE id = ?1")?
            .query_row([sid], |r| {
                Ok(Home {
                    node: r.get::<_, Option<String>>(0)?.map(NodeId),
                    epoch: r.get(1)?,
                })
            })
            .optional()?,
    )
}

/// Creates the session homed on `writer` unless it exists; answers its home either way.
pub fn create_session(c: &Connection, writer: &Writer, sid: &str) -> StoreResult<Home> {
    c.prepare_cached(&format!(
        "INSERT INTO sessions (id, home_node, home_epoch, created_at) VALUES (?1, ?2, ?3, {NOW}) \
         ON CONFLICT(id) DO NOTHING"
    ))?
    .execute(params![sid, writer.node.as_str(), writer.epoch])?;
    home(c, sid)?.ok_or_else(|| StoreError::UnknownSession(sid.to_string()))
}

pub fn high_water(c: &Connection, sid: &str) -> StoreResult<Option<i64>> {
    Ok(
        c.prepare_cached("SELECT last_seq FROM sessions WHERE id = ?1")?
            .query_row([sid], |r| r.get(0))
            .optional()?,
    )
}

/// One statement, so the trimmed mark and the events come from one snapshot: an event the
/// range lacks below the mark is one retention removed, never one skipped.
pub fn range(c: &Connection, sid: &str, after: i64, limit: usize) -> StoreResult<Range> {
    let mut st = c.prepare_cached(
        "SELECT s.trimmed_through, e.seq, e.type, e.data FROM sessions s \
         LEFT JOIN events e ON e.sid = s.id AND e.seq > ?2 WHERE s.id = ?1 ORDER BY e.seq LIMIT ?3",
    )?;
    let mut rows = st.query(params![sid, after, limit.max(1) as i64])?;
    let mut range = Range::default();
    while let Some(r) = rows.next()? {
        range.trimmed_through = r.get(0)?;
        if let Some(seq) = r.get::<_, Option<i64>>(1)? {
            range.events.push(Event {
                seq,
                kind: r.get(2)?,
                data: r.get(3)?,
            });
        }
    }
    range.events.truncate(limit);
    Ok(range)
}

pub fn egress_page(
    c: &Connection,
    sid: &str,
    before: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<(i64, EgressRecord)>> {
    let mut st = c.prepare_cached(
        "SELECT seq, data FROM egress WHERE sid = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
    )?;
    let rows = st
        .query_map(
            params![sid, before.unwrap_or(i64::MAX), limit as i64],
            |r| Ok((r.get(0)?, EgressRecord::from_stored(r.get(1)?))),
        )?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

fn lease_from(r: &rusqlite::Row) -> rusqlite::Result<Lease> {
    Ok(Lease {
        node: NodeId(r.get(0)?),
        address: r.get(1)?,
        epoch: r.get(2)?,
        expires_at_ms: r.get(3)?,
    })
}

/// Registers (or re-registers) a node: a new epoch, and the node's sessions adopted at it.
pub fn acquire(c: &Connection, node: &NodeId, address: &str, ttl_ms: i64) -> StoreResult<Lease> {
    let tx = c.unchecked_transaction()?;
    let lease = tx
        .prepare_cached(&format!(
            "INSERT INTO leases (node, address, epoch, expires_at) VALUES (?1, ?2, 1, {NOW} + ?3) \
             ON CONFLICT(node) DO UPDATE SET address = excluded.address, epoch = leases.epoch + 1, \
             expires_at = excluded.expires_at RETURNING node, address, epoch, expires_at"
        ))?
        .query_row(params![node.as_str(), address, ttl_ms], lease_from)?;
    tx.prepare_cached("UPDATE sessions SET home_epoch = ?2 WHERE home_node = ?1")?
        .execute(params![node.as_str(), lease.epoch])?;
    tx.commit()?;
    Ok(lease)
}

pub fn renew(c: &Connection, lease: &Lease, ttl_ms: i64) -> StoreResult<Lease> {
    c.prepare_cached(&format!(
        "UPDATE leases SET expires_at = {NOW} + ?3 WHERE node = ?1 AND epoch = ?2 AND expires_at > {NOW} \
         RETURNING node, address, epoch, expires_at"
    ))?
    .query_row(params![lease.node.as_str(), lease.epoch, ttl_ms], lease_from)
    .optional()?
    .ok_or_else(|| StoreError::LeaseLost {
        node: lease.node.0.clone(),
        epoch: lease.epoch,
    })
}

/// Leases whose time has passed (`live == false`) or not (`live == true`), by node id.
pub fn leases(c: &Connection, live: bool) -> StoreResult<Vec<Lease>> {
    let op = if live { ">" } else { "<=" };
    let mut st = c.prepare_cached(&format!(
        "SELECT node, address, epoch, expires_at FROM leases WHERE expires_at {op} {NOW} ORDER BY node"
    ))?;
    let rows = st.query_map([], lease_from)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// A survivor takes over an expired node: the dead lease's epoch moves on and its sessions
/// are homed on the survivor. `None` when the dead node's lease is live (nothing taken).
pub fn take_over(
    c: &Connection,
    survivor: &Lease,
    dead: &NodeId,
) -> StoreResult<Option<Vec<String>>> {
    let tx = c.unchecked_transaction()?;
    let alive: Option<i64> = tx
        .prepare_cached(&format!(
            "SELECT 1 FROM leases WHERE node = ?1 AND epoch = ?2 AND expires_at > {NOW}"
        ))?
        .query_row(params![survivor.node.as_str(), survivor.epoch], |r| {
            r.get(0)
        })
        .optional()?;
    if alive.is_none() {
        return Err(StoreError::LeaseLost {
            node: survivor.node.0.clone(),
            epoch: survivor.epoch,
        });
    }
    let bumped = tx
        .prepare_cached(&format!(
            "UPDATE leases SET epoch = epoch + 1 WHERE node = ?1 AND expires_at <= {NOW} RETURNING epoch"
        ))?
        .query_row([dead.as_str()], |r| r.get::<_, i64>(0))
        .optional()?;
    if bumped.is_none() {
        return Ok(None);
    }
    let mut st = tx.prepare_cached(
        "UPDATE sessions SET home_node = ?1, home_epoch = ?2 WHERE home_node = ?3 RETURNING id",
    )?;
    let mut sids = st
        .query_map(
            params![survivor.node.as_str(), survivor.epoch, dead.as_str()],
            |r| r.get::<_, String>(0),
        )?
        .collect::<Result<Vec<_>, _>>()?;
    drop(st);
    tx.commit()?;
    sids.sort();
    Ok(Some(sids))
}
