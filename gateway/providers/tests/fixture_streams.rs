//! End-to-end tests of both dialects against the fixture LLM server (loopback only).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use vis_providers::{
    collect, ChatMessage, ChatRequest, Client, Collected, Dialect, Image, Level, ProviderConfig,
    ProviderError, RetryInfo, StopReason, StreamEvent, ToolCall, ToolSpec,
};
use vis_tests::{FixtureLlm, Script};

const KEY: &str = "sk-test-key-0123456789";
const DIALECTS: [Dialect; 2] = [Dialect::OpenAiChat, Dialect::Anthropic];

fn config(f: &FixtureLlm, dialect: Dialect) -> ProviderConfig {
    let base = match dialect {
        Dialect::OpenAiChat => f.openai_base_url(),
        Dialect::Anthropic => f.anthropic_base_url(),
    };
    let mut cfg = ProviderConfig::new("fixture", dialect, base, "fixture-model");
    cfg.api_key = Some(KEY.to_string());
    cfg.stall_timeout = Duration::from_secs(5);
    cfg.connect_timeout = Duration::from_secs(2);
    cfg
}

fn fast(cfg: ProviderConfig) -> Client {
    Client::new(cfg).expect("client").with_backoff(
        Duration::from_millis(2),
        Duration::from_millis(10),
        Duration::from_secs(5),
    )
}

fn client(f: &FixtureLlm, dialect: Dialect) -> Client {
    fast(config(f, dialect))
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::User { text: text.into() }],
        ..ChatRequest::default()
    }
}

#[derive(Clone, Default)]
struct Retries(Arc<Mutex<Vec<RetryInfo>>>);

impl Retries {
    fn callback(&self) -> impl Fn(RetryInfo) + Send + Sync + 'static {
        let seen = self.0.clone();
        move |info| seen.lock().unwrap().push(info)
    }
    fn seen(&self) -> Vec<RetryInfo> {
        self.0.lock().unwrap().clone()
    }
}

fn no_retry(info: RetryInfo) {
    panic!("unexpected retry: {info:?}");
}

async fn events(
    c: &Client,
    req: &ChatRequest,
) -> Result<Vec<Result<StreamEvent, ProviderError>>, ProviderError> {
    let s = c.stream(req, CancellationToken::new(), &no_retry).await?;
    Ok(s.collect().await)
}

async fn run(c: &Client, req: &ChatRequest) -> Result<Collected, ProviderError> {
    let s = c.stream(req, CancellationToken::new(), &no_retry).await?;
    collect(s).await
}

#[tokio::test]
async fn text_chunks_arrive_as_separate_deltas_and_finish_with_usage_in_both_dialects() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::text(&["Hel", "lo, ", "world"]));
        let evs: Vec<StreamEvent> = events(&client(&f, d), &ask("hi"))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(
            &evs[..3],
            &[
                StreamEvent::TextDelta("Hel".into()),
                StreamEvent::TextDelta("lo, ".into()),
                StreamEvent::TextDelta("world".into()),
            ],
            "{d}"
        );
        match &evs[3] {
            StreamEvent::Completed { stop_reason, usage } => {
                assert_eq!(*stop_reason, StopReason::EndTurn, "{d}");
                assert!(
                    usage.input_tokens > 0 && usage.output_tokens > 0,
                    "{d}: {usage:?}"
                );
            }
            other => panic!("{d}: expected Completed, got {other:?}"),
        }
        assert_eq!(evs.len(), 4, "{d}");
    }
}

#[tokio::test]
async fn with_an_empty_script_queue_the_fixture_echoes_the_last_user_text() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        let c = run(&client(&f, d), &ask("ping pong")).await.unwrap();
        assert_eq!(c.text, "You said: ping pong", "{d}");
        assert!(c.tool_calls.is_empty());
    }
}

