//! Learn mode's SQL: the egress rows a proposal reads, the sessions' own mode switches and
//! the policy changes written into projects' `vis.yml`.

use super::propose::Observation;
use crate::store::{Db, StoreResult};
use serde_json::Value;

/// Which rows a proposal or the drift view is built from.
#[derive(Debug, Clone)]
pub enum Scope {
    Session(String),
    Project(String),
}

/// Every stored egress record of the scope, as JSON text.
pub fn egress_rows(db: &mut Db, scope: &Scope) -> StoreResult<Vec<String>> {
    match scope {
        Scope::Session(sid) => db.column(
            "SELECT data FROM egress WHERE sid = ?1 ORDER BY seq",
            &[sid],
        ),
        Scope::Project(root) => db.column(
            "SELECT e.data FROM egress e JOIN sessions s ON s.id = e.sid \
             WHERE s.root = ?1 ORDER BY e.sid, e.seq",
            &[root],
        ),
    }
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

pub fn modes(db: &mut Db) -> StoreResult<Vec<(String, String)>> {
    db.rows("SELECT sid, mode FROM egress_modes", &[], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
}

pub fn set_mode(db: &mut Db, sid: &str, mode: Option<&str>) -> StoreResult<()> {
    match mode {
        Some(m) => db.exec(
            "INSERT INTO egress_modes (sid, mode) VALUES (?1, ?2) \
             ON CONFLICT (sid) DO UPDATE SET mode = excluded.mode",
            &[&sid, &m],
        )?,
        None => db.exec("DELETE FROM egress_modes WHERE sid = ?1", &[&sid])?,
    };
    Ok(())
}

pub fn mode(db: &mut Db, sid: &str) -> StoreResult<Option<String>> {
    db.value("SELECT mode FROM egress_modes WHERE sid = ?1", &[&sid])
}

/// Stores a change; answers its id.
pub fn insert_change(
    db: &mut Db,
    root: &str,
    sid: Option<&str>,
    at: i64,
    record: &str,
) -> StoreResult<i64> {
    db.value(
        "INSERT INTO policy_changes (root, sid, applied_at, record) VALUES (?1, ?2, ?3, ?4) \
         RETURNING id",
        &[&root, &sid, &at, &record],
    )?
    .ok_or_else(|| crate::store::StoreError::Other("the change got no id".into()))
}

/// A project's changes, newest first, as (id, record).
pub fn changes(db: &mut Db, root: &str) -> StoreResult<Vec<(i64, String)>> {
    db.rows(
        "SELECT id, record FROM policy_changes WHERE root = ?1 ORDER BY id DESC",
        &[&root],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

#[cfg(test)]
mod store_tests {
    use super::*;
    use crate::store::test_support::each_engine;

    #[tokio::test]
    async fn modes_and_policy_changes_read_back_alike_on_either_engine() {
        for (store, _keep) in each_engine("learn").await {
            let (modes, one, ids, changes) = store
                .with(|db| {
                    set_mode(db, "s1", Some("learn"))?;
                    set_mode(db, "s1", Some("enforce"))?;
                    set_mode(db, "s2", Some("learn"))?;
                    set_mode(db, "s2", None)?;
                    let a = insert_change(db, "/p", Some("s1"), 1, "{\"n\":1}")?;
                    let b = insert_change(db, "/p", None, 2, "{\"n\":2}")?;
                    insert_change(db, "/other", None, 3, "{}")?;
                    Ok((modes(db)?, mode(db, "s2")?, (a, b), changes(db, "/p")?))
                })
                .await
                .expect("store");
            assert_eq!(modes, [("s1".to_string(), "enforce".to_string())]);
            assert_eq!(one, None);
            assert!(ids.1 > ids.0, "ids grow");
            assert_eq!(
                changes,
                [
                    (ids.1, "{\"n\":2}".to_string()),
                    (ids.0, "{\"n\":1}".to_string())
                ]
            );
        }
    }
}
