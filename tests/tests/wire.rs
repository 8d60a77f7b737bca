//! Wire conventions (docs/decisions.md, wire rules) across the answers of a real session: snake_case keys, JSON content
//! type, epoch-ms numbers, `null`s emitted.

mod common;

use common::*;
use reqwest::Method;
use serde_json::Value;

/// Keys whose children are data, not schema (ids, header-like maps).
const DATA_MAPS: &[&str] = &[
    "per_session",
    "values",
    "errors",
    "input",
    "arguments",
    "headers",
];

fn check_keys(v: &Value, path: &str, bad: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let ok = k
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                    || k.contains('/');
                if !ok {
                    bad.push(format!("{path}.{k}"));
                }
                if !DATA_MAPS.contains(&k.as_str()) {
                    check_keys(child, &format!("{path}.{k}"), bad);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                check_keys(x, &format!("{path}[{i}]"), bad);
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_key_in_every_answer_is_snake_case() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Reasoning {
        reasoning: vec!["Hmm. ".into()],
        text: vec!["Fine.".into()],
    });
    llm.push(Script::tool_call(
        "apropos",
        serde_json::json!({"pattern": "x"}),
    ));
    llm.push(Script::text(&["Done."]));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (_, t1) = gw.submit(&sid, "first").await;
    sse.collect_until("context.updated", WAIT).await;
    gw.submit(&sid, "second").await;
    sse.collect_until("context.updated", WAIT).await;
    gw.submit(&sid, "/help").await;
    sse.collect_until("context.updated", WAIT).await;
    let tid = t1["turn_id"].as_str().unwrap();
    let paths = [
        "/healthz".to_string(),
        "/readyz".to_string(),
        "/v1/capabilities".to_string(),
        "/v1/admin/status".to_string(),
        "/v1/sessions".to_string(),
        "/v1/sessions?limit=1".to_string(),
        format!("/v1/sessions/{sid}?include=queued"),
        format!("/v1/sessions/{sid}/transcript"),
        format!("/v1/sessions/{sid}/turns"),
        format!("/v1/sessions/{sid}/turns/{tid}"),
        format!("/v1/sessions/{sid}/turns/{tid}/attachments"),
        format!("/v1/sessions/{sid}/events-since"),
        format!("/v1/sessions/{sid}/seq"),
        format!("/v1/sessions/{sid}/slashes"),
        format!("/v1/sessions/{sid}/human-input"),
        format!("/v1/sessions/{sid}/human-input/live"),
        format!("/v1/sessions/{sid}/model"),
        format!("/v1/sessions/{sid}/egress"),
        format!("/v1/sessions/{sid}/artifacts"),
        "/v1/extensions".to_string(),
        "/v1/router".to_string(),
        "/v1/settings".to_string(),
        "/v1/devices".to_string(),
        "/v1/fs".to_string(),
        "/nope".to_string(),
    ];
    let mut bad = Vec::new();
    for p in &paths {
        let r = gw.req(Method::GET, p).send().await.unwrap();
        let ct = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        assert!(ct.starts_with("application/json"), "{p}: {ct}");
        let v: Value = r.json().await.unwrap();
        check_keys(&v, p, &mut bad);
    }
    let r = gw
        .req(Method::GET, "/metrics")
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert!(v.is_object(), "{v}");
    check_keys(&v, "/metrics", &mut bad);
    let evs = sse.drain_for(std::time::Duration::from_millis(100)).await;
    let _ = evs;
    let mut replay = gw.events(&sid, 0).await;
    for e in replay
        .drain_for(std::time::Duration::from_millis(500))
        .await
    {
        check_keys(&e.data, &format!("event {}", e.event), &mut bad);
    }
    assert!(bad.is_empty(), "not snake_case: {bad:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soul_and_turn_records_carry_their_documented_fields() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (_, t) = gw.submit(&sid, "/help").await;
    sse.collect_until("context.updated", WAIT).await;
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    for k in [
        "id",
        "channel",
        "title",
        "external_id",
        "owner_id",
        "model",
        "created_at",
        "last_active_at",
        "turn_count",
        "project_id",
        "project_name",
        "project_position",
        "favorite_rank",
        "status",
        "live",
        "is_awaiting_input",
        "current_turn_id",
        "server_time_ms",
    ] {
        assert!(soul.get(k).is_some(), "Soul lacks {k}: {soul}");
    }
    assert!(
        soul["created_at"].as_i64().unwrap() > 1_600_000_000_000,
        "epoch ms"
    );
    let tid = t["turn_id"].as_str().unwrap();
    let (_, rec) = gw.get(format!("/v1/sessions/{sid}/turns/{tid}")).await;
    for k in [
        "id",
        "turn_id",
        "session_id",
        "role",
        "status",
        "request",
        "created_at",
        "content",
        "started_at",
        "completed_at",
        "duration_ms",
        "iteration_count",
        "error",
    ] {
        assert!(rec.get(k).is_some(), "TurnRecord lacks {k}: {rec}");
    }
    assert_eq!(rec["role"], "assistant");
    let (_, list) = gw.get("/v1/sessions").await;
    for k in [
        "sessions",
        "awaiting",
        "root",
        "total",
        "limit",
        "after",
        "next_cursor",
        "has_more",
    ] {
        assert!(list.get(k).is_some(), "list lacks {k}: {list}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_transcript_row_carries_the_documented_fields() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::text(&["An answer."]));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (_, t) = gw.submit(&sid, "question").await;
    sse.collect_until("context.updated", WAIT).await;
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    let row = &tr["turns"][0];
    let mut missing = Vec::new();
    for k in [
        "id",
        "user_request",
        "status",
        "content",
        "iterations",
        "created_at",
        "duration_ms",
        "iteration_count",
        "input_tokens",
        "input_regular_tokens",
        "input_cache_write_tokens",
        "input_cache_read_tokens",
        "output_tokens",
        "output_reasoning_tokens",
        "total_cost",
        "model",
        "provider",
    ] {
        if row.get(k).is_none() {
            missing.push(k);
        }
    }
    assert!(missing.is_empty(), "missing {missing:?}: {row}");
    assert_eq!(row["status"], "success");
    assert_eq!(row["user_request"], "question");
    assert!(row["input_tokens"].as_u64().unwrap() > 0, "{row}");
    assert!(row["output_tokens"].as_u64().unwrap() > 0, "{row}");
    let it = &row["iterations"][0];
    for k in [
        "id",
        "position",
        "thinking",
        "assistant_prose",
        "answer",
        "code",
        "forms",
        "duration_ms",
        "cost_usd",
        "error",
        "llm_selected",
        "llm_actual",
        "is_llm_fallback",
        "llm_routing_trace",
    ] {
        assert!(it.get(k).is_some(), "iteration lacks {k}: {it}");
    }
    // the TurnRecord after the terminal
    let tid = t["turn_id"].as_str().unwrap();
    let (_, rec) = gw.get(format!("/v1/sessions/{sid}/turns/{tid}")).await;
    for k in [
        "engine_turn_id",
        "provider",
        "tokens",
        "cost",
        "iteration_count",
        "duration_ms",
        "utilization",
        "error",
        "completed_at",
        "is_needs_input",
    ] {
        assert!(rec.get(k).is_some(), "TurnRecord lacks {k}: {rec}");
    }
    assert_eq!(rec["engine_turn_id"], row["id"]);
    assert_eq!(rec["provider"], "openai");
}