#[tokio::test]
async fn a_single_tool_call_is_assembled_from_arguments_streamed_in_pieces() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        let args = json!({"path": "src/main.rs", "lines": [1, 20]});
        f.push(Script::ToolCall {
            name: "read_file".into(),
            arguments: args.clone(),
            text_before: Some("Let me look.".into()),
        });
        let c = client(&f, d);
        let evs: Vec<StreamEvent> = events(&c, &ask("read it"))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.unwrap())
            .collect();
        let deltas = evs
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallDelta { index: 0, .. }))
            .count();
        assert!(deltas >= 2, "{d}: arguments came in {deltas} pieces");

        f.push(Script::ToolCall {
            name: "read_file".into(),
            arguments: args.clone(),
            text_before: Some("Let me look.".into()),
        });
        let got = run(&c, &ask("read it")).await.unwrap();
        assert_eq!(got.text, "Let me look.", "{d}");
        assert_eq!(got.stop_reason, StopReason::ToolUse, "{d}");
        assert_eq!(got.tool_calls.len(), 1, "{d}");
        assert_eq!(got.tool_calls[0].name, "read_file");
        assert!(!got.tool_calls[0].id.is_empty());
        let parsed: Value = serde_json::from_str(&got.tool_calls[0].arguments).unwrap();
        assert_eq!(parsed, args, "{d}");
    }
}

#[tokio::test]
async fn parallel_tool_calls_keep_their_own_index_id_and_arguments() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::ToolCalls(vec![
            ("weather".into(), json!({"city": "Paris"})),
            ("weather".into(), json!({"city": "Zürich"})),
            ("time".into(), json!({})),
        ]));
        let got = run(&client(&f, d), &ask("go")).await.unwrap();
        assert_eq!(got.stop_reason, StopReason::ToolUse, "{d}");
        let names: Vec<&str> = got.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["weather", "weather", "time"], "{d}");
        let args: Vec<Value> = got
            .tool_calls
            .iter()
            .map(|c| serde_json::from_str(&c.arguments).unwrap())
            .collect();
        assert_eq!(
            args,
            [
                json!({"city": "Paris"}),
                json!({"city": "Zürich"}),
                json!({})
            ],
            "{d}"
        );
        let mut ids: Vec<&str> = got.tool_calls.iter().map(|c| c.id.as_str()).collect();
        ids.dedup();
        assert_eq!(ids.len(), 3, "{d}: ids must differ");
    }
}

#[tokio::test]
async fn reasoning_is_streamed_apart_from_the_answer_text() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::Reasoning {
            reasoning: vec!["First, ".into(), "think.".into()],
            text: vec!["Answer: ".into(), "42".into()],
        });
        let evs: Vec<StreamEvent> = events(&client(&f, d), &ask("q"))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(evs[0], StreamEvent::ReasoningDelta("First, ".into()), "{d}");
        assert_eq!(evs[1], StreamEvent::ReasoningDelta("think.".into()), "{d}");
        f.push(Script::Reasoning {
            reasoning: vec!["First, ".into(), "think.".into()],
            text: vec!["Answer: ".into(), "42".into()],
        });
        let got = run(&client(&f, d), &ask("q")).await.unwrap();
        assert_eq!(got.reasoning, "First, think.", "{d}");
        assert_eq!(got.text, "Answer: 42", "{d}");
        if d == Dialect::OpenAiChat {
            assert!(got.usage.reasoning_tokens > 0);
        }
    }
}

#[tokio::test]
async fn hitting_the_output_limit_is_reported_as_max_tokens() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::MaxTokens(vec!["cut".into()]));
        let got = run(&client(&f, d), &ask("q")).await.unwrap();
        assert_eq!(got.stop_reason, StopReason::MaxTokens, "{d}");
    }
}

#[tokio::test]
async fn an_unauthorized_answer_surfaces_the_provider_message_and_is_not_retried() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::error(401, "Invalid API key provided"));
        let err = run(&client(&f, d), &ask("q")).await.unwrap_err();
        assert_eq!(
            err,
            ProviderError::Http {
                status: 401,
                message: "Invalid API key provided".into(),
                retryable: false
            },
            "{d}"
        );
        assert!(err.to_string().contains("Invalid API key provided"));
        assert_eq!(f.request_count(), 1, "{d}");
    }
}

#[tokio::test]
async fn the_api_key_never_appears_in_an_error_message_even_if_the_provider_echoes_it() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::error(401, &format!("key {KEY} is revoked")));
        let err = run(&client(&f, d), &ask("q")).await.unwrap_err();
        assert!(!err.to_string().contains(KEY), "{d}: {err}");
        assert!(err.to_string().contains("is revoked"), "{d}: {err}");
    }
}

