use super::replay::{REPLAY_PAGE_BYTES, REPLAY_PAGE_FRAMES};
use super::*;
use std::task::Context;

fn fixture() -> (Arc<Bus>, Store, tempfile::TempDir) {
    let (store, dir) = crate::store::test_support::temp_store("bus");
    let bus = Arc::new(Bus::new(store.clone(), 100));
    bus.open("s", 0);
    (bus, store, dir)
}

fn drain(rx: &mut live::LiveRx) -> Vec<i64> {
    let mut seqs = Vec::new();
    let waker = futures::task::noop_waker();
    let _ = rx.poll_drain(&mut Context::from_waker(&waker), &mut |f| seqs.push(f.seq));
    seqs
}

#[tokio::test]
async fn a_live_stream_gets_an_event_only_once_the_store_has_committed_it() {
    let (bus, store, _dir) = fixture();
    let mut sub = bus
        .subscribe("s", 0, None, CancellationToken::new())
        .await
        .expect("subscription");
    let hold = crate::store::test_support::hold(&store);
    bus.publish("s", ev());
    bus.publish("s", ev());
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(
        drain(&mut sub.live),
        Vec::<i64>::new(),
        "nothing before the commit"
    );
    drop(hold);
    store.flush().await;
    assert_eq!(drain(&mut sub.live), vec![1, 2], "both, in seq order");
    let stored = store
        .with(|db| rows::events_between(db, "s", 0, 10))
        .await
        .expect("read")
        .1;
    assert_eq!(stored.len(), 2);
}

