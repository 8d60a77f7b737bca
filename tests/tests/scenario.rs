//! The Companion's first-session scenario, steps 1–12, 14 and 17, against the real binary.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::json;
use std::time::{Duration, Instant};

fn slow(chunks: usize, delay_ms: u64) -> Script {
    Script::Slow {
        chunks: (0..chunks).map(|i| format!("part {i}. ")).collect(),
        delay_ms,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_session_scenario_pairs_lists_opens_sends_and_settles() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::text(&["Hello ", "there. ", "How can I help?"]));
    let gw = Gateway::start(Opts::openai(&llm)).await;

    // 1. healthz
    let (s, h) = gw.get("/healthz").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h["status"], "ok");
    assert_eq!(h["protocol"]["protocol"], 2);
    // 2. capabilities
    let (s, caps) = gw.get("/v1/capabilities").await;
    assert_eq!(s, StatusCode::OK, "{caps}");
    assert_eq!(caps["protocol"]["protocol"], 2);
    assert_eq!(caps["compatibility"]["is_compatible"], true);
    assert!(caps["addresses"].is_array());
    // 4. sessions list with ETag / 304
    let r = gw
        .req(reqwest::Method::GET, "/v1/sessions?limit=100")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    assert!(etag.starts_with("W/\""), "{etag}");
    let list: serde_json::Value = r.json().await.unwrap();
    assert!(
        list["sessions"].is_array() && list["awaiting"].is_array(),
        "{list}"
    );
    let r = gw
        .req(reqwest::Method::GET, "/v1/sessions?limit=100")
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
    assert!(r.bytes().await.unwrap().is_empty());

    // 5. create
    let (s, created) = gw.post("/v1/sessions", json!({"channel": "web"})).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    let mut keys: Vec<_> = created.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["channel", "external_id", "id", "title", "workspace_id"],
        "{created}"
    );
    assert_eq!(created["channel"], "web");
    let sid = created["id"].as_str().unwrap().to_string();

    // 6. open in parallel
    let p = |s: &str| format!("/v1/sessions/{sid}{s}");
    let (a, b, c, d, e, f) = tokio::join!(
        gw.get(p("?include=queued")),
        gw.get(p("/transcript?limit=24")),
        gw.get(p("/slashes")),
        gw.get(p("/human-input")),
        gw.get(p("/human-input/live")),
        gw.get("/v1/capabilities"),
    );
    for (s, v) in [&a, &b, &c, &d, &e, &f] {
        assert_eq!(*s, StatusCode::OK, "{v}");
    }
    assert_eq!(a.1["id"], sid.as_str());
    assert_eq!(a.1["queued_turns"], json!([]), "{}", a.1);
    assert_eq!(
        b.1,
        json!({"turns": [], "total": 0, "offset": 0, "has_more": false})
    );
    assert!(c.1["commands"].as_array().is_some_and(|c| !c.is_empty()));
    assert_eq!(d.1, json!({"requests": []}));
    assert_eq!(e.1, json!({"views": []}));

    // 7. subscribe live-only
    let mut sse = gw.events_multi(&format!("{sid}:-1")).await;
    let ready = sse.next_event(WAIT).await.expect("subscription.ready");
    assert_eq!(ready.event, "subscription.ready");
    assert_eq!(ready.id.as_deref(), Some(""));
    assert_eq!(ready.data["is_live"], false);
    assert!(ready.data["current_turn_id"].is_null());
    assert_eq!(ready.data["session_id"], sid.as_str());
    assert!(ready.data["cursor"].is_i64());

    // 8. submit
    let key = format!("companion:{}", uuid::Uuid::new_v4());
    let (s, rec) = gw.submit_keyed(&sid, "hi", &key).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{rec}");
    assert_eq!(rec["status"], "streaming");
    assert_eq!(rec["session_id"], sid.as_str());
    let tid = rec["turn_id"].as_str().unwrap().to_string();
    assert_eq!(rec["id"], tid.as_str());

    // 9. stream until the terminal and context.updated
    let mut evs = sse.collect_until("turn.completed", WAIT).await;
    evs.extend(sse.collect_until("context.updated", WAIT).await);
    let t = ev_types(&evs);
    assert_eq!(t[0], "turn.started", "{t:?}");
    assert_eq!(evs[0].data["turn_id"], tid.as_str());
    assert_eq!(evs[0].data["idempotency_key"], key.as_str());
    assert!(t.contains(&"content.block.delta"), "{t:?}");
    assert!(!t.contains(&"turn.delta"), "{t:?}");
    let done = evs.iter().find(|e| e.event == "turn.completed").unwrap();
    assert_eq!(done.data["status"], "completed");
    assert_eq!(done.data["idempotency_key"], key.as_str());
    let content = done.data["content"].as_array().unwrap();
    assert!(content.iter().all(|b| b["type"] == "prose"), "{content:?}");
    let md: String = content
        .iter()
        .map(|b| b["markdown"].as_str().unwrap_or(""))
        .collect();
    assert!(md.contains("How can I help?"), "{md}");
    // seq strictly increasing, ids match data.seq
    let mut last = 0;
    for e in evs.iter().filter(|e| e.seq().is_some()) {
        let s = e.seq().unwrap();
        assert!(s > last, "{t:?}");
        assert_eq!(e.data["seq"], s);
        last = s;
    }
    // cumulative on deltas
    for d in evs.iter().filter(|e| e.event == "content.block.delta") {
        assert!(d.data["cumulative"].is_string(), "{:?}", d.data);
    }

    // 10. settle: transcript row success
    let deadline = Instant::now() + WAIT;
    loop {
        let (s, tr) = gw.get(&p("/transcript?limit=4")).await;
        assert_eq!(s, StatusCode::OK);
        let row = &tr["turns"][0];
        if row["status"] == "success" {
            assert!(row["content"].is_array(), "{row}");
            assert_eq!(tr["total"], 1);
            break;
        }
        assert!(Instant::now() < deadline, "never settled: {tr}");
        tokio::time::sleep(Duration::from_millis(70)).await;
    }
    let (s, soul) = gw.get(&p("")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(soul["live"], false);
    assert_eq!(soul["turn_count"], 1);
    // the session is listed now
    let (_, list) = gw.get("/v1/sessions?limit=100").await;
    assert!(
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == sid.as_str()),
        "{list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_while_busy_queues_and_a_cancel_sweeps_the_earlier_queue() {
    let llm = FixtureLlm::start().await;
    llm.push(slow(200, 50));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events_multi(&format!("{sid}:-1")).await;
    sse.collect_until("subscription.ready", WAIT).await;

    let (s, first) = gw.submit(&sid, "long one").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let started = sse.collect_until("turn.started", WAIT).await;
    let tid = started.last().unwrap().data["turn_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(first["turn_id"], tid.as_str());

    // 11. send while busy
    let (s, q) = gw.submit(&sid, "second").await;
    assert_eq!(s, StatusCode::ACCEPTED, "{q}");
    assert_eq!(q["status"], "queued");
    let qtid = q["turn_id"].as_str().unwrap().to_string();
    let evs = sse.collect_until("turn.queued", WAIT).await;
    let queued = evs.last().unwrap();
    assert_eq!(queued.data["turn_id"], qtid.as_str());
    assert_eq!(queued.data["request"], "second");
    let (s, l) = gw
        .get(&format!("/v1/sessions/{sid}/turns?status=queued"))
        .await;
    assert_eq!(s, StatusCode::OK);
    let ids: Vec<_> = l["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["turn_id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(qtid)], "{l}");
    let (_, soul) = gw.get(&format!("/v1/sessions/{sid}?include=queued")).await;
    assert_eq!(soul["queued_turns"][0]["turn_id"], qtid.as_str(), "{soul}");
    assert_eq!(soul["live"], true);
    assert_eq!(soul["current_turn_id"], tid.as_str());

    // 12. cancel
    let (s, c) = gw
        .post_empty(&format!("/v1/sessions/{sid}/turns/{tid}/cancel"))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{c}");
    assert_eq!(c, json!({"status": "cancelling"}));
    let evs = sse
        .collect_until_any(&["turn.queued.deleted", "queue.paused"], WAIT)
        .await;
    assert_eq!(
        evs.last().unwrap().event,
        "turn.queued.deleted",
        "{:?}",
        evs.iter().map(|e| &e.data).collect::<Vec<_>>()
    );
    let t: Vec<&str> = ev_types(&evs)
        .into_iter()
        .filter(|t| {
            matches!(
                *t,
                "turn.cancelled" | "context.updated" | "turn.queued.deleted"
            )
        })
        .collect();
    assert_eq!(
        t,
        ["turn.cancelled", "context.updated", "turn.queued.deleted"]
    );
    let del = evs.last().unwrap();
    assert_eq!(del.data["turn_id"], qtid.as_str());
    assert_eq!(del.data["reason"], "cancelled");
    assert_eq!(del.data["request"], "second");
    let cancelled = evs.iter().find(|e| e.event == "turn.cancelled").unwrap();
    assert_eq!(cancelled.data["status"], "cancelled");
    // the swept turn never starts
    let more = sse.drain_for(Duration::from_millis(500)).await;
    assert!(
        !ev_types(&more).contains(&"turn.started"),
        "{:?}",
        ev_types(&more)
    );
    let (_, l) = gw
        .get(&format!("/v1/sessions/{sid}/turns?status=queued"))
        .await;
    assert_eq!(l["turns"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_queued_after_a_cancel_drains_normally() {
    let llm = FixtureLlm::start().await;
    llm.push(slow(200, 50));
    llm.push(Script::text(&["after."]));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    sse.collect_until("subscription.ready", WAIT).await;
    gw.submit(&sid, "long").await;
    let evs = sse.collect_until("turn.started", WAIT).await;
    let tid = evs.last().unwrap().data["turn_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Cancel only once the provider stream is running, so the cancelled turn is the one
    // that consumed the slow script.
    sse.collect_until("content.block.delta", WAIT).await;
    let key = format!("companion:{}", uuid::Uuid::new_v4());
    let (s, _) = gw.submit_keyed(&sid, "before cancel", &key).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    // cancel, then queue another before the terminal can land is racy; instead queue after
    // the 202 and accept either order as long as the post-cancel turn runs.
    let (s, _) = gw
        .post_empty(&format!("/v1/sessions/{sid}/turns/{tid}/cancel"))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (_, after) = gw.submit(&sid, "run this").await;
    let after_tid = after["turn_id"].as_str().unwrap().to_string();
    let evs = sse.collect_until("turn.completed", WAIT).await;
    let started: Vec<_> = evs
        .iter()
        .filter(|e| e.event == "turn.started")
        .map(|e| e.data["turn_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(started, vec![after_tid.clone()], "{:?}", ev_types(&evs));
    let done = evs.last().unwrap();
    assert_eq!(done.data["turn_id"], after_tid.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_with_a_backlog_pauses_the_queue_until_resume() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Slow {
        chunks: vec!["a".into(); 40],
        delay_ms: 25,
    });
    llm.push(Script::error(400, "bad things"));
    // keep the first part streaming long enough to queue behind it: use a Slow then an error
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    sse.collect_until("subscription.ready", WAIT).await;

    gw.submit(&sid, "first ok").await; // consumes the Slow script
    sse.collect_until("turn.started", WAIT).await;
    let (_, failing) = gw.submit(&sid, "will fail").await;
    assert_eq!(failing["status"], "queued");
    let (_, held) = gw.submit(&sid, "held").await;
    let held_tid = held["turn_id"].as_str().unwrap().to_string();
    // first completes, second starts (drained) and fails with the 400, third is held.
    let evs = sse
        .collect_until("queue.paused", Duration::from_secs(15))
        .await;
    let t = ev_types(&evs);
    assert!(t.contains(&"turn.failed"), "{t:?}");
    let failed = evs.iter().find(|e| e.event == "turn.failed").unwrap();
    assert_eq!(failed.data["turn_id"], failing["turn_id"]);
    let err_block = failed.data["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "error")
        .cloned()
        .expect("error block");
    assert!(err_block["code"].is_string(), "{err_block}");
    let paused = evs.last().unwrap();
    assert_eq!(paused.data["reason"], "turn_failed");
    assert_eq!(paused.data["held"], 1);
    // nothing auto-starts
    let more = sse.drain_for(Duration::from_millis(400)).await;
    assert!(!ev_types(&more).contains(&"turn.started"));
    // 14. resume
    let (s, r) = gw
        .post_empty(&format!("/v1/sessions/{sid}/resume-queue"))
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["turn"]["turn_id"], held_tid.as_str(), "{r}");
    let evs = sse.collect_until("turn.completed", WAIT).await;
    let resumed = evs
        .iter()
        .find(|e| e.event == "queue.resumed")
        .expect("queue.resumed");
    assert_eq!(resumed.data["is_auto"], false);
    let st = evs.iter().find(|e| e.event == "turn.started").unwrap();
    assert_eq!(st.data["turn_id"], held_tid.as_str());
    assert_eq!(st.data["is_queued"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_the_last_seq_replays_only_newer_events_then_goes_live() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events_multi(&format!("{sid}:-1")).await;
    sse.collect_until("subscription.ready", WAIT).await;
    gw.submit(&sid, "one").await;
    let first = sse.collect_until("context.updated", WAIT).await;
    let last_seq = first.iter().filter_map(|e| e.seq()).max().unwrap();
    drop(sse);
    // events while disconnected
    gw.submit(&sid, "two").await;
    let stored = gw.wait_stored(&sid, "turn.completed").await;
    let _ = stored;
    gw.wait_idle(&sid).await;
    // 17. reconnect
    let mut sse = gw.events_multi(&format!("{sid}:{last_seq}")).await;
    let ready = sse.next_event(WAIT).await.unwrap();
    assert_eq!(ready.event, "subscription.ready");
    assert_eq!(ready.data["cursor"], last_seq);
    let evs = sse.collect_until("context.updated", WAIT).await;
    assert_eq!(evs[0].event, "turn.started", "{:?}", ev_types(&evs));
    assert_eq!(evs[0].data["request"], "two");
    assert!(evs.iter().all(|e| e.seq().unwrap() > last_seq));
    // then live
    gw.submit(&sid, "three").await;
    let live = sse.collect_until("turn.completed", WAIT).await;
    let st = live.iter().find(|e| e.event == "turn.started").unwrap();
    assert_eq!(st.data["request"], "three");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_routes_the_companion_calls_on_open_answer_their_shapes() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let (s, v) = gw.get("/v1/router").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["providers"].is_array());
    let (s, v) = gw.get("/v1/devices").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["devices"], json!([]));
    assert_eq!(v["push"]["is_available"], false);
    for id in ["reasoning_level", "verbosity", "codex_fast_mode"] {
        let (s, v) = gw.get(format!("/v1/settings/{id}")).await;
        assert_eq!(s, StatusCode::OK, "{id}: {v}");
        assert_eq!(v["id"], id);
        assert!(v["label"].is_string() && v["type"].is_string(), "{v}");
    }
    let (s, v) = gw.get(format!("/v1/sessions/{sid}/artifacts")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v, json!({"artifacts": []}));
    let (s, v) = gw.get(format!("/v1/sessions/{sid}/model")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v, json!({"model": null}));
    let (s, v) = gw.get(format!("/v1/sessions/{sid}/egress")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["decisions"], json!([]));
    assert_eq!(v["has_more"], false);
    let (s, v) = gw.get("/v1/extensions").await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        v["extensions"].is_array() && v["failures"].is_array(),
        "{v}"
    );
    let root = gw.dirs.root();
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(root.join(".hidden")).unwrap();
    std::fs::write(root.join("file.txt"), "x").unwrap();
    let (s, v) = gw.get(format!("/v1/fs?path={}", root.display())).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let names: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sub"], "directories only, no dot-folders: {v}");
    assert_eq!(v["entries"][0]["entry_count"], 1);
    for k in ["path", "parent", "home", "is_truncated"] {
        assert!(v.get(k).is_some(), "{k}: {v}");
    }
}