#[tokio::test]
async fn rate_limit_and_server_errors_are_retried_with_numbered_attempts_then_succeed() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::error(429, "slow down"));
        f.push(Script::error(500, "boom"));
        f.push(Script::text(&["fine"]));
        let retries = Retries::default();
        let cb = retries.callback();
        let c = client(&f, d);
        let s = c
            .stream(&ask("q"), CancellationToken::new(), &cb)
            .await
            .unwrap();
        let got = collect(s).await.unwrap();
        assert_eq!(got.text, "fine", "{d}");
        let seen = retries.seen();
        assert_eq!(
            seen.iter().map(|r| r.attempt).collect::<Vec<_>>(),
            [1, 2],
            "{d}"
        );
        assert!(seen.iter().all(|r| r.max_retries == 2));
        assert!(seen[0].error.contains("429") && seen[0].error.contains("slow down"));
        assert!(seen[1].error.contains("500") && seen[1].error.contains("boom"));
        assert_eq!(f.request_count(), 3, "{d}");
    }
}

#[tokio::test]
async fn retries_stop_after_max_retries_and_return_the_last_error() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        for _ in 0..4 {
            f.push(Script::error(503, "unavailable"));
        }
        let retries = Retries::default();
        let cb = retries.callback();
        let err = client(&f, d)
            .stream(&ask("q"), CancellationToken::new(), &cb)
            .await
            .err()
            .unwrap();
        assert_eq!(err.status(), Some(503), "{d}");
        assert!(err.is_retryable());
        assert_eq!(retries.seen().len(), 2, "{d}");
        assert_eq!(f.request_count(), 3, "{d}");
    }
}

#[tokio::test]
async fn a_retry_after_header_sets_the_retry_delay() {
    let f = FixtureLlm::start().await;
    f.push(Script::ErrorWithRetryAfter {
        status: 429,
        message: "rate limited".into(),
        retry_after: "1".into(),
    });
    f.push(Script::text(&["ok"]));
    let retries = Retries::default();
    let cb = retries.callback();
    let started = Instant::now();
    let s = client(&f, Dialect::Anthropic)
        .stream(&ask("q"), CancellationToken::new(), &cb)
        .await
        .unwrap();
    assert_eq!(collect(s).await.unwrap().text, "ok");
    assert!(started.elapsed() >= Duration::from_millis(950));
    assert_eq!(retries.seen()[0].delay_ms, 1000);
}

#[tokio::test]
async fn a_retry_after_longer_than_the_allowed_maximum_ends_the_retries_at_once() {
    let f = FixtureLlm::start().await;
    f.push(Script::ErrorWithRetryAfter {
        status: 429,
        message: "come back tomorrow".into(),
        retry_after: "86400".into(),
    });
    let started = Instant::now();
    let err = run(&client(&f, Dialect::OpenAiChat), &ask("q"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(429));
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(f.request_count(), 1);
}

#[tokio::test]
async fn connection_refused_is_retried_and_then_reported_as_a_transport_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cfg = ProviderConfig::new(
        "dead",
        Dialect::OpenAiChat,
        format!("http://127.0.0.1:{port}/v1"),
        "m",
    );
    cfg.api_key = Some(KEY.into());
    let retries = Retries::default();
    let cb = retries.callback();
    let err = fast(cfg)
        .stream(&ask("q"), CancellationToken::new(), &cb)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ProviderError::Transport(_)), "{err:?}");
    assert!(!err.to_string().contains(KEY));
    assert_eq!(retries.seen().len(), 2);
}

#[tokio::test]
async fn a_stream_that_goes_silent_fails_as_stalled_within_the_stall_timeout_and_is_not_retried() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::Stall {
            chunks: vec!["partial".into()],
        });
        let mut cfg = config(&f, d);
        cfg.stall_timeout = Duration::from_millis(300);
        let c = fast(cfg);
        let started = Instant::now();
        let evs = events(&c, &ask("q")).await.unwrap();
        let elapsed = started.elapsed();
        assert_eq!(
            evs.first(),
            Some(&Ok(StreamEvent::TextDelta("partial".into()))),
            "{d}"
        );
        assert_eq!(evs.last(), Some(&Err(ProviderError::Stalled)), "{d}");
        assert!(
            elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(3),
            "{d}: {elapsed:?}"
        );
        assert_eq!(f.request_count(), 1, "{d}");
    }
}

