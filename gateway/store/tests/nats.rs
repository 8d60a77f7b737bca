//! Events across nodes: two "nodes" are two journal handles on one PostgreSQL schema; the
//! writing node publishes on a JetStream stream of the test's own, the other follows.

mod support;

use serde_json::json;
use std::time::Duration;
use support::{nats_addr, nats_url, node, reachable, suffix, Db, Kind};
use vis_store::nats::{Followed, Follower, Nats};
use vis_store::{Journal, JournalOptions, Keep, Writer};

const LONG: Duration = Duration::from_secs(60);

/// A PostgreSQL schema and a JetStream stream of this test's own (both removed when it is
/// dropped, also when the test fails).
struct Cluster {
    db: Db,
    nats: Nats,
    stream: String,
}

impl Cluster {
    async fn new() -> Option<Cluster> {
        let db = Db::new(Kind::Postgres)?;
        if !reachable("NATS", &nats_addr()) {
            return None;
        }
        let s = suffix();
        let stream = format!("VIS_TEST_{s}");
        let nats = Nats::connect(&nats_url(), &stream, &format!("vis-test-{s}.events"))
            .await
            .expect("connect to NATS and make the stream");
        Some(Cluster { db, nats, stream })
    }

    /// A node's journal handle; `publish` hands its commits to NATS.
    async fn node(&self, publish: bool, retain: i64) -> Journal {
        let commits = publish.then(|| self.nats.publisher());
        self.db
            .journal_with(JournalOptions { retain, commits })
            .await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stream = self.stream.clone();
        // On a thread of its own (this one belongs to the test's runtime).
        let remove = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok(client) = async_nats::connect(nats_url()).await {
                    let _ = async_nats::jetstream::new(client)
                        .delete_stream(&stream)
                        .await;
                }
            });
        });
        tokio::task::block_in_place(|| remove.join().ok());
    }
}

async fn append_n(j: &Journal, w: &Writer, sid: &str, from: i64, n: i64) {
    let pending: Vec<_> = (from..from + n)
        .map(|i| j.append(w, sid, "note", json!({ "i": i }), Keep::Journal))
        .collect();
    for p in pending {
        p.await.expect("append");
    }
}

/// Takes items until the event with seq `last`; fails on a timeout.
async fn take_through(f: &mut Follower, last: i64) -> Vec<Followed> {
    let mut out = Vec::new();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(20), f.next())
            .await
            .unwrap_or_else(|_| panic!("no item for 20 s after {:?}", out.last()))
            .expect("the follower runs")
            .expect("no error");
        let done = matches!(&item, Followed::Event(e) if e.seq >= last);
        out.push(item);
        if done {
            return out;
        }
    }
}