#[tokio::test]
async fn an_event_published_before_a_subscription_comes_once_in_its_replay_not_live() {
    let (bus, store, _dir) = fixture();
    let hold = crate::store::test_support::hold(&store);
    bus.publish("s", ev());
    let subscribing = {
        let bus = bus.clone();
        tokio::spawn(async move { bus.subscribe("s", 0, None, CancellationToken::new()).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    drop(hold);
    let mut sub = subscribing.await.expect("task").expect("subscription");
    assert_eq!(
        sub.replay.iter().map(|f| f.seq).collect::<Vec<_>>(),
        vec![1]
    );
    bus.publish("s", ev());
    store.flush().await;
    assert_eq!(drain(&mut sub.live), vec![2], "seq 1 is not repeated live");
}

#[tokio::test]
async fn a_seq_whose_row_failed_still_reaches_the_stored_high_water() {
    let (bus, store, _dir) = fixture();
    store
        .with(|db| {
            rows::put_session(
                db,
                &rows::SessionRow {
                    id: "s".into(),
                    channel: "web".into(),
                    root: "/".into(),
                    last_status: "idle".into(),
                    ..Default::default()
                },
            )
        })
        .await
        .expect("session");
    let kept: SeqRow = Box::new(|db, seq| rows::insert_egress(db, "s", seq, "{}"));
    assert_eq!(bus.publish_egress("s", (), Some(kept)), 1);
    let failing: SeqRow =
        Box::new(|_, _| Err(crate::store::StoreError::Other("the row failed".into())));
    assert_eq!(bus.publish_egress("s", (), Some(failing)), 2);
    let high = store
        .with(|db| Ok(rows::get_session(db, "s")?.map(|r| r.last_seq)))
        .await
        .expect("read");
    assert_eq!(
        high,
        Some(2),
        "the next start must not hand out seq 2 again"
    );
}

/// Caps the database at its current size with SQLite's own limit: a write that needs a
/// new page fails with SQLITE_FULL ("database or disk is full"), as on a full disk.
pub(crate) async fn fill_disk(store: &Store) {
    store
        .call(|c| {
            let n: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            c.query_row(&format!("PRAGMA max_page_count = {n}"), [], |r| {
                r.get::<_, i64>(0)
            })?;
            Ok(())
        })
        .await
        .expect("cap the database");
}

pub(crate) async fn free_disk(store: &Store) {
    store
        .call(|c| {
            c.query_row("PRAGMA max_page_count = 1073741823", [], |r| {
                r.get::<_, i64>(0)
            })?;
            Ok(())
        })
        .await
        .expect("uncap the database");
}

/// An event too large for the pages the database has.
/// A stored event.
fn ev() -> Event {
    Event::QueueResumed(vis_companion_api::events::QueueResumed { is_auto: false })
}

/// A stored event of about 64 KiB.
fn big() -> Event {
    Event::ChunkSlash(vis_companion_api::events::SlashChunk {
        turn_id: "t".into(),
        iteration: 1,
        detail: "x".repeat(64 * 1024),
    })
}

#[tokio::test]
async fn a_frame_whose_write_fails_reaches_no_live_stream_and_its_seq_is_reported_lost() {
    let (bus, store, _dir) = fixture();
    let mut sub = bus
        .subscribe("s", 0, None, CancellationToken::new())
        .await
        .expect("subscription");
    bus.publish("s", ev());
    store.flush().await;
    fill_disk(&store).await;
    bus.publish("s", big());
    bus.publish("s", big());
    store.flush().await;
    free_disk(&store).await;
    bus.publish("s", ev());
    store.flush().await;
    assert_eq!(
        drain(&mut sub.live),
        vec![1, 4],
        "only what the database holds reaches the client"
    );
    let stored: Vec<i64> = store
        .with(|db| rows::events_between(db, "s", 0, 10))
        .await
        .expect("read")
        .1
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(stored, vec![1, 4]);
    let lost = bus.lost().take();
    assert_eq!(
        lost.get("s").map(|l| (l.first, l.last, l.count)),
        Some((2, 3, 2)),
        "{lost:?}"
    );
    assert_eq!(bus.durable_high_water("s"), Some(4));
}

#[tokio::test]
async fn a_tail_cursor_never_points_past_what_is_stored() {
    let (bus, store, _dir) = fixture();
    store
        .with(|db| {
            rows::put_session(
                db,
                &rows::SessionRow {
                    id: "s".into(),
                    channel: "web".into(),
                    root: "/".into(),
                    last_status: "idle".into(),
                    ..Default::default()
                },
            )
        })
        .await
        .expect("session");
    bus.publish("s", ev());
    store.flush().await;
    fill_disk(&store).await;
    assert_eq!(bus.publish("s", big()), 2);
    store.flush().await;
    for cursor in [-1, 7] {
        let sub = bus
            .subscribe("s", cursor, None, CancellationToken::new())
            .await
            .expect("subscription");
        assert_eq!(
            sub.ready.cursor, 1,
            "seq 2 was never stored: a restart may hand it out again"
        );
    }
    assert_eq!(bus.durable_high_water("s"), Some(1));
}

#[tokio::test]
async fn a_replay_longer_than_a_page_is_read_in_pages_and_arrives_whole_and_in_order() {
    let (store, _dir) = crate::store::test_support::temp_store("bus");
    let bus = Arc::new(Bus::new(store.clone(), 10_000));
    bus.open("s", 0);
    for _ in 0..600 {
        bus.publish("s", ev());
    }
    store.flush().await;
    let sub = bus
        .subscribe("s", 0, None, CancellationToken::new())
        .await
        .expect("subscription");
    assert_eq!(sub.replay.len(), REPLAY_PAGE_FRAMES, "one page, not all");
    let mut seqs: Vec<i64> = sub.replay.iter().map(|f| f.seq).collect();
    let rest = sub.rest.expect("more pages");
    let mut pages = 1;
    loop {
        let page = rest.page(*seqs.last().expect("seqs")).await.expect("page");
        assert!(page.frames.len() <= REPLAY_PAGE_FRAMES && page.gap.is_none());
        seqs.extend(page.frames.iter().map(|f| f.seq));
        pages += 1;
        if page.done {
            break;
        }
        assert!(pages < 10, "the replay ends");
    }
    assert_eq!(seqs, (1..=600).collect::<Vec<i64>>());
    assert_eq!(pages, 3);
}

#[tokio::test]
async fn a_page_of_big_events_stops_at_the_byte_limit() {
    let (bus, store, _dir) = fixture();
    for _ in 0..4 {
        bus.publish("s", big());
    }
    store.flush().await;
    let sub = bus
        .subscribe("s", 0, None, CancellationToken::new())
        .await
        .expect("subscription");
    let bytes: usize = sub.replay.iter().map(|f| f.bytes.len()).sum();
    assert_eq!(sub.replay.len(), 2, "64 KiB events, 128 KiB pages");
    assert!(bytes >= REPLAY_PAGE_BYTES && sub.rest.is_some());
}

#[tokio::test]
async fn events_trimmed_while_a_client_reads_its_replay_are_announced_as_a_gap() {
    let (store, _dir) = crate::store::test_support::temp_store("bus");
    store
        .with(|db| {
            rows::put_session(
                db,
                &rows::SessionRow {
                    id: "s".into(),
                    channel: "web".into(),
                    root: "/".into(),
                    last_status: "idle".into(),
                    ..Default::default()
                },
            )
        })
        .await
        .expect("session");
    let bus = Arc::new(Bus::new(store.clone(), 300));
    bus.open("s", 0);
    for _ in 0..300 {
        bus.publish("s", ev());
    }
    store.flush().await;
    let sub = bus
        .subscribe("s", 0, None, CancellationToken::new())
        .await
        .expect("subscription");
    let after = sub.replay.last().expect("a page").seq;
    for _ in 0..300 {
        bus.publish("s", ev());
    }
    store.flush().await;
    let page = sub
        .rest
        .expect("more pages")
        .page(after)
        .await
        .expect("page");
    let (from, to) = page.gap.expect("a gap");
    assert_eq!(from, after + 1);
    assert!(to > after, "trimmed through {to}");
    assert!(page.frames.iter().all(|f| f.seq > to));
}

#[tokio::test]
async fn an_event_is_streamed_and_journaled_as_one_text_with_the_envelope_keys_first() {
    let (bus, store, _dir) = fixture();
    bus.open("s\"\n", 0);
    let mut sub = bus
        .subscribe("s\"\n", 0, None, CancellationToken::new())
        .await
        .expect("subscription");
    let forked = Event::SessionForked(vis_companion_api::events::Forked {
        session_id: "s\"\n".into(),
        fork_session_id: "f".into(),
        through_turn_id: "t".into(),
        created_at: 5,
    });
    assert_eq!(bus.publish("s\"\n", forked), 1);
    store.flush().await;
    let mut frames = Vec::new();
    let waker = futures::task::noop_waker();
    let _ = sub
        .live
        .poll_drain(&mut Context::from_waker(&waker), &mut |f| frames.push(f));
    let text = String::from_utf8(frames[0].bytes.to_vec()).expect("utf-8");
    let live = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("a data line");
    let stored = store
        .with(|db| rows::events_between(db, "s\"\n", 0, 10))
        .await
        .expect("read")
        .1;
    assert_eq!(
        stored[0].2, live,
        "the journal keeps the text the stream carried"
    );
    let head = r#"{"schema":1,"seq":1,"ts":"#;
    assert!(live.starts_with(head), "{live}");
    let after_ts = live[head.len()..]
        .split_once(',')
        .map(|(_, rest)| rest)
        .expect("members after ts");
    assert_eq!(
        after_ts,
        r#""session_id":"s\"\n","type":"session.forked","fork_session_id":"f","through_turn_id":"t","created_at":5}"#,
        "the stream's session id once, then the payload in its own order"
    );
}

#[tokio::test]
async fn the_commit_sink_gets_every_committed_event_in_seq_order_and_no_event_that_failed() {
    let (store, _dir) = crate::store::test_support::temp_store("bus-commits");
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let bus = Arc::new(Bus::with_commits(store.clone(), 100, Some(tx)));
    bus.open("s", 0);
    bus.publish("s", ev());
    // A live-only event.
    bus.publish(
        "s",
        Event::TurnQueuedDrained(vis_companion_api::events::TurnRef {
            turn_id: "t".into(),
        }),
    );
    store.flush().await;
    fill_disk(&store).await;
    bus.publish("s", big());
    store.flush().await;
    free_disk(&store).await;
    bus.publish("s", ev());
    store.flush().await;
    bus.stop_commits();
    bus.publish("s", ev());
    store.flush().await;
    let mut got = Vec::new();
    while let Some(c) = rx.recv().await {
        got.push(c);
    }
    let seqs: Vec<(i64, &str)> = got
        .iter()
        .map(|c| (c.event.seq, c.event.kind.as_str()))
        .collect();
    assert_eq!(
        seqs,
        vec![
            (1, "queue.resumed"),
            (2, "turn.queued.drained"),
            (4, "queue.resumed")
        ],
        "stored and live-only events, not the one the disk refused nor any after the stop"
    );
    let stored = store
        .with(|db| rows::events_between(db, "s", 0, 10))
        .await
        .expect("read")
        .1;
    let first = stored.iter().find(|e| e.0 == 1).expect("seq 1 stored");
    assert_eq!(got[0].event.data, first.2, "the journal's own text");
    assert!(got.iter().all(|c| c.sid == "s"));
}
