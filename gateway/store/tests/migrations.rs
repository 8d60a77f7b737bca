//! Schema migrations: applied once, recorded, also when several nodes start together.

mod support;

use serde_json::json;
use std::time::Duration;
use support::{node, pg_url, Db, Kind};
use vis_store::Keep;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_together_on_postgresql_apply_each_migration_once_and_record_it() {
    let Some(db) = Db::new(Kind::Postgres) else {
        return;
    };
    // Three nodes open the same fresh schema at once.
    let (a, b, c) = tokio::join!(db.journal(), db.journal(), db.journal());
    let w = node(&a, "a", Duration::from_secs(60)).await.writer();
    a.create_session(&w, "s1").await.expect("session");
    for j in [&a, &b, &c] {
        j.append(&w, "s1", "x", json!({}), Keep::Journal)
            .await
            .expect("every node writes to the one schema");
    }
    let (client, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let schema = db.pg_options().and_then(|o| o.schema).expect("a schema");
    let rows = client
        .query(
            &format!("SELECT version, count(*) FROM \"{schema}\".vis_store_migrations GROUP BY version ORDER BY version"),
            &[],
        )
        .await
        .expect("the migrations table");
    let recorded: Vec<(i32, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert!(!recorded.is_empty());
    for (i, (version, count)) in recorded.iter().enumerate() {
        assert_eq!(*version, i as i32 + 1, "numbered from 1 with no hole");
        assert_eq!(*count, 1, "migration {version} recorded once");
    }
    // Opening again applies nothing and keeps the data.
    let again = db.journal().await;
    assert_eq!(again.high_water("s1").await.expect("high water"), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_sqlite_journal_keeps_its_events_and_seqs() {
    let Some(db) = Db::new(Kind::Sqlite) else {
        return;
    };
    let first = db.journal().await;
    let lease = node(&first, "a", Duration::from_secs(60)).await;
    first
        .create_session(&lease.writer(), "s1")
        .await
        .expect("session");
    for _ in 0..3 {
        first
            .append(&lease.writer(), "s1", "x", json!({}), Keep::Journal)
            .await
            .expect("append");
    }
    drop(first);
    let again = db.journal().await;
    let lease = node(&again, "a", Duration::from_secs(60)).await;
    let next = again
        .append(&lease.writer(), "s1", "x", json!({}), Keep::Journal)
        .await
        .expect("the restarted node adopted its session");
    assert_eq!(next.seq, 4, "seqs go on after a restart, none reused");
    assert_eq!(
        again.range("s1", 0, 10).await.expect("range").events.len(),
        4
    );
}