#[tokio::test]
async fn cancelling_mid_stream_ends_the_stream_promptly_with_cancelled() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::Slow {
            chunks: (0..100).map(|i| format!("w{i} ")).collect(),
            delay_ms: 500,
        });
        let cancel = CancellationToken::new();
        let mut s = client(&f, d)
            .stream(&ask("q"), cancel.clone(), &no_retry)
            .await
            .unwrap();
        let first = s.next().await.unwrap().unwrap();
        assert!(matches!(first, StreamEvent::TextDelta(_)), "{d}: {first:?}");
        let started = Instant::now();
        let canceller = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            canceller.cancel();
        });
        let mut last = None;
        while let Some(ev) = s.next().await {
            last = Some(ev);
        }
        assert_eq!(last, Some(Err(ProviderError::Cancelled)), "{d}");
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{d}: {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn cancelling_during_a_retry_wait_returns_cancelled_promptly() {
    let f = FixtureLlm::start().await;
    f.push(Script::ErrorWithRetryAfter {
        status: 503,
        message: "busy".into(),
        retry_after: "4".into(),
    });
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    let retries = Retries::default();
    let cb = retries.callback();
    let started = Instant::now();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let err = client(&f, Dialect::OpenAiChat)
        .stream(&ask("q"), cancel, &cb)
        .await
        .err()
        .unwrap();
    assert_eq!(err, ProviderError::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(retries.seen().len(), 1);
}

#[tokio::test]
async fn an_already_cancelled_token_sends_no_request() {
    let f = FixtureLlm::start().await;
    let cancel = CancellationToken::new();
    cancel.cancel();
    let err = client(&f, Dialect::Anthropic)
        .stream(&ask("q"), cancel, &no_retry)
        .await
        .err()
        .unwrap();
    assert_eq!(err, ProviderError::Cancelled);
    assert_eq!(f.request_count(), 0);
}

fn history_request() -> ChatRequest {
    ChatRequest {
        model: "model-x".into(),
        system: Some("You are terse.".into()),
        messages: vec![
            ChatMessage::User {
                text: "list files".into(),
            },
            ChatMessage::Assistant {
                text: "Sure.".into(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "shell".into(),
                    arguments: r#"{"cmd":"ls"}"#.into(),
                }],
            },
            ChatMessage::ToolResult {
                call_id: "call_1".into(),
                content: "permission denied".into(),
                is_error: true,
            },
        ],
        tools: vec![ToolSpec {
            name: "shell".into(),
            description: "Run a command".into(),
            parameters: json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
        }],
        max_tokens: None,
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn openai_requests_carry_bearer_auth_tools_system_and_tool_results() {
    let f = FixtureLlm::start().await;
    let mut cfg = config(&f, Dialect::OpenAiChat);
    cfg.extra_headers = vec![("x-extra".into(), "yes".into())];
    let got = run(&fast(cfg), &history_request()).await.unwrap();
    assert_eq!(got.text, "You said: list files");
    let reqs = f.requests();
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.header("x-extra"), Some("yes"));
    assert_eq!(r.header("x-api-key"), None);
    let b = &r.body;
    assert_eq!(b["model"], "model-x");
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert!(b.get("max_tokens").is_none());
    assert_eq!(
        b["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": "Sure.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":\"ls\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Error: permission denied"},
        ])
    );
    assert_eq!(
        b["tools"],
        json!([{"type": "function", "function": {
            "name": "shell",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        }}])
    );
}

#[tokio::test]
async fn anthropic_requests_carry_the_api_key_header_version_system_and_tool_blocks() {
    let f = FixtureLlm::start().await;
    let got = run(&client(&f, Dialect::Anthropic), &history_request())
        .await
        .unwrap();
    assert_eq!(got.text, "You said: list files");
    let reqs = f.requests();
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("authorization"), None);
    let b = &r.body;
    assert_eq!(b["model"], "model-x");
    assert_eq!(b["stream"], true);
    assert_eq!(b["max_tokens"], 8192);
    assert_eq!(b["system"], "You are terse.");
    assert_eq!(
        b["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "list files"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Sure."},
                {"type": "tool_use", "id": "call_1", "name": "shell", "input": {"cmd": "ls"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "permission denied", "is_error": true},
            ]},
        ])
    );
    assert_eq!(
        b["tools"],
        json!([{
            "name": "shell",
            "description": "Run a command",
            "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        }])
    );
}

#[tokio::test]
async fn an_empty_request_model_falls_back_to_the_configured_default_model() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        run(&client(&f, d), &ask("q")).await.unwrap();
        assert_eq!(f.requests()[0].body["model"], "fixture-model", "{d}");
    }
}