fn seqs(items: &[Followed]) -> Vec<i64> {
    items
        .iter()
        .map(|i| match i {
            Followed::Event(e) => e.seq,
            Followed::Gap { .. } => panic!("an unexpected gap: {i:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_appended_on_one_node_are_followed_on_another_in_order_with_no_gap_or_duplicate() {
    let Some(cluster) = Cluster::new().await else {
        return;
    };
    let a = cluster.node(true, 10_000).await;
    let b = cluster.node(false, 10_000).await;
    let w = node(&a, "a", LONG).await.writer();
    a.create_session(&w, "s1").await.expect("session");
    append_n(&a, &w, "s1", 1, 20).await;
    // One follower from the start, started after some events (they come from the journal).
    let mut from_start = cluster
        .nats
        .follow(b.clone(), "s1", 0)
        .await
        .expect("follow");
    let mut all = take_through(&mut from_start, 20).await;
    assert_eq!(
        from_start.stats().from_journal,
        20,
        "what was written before it followed came from the journal"
    );
    let writer = {
        let (a, w) = (a.clone(), w.clone());
        tokio::spawn(async move {
            for chunk in 0..38 {
                append_n(&a, &w, "s1", 21 + chunk * 10, 10).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    // Another joins mid-stream with a cursor, while events are being written.
    while b.high_water("s1").await.expect("high water").unwrap_or(0) < 120 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut mid_stream = cluster
        .nats
        .follow(b.clone(), "s1", 100)
        .await
        .expect("follow");
    writer.await.expect("writer");
    all.extend(take_through(&mut from_start, 400).await);
    assert_eq!(seqs(&all), (1..=400).collect::<Vec<_>>());
    let tail = take_through(&mut mid_stream, 400).await;
    assert_eq!(seqs(&tail), (101..=400).collect::<Vec<_>>());
    let stats = from_start.stats();
    assert_eq!(stats.from_journal + stats.live, 400);
    assert!(
        stats.live > 0,
        "events came live from the stream: {stats:?}"
    );
    // What was followed is what the journal stores, byte for byte.
    let stored = b.range("s1", 0, 1000).await.expect("range").events;
    let followed: Vec<_> = all
        .into_iter()
        .filter_map(|i| match i {
            Followed::Event(e) => Some(e),
            Followed::Gap { .. } => None,
        })
        .collect();
    assert_eq!(followed, stored);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_gets_from_the_journal_the_events_that_were_never_published() {
    let Some(cluster) = Cluster::new().await else {
        return;
    };
    // The same node through two handles: one publishes, the other's publishing "failed".
    let publishing = cluster.node(true, 10_000).await;
    let silent = cluster.node(false, 10_000).await;
    let reader = cluster.node(false, 10_000).await;
    let w = node(&publishing, "a", LONG).await.writer();
    publishing.create_session(&w, "s1").await.expect("session");
    let mut f = cluster.nats.follow(reader, "s1", 0).await.expect("follow");
    append_n(&publishing, &w, "s1", 1, 1).await;
    assert_eq!(seqs(&take_through(&mut f, 1).await), vec![1]);
    // Caught up: what follows is live, but for the five whose publishing "failed".
    append_n(&publishing, &w, "s1", 2, 4).await;
    append_n(&silent, &w, "s1", 6, 5).await;
    append_n(&publishing, &w, "s1", 11, 5).await;
    assert_eq!(
        seqs(&take_through(&mut f, 15).await),
        (2..=15).collect::<Vec<_>>()
    );
    let stats = f.stats();
    assert!(
        stats.from_journal >= 6,
        "the hole was refilled from the journal: {stats:?}"
    );
    assert!(stats.live > 0, "{stats:?}");
    // Unpublished events at the tail, with nothing after them: the idle check finds them.
    append_n(&silent, &w, "s1", 16, 3).await;
    assert_eq!(seqs(&take_through(&mut f, 18).await), vec![16, 17, 18]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_journal_s_retention_is_told_the_gap_first() {
    let Some(cluster) = Cluster::new().await else {
        return;
    };
    let a = cluster.node(true, 32).await;
    let w = node(&a, "a", LONG).await.writer();
    a.create_session(&w, "s1").await.expect("session");
    append_n(&a, &w, "s1", 1, 100).await;
    let trimmed = a.range("s1", 0, 1).await.expect("range").trimmed_through;
    assert!(trimmed > 0);
    let mut f = cluster
        .nats
        .follow(a.clone(), "s1", 0)
        .await
        .expect("follow");
    let first = f.next().await.expect("an item").expect("no error");
    assert_eq!(
        first,
        Followed::Gap {
            from: 1,
            to: trimmed
        }
    );
    let rest = take_through(&mut f, 100).await;
    assert_eq!(seqs(&rest), (trimmed + 1..=100).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_publisher_publishes_everything_handed_to_it_before_it_ends() {
    if !reachable("NATS", &nats_addr()) {
        return;
    }
    let s = suffix();
    let (stream, prefix) = (format!("VIS_TEST_{s}"), format!("vis-test-{s}.events"));
    let nats = Nats::connect(&nats_url(), &stream, &prefix)
        .await
        .expect("connect to NATS and make the stream");
    let (sink, publisher) = nats.start_publisher();
    for seq in 1..=2000 {
        let event = vis_store::Event {
            seq,
            kind: "note".into(),
            data: json!({ "seq": seq }).to_string(),
        };
        sink.try_send(vis_store::Committed {
            sid: "s1".into(),
            event,
        })
        .expect("room in the queue");
    }
    drop(sink);
    let drained = publisher.drained(Duration::from_secs(30)).await;
    let client = async_nats::connect(nats_url()).await.expect("NATS");
    let js = async_nats::jetstream::new(client);
    let mut info = js.get_stream(&stream).await.expect("the stream");
    let held = info.info().await.expect("stream info").state.messages;
    let _ = js.delete_stream(&stream).await;
    assert!(drained, "the publisher ended within 30 s");
    assert_eq!(
        held, 2000,
        "every event was published before the task ended"
    );
}
