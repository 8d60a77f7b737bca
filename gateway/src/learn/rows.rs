//! Learn mode's SQL: the egress rows a proposal reads, the sessions' own mode switches and
//! the policy changes written into projects' `vis.yml`.

use super::propose::Observation;
use crate::store::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

/// Which rows a proposal or the drift view is built from.
#[derive(Debug, Clone)]
pub enum Scope {
    Session(String),
    Project(String),
}

/// Every stored egress record of the scope, as JSON text.
pub fn egress_rows(c: &Connection, scope: &Scope) -> StoreResult<Vec<String>> {
    let (sql, key) = match scope {
        Scope::Session(sid) => ("SELECT data FROM egress WHERE sid = ?1 ORDER BY seq", sid),
        Scope::Project(root) => (
            "SELECT e.data FROM egress e JOIN sessions s ON s.id = e.sid \
             WHERE s.root = ?1 ORDER BY e.sid, e.seq",
            root,
        ),
    };
    let mut st = c.prepare(sql)?;
    let rows = st.query_map([key], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The enforce verdicts a proposal can lift (docs/decisions.md, L1).
const LIFTABLE: [&str; 3] = [
    "blocked-by-allowlist",
    "blocked-by-method-policy",
    "blocked-by-port-policy",
];

/// A stored record as an observation: `denials` picks the enforce-mode denials a proposal
/// would allow (the drift view), otherwise what the policy (or learn mode) let through.
pub fn observation(row: &str, denials: bool) -> Option<Observation> {
    let v: Value = serde_json::from_str(row).ok()?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let lane = s("lane")?;
    if lane == "provider" {
        return None;
    }
    let kind = s("error_kind");
    let decision = s("decision")?;
    let wanted = if denials {
        decision == "deny" && kind.as_deref().is_some_and(|k| LIFTABLE.contains(&k))
    } else {
        // an allowed request that failed upstream was still allowed by the policy
        decision == "allow"
    };
    if !wanted {
        return None;
    }
    // an address the SSRF floor always refuses (metadata, link-local, …) is never proposed
    let host = s("host")?;
    if let Some(ip) = vis_proxy::ssrf::parse_ip_literal(&host) {
        if vis_proxy::ssrf::classify(ip) == vis_proxy::ssrf::AddrClass::Internal {
            return None;
        }
    }
    let ts = v.get("ts").and_then(Value::as_u64).unwrap_or(0);
    Some(Observation {
        host,
        port: v.get("port").and_then(Value::as_u64)? as u16,
        tunnel: lane == "connect" || lane == "socks",
        method: s("method"),
        path: s("path"),
        count: v.get("count").and_then(Value::as_u64).unwrap_or(1),
        first_ts: ts,
        last_ts: v.get("last_ts").and_then(Value::as_u64).unwrap_or(ts),
        command: s("command"),
        would_deny: denials || v.get("would_deny").is_some_and(|w| !w.is_null()),
    })
}

pub fn modes(c: &Connection) -> StoreResult<Vec<(String, String)>> {
    let mut st = c.prepare("SELECT sid, mode FROM egress_modes")?;
    let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn set_mode(c: &Connection, sid: &str, mode: Option<&str>) -> StoreResult<()> {
    match mode {
        Some(m) => c.execute(
            "INSERT OR REPLACE INTO egress_modes (sid, mode) VALUES (?1, ?2)",
            params![sid, m],
        )?,
        None => c.execute("DELETE FROM egress_modes WHERE sid = ?1", [sid])?,
    };
    Ok(())
}

pub fn mode(c: &Connection, sid: &str) -> StoreResult<Option<String>> {
    Ok(
        c.query_row("SELECT mode FROM egress_modes WHERE sid = ?1", [sid], |r| {
            r.get(0)
        })
        .optional()?,
    )
}

/// Stores a change; answers its id.
pub fn insert_change(
    c: &Connection,
    root: &str,
    sid: Option<&str>,
    at: i64,
    record: &str,
) -> StoreResult<i64> {
    c.execute(
        "INSERT INTO policy_changes (root, sid, applied_at, record) VALUES (?1, ?2, ?3, ?4)",
        params![root, sid, at, record],
    )?;
    Ok(c.last_insert_rowid())
}

/// A project's changes, newest first, as (id, record).
pub fn changes(c: &Connection, root: &str) -> StoreResult<Vec<(i64, String)>> {
    let mut st =
        c.prepare("SELECT id, record FROM policy_changes WHERE root = ?1 ORDER BY id DESC")?;
    let rows = st.query_map([root], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}