#[tokio::test]
async fn a_tool_round_trip_feeds_the_collected_call_back_as_history() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::tool_call("shell", json!({"cmd": "pwd"})));
        let c = client(&f, d);
        let mut req = ask("where am I?");
        let first = run(&c, &req).await.unwrap();
        assert_eq!(first.stop_reason, StopReason::ToolUse);
        req.messages.push(first.to_message());
        req.messages.push(ChatMessage::ToolResult {
            call_id: first.tool_calls[0].id.clone(),
            content: "/work".into(),
            is_error: false,
        });
        let second = run(&c, &req).await.unwrap();
        assert_eq!(second.text, "You said: where am I?", "{d}");
        assert_eq!(second.stop_reason, StopReason::EndTurn, "{d}");
        assert_eq!(f.request_count(), 2);
    }
}

#[tokio::test]
async fn malformed_json_in_a_stream_is_a_protocol_error() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.push(Script::Raw {
            status: 200,
            content_type: "text/event-stream".into(),
            body: "data: {not json\n\n".into(),
        });
        let err = run(&client(&f, d), &ask("q")).await.unwrap_err();
        assert!(matches!(err, ProviderError::Protocol(_)), "{d}: {err:?}");
    }
}

#[tokio::test]
async fn a_stream_that_ends_before_completion_is_a_protocol_error() {
    let f = FixtureLlm::start().await;
    f.push(Script::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n".into(),
    });
    let evs = events(&client(&f, Dialect::OpenAiChat), &ask("q"))
        .await
        .unwrap();
    assert_eq!(evs[0], Ok(StreamEvent::TextDelta("Hi".into())));
    assert!(matches!(evs.last(), Some(Err(ProviderError::Protocol(_)))));
}

#[tokio::test]
async fn an_anthropic_error_event_mid_stream_surfaces_its_type_and_message() {
    let f = FixtureLlm::start().await;
    f.push(Script::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body: concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
            "event: error\n",
            "data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        )
        .into(),
    });
    let err = run(&client(&f, Dialect::Anthropic), &ask("q"))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ProviderError::Stream {
            kind: "overloaded_error".into(),
            message: "Overloaded".into()
        }
    );
}

#[tokio::test]
async fn a_fixture_that_requires_a_key_rejects_a_wrong_one_with_the_dialect_401() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        f.require_api_key(Some("the-right-key"));
        let err = run(&client(&f, d), &ask("q")).await.unwrap_err();
        assert_eq!(err.status(), Some(401), "{d}");
        let mut cfg = config(&f, d);
        cfg.api_key = Some("the-right-key".into());
        assert_eq!(
            run(&fast(cfg), &ask("ok")).await.unwrap().text,
            "You said: ok"
        );
    }
}

