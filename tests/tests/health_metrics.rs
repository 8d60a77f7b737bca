//! Status map figures, capabilities verdict, metrics series.

mod common;

use common::*;
use reqwest::Method;
use serde_json::Value;

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_report_the_callers_compatibility_and_disabled_features() {
    let gw = Gateway::start(Opts::default()).await;
    let (_, ok) = gw.get("/v1/capabilities").await;
    assert_eq!(ok["version"], 1);
    assert_eq!(ok["compatibility"]["reason"], "ok");
    assert!(ok["compatibility"]["upgrade"].is_null());
    let f = &ok["features"];
    assert_eq!(f["chat"]["enabled"], true);
    assert_eq!(f["attachments"]["transport"], "inline-base64");
    assert_eq!(f["attachments"]["max_files"], 8);
    assert_eq!(f["attachments"]["max_file_bytes"], 26_214_400);
    assert_eq!(f["voice"]["enabled"], false);
    assert_eq!(f["speech"]["is_enabled"], false);
    assert_eq!(f["push"]["is_available"], false);
    let (_, none) = into_json(
        gw.raw(Method::GET, "/v1/capabilities")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(none["compatibility"]["reason"], "unknown");
    assert_eq!(none["compatibility"]["is_compatible"], false);
    let (_, old) = into_json(
        gw.raw(Method::GET, "/v1/capabilities")
            .header("X-Vis-Protocol", "1")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(old["compatibility"]["reason"], "client-too-old");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_turns_failures_and_running_state() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::text(&["ok."]));
    llm.push(Script::error(400, "bad"));
    llm.push(Script::Stall {
        chunks: vec!["hold. ".into()],
    });
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "a").await;
    sse.collect_until("context.updated", WAIT).await;
    gw.submit(&sid, "b").await;
    sse.collect_until("context.updated", WAIT).await;
    gw.submit(&sid, "c").await;
    sse.collect_until("content.block.delta", WAIT).await;
    let m = gw.metrics_text().await;
    assert_eq!(metric(&m, "vis_turns_total"), Some(3.0), "{m}");
    assert_eq!(metric(&m, "vis_turns_failed_total"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "vis_turns_running"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "vis_turns_executing"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "vis_turn_concurrency_limit"), Some(50.0), "{m}");
    assert!(metric(&m, "vis_gateway_sse_clients").unwrap() >= 1.0, "{m}");
    assert!(metric(&m, "vis_sessions_tracked").unwrap() >= 1.0);
    assert!(
        metric(&m, "vis_turn_tokens_total{kind=\"input\"}").unwrap() > 0.0,
        "{m}"
    );
    // every series has exactly one TYPE line
    let mut types = std::collections::HashSet::new();
    for l in m.lines().filter(|l| l.starts_with("# TYPE ")) {
        assert!(
            types.insert(l.split(' ').nth(2).unwrap().to_string()),
            "dup {l}"
        );
    }
    assert!(
        m.contains("# HELP vis_turns_total "),
        "every series is explained: {m}"
    );
    let (_, j) = into_json(
        gw.req(Method::GET, "/metrics")
            .header("Accept", "application/json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(j["turns_total"], 3.0, "{j}");
    assert!(j["tokens_input"].as_f64().unwrap() > 0.0, "{j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_print_every_documented_series() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/help").await;
    sse.collect_until("context.updated", WAIT).await;
    let m = gw.metrics_text().await;
    for s in [
        "vis_turns_total",
        "vis_turns_failed_total",
        "vis_turn_cost_usd_total",
        "vis_turn_duration_ms_total",
        "vis_gateway_client_registrations_total",
        "vis_gateway_client_releases_total",
        "vis_gateway_client_replacements_total",
        "vis_gateway_client_leases_reaped_total",
        "vis_sessions_tracked",
        "vis_turns_running",
        "vis_turns_executing",
        "vis_turns_waiting",
        "vis_turns_queued",
        "vis_turn_concurrency_limit",
        "vis_replay_events_retained",
        "vis_process_rss_bytes",
        "vis_gateway_client_leases",
        "vis_gateway_sse_clients",
        "vis_events_not_published_total",
    ] {
        assert!(metric(&m, s).is_some(), "{s} missing: {m}");
    }
    assert!(
        metric(&m, "vis_replay_events_retained").unwrap() >= 4.0,
        "stored events are retained: {m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_map_counts_open_sse_streams() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut a = gw.events(&sid, -1).await;
    let mut b = gw.events_multi(&format!("{sid}:-1")).await;
    a.next_event(WAIT).await.unwrap();
    b.next_event(WAIT).await.unwrap();
    for p in ["/healthz", "/v1/admin/status"] {
        let (_, v): (_, Value) = gw.get(p).await;
        assert_eq!(v["sse_clients"], 2, "{p}: {v}");
        assert!(v["clients"].as_u64().unwrap() >= 2, "{p}: {v}");
    }
}
