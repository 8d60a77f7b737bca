//! The PostgreSQL engine's reads, session homes and leases.

use crate::types::{EgressRecord, Event, Home, Lease, NodeId, Range, Writer};
use crate::{StoreError, StoreResult};
use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::Row;

/// The database clock in epoch milliseconds: every node reads lease times off one clock.
const NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

pub async fn home(c: &impl GenericClient, sid: &str) -> StoreResult<Option<Home>> {
    let st = c
        .prepare_cached("SELECT home_node, home_epoch FROM sessions WHERE id = $1")
        .await?;
    Ok(c.query_opt(&st, &[&sid]).await?.map(|r| Home {
        node: r.get::<_, Option<String>>(0).map(NodeId),
        epoch: r.get(1),
    }))
}

/// Why an append found no session row homed on its writer.
pub async fn refusal(c: &impl GenericClient, sid: &str) -> StoreError {
    match home(c, sid).await {
        Ok(Some(home)) => StoreError::Fenced {
            sid: sid.to_string(),
            home,
        },
        Ok(None) => StoreError::UnknownSession(sid.to_string()),
        Err(e) => e,
    }
}

pub async fn create_session(c: &Client, writer: &Writer, sid: &str) -> StoreResult<Home> {
    let st = c
        .prepare_cached(&format!(
            "INSERT INTO sessions (id, home_node, home_epoch, created_at) VALUES ($1, $2, $3, {NOW}) \
             ON CONFLICT (id) DO NOTHING"
        ))
        .await?;
    c.execute(&st, &[&sid, &writer.node.as_str(), &writer.epoch])
        .await?;
    home(c, sid)
        .await?
        .ok_or_else(|| StoreError::UnknownSession(sid.to_string()))
}

pub async fn high_water(c: &Client, sid: &str) -> StoreResult<Option<i64>> {
    let st = c
        .prepare_cached("SELECT last_seq FROM sessions WHERE id = $1")
        .await?;
    Ok(c.query_opt(&st, &[&sid]).await?.map(|r| r.get(0)))
}

/// One statement, so the trimmed mark and the events come from one snapshot: an event the
/// range lacks below the mark is one retention removed, never one skipped.
pub async fn range(c: &Client, sid: &str, after: i64, limit: usize) -> StoreResult<Range> {
    let st = c
        .prepare_cached(
            "SELECT s.trimmed_through, e.seq, e.type, e.data FROM sessions s \
             LEFT JOIN events e ON e.sid = s.id AND e.seq > $2 WHERE s.id = $1 ORDER BY e.seq LIMIT $3",
        )
        .await?;
    let rows = c
        .query(&st, &[&sid, &after, &(limit.max(1) as i64)])
        .await?;
    let mut range = Range::default();
    for r in rows {
        range.trimmed_through = r.get(0);
        if let Some(seq) = r.get::<_, Option<i64>>(1) {
            range.events.push(Event {
                seq,
                kind: r.get(2),
                data: r.get(3),
            });
        }
    }
    range.events.truncate(limit);
    Ok(range)
}

pub async fn egress_page(
    c: &Client,
    sid: &str,
    before: Option<i64>,
    limit: usize,
) -> StoreResult<Vec<(i64, EgressRecord)>> {
    let st = c
        .prepare_cached(
            "SELECT seq, data FROM egress WHERE sid = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3",
        )
        .await?;
    let (before, limit) = (before.unwrap_or(i64::MAX), limit as i64);
    Ok(c.query(&st, &[&sid, &before, &limit])
        .await?
        .into_iter()
        .map(|r| (r.get(0), EgressRecord::from_stored(r.get(1))))
        .collect())
}

fn lease_from(r: &Row) -> Lease {
    Lease {
        node: NodeId(r.get(0)),
        address: r.get(1),
        epoch: r.get(2),
        expires_at_ms: r.get(3),
    }
}

