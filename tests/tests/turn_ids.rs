//! One turn id on every surface the app matches turns by (the answer of `POST …/turns`, the
//! SSE events, the transcript, `/forks`), and forks the app can tell apart.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_has_one_id_in_the_submit_answer_the_stream_the_transcript_and_forks() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    llm.push(Script::text(&["hello"]));
    let mut sse = gw.events(&sid, -1).await;
    let (s, v) = gw.submit(&sid, "hi").await;
    assert!(s.is_success(), "{v}");
    let tid = v["turn_id"].as_str().expect("turn_id").to_string();
    let evs = sse
        .collect_until("turn.completed", std::time::Duration::from_secs(15))
        .await;
    for e in evs.iter().filter(|e| e.event.starts_with("turn.")) {
        assert_eq!(e.data["turn_id"], tid.as_str(), "{}: {}", e.event, e.data);
    }
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(tr["turns"][0]["id"], tid.as_str(), "{tr}");
    let (_, pts) = gw.get(format!("/v1/sessions/{sid}/forks")).await;
    assert_eq!(pts["turns"][0]["turn_id"], tid.as_str(), "{pts}");
    let (s, t) = gw.get(format!("/v1/sessions/{sid}/turns/{tid}")).await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let (s, trace) = gw
        .get(format!("/v1/sessions/{sid}/turns/{tid}/trace"))
        .await;
    assert_eq!(s, StatusCode::OK, "{trace}");
    assert!(
        trace["iterations"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "the trace is found by the same id: {trace}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forks_of_one_session_get_titles_the_app_can_tell_apart() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let (s, v) = gw
        .post("/v1/sessions", json!({"title": "Parser work"}))
        .await;
    assert!(s.is_success(), "{v}");
    let sid = v["id"].as_str().unwrap().to_string();
    for i in 1..=2 {
        llm.push(Script::text(&[format!("answer {i}")]));
        gw.run_turn(&sid, &format!("question {i}")).await;
    }
    let (_, pts) = gw.get(format!("/v1/sessions/{sid}/forks")).await;
    let first = pts["turns"][0]["turn_id"].as_str().unwrap().to_string();
    let mut titles = Vec::new();
    for body in [json!({}), json!({}), json!({"through_turn_id": first})] {
        let (s, v) = gw.post(&format!("/v1/sessions/{sid}/forks"), body).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        titles.push(v["session"]["title"].as_str().unwrap().to_string());
    }
    assert!(
        titles.iter().all(|t| t.contains("Parser work")),
        "{titles:?}"
    );
    let mut unique = titles.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 3, "{titles:?}");
    assert!(
        titles[2].contains("turn 1"),
        "the cut point is named: {titles:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slash_turns_trace_holds_the_one_iteration_its_usage_counts() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (s, v) = gw.submit(&sid, "/help").await;
    assert!(s.is_success(), "{v}");
    let tid = v["turn_id"].as_str().expect("turn_id").to_string();
    sse.collect_until("turn.completed", std::time::Duration::from_secs(15))
        .await;
    let (s, trace) = gw
        .get(format!("/v1/sessions/{sid}/turns/{tid}/trace"))
        .await;
    assert_eq!(s, StatusCode::OK);
    let its = trace["iterations"].as_array().expect("iterations");
    assert_eq!(its.len(), 1, "{trace}");
    let (_, usage) = gw.get(format!("/v1/sessions/{sid}/usage")).await;
    assert_eq!(usage["usage"]["turns"][0]["iteration_count"], 1, "{usage}");
}
