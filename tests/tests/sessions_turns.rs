//! Sessions, turns, queue, cancel, slashes, no-provider.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::HashMap;

fn long_slow() -> Script {
    Script::Slow {
        chunks: (0..300).map(|i| format!("w{i}. ")).collect(),
        delay_ms: 40,
    }
}

async fn started_tid(sse: &mut Sse) -> String {
    let evs = sse.collect_until("turn.started", WAIT).await;
    evs.last().unwrap().data["turn_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_is_lean_and_absent_from_the_list_until_its_first_turn() {
    let gw = Gateway::start(Opts::default()).await;
    let (s, v) = gw
        .post(
            "/v1/sessions",
            json!({"channel": "web", "external_id": "ext-1"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(v["channel"], "web");
    assert!(v["title"].is_null());
    assert_eq!(v["external_id"], "ext-1");
    assert!(v.get("workspace_id").is_some());
    assert!(v.get("status").is_none(), "not a Soul: {v}");
    let sid = v["id"].as_str().unwrap().to_string();
    assert!(uuid::Uuid::parse_str(&sid).is_ok());
    let listed = |l: &Value| {
        l["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == sid.as_str())
    };
    let (_, l) = gw.get("/v1/sessions").await;
    assert!(!listed(&l), "{l}");
    // dirty makes it visible
    let (_, l) = gw.get(format!("/v1/sessions?dirty={sid}")).await;
    assert!(listed(&l), "{l}");
    let mut sse = gw.events(&sid, 0).await;
    let (s, _) = gw.submit(&sid, "/help").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    sse.collect_until("turn.completed", WAIT).await;
    let (_, l) = gw.get("/v1/sessions").await;
    assert!(listed(&l), "{l}");
    let row = l["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == sid.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["title"], "/help", "auto-titled: {row}");
    assert!(row["workspace"].is_object(), "{row}");
    assert!(l["total"].is_u64() && l.get("has_more").is_some(), "{l}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_list_has_a_weak_etag_304_and_a_malformed_after_is_400() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, 0).await;
    gw.submit(&sid, "/help").await;
    sse.collect_until("context.updated", WAIT).await;
    let r = gw
        .req(reqwest::Method::GET, "/v1/sessions")
        .send()
        .await
        .unwrap();
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(r.headers()["cache-control"], "no-cache");
    assert!(etag.starts_with("W/\"") && etag.len() == 32 + 4, "{etag}");
    let r = gw
        .req(reqwest::Method::GET, "/v1/sessions")
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    // a change invalidates it
    gw.submit(&sid, "/help").await;
    sse.collect_until("context.updated", WAIT).await;
    let r = gw
        .req(reqwest::Method::GET, "/v1/sessions")
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    for q in [
        "after=nonsense",
        "after=1:2",
        "after=x:1:abc",
        "limit=abc",
        "limit=-1",
    ] {
        let (s, v) = gw.get(format!("/v1/sessions?{q}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {v}");
        assert_eq!(error_type(&v), "invalid-window", "{q}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_list_pages_with_next_cursor() {
    let gw = Gateway::start(Opts::default()).await;
    let mut sids = Vec::new();
    for i in 0..3 {
        let sid = gw.create_session().await;
        let mut sse = gw.events(&sid, 0).await;
        gw.submit(&sid, &format!("/help {i}")).await;
        sse.collect_until("context.updated", WAIT).await;
        sids.push(sid);
    }
    let (s, p1) = gw.get("/v1/sessions?limit=2").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(p1["sessions"].as_array().unwrap().len(), 2, "{p1}");
    assert_eq!(p1["has_more"], true);
    assert_eq!(p1["total"], 3);
    assert!(p1.get("overview").is_some(), "head page has overview");
    let cursor = p1["next_cursor"].as_str().expect("next_cursor").to_string();
    let (s, p2) = gw.get(format!("/v1/sessions?limit=2&after={cursor}")).await;
    assert_eq!(s, StatusCode::OK, "{p2}");
    assert_eq!(p2["sessions"].as_array().unwrap().len(), 1, "{p2}");
    assert_eq!(p2["has_more"], false);
    assert!(
        p2.get("overview").is_none_or(Value::is_null),
        "no overview after a cursor: {p2}"
    );
    let mut all: Vec<String> = p1["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .chain(p2["sessions"].as_array().unwrap())
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    all.sort();
    sids.sort();
    assert_eq!(all, sids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_session_is_404_session_not_found_with_its_id() {
    let gw = Gateway::start(Opts::default()).await;
    let unknown = uuid::Uuid::new_v4().to_string();
    for path in [
        format!("/v1/sessions/{unknown}"),
        format!("/v1/sessions/{unknown}/turns"),
        format!("/v1/sessions/{unknown}/human-input"),
        format!("/v1/sessions/{unknown}/human-input/live"),
        format!("/v1/sessions/{unknown}/slashes"),
        format!("/v1/sessions/{unknown}/events"),
    ] {
        let (s, v) = gw.get(&path).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {v}");
        assert_eq!(error_type(&v), "session-not-found", "{path}");
        assert_eq!(v["error"]["session_id"], unknown.as_str(), "{path}");
    }
    for path in [
        format!("/v1/sessions/{unknown}/turns"),
        format!("/v1/sessions/{unknown}/cancel-current"),
        format!("/v1/sessions/{unknown}/resume-queue"),
        format!("/v1/sessions/{unknown}/drain-queue"),
    ] {
        let (s, v) = gw.post(&path, json!({"request": "hi"})).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {v}");
        assert_eq!(error_type(&v), "session-not-found", "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_is_202_streaming_when_idle_202_queued_when_busy_and_200_on_a_repeated_key() {
    let llm = FixtureLlm::start().await;
    llm.push(long_slow());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "  "}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(error_type(&v), "invalid-request");
    assert_eq!(v["error"]["message"], "request must be a non-blank string");

    let (s, a) = gw.submit_keyed(&sid, "first", "k-1").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_eq!(a["status"], "streaming");
    assert_eq!(a["role"], "assistant");
    assert_eq!(a["request"], "first");
    assert_eq!(a["idempotency_key"], "k-1");
    assert!(a["created_at"].is_i64() && a["started_at"].is_i64(), "{a}");
    let (s, b) = gw.submit_keyed(&sid, "second", "k-2").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_eq!(b["status"], "queued");
    assert!(b["queued_at"].is_i64(), "{b}");
    let (s, a2) = gw.submit_keyed(&sid, "first again", "k-1").await;
    assert_eq!(s, StatusCode::OK, "{a2}");
    assert_eq!(a2["turn_id"], a["turn_id"]);
    let (s, b2) = gw.submit_keyed(&sid, "second again", "k-2").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b2["turn_id"], b["turn_id"]);
    assert_eq!(b2["status"], "queued");
    // still only one queued turn
    let (_, l) = gw
        .get(format!("/v1/sessions/{sid}/turns?status=queued"))
        .await;
    assert_eq!(l["turns"].as_array().unwrap().len(), 1, "{l}");
    // the same key in another session is a new turn
    let other = gw.create_session().await;
    let (s, _) = gw.submit_keyed(&other, "/help", "k-1").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    // GET one turn
    let tid = a["turn_id"].as_str().unwrap();
    let (s, g) = gw.get(format!("/v1/sessions/{sid}/turns/{tid}")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(g["turn_id"], tid);
    assert_eq!(g["status"], "streaming");
    // history lists both
    let (_, h) = gw.get(format!("/v1/sessions/{sid}/turns")).await;
    let ids: Vec<_> = h["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["turn_id"].clone())
        .collect();
    assert!(
        ids.contains(&a["turn_id"]) && ids.contains(&b["turn_id"]),
        "{h}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_and_deleting_queued_turns_and_the_not_queued_errors() {
    let llm = FixtureLlm::start().await;
    llm.push(long_slow());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (_, run) = gw.submit(&sid, "running").await;
    let rtid = run["turn_id"].as_str().unwrap().to_string();
    let (_, q) = gw.submit(&sid, "queued one").await;
    let qtid = q["turn_id"].as_str().unwrap().to_string();
    let base = format!("/v1/sessions/{sid}/turns");

    let (s, v) = gw
        .patch(&format!("{base}/{qtid}"), json!({"request": " "}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(error_type(&v), "invalid-request");
    let (s, v) = gw
        .patch(&format!("{base}/{qtid}"), json!({"request": "edited"}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["request"], "edited");
    assert_eq!(v["status"], "queued");
    let evs = sse.collect_until("turn.queued.updated", WAIT).await;
    let upd = evs.last().unwrap();
    assert_eq!(upd.data["turn_id"], qtid.as_str());
    assert_eq!(upd.data["request"], "edited");

    for (method, body) in [("PATCH", json!({"request": "x"})), ("DELETE", json!(null))] {
        let (s, v) = if method == "PATCH" {
            gw.patch(&format!("{base}/{rtid}"), body).await
        } else {
            gw.delete(&format!("{base}/{rtid}")).await
        };
        assert_eq!(s, StatusCode::CONFLICT, "{method}: {v}");
        assert_eq!(error_type(&v), "not-queued");
        assert_eq!(v["error"]["turn_id"], rtid.as_str());
        assert_eq!(v["error"]["turn_status"], "streaming");
    }
    let unknown = uuid::Uuid::new_v4().to_string();
    for (s, v) in [
        gw.patch(&format!("{base}/{unknown}"), json!({"request": "x"}))
            .await,
        gw.delete(&format!("{base}/{unknown}")).await,
        gw.get(format!("{base}/{unknown}")).await,
        gw.post_empty(&format!("{base}/{unknown}/cancel")).await,
    ] {
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
        assert_eq!(error_type(&v), "turn-not-found");
        assert_eq!(v["error"]["turn_id"], unknown.as_str());
    }
    // /cancel of a queued turn → 409 not-running
    let (s, v) = gw.post_empty(&format!("{base}/{qtid}/cancel")).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(error_type(&v), "not-running");
    assert_eq!(v["error"]["turn_status"], "queued");
    // DELETE queued
    let (s, v) = gw.delete(&format!("{base}/{qtid}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"status": "deleted"}));
    let evs = sse.collect_until("turn.queued.deleted", WAIT).await;
    assert_eq!(evs.last().unwrap().data["turn_id"], qtid.as_str());
    let (_, l) = gw.get(format!("{base}?status=queued")).await;
    assert_eq!(l["turns"], json!([]));
    let (s, _) = gw.delete(&format!("{base}/{qtid}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "a deleted queued turn is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_turns_are_not_queued_and_not_running() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, 0).await;
    let (_, t) = gw.submit(&sid, "/help").await;
    let tid = t["turn_id"].as_str().unwrap().to_string();
    sse.collect_until("context.updated", WAIT).await;
    let base = format!("/v1/sessions/{sid}/turns/{tid}");
    let (s, v) = gw.post_empty(&format!("{base}/cancel")).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(error_type(&v), "not-running");
    assert_eq!(v["error"]["turn_status"], "completed");
    let (s, v) = gw.delete(&base).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(error_type(&v), "not-queued");
    assert_eq!(v["error"]["turn_status"], "completed");
    let (s, v) = gw.get(&base).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["status"], "completed");
    assert!(v["completed_at"].is_i64(), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_current_checks_the_owner_key() {
    let llm = FixtureLlm::start().await;
    llm.push(long_slow());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let path = format!("/v1/sessions/{sid}/cancel-current");
    let (s, v) = gw.post(&path, json!({"idempotency_key": "x"})).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(error_type(&v), "no-running-turn");
    let mut sse = gw.events(&sid, -1).await;
    let (_, t) = gw.submit_keyed(&sid, "run", "companion:owner").await;
    let tid = t["turn_id"].as_str().unwrap().to_string();
    sse.collect_until("turn.started", WAIT).await;
    for body in [
        json!({"idempotency_key": "companion:other"}),
        json!({}),
        json!(null),
    ] {
        let (s, v) = gw.post(&path, body.clone()).await;
        assert_eq!(s, StatusCode::CONFLICT, "{body}: {v}");
        assert_eq!(error_type(&v), "not-owner");
        assert_eq!(v["error"]["turn_id"], tid.as_str());
    }
    let (s, v) = gw
        .post(&path, json!({"idempotency_key": "companion:owner"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v, json!({"status": "cancelling", "turn_id": tid}));
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().data["turn_id"], tid.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_cancel_lands_turn_cancelled_with_a_notice_block() {
    let llm = FixtureLlm::start().await;
    for _ in 0..5 {
        llm.push(long_slow());
    }
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    // several rounds: each must be turn.cancelled, never turn.failed
    for i in 0..5 {
        gw.submit(&sid, &format!("run {i}")).await;
        let tid = started_tid(&mut sse).await;
        if i % 2 == 1 {
            sse.collect_until("content.block.delta", WAIT).await;
        }
        let (s, _) = gw
            .post_empty(&format!("/v1/sessions/{sid}/turns/{tid}/cancel"))
            .await;
        assert_eq!(s, StatusCode::ACCEPTED);
        let evs = sse.collect_until_any(TERMINALS, WAIT).await;
        let term = evs.last().unwrap();
        assert_eq!(term.event, "turn.cancelled", "round {i}: {:?}", term.data);
        assert!(
            !ev_types(&evs).contains(&"iteration.error"),
            "a user cancel is not a provider error: {:?}",
            ev_types(&evs)
        );
        assert_eq!(term.data["status"], "cancelled");
        sse.collect_until("context.updated", WAIT).await;
        let (_, rec) = gw.get(format!("/v1/sessions/{sid}/turns/{tid}")).await;
        assert_eq!(rec["status"], "cancelled");
        assert!(
            rec["content"]
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b["type"] == "notice" && b["code"] == "turn_cancelled"),
            "{rec}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_and_drain_answer_turn_null_when_not_paused_or_busy() {
    let llm = FixtureLlm::start().await;
    llm.push(long_slow());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    for r in ["resume-queue", "drain-queue"] {
        let (s, v) = gw.post_empty(&format!("/v1/sessions/{sid}/{r}")).await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(v, json!({"turn": null}), "{r}");
    }
    gw.submit(&sid, "busy").await;
    gw.submit(&sid, "queued").await;
    for r in ["resume-queue", "drain-queue"] {
        let (s, v) = gw.post_empty(&format!("/v1/sessions/{sid}/{r}")).await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(v, json!({"turn": null}), "{r} while busy");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_help_and_extensions_complete_with_chunk_slash_and_no_provider_call() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    for cmd in ["/help", "/extensions"] {
        gw.submit(&sid, cmd).await;
        let mut evs = sse.collect_until("turn.completed", WAIT).await;
        evs.extend(sse.collect_until("context.updated", WAIT).await);
        let t: Vec<&str> = ev_types(&evs)
            .into_iter()
            .filter(|t| !t.starts_with("session.") && *t != "subscription.ready")
            .collect();
        assert_eq!(
            t,
            [
                "turn.started",
                "chunk.slash",
                "turn.completed",
                "context.updated"
            ],
            "{cmd}"
        );
        let done = &evs
            .iter()
            .find(|e| e.event == "turn.completed")
            .unwrap()
            .data;
        let content = done["content"].as_array().unwrap();
        assert_eq!(content.len(), 1, "{done}");
        assert_eq!(content[0]["type"], "prose");
        assert!(!content[0]["markdown"].as_str().unwrap().is_empty());
    }
    assert_eq!(llm.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_provider_slashes_work_and_a_model_turn_fails_with_no_provider() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/extensions").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().event, "turn.completed");
    assert!(ev_types(&evs).contains(&"chunk.slash"));
    gw.submit(&sid, "hello model").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    let failed = evs.last().unwrap();
    assert_eq!(failed.event, "turn.failed", "{:?}", ev_types(&evs));
    assert_eq!(failed.data["status"], "failed");
    let block = failed.data["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "error")
        .cloned()
        .expect("error block");
    assert_eq!(block["code"], "no_provider", "{block}");
    assert!(block["message"].as_str().unwrap().len() > 10);
    assert!(block["id"].is_string());
    sse.collect_until("context.updated", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_turn_started_gets_exactly_one_terminal_then_context_updated() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::text(&["ok."]));
    llm.push(Script::error(400, "boom"));
    llm.push(long_slow());
    llm.push(Script::text(&["fine."]));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "a").await;
    sse.collect_until("context.updated", WAIT).await;
    gw.submit(&sid, "b").await;
    sse.collect_until("context.updated", WAIT).await;
    gw.submit(&sid, "/help").await;
    sse.collect_until("context.updated", WAIT).await;
    gw.submit(&sid, "c").await;
    let tid = started_tid(&mut sse).await;
    // cancel only once the provider stream is consumed (the next script is for "d")
    sse.collect_until("content.block.delta", WAIT).await;
    gw.post_empty(&format!("/v1/sessions/{sid}/turns/{tid}/cancel"))
        .await;
    sse.collect_until("context.updated", WAIT).await;
    gw.submit(&sid, "d").await;
    sse.collect_until("context.updated", WAIT).await;
    gw.wait_idle(&sid).await;

    let stored = gw.events_since(&sid, 0).await;
    let mut starts = 0;
    let mut terms: HashMap<String, usize> = HashMap::new();
    for (i, e) in stored.iter().enumerate() {
        let ty = e["type"].as_str().unwrap();
        let tid = e["turn_id"].as_str().unwrap_or("").to_string();
        if ty == "turn.started" {
            starts += 1;
            terms.entry(tid).or_default();
        } else if TERMINALS.contains(&ty) {
            *terms.entry(tid.clone()).or_default() += 1;
            let next = stored[i + 1..]
                .iter()
                .find(|n| n["turn_id"] == tid.as_str() && n["type"] != "content.block.completed")
                .map(|n| n["type"].clone());
            assert_eq!(next, Some(json!("context.updated")), "after {ty}");
        }
    }
    assert_eq!(starts, 5, "{:?}", types(&stored));
    assert_eq!(terms.len(), 5);
    assert!(terms.values().all(|n| *n == 1), "{terms:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transcript_pages_from_the_returned_offset() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    for i in 0..5 {
        gw.submit(&sid, &format!("/help {i}")).await;
        sse.collect_until("context.updated", WAIT).await;
    }
    let (s, all) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(all["total"], 5);
    assert_eq!(all["offset"], 0);
    assert_eq!(all["has_more"], false);
    assert_eq!(all["turns"].as_array().unwrap().len(), 5);
    let row = &all["turns"][0];
    for k in [
        "id",
        "user_request",
        "status",
        "content",
        "iterations",
        "created_at",
    ] {
        assert!(row.get(k).is_some(), "{k}: {row}");
    }
    assert_eq!(row["user_request"], "/help 0", "oldest first");
    let (_, p) = gw
        .get(format!("/v1/sessions/{sid}/transcript?limit=2"))
        .await;
    assert_eq!(p["offset"], 3, "{p}");
    assert_eq!(p["has_more"], true);
    assert_eq!(p["turns"][0]["user_request"], "/help 3");
    let (_, p) = gw
        .get(format!("/v1/sessions/{sid}/transcript?limit=2&offset=1"))
        .await;
    assert_eq!(p["offset"], 1);
    assert_eq!(p["has_more"], true);
    assert_eq!(p["turns"][1]["user_request"], "/help 2");
    let (_, p) = gw
        .get(format!("/v1/sessions/{sid}/transcript?limit=2&offset=0"))
        .await;
    assert_eq!(p["has_more"], false);
    // the slash iteration carries the user-slash form
    let forms = &all["turns"][0]["iterations"][0]["forms"];
    assert_eq!(forms[0]["tag"], "user-slash", "{}", all["turns"][0]);
    assert_eq!(all["turns"][0]["status"], "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_records_strip_inline_attachments_and_the_attachments_route_returns_them() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let (s, rec) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "look", "attachments": [{"filename": "a.png", "media_type": "image/png", "base64": png}]}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{rec}");
    assert!(!rec.to_string().contains(png), "{rec}");
    let evs = sse.collect_until("turn.started", WAIT).await;
    let st = &evs.last().unwrap().data;
    assert_eq!(st["attachments"][0]["base64"], png, "{st}");
    let tid = rec["turn_id"].as_str().unwrap();
    let (s, a) = gw
        .get(format!("/v1/sessions/{sid}/turns/{tid}/attachments"))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(a["attachments"][0]["base64"], png, "{a}");
    assert_eq!(a["attachments"][0]["filename"], "a.png");
    sse.collect_until_any(TERMINALS, WAIT).await;
    let (_, h) = gw.get(format!("/v1/sessions/{sid}/turns")).await;
    assert!(!h.to_string().contains(png));
    // too many attachments are refused
    let many: Vec<Value> = (0..9)
        .map(|i| json!({"filename": format!("{i}.png"), "media_type": "image/png", "base64": png}))
        .collect();
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "x", "attachments": many}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(error_type(&v), "invalid-attachment");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_answers_204_for_any_id_and_delete_of_an_unknown_id_is_a_404() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let unknown = uuid::Uuid::new_v4().to_string();
    for id in [&unknown, &sid] {
        let (s, _) = gw.post_empty(&format!("/v1/sessions/{id}/release")).await;
        assert_eq!(s, StatusCode::NO_CONTENT);
    }
    let (s, v) = gw.delete(&format!("/v1/sessions/{unknown}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(error_type(&v), "session-not-found");
    let (s, v) = gw.delete(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    assert!(v.is_null());
    let (s, v) = gw.delete(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "deleted already: {v}");
    let (s, v) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "deleted: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slash_palette_lists_builtins_and_client_native_commands() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let (s, v) = gw.get(format!("/v1/sessions/{sid}/slashes")).await;
    assert_eq!(s, StatusCode::OK);
    let names: Vec<&str> = v["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert!(c["doc"].is_string());
            c["name"].as_str().unwrap()
        })
        .collect();
    for n in [
        "/help",
        "/new-session",
        "/sessions",
        "/clear",
        "/extensions",
        "/reload",
    ] {
        assert!(names.contains(&n), "{n}: {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soul_reports_running_state_and_the_running_turn() {
    let llm = FixtureLlm::start().await;
    llm.push(long_slow());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let (_, idle) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(idle["status"], "idle");
    assert_eq!(idle["live"], false);
    assert_eq!(idle["is_awaiting_input"], false);
    assert!(idle["current_turn_id"].is_null());
    assert!(idle["server_time_ms"].is_i64());
    let (_, t) = gw.submit(&sid, "please run").await;
    let (_, busy) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(busy["status"], "running", "{busy}");
    assert_eq!(busy["live"], true);
    assert_eq!(busy["current_turn_id"], t["turn_id"]);
    assert_eq!(busy["running_request"], "please run", "{busy}");
    assert_eq!(busy["first_request"], "please run");
    assert_eq!(busy["turn_count"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_page_stops_after_the_row_that_crosses_the_byte_cap() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let big = "q".repeat(800 * 1024);
    for i in 0..3 {
        gw.submit(&sid, &format!("/help {i} {big}")).await;
        sse.collect_until("context.updated", WAIT).await;
    }
    let (s, p) = gw
        .get(format!("/v1/sessions/{sid}/transcript?limit=3&offset=0"))
        .await;
    assert_eq!(s, StatusCode::OK);
    let rows = p["turns"].as_array().unwrap();
    let bytes: usize = rows.iter().map(|r| r.to_string().len()).sum();
    assert!(
        rows.len() < 3,
        "{} rows, {bytes} bytes in one page",
        rows.len()
    );
    assert_eq!(p["offset"], 3 - rows.len());
    assert_eq!(p["has_more"], true);
    let last_kept = rows.last().unwrap()["user_request"].as_str().unwrap();
    assert!(last_kept.starts_with("/help 2"), "newest row is kept");
    // every row but the last fits under the cap
    let without_first: usize = rows[1..].iter().map(|r| r.to_string().len()).sum();
    assert!(without_first <= 2 * 1024 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transcript_byte_cap_follows_vis_gateway_transcript_page_max_bytes() {
    let gw =
        Gateway::start(Opts::default().env("VIS_GATEWAY_TRANSCRIPT_PAGE_MAX_BYTES", "3000")).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let pad = "p".repeat(500);
    for i in 0..6 {
        gw.submit(&sid, &format!("/help {i} {pad}")).await;
        sse.collect_until("context.updated", WAIT).await;
    }
    let (_, p) = gw
        .get(format!("/v1/sessions/{sid}/transcript?limit=6"))
        .await;
    let rows = p["turns"].as_array().unwrap();
    assert!(
        rows.len() < 6,
        "the 3000-byte cap was ignored: {} rows",
        rows.len()
    );
    assert_eq!(p["has_more"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_orders_dirty_then_most_recent_and_filters_by_root() {
    let gw = Gateway::start(Opts::default()).await;
    let other_root = gw.dirs.base.path().join("other");
    std::fs::create_dir_all(&other_root).unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        let body = if i == 2 {
            json!({"channel": "web", "root": other_root.display().to_string()})
        } else {
            json!({"channel": "web"})
        };
        let (_, v) = gw.post("/v1/sessions", body).await;
        let sid = v["id"].as_str().unwrap().to_string();
        let mut sse = gw.events(&sid, -1).await;
        gw.submit(&sid, &format!("/help {i}")).await;
        sse.collect_until("context.updated", WAIT).await;
        ids.push(sid);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let order = |l: &Value| -> Vec<String> {
        l["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, l) = gw.get("/v1/sessions").await;
    assert_eq!(
        order(&l),
        vec![ids[2].clone(), ids[1].clone(), ids[0].clone()],
        "most recent first"
    );
    let (_, l) = gw.get(format!("/v1/sessions?dirty={}", ids[0])).await;
    assert_eq!(order(&l)[0], ids[0], "dirty band before the rest");
    let root = other_root.display().to_string();
    let (s, l) = gw
        .get(format!("/v1/sessions?root={}", form_enc(&root)))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(order(&l), vec![ids[2].clone()], "{l}");
    assert_eq!(l["root"], root.as_str());
    // the overview counts projects on the head page
    let (_, l) = gw.get("/v1/sessions?limit=10").await;
    let ov = &l["overview"];
    assert_eq!(ov["session_count"], 3, "{ov}");
    assert_eq!(ov["live_count"], 0);
    assert_eq!(ov["awaiting_count"], 0);
    assert!(
        ov["projects"].as_array().is_some_and(|p| p.len() == 2),
        "{ov}"
    );
}

fn form_enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_only_reachable_through_its_own_session() {
    let llm = FixtureLlm::start().await;
    llm.push(long_slow());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let a = gw.create_session().await;
    let b = gw.create_session().await;
    let (_, run) = gw.submit_keyed(&a, "in a", "companion:a").await;
    let (_, q) = gw.submit(&a, "queued in a").await;
    let (rt, qt) = (
        run["turn_id"].as_str().unwrap().to_string(),
        q["turn_id"].as_str().unwrap().to_string(),
    );
    let bt = format!("/v1/sessions/{b}/turns");
    for (s, v) in [
        gw.get(format!("{bt}/{rt}")).await,
        gw.post_empty(&format!("{bt}/{rt}/cancel")).await,
        gw.patch(&format!("{bt}/{qt}"), json!({"request": "hijack"}))
            .await,
        gw.delete(&format!("{bt}/{qt}")).await,
    ] {
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
        assert_eq!(error_type(&v), "turn-not-found");
    }
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{b}/cancel-current"),
            json!({"idempotency_key": "companion:a"}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(error_type(&v), "no-running-turn");
    let (_, still) = gw.get(format!("/v1/sessions/{a}?include=queued")).await;
    assert_eq!(still["current_turn_id"], rt.as_str());
    assert_eq!(still["queued_turns"][0]["request"], "queued in a");
    // the same key in b is a new turn, not a replay of a's
    let (s, v) = gw.submit_keyed(&b, "/help", "companion:a").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_ne!(v["turn_id"], rt.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_a_deleted_queued_turn_can_be_submitted_again() {
    let llm = FixtureLlm::start().await;
    llm.push(long_slow());
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    gw.submit(&sid, "busy").await;
    let (_, q) = gw
        .submit_keyed(&sid, "/help queued", "companion:again")
        .await;
    let qtid = q["turn_id"].as_str().unwrap().to_string();
    let (s, _) = gw.delete(&format!("/v1/sessions/{sid}/turns/{qtid}")).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = gw
        .submit_keyed(&sid, "/help queued", "companion:again")
        .await;
    assert!(s == StatusCode::ACCEPTED, "POST /turns answered {s}: {v}");
    assert_eq!(v["status"], "queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclaimed_slash_name_runs_as_a_normal_model_turn() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/notacommand please").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().event, "turn.completed");
    assert!(!ev_types(&evs).contains(&"chunk.slash"));
    assert_eq!(llm.request_count(), 1);
    assert!(evs
        .last()
        .unwrap()
        .data
        .to_string()
        .contains("You said: /notacommand please"));
}
