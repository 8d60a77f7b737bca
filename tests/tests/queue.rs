//! Queue policy (docs/decisions.md, turn rules): FIFO drain, pause on failure, auto-resume on success, concurrency.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

fn slow(n: usize, ms: u64) -> Script {
    Script::Slow {
        chunks: (0..n).map(|i| format!("s{i}. ")).collect(),
        delay_ms: ms,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_drains_the_queue_in_submit_order_with_drained_then_started() {
    let llm = FixtureLlm::start().await;
    llm.push(slow(20, 40));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "first").await;
    let mut queued = Vec::new();
    for r in ["/help a", "/help b", "/help c"] {
        let (s, q) = gw.submit(&sid, r).await;
        assert_eq!(q["status"], "queued", "{q}");
        assert_eq!(s, StatusCode::ACCEPTED);
        queued.push(q["turn_id"].as_str().unwrap().to_string());
    }
    let mut evs = Vec::new();
    while evs
        .iter()
        .filter(|e: &&Event| e.event == "turn.completed")
        .count()
        < 4
    {
        evs.extend(sse.collect_until("turn.completed", WAIT).await);
    }
    let started: Vec<String> = evs
        .iter()
        .filter(|e| e.event == "turn.started")
        .skip(1)
        .map(|e| {
            assert_eq!(e.data["is_queued"], true, "{:?}", e.data);
            e.data["turn_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(started, queued, "FIFO");
    for tid in &queued {
        let d = evs
            .iter()
            .position(|e| e.event == "turn.queued.drained" && e.data["turn_id"] == tid.as_str())
            .expect("drained");
        let s = evs
            .iter()
            .position(|e| e.event == "turn.started" && e.data["turn_id"] == tid.as_str())
            .unwrap();
        assert_eq!(s, d + 1, "drained right before started");
    }
    // no queue-state events are replayed, but the started ones are
    gw.wait_idle(&sid).await;
    let stored = gw.events_since(&sid, 0).await;
    assert_eq!(
        types(&stored)
            .iter()
            .filter(|t| *t == "turn.started")
            .count(),
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_while_paused_clears_the_pause_with_is_auto_true_and_drains() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Slow {
        chunks: vec!["x".into(); 20],
        delay_ms: 40,
    });
    llm.push(Script::error(400, "nope"));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    // a Slow turn keeps the session busy while the failing one and a held one queue
    gw.submit(&sid, "ok").await;
    gw.submit(&sid, "fails").await;
    let (_, held) = gw.submit(&sid, "/help held").await;
    let held = held["turn_id"].as_str().unwrap().to_string();
    sse.collect_until("queue.paused", WAIT).await;
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}?include=queued")).await;
    assert_eq!(soul["live"], false);
    assert_eq!(soul["queued_turns"][0]["turn_id"], held.as_str(), "{soul}");
    // a new submit on the idle (paused) session starts at once
    let (s, now) = gw.submit(&sid, "/help now").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_eq!(now["status"], "streaming", "{now}");
    let evs = sse.collect_until("queue.resumed", WAIT).await;
    let resumed = evs.last().unwrap();
    assert_eq!(resumed.data["is_auto"], true);
    let evs = sse.collect_until("turn.started", WAIT).await;
    assert_eq!(evs.last().unwrap().data["turn_id"], held.as_str());
    sse.collect_until("turn.completed", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_without_a_backlog_does_not_pause() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::error(400, "nope"));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "fails").await;
    sse.collect_until("context.updated", WAIT).await;
    let more = sse.drain_for(Duration::from_millis(300)).await;
    assert!(!ev_types(&more).contains(&"queue.paused"));
    let (_, r) = gw
        .post_empty(&format!("/v1/sessions/{sid}/resume-queue"))
        .await;
    assert_eq!(r, json!({"turn": null}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_run_turns_at_the_same_time() {
    let llm = FixtureLlm::start().await;
    llm.push(slow(40, 25));
    llm.push(slow(40, 25));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let a = gw.create_session().await;
    let b = gw.create_session().await;
    let (_, ta) = gw.submit(&a, "a").await;
    let (_, tb) = gw.submit(&b, "b").await;
    assert_eq!(ta["status"], "streaming");
    assert_eq!(tb["status"], "streaming");
    let (_, sa) = gw.get(format!("/v1/sessions/{a}")).await;
    let (_, sb) = gw.get(format!("/v1/sessions/{b}")).await;
    assert_eq!(sa["live"], true);
    assert_eq!(sb["live"], true);
    let (_, status) = gw.get("/v1/admin/status").await;
    assert_eq!(status["running_turns"], 2, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_execution_permit_a_second_session_waits_and_can_be_cancelled_cleanly() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Stall {
        chunks: vec!["hold. ".into()],
    });
    let gw = Gateway::start(Opts::openai(&llm).env("VIS_GATEWAY_MAX_CONCURRENT_TURNS", "1")).await;
    let a = gw.create_session().await;
    let b = gw.create_session().await;
    let mut sa = gw.events(&a, -1).await;
    gw.submit(&a, "holds the permit").await;
    sa.collect_until("content.block.delta", WAIT).await;
    let mut sb = gw.events(&b, -1).await;
    let (_, tb) = gw.submit(&b, "waits").await;
    assert_eq!(tb["status"], "streaming", "running while it waits: {tb}");
    let tid = tb["turn_id"].as_str().unwrap().to_string();
    sb.collect_until("turn.started", WAIT).await;
    let r = gw
        .req(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(r.contains("vis_turns_waiting 1"), "{r}");
    assert!(r.contains("vis_turn_concurrency_limit 1"), "{r}");
    let (s, _) = gw
        .post_empty(&format!("/v1/sessions/{b}/turns/{tid}/cancel"))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let evs = sb.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().event, "turn.cancelled");
    assert_eq!(
        llm.request_count(),
        1,
        "the waiting turn never called the provider"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_gets_no_execution_permit_in_time_fails_as_stalled_and_the_running_one_is_untouched(
) {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Stall {
        chunks: vec!["hold. ".into()],
    });
    let gw = Gateway::start(
        Opts::openai(&llm)
            .env("VIS_GATEWAY_MAX_CONCURRENT_TURNS", "1")
            .env("VIS_TURN_START_TIMEOUT_MS", "400"),
    )
    .await;
    let a = gw.create_session().await;
    let b = gw.create_session().await;
    let mut sa = gw.events(&a, -1).await;
    let (_, ta) = gw.submit(&a, "holds the permit").await;
    sa.collect_until("content.block.delta", WAIT).await;
    let mut sb = gw.events(&b, -1).await;
    let (_, tb) = gw.submit(&b, "never gets to run").await;
    let tid = tb["turn_id"].as_str().unwrap().to_string();
    let evs = sb.collect_until_any(TERMINALS, WAIT).await;
    let last = evs.last().unwrap();
    assert_eq!(last.event, "turn.failed", "{evs:?}");
    let (_, turn) = gw.get(format!("/v1/sessions/{b}/turns/{tid}")).await;
    let blocks = turn["content"].as_array().cloned().unwrap_or_default();
    let err = blocks
        .iter()
        .find(|b| b["type"] == "error")
        .unwrap_or_else(|| panic!("no error block: {turn}"));
    assert_eq!(err["code"], "turn_stalled", "{turn}");
    assert!(
        err["message"]
            .as_str()
            .unwrap_or_default()
            .contains("never started running"),
        "{turn}"
    );
    assert_eq!(
        llm.request_count(),
        1,
        "the stalled turn never called the provider"
    );
    // The turn holding the permit is untouched and still cancellable.
    let ta = ta["turn_id"].as_str().unwrap().to_string();
    let (s, _) = gw
        .post_empty(&format!("/v1/sessions/{a}/turns/{ta}/cancel"))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let evs = sa.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().event, "turn.cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_records_do_not_leak_internal_fields() {
    let llm = FixtureLlm::start().await;
    llm.push(slow(100, 30));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    gw.submit(&sid, "busy").await;
    let (_, q) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "line one\nline two", "display_request": "shown", "extra_body": {"x": 1},
                   "turn_features": {"y": true}, "workspace": {"z": 1}, "model": "openai/gpt-x",
                   "reasoning_default": "high"}),
        )
        .await;
    assert_eq!(q["status"], "queued");
    for rec in [
        q.clone(),
        gw.get(format!("/v1/sessions/{sid}/turns?status=queued"))
            .await
            .1["turns"][0]
            .clone(),
        gw.get(format!("/v1/sessions/{sid}?include=queued")).await.1["queued_turns"][0].clone(),
    ] {
        for k in [
            "messages",
            "extra_body",
            "turn_features",
            "workspace",
            "engine_opts",
        ] {
            assert!(rec.get(k).is_none(), "{k} leaked: {rec}");
        }
        assert_eq!(rec["display_request"], "shown", "{rec}");
        assert_eq!(rec["request_preview"], "line one…", "{rec}");
        assert_eq!(rec["model"], "openai/gpt-x");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_with_a_running_turn_cancels_it_and_closes_its_stream() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Stall {
        chunks: vec!["hold. ".into()],
    });
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "runs").await;
    sse.collect_until("content.block.delta", WAIT).await;
    let (s, _) = gw.delete(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let rest = sse.drain_for(WAIT).await;
    assert!(
        sse.ended,
        "the stream of a deleted session ends: {:?}",
        ev_types(&rest)
    );
    let (s, _) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (_, status) = gw.get("/v1/admin/status").await;
    assert_eq!(status["running_turns"], 0, "{status}");
    let (_, l) = gw.get("/v1/sessions").await;
    assert!(!l.to_string().contains(&sid));
    assert!(
        gw.events_since(&sid, 0).await.is_empty(),
        "its events are deleted too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submits_start_exactly_one_turn_and_dedup_a_shared_key() {
    let llm = FixtureLlm::start().await;
    llm.push(slow(20, 40));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let path = format!("/v1/sessions/{sid}/turns");
    let mut futs = Vec::new();
    for i in 0..24 {
        let key = if i % 3 == 0 {
            "companion:shared".to_string()
        } else {
            format!("companion:{i}")
        };
        // all model turns: whichever arrives first takes the slow script and keeps the
        // session busy while the others queue
        let req = format!("model turn {i}");
        futs.push(gw.post(&path, json!({"request": req, "idempotency_key": key})));
    }
    let results = futures::future::join_all(futs).await;
    let streaming = results
        .iter()
        .filter(|(s, v)| *s == StatusCode::ACCEPTED && v["status"] == "streaming")
        .count();
    assert_eq!(streaming, 1, "{results:?}");
    let shared: std::collections::HashSet<String> = results
        .iter()
        .filter(|(_, v)| v["idempotency_key"] == "companion:shared")
        .map(|(_, v)| v["turn_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(shared.len(), 1, "one turn for the shared key");
    let fresh = results
        .iter()
        .filter(|(s, _)| *s == StatusCode::ACCEPTED)
        .count();
    assert_eq!(fresh, 24 - 8 + 1, "16 distinct keys + the shared one");
    let (_, h) = gw.get(format!("/v1/sessions/{sid}/turns")).await;
    assert_eq!(h["turns"].as_array().unwrap().len(), 17, "{h}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_queued_turn_runs_with_its_new_request() {
    let llm = FixtureLlm::start().await;
    llm.push(slow(20, 40));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "first").await;
    let (_, q) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "original", "display_request": "orig shown"}),
        )
        .await;
    let qtid = q["turn_id"].as_str().unwrap().to_string();
    let (s, _) = gw
        .patch(
            &format!("/v1/sessions/{sid}/turns/{qtid}"),
            json!({"request": "edited text"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let mut evs = Vec::new();
    while !evs
        .iter()
        .any(|e: &Event| e.event == "turn.completed" && e.data["turn_id"] == qtid.as_str())
    {
        evs.extend(sse.collect_until("turn.completed", WAIT).await);
    }
    let st = evs
        .iter()
        .find(|e| e.event == "turn.started" && e.data["turn_id"] == qtid.as_str())
        .unwrap();
    assert_eq!(
        st.data["request"], "edited text",
        "the stale display_request is dropped"
    );
    let done = evs.last().unwrap();
    assert!(done.data["content"]
        .to_string()
        .contains("You said: edited text"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multiplexed_stream_survives_the_deletion_of_one_of_its_sessions() {
    let gw = Gateway::start(Opts::default()).await;
    let a = gw.create_session().await;
    let b = gw.create_session().await;
    let mut m = gw.events_multi(&format!("{a}:-1,{b}:-1")).await;
    m.next_event(WAIT).await.unwrap();
    m.next_event(WAIT).await.unwrap();
    let (s, _) = gw.delete(&format!("/v1/sessions/{a}")).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    gw.submit(&b, "/help").await;
    let evs = m.collect_until("turn.completed", WAIT).await;
    assert!(evs.iter().all(|e| e.data["session_id"] == b.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_created_with_a_title_keeps_it() {
    let gw = Gateway::start(Opts::default()).await;
    let (_, v) = gw
        .post("/v1/sessions", json!({"channel": "web", "title": "Mine"}))
        .await;
    assert_eq!(v["title"], "Mine");
    let sid = v["id"].as_str().unwrap().to_string();
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/help").await;
    let evs = sse.collect_until("context.updated", WAIT).await;
    assert!(!ev_types(&evs).contains(&"session.title_updated"));
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(soul["title"], "Mine");
    // listed right away because it has a title
    let (_, v) = gw.post("/v1/sessions", json!({"title": "Other"})).await;
    assert_eq!(v["channel"], "api", "default channel");
    let (_, l) = gw.get("/v1/sessions").await;
    assert!(
        l.to_string().contains(v["id"].as_str().unwrap()),
        "titled sessions are listed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_with_many_turns_each_settle_with_exactly_one_terminal_per_turn() {
    let gw = Gateway::start(Opts::default()).await;
    let mut sids = Vec::new();
    for _ in 0..12 {
        sids.push(gw.create_session().await);
    }
    let mut streams = Vec::new();
    for sid in &sids {
        streams.push(gw.events(sid, 0).await);
    }
    let gwr = &gw;
    let mut futs = Vec::new();
    for sid in &sids {
        for i in 0..6 {
            futs.push(async move { gwr.submit(sid, &format!("/help {i}")).await });
        }
    }
    for (s, v) in futures::future::join_all(futs).await {
        assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    }
    for (sid, sse) in sids.iter().zip(streams.iter_mut()) {
        let mut done = 0;
        let mut last = 0;
        while done < 6 {
            let e = sse
                .next_event(WAIT)
                .await
                .unwrap_or_else(|| panic!("{sid}: only {done} completions"));
            if let Some(s) = e.seq() {
                assert!(s > last, "{sid}: seq {s} after {last}");
                last = s;
            }
            assert!(e.data["session_id"] == sid.as_str() || e.event == "subscription.ready");
            if e.event == "turn.completed" {
                done += 1;
            }
            assert_ne!(e.event, "turn.failed", "{:?}", e.data);
        }
    }
    for sid in &sids {
        gw.wait_idle(sid).await;
        let stored = gw.events_since(sid, 0).await;
        let t = types(&stored);
        assert_eq!(
            t.iter().filter(|x| *x == "turn.started").count(),
            6,
            "{sid}"
        );
        assert_eq!(
            t.iter().filter(|x| *x == "turn.completed").count(),
            6,
            "{sid}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_racing_fast_turns_never_double_land_or_wedge_the_session() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    for i in 0..25 {
        let key = format!("companion:race{i}");
        let req = if i % 2 == 0 {
            format!("/help {i}")
        } else {
            format!("echo {i}")
        };
        let (s, t) = gw.submit_keyed(&sid, &req, &key).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{t}");
        let (s, v) = if i % 3 == 0 {
            gw.post(
                &format!("/v1/sessions/{sid}/cancel-current"),
                json!({"idempotency_key": key}),
            )
            .await
        } else {
            gw.post_empty(&format!(
                "/v1/sessions/{sid}/turns/{}/cancel",
                t["turn_id"].as_str().unwrap()
            ))
            .await
        };
        assert!(
            s == StatusCode::ACCEPTED || s == StatusCode::CONFLICT,
            "{s}: {v}"
        );
        sse.collect_until("context.updated", WAIT).await;
    }
    gw.wait_idle(&sid).await;
    let stored = gw.events_since(&sid, 0).await;
    let mut per_turn: std::collections::HashMap<String, (usize, usize)> = Default::default();
    for e in &stored {
        let tid = e["turn_id"].as_str().unwrap_or("").to_string();
        let ty = e["type"].as_str().unwrap();
        if ty == "turn.started" {
            per_turn.entry(tid).or_default().0 += 1;
        } else if TERMINALS.contains(&ty) {
            per_turn.entry(tid).or_default().1 += 1;
        }
    }
    assert_eq!(per_turn.len(), 25);
    assert!(per_turn.values().all(|v| *v == (1, 1)), "{per_turn:?}");
    // and the session still works
    gw.submit(&sid, "/help").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().event, "turn.completed");
}
