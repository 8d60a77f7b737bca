//! One suite, both engines: every check runs on a fresh SQLite file and on a fresh
//! PostgreSQL schema, and must behave the same.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::{node, until_expired, Db};
use vis_store::{Appended, EgressRecord, Home, JournalOptions, Keep, NodeId, StoreError};

const LONG: Duration = Duration::from_secs(60);

on_both_engines! {
    appended_events_get_consecutive_seqs_and_read_back_in_order => consecutive_seqs;
    a_range_read_starts_after_the_seq_and_stops_at_the_limit => range_limits;
    live_only_and_egress_events_take_a_seq_without_a_journal_row => live_only_and_egress;
    a_completed_flow_replaces_its_egress_row_in_place_and_still_advances_the_high_water => egress_update;
    appends_from_two_writers_at_once_never_reuse_a_seq => two_writers;
    a_refused_append_leaves_the_other_appends_of_its_batch_alone => refused_in_batch;
    an_append_to_an_unknown_session_is_refused => unknown_session;
    after_a_takeover_the_lost_node_is_fenced_and_the_survivor_writes_on => takeover_fences;
    a_restarted_node_adopts_its_sessions_and_its_previous_incarnation_is_fenced => restart_adopts;
    a_takeover_of_a_node_whose_lease_is_live_takes_nothing => takeover_of_live_node;
    a_lease_not_renewed_in_time_expires_and_its_heartbeat_then_fails => lease_expiry;
    retention_trims_the_oldest_events_and_a_range_read_says_how_far => retention;
}

async fn consecutive_seqs(db: &Db) {
    let j = db.journal().await;
    let w = node(&j, "a", LONG).await.writer();
    let home = j.create_session(&w, "s1").await.expect("session");
    assert_eq!(
        home,
        Home {
            node: Some(NodeId::new("a")),
            epoch: w.epoch
        }
    );
    // Queued one after the other before any is awaited: seqs follow the order of the calls.
    let pending: Vec<_> = (0..20)
        .map(|n| j.append(&w, "s1", "note", json!({ "n": n }), Keep::Journal))
        .collect();
    let mut seqs = Vec::new();
    for p in pending {
        seqs.push(p.await.expect("append").seq);
    }
    assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
    let range = j.range("s1", 0, 100).await.expect("range");
    assert_eq!(range.trimmed_through, 0);
    assert_eq!(range.events.len(), 20);
    for (i, e) in range.events.iter().enumerate() {
        let v: Value = serde_json::from_str(&e.data).expect("the stored text is JSON");
        assert_eq!(e.seq, i as i64 + 1);
        assert_eq!(e.kind, "note");
        assert_eq!(
            v["seq"], e.seq,
            "the envelope carries the seq the store assigned"
        );
        assert_eq!(v["session_id"], "s1");
        assert_eq!(v["type"], "note");
        assert_eq!(
            v["n"], i as i64,
            "the payload's members sit beside the envelope's"
        );
    }
    assert_eq!(j.high_water("s1").await.expect("high water"), Some(20));
    assert_eq!(j.high_water("nope").await.expect("high water"), None);
}

async fn range_limits(db: &Db) {
    let j = db.journal().await;
    let w = node(&j, "a", LONG).await.writer();
    j.create_session(&w, "s1").await.expect("session");
    for n in 0..10 {
        j.append(&w, "s1", "note", json!({ "n": n }), Keep::Journal)
            .await
            .expect("append");
    }
    let seqs = |r: vis_store::Range| r.events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(j.range("s1", 5, 3).await.expect("range")),
        vec![6, 7, 8]
    );
    assert_eq!(
        seqs(j.range("s1", 8, 100).await.expect("range")),
        vec![9, 10]
    );
    assert!(seqs(j.range("s1", 10, 100).await.expect("range")).is_empty());
    assert!(seqs(j.range("other", 0, 100).await.expect("range")).is_empty());
}

async fn live_only_and_egress(db: &Db) {
    let j = db.journal().await;
    let w = node(&j, "a", LONG).await.writer();
    j.create_session(&w, "s1").await.expect("session");
    let record = EgressRecord::new(&json!({ "host": "example.test", "decision": "deny" }))
        .expect("a record");
    let keeps = [
        Keep::Journal,
        Keep::LiveOnly,
        Keep::Egress(record.clone()),
        Keep::Journal,
    ];
    let mut seqs = Vec::new();
    for keep in keeps {
        seqs.push(
            j.append(&w, "s1", "x", json!({}), keep)
                .await
                .expect("append")
                .seq,
        );
    }
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    let stored: Vec<i64> = j
        .range("s1", 0, 10)
        .await
        .expect("range")
        .events
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(stored, vec![1, 4], "only journal events are replayable");
    assert_eq!(j.high_water("s1").await.expect("high water"), Some(4));
    assert_eq!(
        j.egress_page("s1", None, 10).await.expect("egress"),
        vec![(3, record)],
        "the egress row keeps its event's seq"
    );
    assert!(j
        .egress_page("s1", Some(3), 10)
        .await
        .expect("egress")
        .is_empty());
}