#[tokio::test]
async fn the_fixture_rejects_an_anthropic_request_without_max_tokens_like_the_real_api() {
    let f = FixtureLlm::start().await;
    vis_tests::init_crypto();
    let resp = reqwest::Client::new()
        .post(format!("{}/messages", f.anthropic_base_url()))
        .json(&json!({"model": "m", "messages": [], "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
}

fn rich_script() -> Script {
    Script::ToolCall {
        name: "greet".into(),
        arguments: json!({"who": "Zoë", "emoji": "🌍", "n": [1, 2]}),
        text_before: Some("Grüße aus Köln 🌍\r\n".into()),
    }
}

#[tokio::test]
async fn a_stream_cut_into_tiny_writes_anywhere_decodes_the_same_as_a_whole_one() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        let c = client(&f, d);
        f.push(rich_script());
        let reference = run(&c, &ask("q")).await.unwrap();
        for n in [3, 11, 64] {
            f.push(Script::Chunked {
                script: Box::new(rich_script()),
                bytes_per_write: n,
            });
            let got = run(&c, &ask("q")).await.unwrap();
            assert_eq!(got.text, reference.text, "{d}, {n} bytes per write");
            assert_eq!(got.tool_calls.len(), 1);
            assert_eq!(
                serde_json::from_str::<Value>(&got.tool_calls[0].arguments).unwrap(),
                json!({"who": "Zoë", "emoji": "🌍", "n": [1, 2]}),
                "{d}, {n} bytes per write"
            );
            assert_eq!(got.stop_reason, StopReason::ToolUse);
            assert_eq!(got.usage, reference.usage);
        }
    }
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_and_answers_with_json_is_replayed_as_events() {
    for d in DIALECTS {
        let f = FixtureLlm::start().await;
        let c = client(&f, d);
        f.push(rich_script());
        let streamed = run(&c, &ask("q")).await.unwrap();
        f.push(Script::NoStream(Box::new(rich_script())));
        let whole = run(&c, &ask("q")).await.unwrap();
        assert_eq!(whole.text, streamed.text, "{d}");
        assert_eq!(whole.tool_calls[0].name, "greet", "{d}");
        assert_eq!(
            serde_json::from_str::<Value>(&whole.tool_calls[0].arguments).unwrap(),
            serde_json::from_str::<Value>(&streamed.tool_calls[0].arguments).unwrap(),
            "{d}"
        );
        assert_eq!(whole.stop_reason, StopReason::ToolUse, "{d}");
        assert_eq!(whole.usage, streamed.usage, "{d}");

        f.push(Script::NoStream(Box::new(Script::Reasoning {
            reasoning: vec!["hm".into()],
            text: vec!["yes".into()],
        })));
        let r = run(&c, &ask("q")).await.unwrap();
        assert_eq!(
            (r.reasoning.as_str(), r.text.as_str()),
            ("hm", "yes"),
            "{d}"
        );
    }
}

#[tokio::test]
async fn a_server_that_accepts_but_never_answers_fails_as_stalled() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let mut cfg = ProviderConfig::new(
        "mute",
        Dialect::Anthropic,
        format!("http://127.0.0.1:{port}/v1"),
        "m",
    );
    cfg.stall_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = fast(cfg)
        .stream(&ask("q"), CancellationToken::new(), &no_retry)
        .await
        .err()
        .unwrap();
    assert_eq!(err, ProviderError::Stalled);
    assert!(started.elapsed() < Duration::from_secs(3));
    hold.abort();
}

#[tokio::test]
async fn openai_compatible_tool_arguments_sent_as_an_object_are_accepted() {
    let f = FixtureLlm::start().await;
    f.push(Script::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body: concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        )
        .into(),
    });
    let got = run(&client(&f, Dialect::OpenAiChat), &ask("q"))
        .await
        .unwrap();
    assert_eq!(got.tool_calls[0].arguments, "{\"a\":1}");
    assert_eq!(got.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn a_stream_can_be_opened_and_read_inside_a_spawned_task() {
    let f = FixtureLlm::start().await;
    let c = client(&f, Dialect::OpenAiChat);
    let got = tokio::spawn(async move {
        let on_retry = |_: RetryInfo| {};
        let s = c
            .stream(&ask("from a task"), CancellationToken::new(), &on_retry)
            .await?;
        collect(s).await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(got.text, "You said: from a task");
}

fn picture_request() -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::UserImages {
            text: "what is this?".into(),
            images: vec![Image {
                media_type: "image/png".into(),
                base64: "iVBORw0KGgo=".into(),
            }],
        }],
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn an_image_message_is_an_openai_image_url_part_and_an_anthropic_image_block() {
    let f = FixtureLlm::start().await;
    for d in DIALECTS {
        let got = run(&client(&f, d), &picture_request()).await.unwrap();
        assert_eq!(got.text, "You said: what is this?", "{d}");
    }
    let reqs = f.requests();
    assert_eq!(
        reqs[0].body["messages"][0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]})
    );
    assert_eq!(
        reqs[1].body["messages"][0],
        json!({"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "text", "text": "what is this?"},
        ]})
    );
}

#[tokio::test]
async fn reasoning_verbosity_and_fast_mode_are_sent_only_where_the_dialect_has_the_field() {
    let f = FixtureLlm::start().await;
    let mut req = ask("think");
    req.reasoning = Some(Level::Low);
    req.verbosity = Some(Level::High);
    req.fast = true;
    for d in DIALECTS {
        run(&client(&f, d), &req).await.unwrap();
    }
    let reqs = f.requests();
    let openai = &reqs[0].body;
    assert_eq!(openai["reasoning_effort"], "low");
    assert_eq!(openai["verbosity"], "high");
    assert_eq!(openai["service_tier"], "priority");
    let anthropic = &reqs[1].body;
    assert_eq!(
        anthropic["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(anthropic["max_tokens"], 8192);
    for k in ["verbosity", "service_tier", "reasoning_effort"] {
        assert!(anthropic.get(k).is_none(), "{k}: {anthropic}");
    }
    let plain = ask("plain");
    run(&client(&f, Dialect::OpenAiChat), &plain).await.unwrap();
    let body = &f.requests()[2].body;
    for k in ["verbosity", "service_tier", "reasoning_effort"] {
        assert!(body.get(k).is_none(), "nothing sent by default: {k}");
    }
}
