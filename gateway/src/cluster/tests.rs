//! The fence on a cluster node's store, on the machine's PostgreSQL.

use crate::store::test_support::PgSchema;
use crate::store::{rows, Store, StoreError};
use std::time::Duration;
use vis_store::testing::{pg_addr, pg_url, reachable};
use vis_store::{Journal, JournalOptions, NodeId, PgOptions, Writer};

async fn node_store(opts: &PgOptions, writer: Writer) -> Store {
    Store::open_postgres(opts, String::new(), Some(writer))
        .await
        .expect("store on PostgreSQL")
}

async fn write_event(store: &Store, sid: &str, seq: i64) -> Result<(), StoreError> {
    let sid = sid.to_string();
    store
        .with(move |db| {
            db.atomically(|db| {
                rows::insert_event(db, &sid, seq, "turn.queued", Some("{}"), 100, false)
            })
        })
        .await
}

/// The same write outside a unit of its own: the bump and the insert go out together, so
/// the insert must check the fence too.
async fn write_event_unguarded(store: &Store, sid: &str, seq: i64) -> Result<(), StoreError> {
    let sid = sid.to_string();
    store
        .with(move |db| rows::insert_event(db, &sid, seq, "turn.queued", Some("{}"), 100, false))
        .await
}

async fn stored_seqs(store: &Store, sid: &str) -> Vec<i64> {
    let sid = sid.to_string();
    let (_, evs) = store
        .with(move |db| rows::events_between(db, &sid, 0, i64::MAX))
        .await
        .expect("read");
    evs.into_iter().map(|(seq, _, _)| seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_writes_only_for_sessions_homed_on_it_at_its_lease_epoch() {
    if !reachable("PostgreSQL", &pg_addr()) {
        return;
    }
    let schema = format!("vis_gw_fence_{}", uuid::Uuid::new_v4().simple());
    let opts = PgOptions::new(pg_url()).with_schema(schema.clone());
    let _guard = PgSchema::new(schema);
    let journal = Journal::open_postgres(&opts, JournalOptions::default())
        .await
        .expect("journal");
    let leases = journal.leases();
    let a = leases
        .acquire(&NodeId::new("a"), "http://a", Duration::from_millis(1000))
        .await
        .expect("lease a");
    let b = leases
        .acquire(&NodeId::new("b"), "http://b", Duration::from_secs(60))
        .await
        .expect("lease b");
    let (store_a, store_b) = (
        node_store(&opts, a.writer()).await,
        node_store(&opts, b.writer()).await,
    );
    let row = rows::SessionRow::bare("s1");
    store_a
        .with(move |db| rows::put_session(db, &row))
        .await
        .expect("session");

    // the first node to write for a session no node owns claims it
    write_event(&store_a, "s1", 1).await.expect("a writes");
    assert_eq!(
        journal.home("s1").await.expect("home").and_then(|h| h.node),
        Some(NodeId::new("a"))
    );
    let refused = write_event(&store_b, "s1", 2).await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    let refused = write_event_unguarded(&store_b, "s1", 3).await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(
        stored_seqs(&store_a, "s1").await,
        vec![1],
        "b stored nothing"
    );

    // a's lease runs out; b takes the session over; a is fenced off from then on
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let taken = leases
        .take_over(&b, &NodeId::new("a"))
        .await
        .expect("take over");
    assert_eq!(taken, Some(vec!["s1".to_string()]));
    let refused = write_event(&store_a, "s1", 2).await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    write_event(&store_b, "s1", 2).await.expect("b writes now");
    assert_eq!(stored_seqs(&store_b, "s1").await, vec![1, 2]);
}
