use super::*;

#[test]
fn a_frame_has_id_event_and_one_data_line() {
    let f = format_frame(Some(7), "turn.started", r#"{"a":1}"#);
    assert_eq!(&f[..], b"id: 7\nevent: turn.started\ndata: {\"a\":1}\n\n");
}

fn frame(seq: i64) -> Frame {
    Frame {
        seq,
        bytes: format_frame(Some(seq), "x", "{}"),
    }
}

fn subscription(replay: Vec<Frame>, live: LiveRx) -> Subscription {
    Subscription {
        session_id: "s".into(),
        ready: crate::areas::Ready {
            cursor: 1,
            current_turn_id: None,
            is_live: false,
        },
        gap: Some((1, 1)),
        replay,
        rest: None,
        live,
    }
}

#[tokio::test]
async fn frames_ready_together_are_written_once_without_duplicates() {
    let (tx, rx) = crate::live::channel(8);
    let sub = subscription(vec![frame(2), frame(3)], rx);
    tx.push(frame(3)).unwrap();
    tx.push(frame(4)).unwrap();
    let mut body = body_stream(vec![sub], false);
    let first = body.next().await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&first);
    assert!(
        text.starts_with("id: \nevent: subscription.ready"),
        "{text}"
    );
    assert!(text.contains("event: stream.gap"));
    assert_eq!(
        text.matches("id: 3\n").count(),
        1,
        "seq 3 replayed and live must be written once: {text}"
    );
    assert!(text.contains("id: 2\n") && text.contains("id: 4\n"));
    drop(tx);
    assert!(
        body.next().await.unwrap().is_err(),
        "a closed sink ends the stream with an error so the socket closes"
    );
}

#[tokio::test]
async fn a_lone_live_frame_is_written_as_it_is() {
    let (tx, rx) = crate::live::channel(8);
    let mut body = body_stream(vec![subscription(vec![], rx)], false);
    body.next().await.unwrap().unwrap();
    let f = frame(5);
    tx.push(f.clone()).unwrap();
    let chunk = body.next().await.unwrap().unwrap();
    assert_eq!(chunk, f.bytes);
    assert_eq!(
        chunk.as_ptr(),
        f.bytes.as_ptr(),
        "the shared frame bytes are written without a copy"
    );
}

#[tokio::test(start_paused = true)]
async fn a_quiet_stream_pings_within_the_heartbeat_and_a_busy_one_does_not() {
    let (tx, rx) = crate::live::channel(8);
    let mut body = body_stream(vec![subscription(vec![], rx)], false);
    body.next().await.unwrap().unwrap();
    let t0 = Instant::now();
    // Frames keep arriving every 5 s for 30 s: no ping in between.
    for s in 2..8 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        tx.push(frame(s)).unwrap();
        let chunk = body.next().await.unwrap().unwrap();
        assert_eq!(chunk, frame(s).bytes, "no ping while frames flow");
    }
    // Then silence: a ping comes after at most HEARTBEAT.
    let quiet = Instant::now();
    let chunk = body.next().await.unwrap().unwrap();
    assert_eq!(&chunk[..], PING);
    let waited = quiet.elapsed();
    assert!(
        waited <= HEARTBEAT && waited >= HEARTBEAT / 2,
        "ping after {waited:?} of silence"
    );
    assert!(t0.elapsed() > Duration::from_secs(30));
}

#[test]
fn a_control_frame_has_an_empty_id_line() {
    let f = format_frame(None, "subscription.ready", "{}");
    assert!(f.starts_with(b"id: \nevent: subscription.ready\n"));
}

/// Pages handed out in order; records the cursor each was asked after.
struct Pages {
    pages: std::sync::Mutex<VecDeque<Result<ReplayPage, String>>>,
    asked: std::sync::Arc<std::sync::Mutex<Vec<i64>>>,
}

impl ReplayRest for Pages {
    fn page(&self, after: i64) -> BoxFuture<'static, Result<ReplayPage, String>> {
        self.asked.lock().unwrap().push(after);
        let next = self.pages.lock().unwrap().pop_front();
        Box::pin(async move { next.unwrap_or_else(|| Err("no more pages".into())) })
    }
}

/// A 40 KiB frame.
fn fat(seq: i64) -> Frame {
    Frame {
        seq,
        bytes: format_frame(Some(seq), "x", &format!("\"{}\"", "y".repeat(40 * 1024))),
    }
}

