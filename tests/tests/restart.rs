//! Restarts (docs/decisions.md, G2, G3): the stored log and turns survive restarts; an interrupted turn gets
//! exactly one terminal (`turn.failed` with an `interrupted` error block).

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::{Duration, Instant};

fn stall() -> Script {
    Script::Stall {
        chunks: vec!["Working on it. ".into(), "Still going.\n".into()],
    }
}

/// Starts a turn that stalls mid-stream and waits until it is stored as running.
async fn stalled_turn(gw: &Gateway, sid: &str) -> String {
    let mut sse = gw.events(sid, -1).await;
    let (s, t) = gw.submit(sid, "do the long thing").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    sse.collect_until("content.block.delta", WAIT).await;
    gw.wait_stored(sid, "content.block.delta").await;
    t["turn_id"].as_str().unwrap().to_string()
}

fn terminals_of<'a>(evs: &'a [Value], tid: &str) -> Vec<&'a Value> {
    evs.iter()
        .filter(|e| e["turn_id"] == tid && TERMINALS.contains(&e["type"].as_str().unwrap_or("")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_mid_turn_lands_one_interrupted_turn_failed_at_the_next_start() {
    let llm = FixtureLlm::start().await;
    llm.push(stall());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let tid = stalled_turn(&gw, &sid).await;
    let before = gw.events_since(&sid, 0).await;
    let hw_before = before.last().unwrap()["seq"].as_i64().unwrap();

    let gw = gw.restart_after_kill().await;
    // replay from 0: stored events, then exactly one terminal for the interrupted turn
    let mut sse = gw.events(&sid, 0).await;
    let ready = sse.next_event(WAIT).await.unwrap();
    assert_eq!(ready.event, "subscription.ready");
    assert_eq!(ready.data["is_live"], false, "{:?}", ready.data);
    let evs = sse.collect_until("context.updated", WAIT).await;
    let tys = ev_types(&evs);
    assert_eq!(tys[0], "turn.started", "{tys:?}");
    assert!(tys.contains(&"content.block.delta"), "{tys:?}");
    let failed = evs
        .iter()
        .find(|e| e.event == "turn.failed")
        .expect("turn.failed");
    assert_eq!(failed.data["turn_id"], tid.as_str());
    assert!(
        failed.seq().unwrap() > hw_before,
        "seq continues after the restart"
    );
    let block = failed.data["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "error")
        .cloned()
        .expect("error block");
    assert_eq!(block["code"], "interrupted", "{block}");
    let stored = gw.events_since(&sid, 0).await;
    assert_eq!(terminals_of(&stored, &tid).len(), 1, "{:?}", types(&stored));
    // the stored turn answers, settled
    let (s, rec) = gw.get(format!("/v1/sessions/{sid}/turns/{tid}")).await;
    assert_eq!(s, StatusCode::OK, "{rec}");
    assert_eq!(rec["status"], "failed");
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(tr["turns"][0]["status"], "error", "{tr}");
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(soul["live"], false);
    assert_eq!(soul["status"], "idle");

    // a second restart adds no second terminal
    let gw = gw.restart_after_kill().await;
    let stored = gw.events_since(&sid, 0).await;
    assert_eq!(terminals_of(&stored, &tid).len(), 1, "{:?}", types(&stored));
    // and the session still takes turns
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/help").await;
    let evs = sse.collect_until("turn.completed", WAIT).await;
    assert!(evs
        .iter()
        .all(|e| e.seq().is_none() || e.seq().unwrap() > hw_before));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_queued_behind_an_interrupted_turn_survives_the_restart_and_is_held() {
    let llm = FixtureLlm::start().await;
    llm.push(stall());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    stalled_turn(&gw, &sid).await;
    let (_, q) = gw.submit(&sid, "/help queued").await;
    assert_eq!(q["status"], "queued");
    let qtid = q["turn_id"].as_str().unwrap().to_string();
    // let the store thread write it
    tokio::time::sleep(Duration::from_millis(200)).await;
    let gw = gw.restart_after_kill().await;
    let (s, l) = gw
        .get(format!("/v1/sessions/{sid}/turns?status=queued"))
        .await;
    assert_eq!(s, StatusCode::OK);
    let queued: Vec<_> = l["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["turn_id"].clone())
        .collect();
    assert_eq!(queued, vec![Value::from(qtid.clone())], "{l}");
    let stored = gw.events_since(&sid, 0).await;
    let paused = stored.iter().find(|e| e["type"] == "queue.paused").cloned();
    let paused = paused.unwrap_or_else(|| panic!("no queue.paused: {:?}", types(&stored)));
    assert_eq!(paused["reason"], "turn_failed");
    assert_eq!(paused["held"], 1);
    let (s, r) = gw
        .post_empty(&format!("/v1/sessions/{sid}/resume-queue"))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(r["turn"]["turn_id"], qtid.as_str(), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_works_after_a_clean_restart_and_seq_numbering_continues() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/help one").await;
    sse.collect_until("context.updated", WAIT).await;
    let before = gw.events_since(&sid, 0).await;
    let hw = before.last().unwrap()["seq"].as_i64().unwrap();
    drop(sse);
    let (dirs, opts) = (gw.dirs.clone(), gw.opts.clone());
    let mut gw = gw;
    let status = gw.stop().await;
    assert!(status.success(), "{status}");
    drop(gw);
    let gw = Gateway::start_in(dirs, opts).await;
    let (s, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::OK, "{soul}");
    assert_eq!(soul["title"], "/help one");
    let (_, seq) = gw.get(format!("/v1/sessions/{sid}/seq")).await;
    assert_eq!(seq["seq"], hw);
    let mut sse = gw.events(&sid, 0).await;
    sse.next_event(WAIT).await.unwrap();
    let replay = sse.collect_until("context.updated", WAIT).await;
    let got: Vec<i64> = replay.iter().map(|e| e.seq().unwrap()).collect();
    let want: Vec<i64> = before.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(got, want);
    gw.submit(&sid, "/help two").await;
    let live = sse.next_event(WAIT).await.unwrap();
    assert_eq!(live.event, "turn.started");
    assert_eq!(live.seq(), Some(hw + 1));
    // the list still has it
    let (_, l) = gw.get("/v1/sessions").await;
    assert!(l["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == sid.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_mid_turn_lands_its_terminal_before_exit_and_none_after_restart() {
    let llm = FixtureLlm::start().await;
    llm.push(stall());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let tid = stalled_turn(&gw, &sid).await;
    let (dirs, opts) = (gw.dirs.clone(), gw.opts.clone());
    let mut gw = gw;
    let t0 = Instant::now();
    let status = gw.stop().await;
    assert!(status.success(), "{status}");
    assert!(t0.elapsed() < Duration::from_secs(12));
    assert!(
        !dirs.registry().exists(),
        "the registry is removed on a clean stop"
    );
    drop(gw);
    let gw = Gateway::start_in(dirs, opts).await;
    let stored = gw.events_since(&sid, 0).await;
    let terms = terminals_of(&stored, &tid);
    assert_eq!(terms.len(), 1, "{:?}", types(&stored));
    let (_, rec) = gw.get(format!("/v1/sessions/{sid}/turns/{tid}")).await;
    assert_ne!(rec["status"], "streaming", "{rec}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_still_dedups_after_a_restart() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (s, first) = gw.submit_keyed(&sid, "/help", "companion:k1").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    sse.collect_until("context.updated", WAIT).await;
    let (s, again) = gw.submit_keyed(&sid, "/help", "companion:k1").await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(again["turn_id"], first["turn_id"]);
    assert_eq!(again["status"], "completed");
    drop(sse);
    let gw = gw.restart_after_kill().await;
    let (s, after) = gw.submit_keyed(&sid, "/help", "companion:k1").await;
    assert_eq!(s, StatusCode::OK, "a stored key is still known: {after}");
    assert_eq!(after["turn_id"], first["turn_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_turns_are_listed_and_served_after_a_restart() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let mut tids = Vec::new();
    for r in ["/help a", "/help b"] {
        let (_, t) = gw.submit(&sid, r).await;
        tids.push(t["turn_id"].clone());
        sse.collect_until("context.updated", WAIT).await;
    }
    drop(sse);
    let gw = gw.restart_after_kill().await;
    let (s, h) = gw.get(format!("/v1/sessions/{sid}/turns")).await;
    assert_eq!(s, StatusCode::OK);
    let got: Vec<Value> = h["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["status"], "completed", "{t}");
            t["turn_id"].clone()
        })
        .collect();
    assert_eq!(got, tids, "oldest first");
    for t in &tids {
        let (s, rec) = gw
            .get(format!("/v1/sessions/{sid}/turns/{}", t.as_str().unwrap()))
            .await;
        assert_eq!(s, StatusCode::OK, "{rec}");
        assert!(rec["request"].as_str().unwrap().starts_with("/help"));
    }
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(tr["total"], 2);
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(soul["turn_count"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_keeps_the_queued_turns_of_a_busy_session_and_runs_them_in_order() {
    let llm = FixtureLlm::start().await;
    llm.push(stall());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    stalled_turn(&gw, &sid).await;
    let mut queued = Vec::new();
    for r in ["/help one", "/help two"] {
        let (_, q) = gw.submit(&sid, r).await;
        assert_eq!(q["status"], "queued");
        queued.push(q["turn_id"].as_str().unwrap().to_string());
    }
    let (dirs, opts) = (gw.dirs.clone(), gw.opts.clone());
    let mut gw = gw;
    assert!(gw.stop().await.success());
    drop(gw);
    let gw = Gateway::start_in(dirs, opts).await;
    // The user's backlog survives a clean restart and runs, in its order.
    let deadline = Instant::now() + WAIT;
    let stored = loop {
        let evs = gw.events_since(&sid, 0).await;
        if queued.iter().all(|t| !terminals_of(&evs, t).is_empty()) {
            break evs;
        }
        assert!(Instant::now() < deadline, "{:?}", types(&evs));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let started: Vec<&Value> = stored
        .iter()
        .filter(|e| {
            e["type"] == "turn.started" && queued.iter().any(|t| e["turn_id"] == t.as_str())
        })
        .collect();
    let order: Vec<&str> = started
        .iter()
        .map(|e| e["turn_id"].as_str().unwrap())
        .collect();
    assert_eq!(order, vec![queued[0].as_str(), queued[1].as_str()]);
    assert!(
        started.iter().all(|e| e["is_queued"] == true),
        "{started:?}"
    );
    for t in &queued {
        assert_eq!(terminals_of(&stored, t)[0]["type"], "turn.completed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_with_open_streams_exits_promptly_and_ends_the_streams() {
    let llm = FixtureLlm::start().await;
    llm.push(stall());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut a = gw.events(&sid, -1).await;
    let mut b = gw.events_multi(&format!("{sid}:-1")).await;
    gw.submit(&sid, "hold").await;
    a.collect_until("content.block.delta", WAIT).await;
    b.collect_until("content.block.delta", WAIT).await;
    let mut gw = gw;
    let t0 = Instant::now();
    assert!(gw.stop().await.success());
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    for s in [&mut a, &mut b] {
        let rest = s.drain_for(Duration::from_secs(3)).await;
        assert!(
            s.ended,
            "stream still open after exit: {:?}",
            ev_types(&rest)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_on_a_busy_port_fails_with_a_bind_error() {
    let blocker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = blocker.local_addr().unwrap().port().to_string();
    let dirs = Dirs::new();
    let mut cmd = command(&dirs, &Opts::default());
    cmd.args(["start", "--port", &port, "--root"])
        .arg(dirs.root());
    let out = tokio::time::timeout(WAIT, tokio::process::Command::from(cmd).output())
        .await
        .expect("start hung on a busy port")
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot bind"), "{err}");
    assert!(!dirs.registry().exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recovered_terminal_closes_blocks_left_open_by_the_crash() {
    let llm = FixtureLlm::start().await;
    llm.push(stall());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    stalled_turn(&gw, &sid).await;
    let gw = gw.restart_after_kill().await;
    let stored = gw.events_since(&sid, 0).await;
    let opened: Vec<Value> = stored
        .iter()
        .filter(|e| e["type"] == "content.block.started")
        .map(|e| e["block"]["id"].clone())
        .collect();
    assert!(!opened.is_empty());
    let failed_at = stored
        .iter()
        .position(|e| e["type"] == "turn.failed")
        .expect("turn.failed");
    for id in opened {
        let closed = stored[..failed_at]
            .iter()
            .any(|e| e["type"] == "content.block.completed" && e["block_id"] == id);
        assert!(closed, "block {id} never completed: {:?}", types(&stored));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_stays_paused_across_a_restart_until_resumed() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Slow {
        chunks: vec!["x".into(); 20],
        delay_ms: 40,
    });
    llm.push(Script::error(400, "nope"));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "ok").await;
    gw.submit(&sid, "fails").await;
    let (_, held) = gw.submit(&sid, "/help held").await;
    let held = held["turn_id"].as_str().unwrap().to_string();
    sse.collect_until("queue.paused", Duration::from_secs(15))
        .await;
    drop(sse);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let gw = gw.restart_after_kill().await;
    let (_, l) = gw
        .get(format!("/v1/sessions/{sid}/turns?status=queued"))
        .await;
    assert_eq!(l["turns"][0]["turn_id"], held.as_str(), "{l}");
    let (_, d) = gw
        .post_empty(&format!("/v1/sessions/{sid}/drain-queue"))
        .await;
    assert_eq!(d, serde_json::json!({"turn": null}), "still paused");
    let mut sse = gw.events(&sid, -1).await;
    let (_, r) = gw
        .post_empty(&format!("/v1/sessions/{sid}/resume-queue"))
        .await;
    assert_eq!(r["turn"]["turn_id"], held.as_str(), "{r}");
    let evs = sse.collect_until("turn.completed", WAIT).await;
    assert!(ev_types(&evs).contains(&"queue.resumed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_queued_before_a_graceful_stop_runs_first_at_the_next_start() {
    let llm = FixtureLlm::start().await;
    llm.push(stall());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let running = stalled_turn(&gw, &sid).await;
    let (_, q) = gw.submit(&sid, "/help queued first").await;
    assert_eq!(q["status"], "queued");
    let qtid = q["turn_id"].as_str().unwrap().to_string();
    let (dirs, opts) = (gw.dirs.clone(), gw.opts.clone());
    let mut gw = gw;
    assert!(gw.stop().await.success());
    drop(gw);
    let gw = Gateway::start_in(dirs, opts).await;
    // A new submission right after the start takes its place behind the stored backlog.
    let (s, next) = gw.submit(&sid, "/help submitted after").await;
    assert_eq!(s, StatusCode::ACCEPTED, "{next}");
    let ntid = next["turn_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + WAIT;
    let stored = loop {
        let evs = gw.events_since(&sid, 0).await;
        let done = [&qtid, &ntid]
            .iter()
            .all(|t| !terminals_of(&evs, t).is_empty());
        if done {
            break evs;
        }
        assert!(
            Instant::now() < deadline,
            "both turns did not settle: {:?}",
            types(&evs)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let seq_of = |ty: &str, tid: &str| {
        stored
            .iter()
            .find(|e| e["type"] == ty && e["turn_id"] == tid)
            .and_then(|e| e["seq"].as_i64())
            .unwrap_or_else(|| panic!("no {ty} for {tid}: {:?}", types(&stored)))
    };
    // The interrupted turn was cancelled by the stop, not by the user.
    assert_eq!(terminals_of(&stored, &running)[0]["type"], "turn.cancelled");
    // The queue says what it does: the stored turn starts as a drained queued turn.
    let started = stored
        .iter()
        .find(|e| e["type"] == "turn.started" && e["turn_id"] == qtid.as_str())
        .unwrap();
    assert_eq!(started["is_queued"], true, "{started}");
    assert!(
        seq_of("turn.completed", &qtid) < seq_of("turn.started", &ntid),
        "the turn queued before the stop runs before the one submitted after it: {:?}",
        types(&stored)
    );
}
