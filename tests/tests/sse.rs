//! SSE framing (docs/decisions.md, event stream rules): cursors, replay, retention gaps, slow subscribers, fan-out.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::json;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn long_slow() -> Script {
    Script::Slow {
        chunks: (0..300).map(|i| format!("w{i}. ")).collect(),
        delay_ms: 40,
    }
}

/// Runs `n` slash turns to completion in `sid` (one at a time).
async fn slash_turns(gw: &Gateway, sid: &str, n: usize) {
    let mut sse = gw.events(sid, -1).await;
    for i in 0..n {
        gw.submit(sid, &format!("/help {i}")).await;
        sse.collect_until("context.updated", WAIT).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_has_the_sse_headers_and_starts_with_subscription_ready_with_an_empty_id() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    for path in [
        format!("/v1/sessions/{sid}/events"),
        format!("/v1/events?sids={sid}"),
    ] {
        let mut sse = gw.sse(&path, &[("Origin", "http://localhost:5173")]).await;
        assert_eq!(sse.status, StatusCode::OK);
        let h = |n: &str| sse.headers.get(n).unwrap().to_str().unwrap().to_string();
        assert!(h("content-type").starts_with("text/event-stream"));
        assert_eq!(h("cache-control"), "no-cache, no-transform");
        assert_eq!(h("x-accel-buffering"), "no");
        assert_eq!(h("access-control-allow-origin"), "http://localhost:5173");
        let ready = sse.next_event(WAIT).await.unwrap();
        assert_eq!(ready.event, "subscription.ready");
        assert_eq!(
            ready.id.as_deref(),
            Some(""),
            "control frames have an empty id line"
        );
        assert_eq!(ready.data["type"], "subscription.ready");
        assert_eq!(ready.data["session_id"], sid.as_str());
        assert_eq!(ready.data["cursor"], 0);
        assert_eq!(ready.data["is_live"], false);
        assert!(ready.data["current_turn_id"].is_null());
        assert!(ready.data["server_time_ms"].is_i64());
        assert!(sse
            .raw_head
            .starts_with(b"id: \nevent: subscription.ready\ndata: {"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_carry_id_event_and_one_data_line_with_the_envelope() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, 0).await;
    gw.submit(&sid, "/help").await;
    let evs = sse.collect_until("context.updated", WAIT).await;
    let raw = String::from_utf8_lossy(&sse.raw_head).to_string();
    for frame in raw.split("\n\n").filter(|f| !f.is_empty()) {
        let lines: Vec<&str> = frame.split('\n').collect();
        assert_eq!(lines.len(), 3, "{frame}");
        assert!(lines[0].starts_with("id: "));
        assert!(lines[1].starts_with("event: "));
        assert!(lines[2].starts_with("data: {"));
    }
    let mut last = 0;
    for e in evs.iter().skip(1) {
        let seq = e.seq().expect("numeric id");
        assert!(seq > last);
        last = seq;
        assert_eq!(e.data["seq"], seq);
        assert_eq!(e.data["type"], e.event.as_str());
        assert_eq!(e.data["schema"], 1);
        assert!(e.data["ts"].is_i64());
        assert_eq!(e.data["session_id"], sid.as_str());
        // every key is snake_case
        for k in e.data.as_object().unwrap().keys() {
            assert!(
                k.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{k}"
            );
        }
    }
    let (_, seq) = gw.get(format!("/v1/sessions/{sid}/seq")).await;
    assert_eq!(seq["seq"], last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_minus_one_while_a_turn_runs_replays_from_its_turn_started() {
    let llm = FixtureLlm::start().await;
    llm.push(long_slow());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    slash_turns(&gw, &sid, 1).await;
    let mut first = gw.events(&sid, -1).await;
    let (_, t) = gw.submit(&sid, "long").await;
    let tid = t["turn_id"].as_str().unwrap().to_string();
    let evs = first.collect_until("turn.started", WAIT).await;
    let started_seq = evs.last().unwrap().seq().unwrap();
    first.collect_until("content.block.delta", WAIT).await;

    for path in [
        format!("/v1/sessions/{sid}/events?cursor=-1"),
        format!("/v1/events?sids={sid}:-1"),
        format!("/v1/sessions/{sid}/events?cursor=999999"),
    ] {
        let mut sse = gw.sse(&path, &[]).await;
        let ready = sse.next_event(WAIT).await.unwrap();
        assert_eq!(ready.event, "subscription.ready", "{path}");
        assert_eq!(ready.data["cursor"], started_seq - 1, "{path}");
        assert_eq!(ready.data["is_live"], true);
        assert_eq!(ready.data["current_turn_id"], tid.as_str());
        let next = sse.next_event(WAIT).await.unwrap();
        assert_eq!(next.event, "turn.started", "{path}");
        assert_eq!(next.seq(), Some(started_seq));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_minus_one_or_above_the_high_water_while_idle_is_live_only() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    slash_turns(&gw, &sid, 2).await;
    let (_, hw) = gw.get(format!("/v1/sessions/{sid}/seq")).await;
    let hw0 = hw["seq"].as_i64().unwrap();
    assert!(hw0 > 4);
    for c in [-1, hw0 + 100] {
        let (_, hw) = gw.get(format!("/v1/sessions/{sid}/seq")).await;
        let hw = hw["seq"].as_i64().unwrap();
        let mut sse = gw.events(&sid, c).await;
        let ready = sse.next_event(WAIT).await.unwrap();
        assert_eq!(ready.data["cursor"], hw, "cursor {c}");
        assert_eq!(ready.data["is_live"], false);
        let nothing = sse.next_event(Duration::from_millis(300)).await;
        assert!(nothing.is_none(), "cursor {c}: {nothing:?}");
        gw.submit(&sid, "/help").await;
        let live = sse.next_event(WAIT).await.unwrap();
        assert_eq!(live.event, "turn.started");
        assert_eq!(live.seq(), Some(hw + 1));
        sse.collect_until("context.updated", WAIT).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_replays_exactly_the_stored_events_after_it_without_duplicates() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    slash_turns(&gw, &sid, 3).await;
    let all = gw.events_since(&sid, 0).await;
    let seqs: Vec<i64> = all.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let n = seqs[seqs.len() / 2];
    let want: Vec<i64> = seqs.iter().copied().filter(|s| *s > n).collect();
    for (path, hdr) in [
        (format!("/v1/sessions/{sid}/events?cursor=0"), n.to_string()),
        (format!("/v1/sessions/{sid}/events"), n.to_string()),
        (format!("/v1/events?sids={sid}:0"), n.to_string()),
    ] {
        let mut sse = gw.sse(&path, &[("Last-Event-ID", &hdr)]).await;
        let ready = sse.next_event(WAIT).await.unwrap();
        assert_eq!(ready.data["cursor"], n, "{path}");
        let got: Vec<i64> = sse
            .drain_for(Duration::from_millis(500))
            .await
            .iter()
            .map(|e| e.seq().unwrap())
            .collect();
        assert_eq!(got, want, "{path}");
    }
    // events-since agrees
    let since: Vec<i64> = gw
        .events_since(&sid, n)
        .await
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(since, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_is_ignored_with_two_sids_and_unknown_sids_are_dropped() {
    let gw = Gateway::start(Opts::default()).await;
    let a = gw.create_session().await;
    let b = gw.create_session().await;
    slash_turns(&gw, &a, 1).await;
    slash_turns(&gw, &b, 1).await;
    let unknown = uuid::Uuid::new_v4();
    let mut sse = gw
        .sse(
            &format!("/v1/events?sids={a}:0,{unknown}:0,{b}:0"),
            &[("Last-Event-ID", "3")],
        )
        .await;
    let evs = sse.drain_for(Duration::from_millis(700)).await;
    let readies: Vec<_> = evs
        .iter()
        .filter(|e| e.event == "subscription.ready")
        .collect();
    assert_eq!(readies.len(), 2, "{:?}", ev_types(&evs));
    for r in &readies {
        assert_eq!(r.data["cursor"], 0, "Last-Event-ID ignored with two sids");
    }
    let sids: HashSet<_> = evs
        .iter()
        .map(|e| e.data["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sids, HashSet::from([a.clone(), b.clone()]));
    // both sessions replay their turn.started
    for s in [&a, &b] {
        assert!(evs
            .iter()
            .any(|e| e.event == "turn.started" && e.data["session_id"] == s.as_str()));
    }
    // unknown only → 400
    for q in [
        format!("{unknown}"),
        "unknown".to_string(),
        String::new(),
        format!("{unknown}:5,nope"),
    ] {
        let r = gw.sse_response(&format!("/v1/events?sids={q}"), &[]).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{q}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(error_type(&v), "bad-request");
        assert_eq!(v["error"]["message"], "no valid sids");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_only_events_never_appear_in_a_replay_but_consume_a_seq() {
    let llm = FixtureLlm::start().await;
    llm.push(long_slow());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut live = gw.events(&sid, -1).await;
    let (_, t) = gw.submit(&sid, "long").await;
    let mut seen = live.collect_until("content.block.delta", WAIT).await;
    let (_, q1) = gw.submit(&sid, "q1").await;
    let (_, q2) = gw.submit(&sid, "q2").await;
    gw.patch(
        &format!(
            "/v1/sessions/{sid}/turns/{}",
            q1["turn_id"].as_str().unwrap()
        ),
        json!({"request": "q1 edited"}),
    )
    .await;
    gw.delete(&format!(
        "/v1/sessions/{sid}/turns/{}",
        q2["turn_id"].as_str().unwrap()
    ))
    .await;
    seen.extend(live.collect_until("turn.queued.deleted", WAIT).await);
    let t_seen = ev_types(&seen);
    for ty in [
        "turn.queued",
        "turn.queued.updated",
        "turn.queued.deleted",
        "activity",
    ] {
        assert!(t_seen.contains(&ty), "{ty} live: {t_seen:?}");
    }
    let (s, _) = gw
        .post_empty(&format!(
            "/v1/sessions/{sid}/turns/{}/cancel",
            t["turn_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    live.collect_until("context.updated", WAIT).await;
    let mut replay = gw.events(&sid, 0).await;
    let evs = replay.drain_for(Duration::from_millis(700)).await;
    let tys = ev_types(&evs);
    for ty in [
        "activity",
        "turn.queued",
        "turn.queued.updated",
        "turn.queued.deleted",
        "turn.queued.drained",
        "session.model_updated",
        "egress.decision",
    ] {
        assert!(!tys.contains(&ty), "{ty} replayed: {tys:?}");
    }
    // holes: the replayed seqs skip the live-only ones
    let replayed: HashSet<i64> = evs.iter().filter_map(|e| e.seq()).collect();
    for e in seen.iter().filter(|e| e.event.starts_with("turn.queued")) {
        assert!(!replayed.contains(&e.seq().unwrap()));
    }
    let since = gw.events_since(&sid, 0).await;
    assert!(!types(&since)
        .iter()
        .any(|t| t.starts_with("turn.queued") || t == "activity"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_proxy_the_body_starts_with_the_8192_space_pad() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    for h in ["X-Forwarded-For", "Via", "CF-Ray", "CF-Connecting-IP"] {
        let mut sse = gw
            .sse(&format!("/v1/sessions/{sid}/events"), &[(h, "1.2.3.4")])
            .await;
        let ready = sse.next_event(WAIT).await.unwrap();
        assert_eq!(ready.event, "subscription.ready");
        let mut pad = b": ".to_vec();
        pad.extend(std::iter::repeat_n(b' ', 8192));
        pad.extend(b"\n\n");
        assert!(sse.raw_head.starts_with(&pad), "{h}");
        assert_eq!(&sse.raw_head[pad.len()..pad.len() + 4], b"id: ");
    }
    let mut plain = gw.events(&sid, 0).await;
    plain.next_event(WAIT).await.unwrap();
    assert!(plain.raw_head.starts_with(b"id: "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stream_receives_a_ping_comment_within_15_seconds() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    sse.next_event(WAIT).await.unwrap();
    let t0 = Instant::now();
    let e = sse.next_event(Duration::from_secs(17)).await;
    assert!(e.is_none(), "{e:?}");
    assert!(
        sse.comments.iter().any(|c| c.trim() == "ping"),
        "no ping after {:?}",
        t0.elapsed()
    );
    assert!(!sse.ended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_title_update_reaches_other_sessions_streams_with_titled_session_id() {
    let gw = Gateway::start(Opts::default()).await;
    let a = gw.create_session().await;
    let b = gw.create_session().await;
    let mut sb = gw.events(&b, -1).await;
    sb.next_event(WAIT).await.unwrap();
    let mut sa = gw.events(&a, -1).await;
    gw.submit(&a, "/help me title this").await;
    let own = sa.collect_until("session.title_updated", WAIT).await;
    let own = &own.last().unwrap().data;
    assert_eq!(own["session_id"], a.as_str());
    assert_eq!(own["title"], "/help me title this");
    assert!(own.get("titled_session_id").is_none_or(|v| v.is_null()));
    let copy = sb.collect_until("session.title_updated", WAIT).await;
    let copy = copy.last().unwrap();
    assert_eq!(copy.data["session_id"], b.as_str());
    assert_eq!(copy.data["titled_session_id"], a.as_str());
    assert_eq!(copy.data["title"], "/help me title this");
    assert!(copy.seq().is_some(), "stored copy");
    // the multiplexed stream demultiplexes by session_id
    let c = gw.create_session().await;
    let mut m = gw.events_multi(&format!("{b}:-1,{c}:-1")).await;
    let d = gw.create_session().await;
    gw.submit(&d, "/help another").await;
    let evs = m.collect_until("session.title_updated", WAIT).await;
    let e = evs.last().unwrap();
    assert_eq!(e.data["titled_session_id"], d.as_str());
    assert!(e.data["session_id"] == b.as_str() || e.data["session_id"] == c.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_older_than_retention_gets_a_stream_gap_before_the_replay() {
    let gw = Gateway::start(Opts::default().env("VIS_GATEWAY_EVENT_RING_MAX", "20")).await;
    let sid = gw.create_session().await;
    slash_turns(&gw, &sid, 12).await;
    let (_, hw) = gw.get(format!("/v1/sessions/{sid}/seq")).await;
    let hw = hw["seq"].as_i64().unwrap();
    assert!(hw > 40, "{hw}");
    let stored = gw.events_since(&sid, 0).await;
    assert_eq!(stored[0]["type"], "stream.gap", "{:?}", types(&stored));
    let to = stored[0]["to"].as_i64().unwrap();
    assert_eq!(stored[0]["from"], 1);
    assert!(to >= hw - 20, "to {to}, hw {hw}");
    assert!(stored.len() <= 21);
    assert_eq!(stored[1]["seq"].as_i64().unwrap(), to + 1);
    let mut sse = gw.events(&sid, 5).await;
    let ready = sse.next_event(WAIT).await.unwrap();
    assert_eq!(ready.event, "subscription.ready");
    let gap = sse.next_event(WAIT).await.unwrap();
    assert_eq!(gap.event, "stream.gap");
    assert_eq!(gap.id.as_deref(), Some(""));
    assert_eq!(gap.data["from"], 6);
    assert_eq!(gap.data["to"], to);
    assert_eq!(gap.data["session_id"], sid.as_str());
    let first = sse.next_event(WAIT).await.unwrap();
    assert_eq!(first.seq(), Some(to + 1));
    // the multiplexed stream signals the gap per session too
    let other = gw.create_session().await;
    let mut m = gw.events_multi(&format!("{sid}:2,{other}:0")).await;
    let evs = m.drain_for(Duration::from_millis(600)).await;
    let gap = evs
        .iter()
        .find(|e| e.event == "stream.gap")
        .expect("stream.gap on /v1/events");
    assert_eq!(gap.data["session_id"], sid.as_str());
    assert_eq!(gap.data["from"], 3);
    assert_eq!(gap.data["to"], to);
    // a cursor inside retention has no gap
    let mut sse = gw.events(&sid, hw - 3).await;
    sse.next_event(WAIT).await.unwrap();
    let next = sse.next_event(WAIT).await.unwrap();
    assert_ne!(next.event, "stream.gap");
}

/// Reads from a raw socket until EOF / reset (true) or `quiet` passes without data (false).
async fn read_until_closed(
    s: &mut tokio::net::TcpStream,
    out: &mut Vec<u8>,
    quiet: Duration,
) -> bool {
    let mut buf = vec![0u8; 65536];
    loop {
        match tokio::time::timeout(quiet, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_is_disconnected_and_can_resume_by_cursor() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock
        .connect(format!("127.0.0.1:{}", gw.port).parse().unwrap())
        .await
        .unwrap();
    let req = format!(
        "GET /v1/sessions/{sid}/events?cursor=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         X-Vis-Protocol: 2\r\nX-Vis-Min-Gateway-Protocol: 2\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    // wait until the subscription exists (the metrics gauge counts it)
    let deadline = Instant::now() + WAIT;
    loop {
        let r = gw
            .req(reqwest::Method::GET, "/metrics")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if r.lines()
            .any(|l| l.starts_with("vis_gateway_sse_clients ") && !l.ends_with(" 0"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "{r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // fill the socket buffers with big frames (≈ 9 MiB: well past the kernel's largest
    // autotuned send buffer, 4 MiB, plus hyper's; 24 turns were about that much, which made
    // the test pass or fail by timing), then queue > 1024 small frames
    let big = "x".repeat(64 * 1024);
    for _ in 0..48 {
        let (st, _) = gw.submit(&sid, &format!("/help {big}")).await;
        assert!(st.is_success());
    }
    for i in 0..320 {
        let (st, _) = gw.submit(&sid, &format!("/help {i}")).await;
        assert!(st.is_success());
    }
    gw.wait_idle(&sid).await;
    let mut got = Vec::new();
    let closed = read_until_closed(&mut s, &mut got, Duration::from_secs(3)).await;
    assert!(
        closed,
        "the server kept the slow subscriber ({} bytes read)",
        got.len()
    );
    let text = String::from_utf8_lossy(&got).to_string();
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    // the last complete frame's seq
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let last_seq = body
        .split("\n\n")
        .filter(|f| f.contains("\ndata: ") || f.contains("data: "))
        .filter_map(|f| f.split('\n').find_map(|l| l.strip_prefix("id: ")))
        .filter_map(|id| id.trim().parse::<i64>().ok())
        .last()
        .unwrap_or(0);
    let (_, hw) = gw.get(format!("/v1/sessions/{sid}/seq")).await;
    let hw = hw["seq"].as_i64().unwrap();
    assert!(last_seq < hw, "dropped before the end: {last_seq} vs {hw}");
    // resume by cursor
    let want: Vec<i64> = gw
        .events_since(&sid, last_seq)
        .await
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    let mut sse = gw
        .sse(
            &format!("/v1/sessions/{sid}/events"),
            &[("Last-Event-ID", &last_seq.to_string())],
        )
        .await;
    let ready = sse.next_event(WAIT).await.unwrap();
    assert_eq!(ready.data["cursor"], last_seq);
    let mut got = Vec::new();
    while got.len() < want.len() {
        let e = sse.next_event(WAIT).await.expect("replay frame");
        got.push(e.seq().unwrap());
    }
    assert_eq!(got, want);
    // the gateway still serves
    let (st, _) = gw.get("/healthz").await;
    assert_eq!(st, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_while_events_flow_never_loses_or_duplicates_a_stored_event() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Slow {
        chunks: (0..60).map(|i| format!("Sentence {i}. ")).collect(),
        delay_ms: 8,
    });
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut watch = gw.events(&sid, -1).await;
    gw.submit(&sid, "stream a lot").await;
    let mut subs = Vec::new();
    for _ in 0..8 {
        subs.push(gw.events(&sid, 0).await);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    watch
        .collect_until("context.updated", Duration::from_secs(15))
        .await;
    let stored: Vec<i64> = gw
        .events_since(&sid, 0)
        .await
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    for (i, mut sub) in subs.into_iter().enumerate() {
        let evs = sub.collect_until("context.updated", WAIT).await;
        let seqs: Vec<i64> = evs.iter().filter_map(|e| e.seq()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "sub {i}: {seqs:?}");
        let got: HashSet<i64> = seqs.iter().copied().collect();
        for s in &stored {
            assert!(got.contains(s), "sub {i} missed stored seq {s}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_sid_is_subscribed_once_and_last_event_id_applies_to_a_lone_valid_sid() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    slash_turns(&gw, &sid, 2).await;
    let unknown = uuid::Uuid::new_v4();
    let mut sse = gw
        .sse(
            &format!("/v1/events?sids={sid}:0,{sid}:0,{unknown}"),
            &[("Last-Event-ID", "4")],
        )
        .await;
    let evs = sse.drain_for(Duration::from_millis(600)).await;
    let readies: Vec<_> = evs
        .iter()
        .filter(|e| e.event == "subscription.ready")
        .collect();
    assert_eq!(readies.len(), 1, "{:?}", ev_types(&evs));
    assert_eq!(
        readies[0].data["cursor"], 4,
        "Last-Event-ID with one valid sid"
    );
    let seqs: Vec<i64> = evs.iter().filter_map(|e| e.seq()).collect();
    assert!(seqs.iter().all(|s| *s > 4), "{seqs:?}");
    let mut dedup = seqs.clone();
    dedup.dedup();
    assert_eq!(dedup, seqs);
    // events-since honours Last-Event-ID when no ?cursor is given
    let (s, v) = into_json(
        gw.req(
            reqwest::Method::GET,
            &format!("/v1/sessions/{sid}/events-since"),
        )
        .header("Last-Event-ID", "4")
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let first = v["events"][0]["seq"].as_i64().unwrap();
    assert!(first > 4, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_client_process_dies_is_closed_with_its_connection() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    // A separate local process holds the stream; killing it closes its socket, and that
    // connection is all the gateway needs to know (no process id is sent or polled).
    let script = format!(
        "import socket,time\n\
         s=socket.create_connection(('127.0.0.1',{}))\n\
         s.sendall(b'GET /v1/sessions/{sid}/events HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\
         X-Vis-Protocol: 2\\r\\nX-Vis-Min-Gateway-Protocol: 2\\r\\n\\r\\n')\n\
         s.recv(100)\n\
         time.sleep(60)\n",
        gw.port
    );
    let mut child = std::process::Command::new("python3")
        .args(["-c", &script])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while gw.metric("vis_gateway_sse_clients").await.unwrap_or(-1.0) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the stream never opened (client: {:?})",
            child.try_wait()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while gw.metric("vis_gateway_sse_clients").await.unwrap_or(-1.0) != 0.0 {
        assert!(
            Instant::now() < deadline,
            "the stream outlived its client's connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_ring_size_falls_back_to_the_default_retention() {
    for v in ["0", "-5", "abc"] {
        let gw = Gateway::start(Opts::default().env("VIS_GATEWAY_EVENT_RING_MAX", v)).await;
        let sid = gw.create_session().await;
        slash_turns(&gw, &sid, 6).await;
        let stored = gw.events_since(&sid, 0).await;
        assert_ne!(
            stored[0]["type"],
            "stream.gap",
            "ring {v}: {:?}",
            types(&stored)
        );
        assert_eq!(stored[0]["seq"], 1, "ring {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_briefly_slow_subscriber_under_the_queue_cap_is_kept_and_gets_everything() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock
        .connect(format!("127.0.0.1:{}", gw.port).parse().unwrap())
        .await
        .unwrap();
    let req = format!(
        "GET /v1/sessions/{sid}/events?cursor=-1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         X-Vis-Protocol: 2\r\nX-Vis-Min-Gateway-Protocol: 2\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = vec![0u8; 1024];
    let n = tokio::time::timeout(WAIT, s.read(&mut head))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    for i in 0..100 {
        gw.submit(&sid, &format!("/help {i}")).await;
    }
    gw.wait_idle(&sid).await;
    let (_, hw) = gw.get(format!("/v1/sessions/{sid}/seq")).await;
    let hw = hw["seq"].as_i64().unwrap();
    let mut got = Vec::new();
    let closed = read_until_closed(&mut s, &mut got, Duration::from_secs(2)).await;
    assert!(!closed, "dropped below the cap");
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains(&format!("id: {hw}\n")),
        "the last event arrived"
    );
}