async fn egress_update(db: &Db) {
    let j = db.journal().await;
    let w = node(&j, "a", LONG).await.writer();
    j.create_session(&w, "s1").await.expect("session");
    let rec = |state: &str, bytes: i64| {
        EgressRecord::new(&json!({ "id": "f1", "state": state, "bytes": bytes })).expect("record")
    };
    let open = j.append(
        &w,
        "s1",
        "egress.decision",
        json!({}),
        Keep::Egress(rec("open", 0)),
    );
    let open = open.await.expect("opened").seq;
    // Queued together, so on PostgreSQL both updates land in one batch: the last one wins.
    let mid = Keep::EgressUpdate {
        row: open,
        record: rec("open", 10),
    };
    let end = Keep::EgressUpdate {
        row: open,
        record: rec("closed", 99),
    };
    let first = j.append(&w, "s1", "egress.decision", json!({}), mid);
    let second = j.append(&w, "s1", "egress.decision", json!({}), end);
    assert_eq!(first.await.expect("update").seq, open + 1);
    assert_eq!(second.await.expect("update").seq, open + 2);
    assert_eq!(
        j.egress_page("s1", None, 10).await.expect("egress"),
        vec![(open, rec("closed", 99))],
        "one row, at its first seq, holding the last record"
    );
    assert_eq!(
        j.high_water("s1").await.expect("high water"),
        Some(open + 2)
    );
}

async fn two_writers(db: &Db) {
    // Two handles on one database: two connections, two writers, as two nodes would be.
    let (one, two) = (db.journal().await, db.journal().await);
    let w = node(&one, "a", LONG).await.writer();
    one.create_session(&w, "s1").await.expect("session");
    let burst = |j: vis_store::Journal, w: vis_store::Writer, tag: &'static str| {
        tokio::spawn(async move {
            let pending: Vec<_> = (0..300)
                .map(|n| j.append(&w, "s1", tag, json!({ "n": n }), Keep::Journal))
                .collect();
            let mut out = Vec::new();
            for p in pending {
                out.push(p.await.expect("append").seq);
            }
            out
        })
    };
    let (a, b) = (
        burst(one.clone(), w.clone(), "one"),
        burst(two.clone(), w, "two"),
    );
    let (a, b) = (a.await.expect("task"), b.await.expect("task"));
    assert!(
        a.windows(2).all(|p| p[0] < p[1]),
        "one writer's seqs rise in call order"
    );
    assert!(
        b.windows(2).all(|p| p[0] < p[1]),
        "one writer's seqs rise in call order"
    );
    let mut all: Vec<i64> = a.into_iter().chain(b).collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=600).collect::<Vec<_>>(),
        "no seq handed out twice, none skipped"
    );
    let stored = two.range("s1", 0, 1000).await.expect("range").events;
    assert_eq!(stored.len(), 600);
    assert_eq!(two.high_water("s1").await.expect("high water"), Some(600));
}

async fn refused_in_batch(db: &Db) {
    let j = db.journal().await;
    let a = node(&j, "a", LONG).await.writer();
    let b = node(&j, "b", LONG).await.writer();
    j.create_session(&a, "mine").await.expect("session");
    j.create_session(&b, "theirs").await.expect("session");
    // Interleaved and queued together, so they share batches.
    let pending: Vec<_> = (0..40)
        .map(|n| {
            let sid = if n % 2 == 0 { "mine" } else { "theirs" };
            (
                sid,
                j.append(&a, sid, "x", json!({ "n": n }), Keep::Journal),
            )
        })
        .collect();
    let mut mine = Vec::new();
    for (sid, p) in pending {
        match (sid, p.await) {
            ("mine", Ok(Appended { seq, .. })) => mine.push(seq),
            ("theirs", Err(StoreError::Fenced { sid, home })) => {
                assert_eq!(sid, "theirs");
                assert_eq!(home.node, Some(NodeId::new("b")));
            }
            (sid, other) => panic!("{sid}: {other:?}"),
        }
    }
    assert_eq!(mine, (1..=20).collect::<Vec<_>>());
    assert_eq!(j.high_water("theirs").await.expect("high water"), Some(0));
    assert!(j
        .range("theirs", 0, 10)
        .await
        .expect("range")
        .events
        .is_empty());
}

async fn unknown_session(db: &Db) {
    let j = db.journal().await;
    let w = node(&j, "a", LONG).await.writer();
    let out = j.append(&w, "ghost", "x", json!({}), Keep::Journal).await;
    assert!(
        matches!(&out, Err(StoreError::UnknownSession(s)) if s == "ghost"),
        "{out:?}"
    );
}