fn paged(
    first: Vec<Frame>,
    pages: Vec<Result<ReplayPage, String>>,
    live: LiveRx,
) -> (Subscription, std::sync::Arc<std::sync::Mutex<Vec<i64>>>) {
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut sub = subscription(first, live);
    sub.gap = None;
    sub.rest = Some(Box::new(Pages {
        pages: std::sync::Mutex::new(pages.into()),
        asked: asked.clone(),
    }));
    (sub, asked)
}

fn seqs(chunk: &Bytes) -> Vec<i64> {
    String::from_utf8_lossy(chunk)
        .lines()
        .filter_map(|l| l.strip_prefix("id: ").and_then(|s| s.parse().ok()))
        .collect()
}

#[tokio::test]
async fn the_replay_is_read_one_page_at_a_time_as_the_client_takes_it() {
    let (tx, rx) = crate::live::channel(8);
    let (sub, asked) = paged(
        vec![fat(2)],
        vec![
            Ok(ReplayPage {
                frames: vec![fat(3), fat(4)],
                through: 4,
                ..Default::default()
            }),
            Ok(ReplayPage {
                frames: vec![fat(5)],
                through: 5,
                done: true,
                ..Default::default()
            }),
        ],
        rx,
    );
    // Live frames that arrive during the replay wait for it (6 repeats nothing; 5 does).
    tx.push(frame(5)).unwrap();
    tx.push(frame(6)).unwrap();
    let mut body = body_stream(vec![sub], false);
    let first = body.next().await.unwrap().unwrap();
    assert_eq!(seqs(&first), vec![2, 3], "a chunk stops at the batch size");
    assert_eq!(*asked.lock().unwrap(), vec![2], "one page read so far");
    let second = body.next().await.unwrap().unwrap();
    assert_eq!(seqs(&second), vec![4, 5], "the rest of the replay");
    assert_eq!(
        *asked.lock().unwrap(),
        vec![2, 4],
        "the next page once the first is written"
    );
    let third = body.next().await.unwrap().unwrap();
    assert_eq!(seqs(&third), vec![6], "then live, without repeating seq 5");
}

#[tokio::test]
async fn events_trimmed_during_the_replay_are_announced_before_the_next_page() {
    let (_tx, rx) = crate::live::channel(8);
    let (sub, _) = paged(
        vec![frame(2)],
        vec![Ok(ReplayPage {
            gap: Some((3, 9)),
            frames: vec![frame(10)],
            through: 10,
            done: true,
        })],
        rx,
    );
    let mut body = body_stream(vec![sub], false);
    let text = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
    let gap = text.find("event: stream.gap").expect(&text);
    let line = text[gap..].lines().nth(1).unwrap_or_default();
    assert!(
        line.contains("\"from\":3") && line.contains("\"to\":9"),
        "{line}"
    );
    assert!(gap > text.find("id: 2\n").unwrap() && gap < text.find("id: 10\n").unwrap());
}

#[tokio::test]
async fn a_replay_page_that_cannot_be_read_ends_the_stream() {
    let (_tx, rx) = crate::live::channel(8);
    let (sub, _) = paged(vec![frame(2)], vec![Err("disk I/O error".into())], rx);
    let mut body = body_stream(vec![sub], false);
    let first = body.next().await.unwrap().unwrap();
    assert_eq!(seqs(&first), vec![2]);
    assert!(body.next().await.unwrap().is_err(), "the socket closes");
    assert!(body.next().await.is_none());
}

#[tokio::test]
async fn live_frames_are_taken_a_chunk_at_a_time_and_the_rest_waits_in_the_queue() {
    let (tx, rx) = crate::live::channel(4);
    let mut body = body_stream(vec![subscription(vec![], rx)], false);
    body.next().await.unwrap().unwrap();
    for s in 2..=5 {
        tx.push(fat(s)).unwrap();
    }
    let first = body.next().await.unwrap().unwrap();
    assert_eq!(
        seqs(&first),
        vec![2, 3],
        "64 KiB per chunk: two 40 KiB frames"
    );
    // 4 and 5 are still queued: the queue has room for two more, not four.
    tx.push(fat(6)).unwrap();
    tx.push(fat(7)).unwrap();
    assert!(
        tx.push(fat(8)).is_err(),
        "a client that stops reading hits the cap"
    );
}
