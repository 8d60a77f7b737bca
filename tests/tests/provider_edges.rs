//! Provider edge cases seen through the Companion API: stalls, retries, malformed and
//! re-chunked streams, non-streaming servers, secrets, request options.

mod common;

use common::*;
use serde_json::{json, Value};

fn error_block(data: &Value) -> Value {
    data["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "error")
        .cloned()
        .unwrap_or_else(|| panic!("no error block: {data}"))
}

fn answer(done: &Event) -> String {
    done.data["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["markdown"].as_str())
        .collect()
}

/// The turn's terminal, asserted to be `turn.failed`.
fn failed_terminal(evs: &[Event]) -> &Event {
    let term = evs
        .iter()
        .find(|e| TERMINALS.contains(&e.event.as_str()))
        .unwrap_or_else(|| panic!("no terminal: {:?}", ev_types(evs)));
    assert_eq!(term.event, "turn.failed", "{:?}", term.data);
    term
}

async fn one_turn(gw: &Gateway, request: &str) -> Vec<Event> {
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, request).await;
    let mut evs = sse.collect_until_any(TERMINALS, WAIT).await;
    evs.extend(sse.collect_until("context.updated", WAIT).await);
    evs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_provider_stream_fails_the_turn_with_provider_stream_stalled() {
    let llm = FixtureLlm::start().await;
    for _ in 0..4 {
        llm.push(Script::Stall {
            chunks: vec!["Thinking about it. ".into()],
        });
    }
    let gw = Gateway::start(Opts::openai(&llm).env("VIS_PROVIDER_STALL_MS", "400")).await;
    let evs = one_turn(&gw, "hi").await;
    let term = failed_terminal(&evs);
    assert_eq!(error_block(&term.data)["code"], "provider_stream_stalled");
    // blocks opened before the stall are closed before the terminal
    let opened: Vec<_> = evs
        .iter()
        .filter(|e| e.event == "content.block.started")
        .map(|e| e.data["block"]["id"].clone())
        .collect();
    for id in opened {
        assert!(
            evs.iter()
                .any(|e| e.event == "content.block.completed" && e.data["block_id"] == id),
            "{id} never completed: {:?}",
            ev_types(&evs)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_with_retry_after_is_retried_with_a_provider_retry_event() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::ErrorWithRetryAfter {
        status: 429,
        message: "slow down".into(),
        retry_after: "0".into(),
    });
    llm.push(Script::text(&["Recovered."]));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let evs = one_turn(&gw, "hi").await;
    let tys = ev_types(&evs);
    assert!(tys.contains(&"provider.retry"), "{tys:?}");
    let retry = evs.iter().find(|e| e.event == "provider.retry").unwrap();
    assert_eq!(retry.data["attempt"], 1, "{:?}", retry.data);
    assert!(retry.data["max_retries"].is_u64());
    assert!(retry.data["delay_ms"].is_u64());
    let done = evs
        .iter()
        .find(|e| e.event == "turn.completed")
        .expect("completed");
    assert_eq!(answer(done), "Recovered.");
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_provider_stream_fails_the_turn_and_the_gateway_keeps_serving() {
    let llm = FixtureLlm::start().await;
    for _ in 0..3 {
        llm.push(Script::Raw {
            status: 200,
            content_type: "text/event-stream".into(),
            body: "data: {not json at all\n\ndata: [DONE]\n\n".into(),
        });
    }
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let evs = one_turn(&gw, "hi").await;
    let term = failed_terminal(&evs);
    let b = error_block(&term.data);
    assert!(b["message"].is_string());
    let (s, _) = gw.get("/healthz").await;
    assert_eq!(s, reqwest::StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_split_streams_keep_multibyte_text_intact_in_both_dialects() {
    let text = ["Grüße 👋🏽 — ", "naïve café. ", "日本語のテキスト。"];
    let want: String = text.concat();
    for anthropic in [false, true] {
        let llm = FixtureLlm::start().await;
        llm.push(Script::Chunked {
            script: Box::new(Script::text(&text)),
            bytes_per_write: 1,
        });
        let opts = if anthropic {
            Opts {
                provider: Provider::Anthropic(llm.anthropic_base_url()),
                ..Default::default()
            }
        } else {
            Opts::openai(&llm)
        };
        let gw = Gateway::start(opts).await;
        let evs = one_turn(&gw, "hi").await;
        let done = evs
            .iter()
            .find(|e| e.event == "turn.completed")
            .unwrap_or_else(|| panic!("anthropic={anthropic}: {:?}", evs.last().map(|e| &e.data)));
        assert_eq!(answer(done), want, "anthropic={anthropic}");
        let last_delta = evs
            .iter()
            .rfind(|e| e.event == "content.block.delta" && e.data["field"] == "markdown")
            .expect("delta");
        assert_eq!(last_delta.data["cumulative"], want.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_ignores_stream_true_still_answers() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::NoStream(Box::new(Script::text(&[
        "Whole ", "answer.",
    ]))));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let evs = one_turn(&gw, "hi").await;
    let done = evs
        .iter()
        .find(|e| e.event == "turn.completed")
        .unwrap_or_else(|| panic!("{:?}", evs.last().map(|e| &e.data)));
    assert_eq!(answer(done), "Whole answer.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_secrets_never_appear_on_the_wire() {
    let llm = FixtureLlm::start().await;
    llm.require_api_key(Some("the-right-key"));
    let secret = "sk-very-secret-0123456789";
    let mut opts = Opts::default()
        .env("OPENAI_API_KEY", secret)
        .env("OPENAI_BASE_URL", &llm.openai_base_url());
    opts.provider = Provider::None;
    let gw = Gateway::start(opts).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "hi").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    let term = evs.last().unwrap();
    assert_eq!(term.event, "turn.failed");
    assert_eq!(error_block(&term.data)["code"], "provider_error");
    let mut seen = String::from_utf8_lossy(&sse.raw_head).to_string();
    for p in [
        "/v1/router".to_string(),
        "/v1/admin/status".to_string(),
        "/healthz".to_string(),
        "/v1/capabilities".to_string(),
        format!("/v1/sessions/{sid}/turns"),
        format!("/v1/sessions/{sid}/transcript"),
        format!("/v1/sessions/{sid}/events-since"),
        format!("/v1/sessions/{sid}"),
        "/v1/settings".to_string(),
    ] {
        let (_, v) = gw.get(&p).await;
        seen.push_str(&v.to_string());
    }
    assert!(!seen.contains(secret), "the provider key leaked");
    assert!(!seen.contains(&gw.token), "the gateway token leaked");
    assert_eq!(
        llm.requests()[0].header("authorization"),
        Some(&*format!("Bearer {secret}"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn display_request_and_an_explicit_model_are_honoured() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (s, rec) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "expanded prompt text", "display_request": "what I typed", "model": "openai/gpt-fixture"}),
        )
        .await;
    assert_eq!(s, reqwest::StatusCode::ACCEPTED);
    assert_eq!(rec["display_request"], "what I typed");
    let evs = sse.collect_until("turn.completed", WAIT).await;
    let st = evs.iter().find(|e| e.event == "turn.started").unwrap();
    assert_eq!(st.data["request"], "what I typed");
    assert_eq!(st.data["display_request"], "what I typed");
    let title = evs
        .iter()
        .find(|e| e.event == "session.title_updated")
        .unwrap();
    assert_eq!(title.data["title"], "what I typed");
    let req = &llm.requests()[0];
    assert_eq!(req.body["model"], "gpt-fixture");
    assert!(req.body["messages"]
        .to_string()
        .contains("expanded prompt text"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_multiline_first_request_is_previewed_on_one_line_within_240_chars() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let long = format!("/help {}\nsecond line", "z".repeat(1000));
    gw.submit(&sid, &long).await;
    sse.collect_until("context.updated", WAIT).await;
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    let first = soul["first_request"].as_str().unwrap();
    assert!(!first.contains('\n'));
    assert!(first.chars().count() <= 241, "{}", first.chars().count());
    assert!(first.ends_with('…'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_silent_after_its_first_output_is_failed_as_stalled_by_the_silence_watchdog() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Stall {
        chunks: vec!["Starting. ".into()],
    });
    // The provider stall (120 s by default) would come much later than the silence limit.
    let gw = Gateway::start(Opts::openai(&llm).env("VIS_TURN_SILENCE_MS", "300")).await;
    let evs = one_turn(&gw, "hi").await;
    let term = failed_terminal(&evs);
    let err = error_block(&term.data);
    assert_eq!(err["code"], "turn_stalled", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap_or("")
            .contains("went silent"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_longer_than_the_silence_limit_is_exempt_from_the_watchdog() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::tool_call(
        "shell",
        json!({"command": "sleep 1; echo slept"}),
    ));
    llm.push(Script::text(&["Done."]));
    let gw = Gateway::start(Opts::openai(&llm).env("VIS_TURN_SILENCE_MS", "300")).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "sleep a second").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let out = evs
        .iter()
        .find(|e| e.event == "block.output")
        .unwrap_or_else(|| panic!("no tool output: {:?}", ev_types(&evs)));
    assert!(
        out.data["stdout"].as_str().unwrap_or("").contains("slept")
            || out.data["result"].as_str().unwrap_or("").contains("slept"),
        "{}",
        out.data
    );
}
