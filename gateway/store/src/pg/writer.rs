//! The PostgreSQL writer: drains pending appends into one transaction per batch.
//!
//! A batch groups its appends by session and writer. Each group claims its seqs with ONE
//! statement on the session row, `UPDATE sessions SET last_seq = last_seq + k WHERE id = …
//! AND home_node = … AND home_epoch = … RETURNING last_seq`: the fence and the seq in the
//! same statement, holding the row's lock until the commit, so two nodes writing the same
//! session are serialized by the database and never get the same seq. Groups are claimed in
//! session order (no two batches lock rows in opposite orders) and pipelined on one
//! connection; then every row of the batch goes in with one `unnest` insert per table.

use super::ops;
use crate::pending::{Pending, Stamped};
use crate::types::{CommitSink, Keep, Writer};
use crate::{StoreError, StoreResult};
use deadpool_postgres::{Pool, Transaction};
use std::collections::BTreeMap;
use tokio::sync::mpsc;

/// Most appends in one transaction.
const MAX_BATCH: usize = 4096;

pub(super) async fn run(
    pool: Pool,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    retain: i64,
    sink: Option<CommitSink>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        write(&pool, std::mem::take(&mut batch), retain, sink.as_ref()).await;
    }
}

/// The appends of one session by one writer, in the order they were made.
type Groups = BTreeMap<(String, Writer), Vec<Pending>>;

async fn write(pool: &Pool, batch: Vec<Pending>, retain: i64, sink: Option<&CommitSink>) {
    let mut groups = Groups::new();
    for p in batch {
        groups
            .entry((p.sid.clone(), p.writer.clone()))
            .or_default()
            .push(p);
    }
    let mut client = match pool.get().await {
        Ok(c) => c,
        Err(e) => return refuse_all(groups, e.into()),
    };
    let tx = match client.transaction().await {
        Ok(tx) => tx,
        Err(e) => return refuse_all(groups, e.into()),
    };
    // On an error every append of the batch has been answered with it.
    let Ok(stamped) = claim(&tx, groups).await else {
        return;
    };
    let outcome = match insert(&tx, &stamped, retain).await {
        Ok(()) => tx.commit().await.map_err(StoreError::from),
        Err(e) => Err(e),
    };
    if let Err(e) = &outcome {
        tracing::error!(error = %e, "journal batch failed");
    }
    for s in stamped {
        s.settle(outcome.clone(), sink);
    }
}

fn refuse_all(groups: Groups, e: StoreError) {
    tracing::error!(error = %e, "journal batch failed");
    for p in groups.into_values().flatten() {
        p.refuse(e.clone());
    }
}

/// Claims every group's seqs and stamps its appends; refuses the appends of groups whose
/// session is not homed on their writer. On a database error every append is answered with
/// it (and the error returned, so the transaction is dropped, which rolls it back).
async fn claim(tx: &Transaction<'_>, groups: Groups) -> StoreResult<Vec<Stamped>> {
    let st = match tx
        .prepare_cached(
            "UPDATE sessions SET last_seq = last_seq + $4 \
             WHERE id = $1 AND home_node = $2 AND home_epoch = $3 RETURNING last_seq",
        )
        .await
    {
        Ok(st) => st,
        Err(e) => {
            let e = StoreError::from(e);
            refuse_all(groups, e.clone());
            return Err(e);
        }
    };
    let claims = futures::future::join_all(groups.iter().map(|((sid, w), ps)| {
        let k = ps.len() as i64;
        let st = &st;
        async move {
            tx.query_opt(st, &[sid, &w.node.as_str(), &w.epoch, &k])
                .await
        }
    }))
    .await;
    if let Some(e) = claims.iter().find_map(|c| c.as_ref().err()) {
        let e = StoreError::from_pg(e);
        refuse_all(groups, e.clone());
        return Err(e);
    }
    let mut stamped = Vec::new();
    for (((sid, _), pendings), row) in groups.into_iter().zip(claims) {
        match row.ok().flatten() {
            Some(row) => {
                let last: i64 = row.get(0);
                let first = last - pendings.len() as i64 + 1;
                stamped.extend(
                    pendings
                        .into_iter()
                        .zip(first..)
                        .map(|(p, seq)| p.stamp(seq)),
                );
            }
            None => {
                let why = ops::refusal(tx, &sid).await;
                for p in pendings {
                    p.refuse(why.clone());
                }
            }
        }
    }
    Ok(stamped)
}

/// The journal and egress rows of the batch (one statement each), then retention.
async fn insert(tx: &Transaction<'_>, stamped: &[Stamped], retain: i64) -> StoreResult<()> {
    let (mut sids, mut seqs, mut kinds, mut datas) = (vec![], vec![], vec![], vec![]);
    let (mut e_sids, mut e_seqs, mut e_datas) = (vec![], vec![], vec![]);
    // Rows completed in place; the last record of the batch for a row wins.
    let mut updates: BTreeMap<(&str, i64), &str> = BTreeMap::new();
    // Per session: the last journal seq of the batch and whether it crossed a trim step.
    let step = (retain / 16).max(1);
    let mut trims: BTreeMap<&str, i64> = BTreeMap::new();
    for s in stamped {
        match &s.keep {
            Keep::Journal => {
                sids.push(s.sid.as_str());
                seqs.push(s.seq);
                kinds.push(s.kind.as_str());
                datas.push(s.data.as_str());
                if s.seq % step == 0 && s.seq > retain {
                    trims.insert(s.sid.as_str(), s.seq - retain);
                }
            }
            Keep::LiveOnly => {}
            Keep::Egress(record) => {
                e_sids.push(s.sid.as_str());
                e_seqs.push(s.seq);
                e_datas.push(record.as_str());
            }
            Keep::EgressUpdate { row, record } => {
                updates.insert((s.sid.as_str(), *row), record.as_str());
            }
        }
    }
    if !sids.is_empty() {
        tx.execute(
            "INSERT INTO events (sid, seq, type, data) \
             SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[])",
            &[&sids, &seqs, &kinds, &datas],
        )
        .await?;
    }
    if !e_sids.is_empty() {
        tx.execute(
            "INSERT INTO egress (sid, seq, data) \
             SELECT * FROM unnest($1::text[], $2::int8[], $3::text[])",
            &[&e_sids, &e_seqs, &e_datas],
        )
        .await?;
    }
    if !updates.is_empty() {
        let (mut u_sids, mut u_seqs, mut u_datas) = (vec![], vec![], vec![]);
        for ((sid, seq), data) in updates {
            u_sids.push(sid);
            u_seqs.push(seq);
            u_datas.push(data);
        }
        tx.execute(
            "UPDATE egress e SET data = u.data \
             FROM unnest($1::text[], $2::int8[], $3::text[]) AS u(sid, seq, data) \
             WHERE e.sid = u.sid AND e.seq = u.seq",
            &[&u_sids, &u_seqs, &u_datas],
        )
        .await?;
    }
    for (sid, cut) in trims {
        tx.execute(
            "DELETE FROM events WHERE sid = $1 AND seq <= $2",
            &[&sid, &cut],
        )
        .await?;
        tx.execute(
            "UPDATE sessions SET trimmed_through = GREATEST(trimmed_through, $2) WHERE id = $1",
            &[&sid, &cut],
        )
        .await?;
    }
    Ok(())
}