/// Registers (or re-registers) a node: a new epoch, and the node's sessions adopted at it.
pub async fn acquire(
    c: &mut Client,
    node: &NodeId,
    address: &str,
    ttl_ms: i64,
) -> StoreResult<Lease> {
    let tx = c.transaction().await?;
    let row = tx
        .query_one(
            &format!(
                "INSERT INTO leases (node, address, epoch, expires_at) VALUES ($1, $2, 1, {NOW} + $3) \
                 ON CONFLICT (node) DO UPDATE SET address = excluded.address, epoch = leases.epoch + 1, \
                 expires_at = excluded.expires_at RETURNING node, address, epoch, expires_at"
            ),
            &[&node.as_str(), &address, &ttl_ms],
        )
        .await?;
    let lease = lease_from(&row);
    // Rows are locked in byte order of their ids, as the writer locks them (it claims a
    // batch's sessions sorted as Rust strings): no deadlock with a batch.
    tx.execute(
        "UPDATE sessions SET home_epoch = $2 WHERE id IN \
         (SELECT id FROM sessions WHERE home_node = $1 ORDER BY id COLLATE \"C\" FOR UPDATE)",
        &[&node.as_str(), &lease.epoch],
    )
    .await?;
    tx.commit().await?;
    Ok(lease)
}

pub async fn renew(c: &Client, lease: &Lease, ttl_ms: i64) -> StoreResult<Lease> {
    let st = c
        .prepare_cached(&format!(
            "UPDATE leases SET expires_at = {NOW} + $3 WHERE node = $1 AND epoch = $2 AND expires_at > {NOW} \
             RETURNING node, address, epoch, expires_at"
        ))
        .await?;
    c.query_opt(&st, &[&lease.node.as_str(), &lease.epoch, &ttl_ms])
        .await?
        .map(|r| lease_from(&r))
        .ok_or_else(|| StoreError::LeaseLost {
            node: lease.node.0.clone(),
            epoch: lease.epoch,
        })
}

pub async fn leases(c: &Client, live: bool) -> StoreResult<Vec<Lease>> {
    let op = if live { ">" } else { "<=" };
    let rows = c
        .query(
            &format!(
                "SELECT node, address, epoch, expires_at FROM leases WHERE expires_at {op} {NOW} ORDER BY node"
            ),
            &[],
        )
        .await?;
    Ok(rows.iter().map(lease_from).collect())
}

/// A survivor takes over an expired node: the dead lease's epoch moves on and its sessions
/// are homed on the survivor. `None` when the dead node's lease is live (nothing taken).
pub async fn take_over(
    c: &mut Client,
    survivor: &Lease,
    dead: &NodeId,
) -> StoreResult<Option<Vec<String>>> {
    let tx = c.transaction().await?;
    // The survivor's own lease row is locked, so it cannot be taken over meanwhile.
    let alive = tx
        .query_opt(
            &format!(
                "SELECT 1 FROM leases WHERE node = $1 AND epoch = $2 AND expires_at > {NOW} FOR UPDATE"
            ),
            &[&survivor.node.as_str(), &survivor.epoch],
        )
        .await?;
    if alive.is_none() {
        return Err(StoreError::LeaseLost {
            node: survivor.node.0.clone(),
            epoch: survivor.epoch,
        });
    }
    let bumped = tx
        .query_opt(
            &format!(
                "UPDATE leases SET epoch = epoch + 1 WHERE node = $1 AND expires_at <= {NOW} RETURNING epoch"
            ),
            &[&dead.as_str()],
        )
        .await?;
    if bumped.is_none() {
        return Ok(None);
    }
    let rows = tx
        .query(
            "UPDATE sessions SET home_node = $1, home_epoch = $2 WHERE id IN \
             (SELECT id FROM sessions WHERE home_node = $3 ORDER BY id COLLATE \"C\" FOR UPDATE) RETURNING id",
            &[&survivor.node.as_str(), &survivor.epoch, &dead.as_str()],
        )
        .await?;
    tx.commit().await?;
    let mut sids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    sids.sort();
    Ok(Some(sids))
}