async fn takeover_fences(db: &Db) {
    let j = db.journal().await;
    let lost = node(&j, "a", Duration::from_millis(300)).await;
    let survivor = node(&j, "b", LONG).await;
    j.create_session(&lost.writer(), "s1")
        .await
        .expect("session");
    let first = j
        .append(&lost.writer(), "s1", "x", json!({}), Keep::Journal)
        .await;
    assert_eq!(first.expect("the home node writes").seq, 1);
    until_expired(&j, "a").await;
    let taken = j
        .leases()
        .take_over(&survivor, &lost.node)
        .await
        .expect("take over");
    assert_eq!(taken, Some(vec!["s1".to_string()]));
    let late = j
        .append(&lost.writer(), "s1", "x", json!({}), Keep::Journal)
        .await;
    match late {
        Err(StoreError::Fenced { home, .. }) => assert_eq!(
            home,
            Home {
                node: Some(NodeId::new("b")),
                epoch: survivor.epoch
            }
        ),
        other => panic!("the lost node wrote: {other:?}"),
    }
    let next = j
        .append(
            &survivor.writer(),
            "s1",
            "turn.interrupted",
            json!({}),
            Keep::Journal,
        )
        .await;
    assert_eq!(
        next.expect("the survivor writes").seq,
        2,
        "no seq lost or reused"
    );
    let renewed = j.leases().renew(&lost, LONG).await;
    assert!(
        matches!(renewed, Err(StoreError::LeaseLost { .. })),
        "{renewed:?}"
    );
    // The lost node comes back: a new lease, but the session is no longer its own.
    let back = node(&j, "a", LONG).await;
    assert!(
        back.epoch > lost.epoch + 1,
        "the takeover moved the epoch on"
    );
    let again = j
        .append(&back.writer(), "s1", "x", json!({}), Keep::Journal)
        .await;
    assert!(matches!(again, Err(StoreError::Fenced { .. })), "{again:?}");
}

async fn restart_adopts(db: &Db) {
    let j = db.journal().await;
    let before = node(&j, "a", LONG).await;
    j.create_session(&before.writer(), "s1")
        .await
        .expect("session");
    let after = node(&j, "a", LONG).await;
    assert_eq!(after.epoch, before.epoch + 1);
    let stale = j
        .append(&before.writer(), "s1", "x", json!({}), Keep::Journal)
        .await;
    assert!(matches!(stale, Err(StoreError::Fenced { .. })), "{stale:?}");
    let fresh = j
        .append(&after.writer(), "s1", "x", json!({}), Keep::Journal)
        .await;
    assert_eq!(fresh.expect("the new incarnation writes").seq, 1);
}

async fn takeover_of_live_node(db: &Db) {
    let j = db.journal().await;
    let a = node(&j, "a", LONG).await;
    let b = node(&j, "b", LONG).await;
    j.create_session(&a.writer(), "s1").await.expect("session");
    assert_eq!(
        j.leases().take_over(&b, &a.node).await.expect("take over"),
        None
    );
    let home = j.home("s1").await.expect("home").expect("a session");
    assert_eq!(home.node, Some(NodeId::new("a")));
    j.leases()
        .renew(&a, LONG)
        .await
        .expect("the live node keeps its lease");
}

async fn lease_expiry(db: &Db) {
    let j = db.journal().await;
    let ttl = Duration::from_millis(400);
    let lease = node(&j, "a", ttl).await;
    let renewed = j
        .leases()
        .renew(&lease, ttl)
        .await
        .expect("a heartbeat in time");
    assert!(renewed.expires_at_ms >= lease.expires_at_ms);
    let live = j.leases().live().await.expect("live leases");
    assert!(live.iter().any(|l| l.node == lease.node));
    until_expired(&j, "a").await;
    assert!(!j
        .leases()
        .live()
        .await
        .expect("live")
        .iter()
        .any(|l| l.node == lease.node));
    let late = j.leases().renew(&lease, ttl).await;
    assert!(
        matches!(late, Err(StoreError::LeaseLost { .. })),
        "{late:?}"
    );
}

async fn retention(db: &Db) {
    let j = db
        .journal_with(JournalOptions {
            retain: 32,
            commits: None,
        })
        .await;
    let w = node(&j, "a", LONG).await.writer();
    j.create_session(&w, "s1").await.expect("session");
    let pending: Vec<_> = (0..100)
        .map(|n| j.append(&w, "s1", "x", json!({ "n": n }), Keep::Journal))
        .collect();
    for p in pending {
        p.await.expect("append");
    }
    let range = j.range("s1", 0, 1000).await.expect("range");
    assert!(
        range.trimmed_through >= 100 - 32 - 2,
        "{}",
        range.trimmed_through
    );
    assert_eq!(
        range.events.first().map(|e| e.seq),
        Some(range.trimmed_through + 1)
    );
    assert_eq!(range.events.last().map(|e| e.seq), Some(100));
}
