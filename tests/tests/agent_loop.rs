//! The agent loop end to end (docs/decisions.md, T1–T4): the real gateway with a scripted
//! provider in both dialects. The transcript is the model's memory, the context window is
//! never exceeded (compaction, `/compact`), the system prompt carries the project's
//! instructions and this turn's facts, and a turn has budgets rather than a step cap.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use vis_tests::{is_summary_request, system_text};

const WAIT: Duration = Duration::from_secs(30);

/// A gateway in the default tool mode (`python_execution`) on the OpenAI dialect.
async fn start(llm: &FixtureLlm, dirs: Arc<Dirs>) -> Gateway {
    Gateway::start_in(dirs, Opts::openai(llm).sandbox()).await
}

/// A gateway whose only provider is `local` in the project's `vis.yml`, with `extra` YAML
/// appended (an OpenAI-compatible server, or Anthropic with `anthropic: true`).
async fn start_local(llm: &FixtureLlm, dirs: Arc<Dirs>, anthropic: bool, extra: &str) -> Gateway {
    let (style, url) = if anthropic {
        ("anthropic", llm.anthropic_base_url())
    } else {
        ("openai-compatible", llm.openai_base_url())
    };
    let yml = format!(
        "providers:\n  local:\n    api_style: {style}\n    base_url: {url}\n    api_key: k\n    model: local-model\n{extra}"
    );
    std::fs::write(dirs.root().join("vis.yml"), yml).unwrap();
    let opts = Opts {
        sandbox: true,
        ..Default::default()
    };
    Gateway::start_in(dirs, opts).await
}

fn code(c: &str) -> Script {
    Script::tool_call("python_execution", json!({ "code": c }))
}

async fn turn(gw: &Gateway, sid: &str, request: &str) -> Event {
    let mut sse = gw.events(sid, -1).await;
    let (s, v) = gw.submit(sid, request).await;
    assert!(s.is_success(), "{s} {v}");
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    evs.last().cloned().expect("a terminal event")
}

/// The model requests (not the summarising ones) in order.
fn model_requests(llm: &FixtureLlm) -> Vec<Value> {
    llm.requests()
        .into_iter()
        .filter(|r| r.body.is_object() && !is_summary_request(&r.body))
        .map(|r| r.body)
        .collect()
}

fn text_of(body: &Value) -> String {
    body["messages"].to_string()
}

/// Prompt tokens as the fixture counts them (four characters a token).
fn prompt_tokens(body: &Value) -> u64 {
    let n = body["messages"].to_string().len()
        + body.get("system").map_or(0, |s| s.to_string().len())
        + body.get("tools").map_or(0, |t| t.to_string().len());
    (n as u64).div_ceil(4)
}

#[tokio::test(flavor = "multi_thread")]
async fn turn_two_carries_turn_ones_code_and_the_output_the_model_saw() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    llm.push(code("print(6 * 7, 'marker-out')"));
    llm.push(Script::text(&["The answer is 42."]));
    assert_eq!(turn(&gw, &sid, "compute it").await.event, "turn.completed");
    llm.push(Script::text(&["Yes."]));
    assert_eq!(turn(&gw, &sid, "again?").await.event, "turn.completed");
    let reqs = model_requests(&llm);
    let second = reqs.last().unwrap();
    let msgs = second["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "user"],
        "{second}"
    );
    assert!(msgs[2]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap()
        .contains("print(6 * 7, 'marker-out')"));
    assert!(msgs[3]["content"]
        .as_str()
        .unwrap()
        .contains("42 marker-out"));
    assert_eq!(msgs[4]["content"], "The answer is 42.");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_anthropic_dialect_replays_tool_use_and_tool_result_blocks() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start_local(&llm, dirs.clone(), true, "").await;
    let sid = gw.create_session_at(&dirs.root()).await;
    llm.push(code("print('from-anthropic-block')"));
    llm.push(Script::text(&["done"]));
    assert_eq!(turn(&gw, &sid, "one").await.event, "turn.completed");
    llm.push(Script::text(&["ok"]));
    assert_eq!(turn(&gw, &sid, "two").await.event, "turn.completed");
    let reqs = model_requests(&llm);
    let msgs = reqs.last().unwrap()["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
    assert_eq!(msgs[1]["content"][0]["type"], "tool_use");
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    assert!(msgs[2]["content"][0]["content"]
        .as_str()
        .unwrap()
        .contains("from-anthropic-block"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fixture_refuses_a_tool_result_without_its_call_as_the_real_apis_do() {
    let llm = FixtureLlm::start().await;
    let http = client();
    let bad_openai = json!({"model": "m", "messages": [
        {"role": "user", "content": "x"},
        {"role": "tool", "tool_call_id": "nope", "content": "r"}]});
    let r = http
        .post(format!("{}/chat/completions", llm.openai_base_url()))
        .json(&bad_openai)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let bad_anthropic = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": "no result"}]});
    let r = http
        .post(format!("{}/messages", llm.anthropic_base_url()))
        .json(&bad_anthropic)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("tool_result"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_turn_is_replayed_with_its_marker_and_an_answer_for_the_cut_call() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    llm.push(code(
        "import time\nprint('cancel-me', flush=True)\ntime.sleep(60)",
    ));
    let mut sse = gw.events(&sid, -1).await;
    let (_, v) = gw.submit(&sid, "long one").await;
    sse.collect_until("block.started", WAIT).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tid = v["turn_id"]
        .as_str()
        .or(v["id"].as_str())
        .unwrap()
        .to_string();
    gw.post_empty(&format!("/v1/sessions/{sid}/turns/{tid}/cancel"))
        .await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().event, "turn.cancelled");
    llm.push(Script::text(&["fine"]));
    assert_eq!(turn(&gw, &sid, "after").await.event, "turn.completed");
    let body = model_requests(&llm).last().unwrap().clone();
    let text = text_of(&body);
    assert!(text.contains("time.sleep(60)"), "{text}");
    assert!(
        text.contains("the user cancelled this turn after 1 step"),
        "{text}"
    );
    assert!(text.contains("no result: the turn ended"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_turn_is_replayed_with_its_code_and_marker() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    llm.push(code("print('before-failure')"));
    llm.push(Script::error(400, "the model broke"));
    assert_eq!(turn(&gw, &sid, "try").await.event, "turn.failed");
    llm.push(Script::text(&["recovered"]));
    assert_eq!(turn(&gw, &sid, "again").await.event, "turn.completed");
    let text = text_of(model_requests(&llm).last().unwrap());
    assert!(text.contains("before-failure"), "{text}");
    assert!(
        text.contains("this turn failed after 1 step (provider_error"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sixty_tool_calls_in_one_turn_complete() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    for i in 0..60 {
        llm.push(code(&format!("print({i})")));
    }
    llm.push(Script::text(&["all sixty done"]));
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "many steps").await;
    let evs = sse
        .collect_until_any(TERMINALS, Duration::from_secs(120))
        .await;
    let last = evs.last().unwrap();
    assert_eq!(last.event, "turn.completed", "{:?}", last.data);
    assert_eq!(evs.iter().filter(|e| e.event == "block.output").count(), 60);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_failing_call_three_times_stops_the_turn_with_a_message_that_says_so() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    for _ in 0..5 {
        llm.push(code("1/0"));
    }
    let last = turn(&gw, &sid, "loop").await;
    assert_eq!(last.event, "turn.failed");
    let body = last.data.to_string();
    assert!(body.contains("same failing"), "{body}");
    // Three model requests, not five.
    assert_eq!(model_requests(&llm).len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn max_steps_from_vis_yml_stops_a_turn_and_says_how_to_go_on() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start_local(&llm, dirs.clone(), false, "agent:\n  max_steps: 3\n").await;
    let sid = gw.create_session_at(&dirs.root()).await;
    for i in 0..5 {
        llm.push(code(&format!("print({i})")));
    }
    let last = turn(&gw, &sid, "go").await;
    assert_eq!(last.event, "turn.failed");
    assert!(
        last.data.to_string().contains("agent.max_steps"),
        "{:?}",
        last.data
    );
    assert_eq!(model_requests(&llm).len(), 3);
}

/// Writes `n` bytes of output per block: the turns that fill a small window.
fn big_output(n: usize, tag: &str) -> Script {
    code(&format!("print('{tag}-start ' + 'x' * {n} + ' {tag}-end')"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_window_is_never_exceeded_and_the_summary_replaces_old_turns_across_a_restart() {
    let llm = FixtureLlm::start().await;
    llm.set_context_window(Some(6_000));
    llm.set_summary_reply(Some("SUMMARY-7731: the user asked for big outputs."));
    let dirs = Dirs::new();
    let extra = "    context_window: 6000\n";
    let gw = start_local(&llm, dirs.clone(), false, extra).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let mut sse = gw.events(&sid, -1).await;
    for i in 0..6 {
        llm.push(big_output(20_000, &format!("turn{i}")));
        llm.push(Script::text(&[format!("answer {i}")]));
        let last = turn(&gw, &sid, &format!("request number {i}")).await;
        assert_eq!(last.event, "turn.completed", "turn {i}: {:?}", last.data);
    }
    let compacted = sse.collect_until("context.compacted", WAIT).await;
    let event = compacted.last().unwrap();
    assert_eq!(event.event, "context.compacted");
    assert_eq!(event.data["window"], 6000);
    assert!(llm.requests().iter().any(|r| is_summary_request(&r.body)));
    for r in llm.requests() {
        if r.body.is_object() {
            assert!(
                prompt_tokens(&r.body) <= 6_000,
                "{}",
                prompt_tokens(&r.body)
            );
        }
    }
    let last = model_requests(&llm).last().unwrap().clone();
    let text = text_of(&last);
    assert!(text.contains("SUMMARY-7731"), "{text}");
    assert!(
        !text.contains("request number 0"),
        "the oldest turn is folded"
    );
    // The newest output keeps its tail (the end line) even when shortened.
    assert!(text.contains("turn5-end"), "{text}");
    // Usage shows the fill level.
    let (_, usage) = gw.get(format!("/v1/sessions/{sid}/usage")).await;
    let usage = &usage["usage"];
    assert_eq!(usage["context_window"], 6000, "{usage}");
    assert!(usage["fold_count"].as_u64().unwrap() >= 1, "{usage}");
    let u = usage["context_utilization"].as_f64().unwrap();
    assert!(u > 0.0 && u <= 1.0, "{usage}");
    // After a restart the next request still carries the summary.
    let mut gw = gw;
    gw.stop().await;
    let gw = start_local(&llm, dirs.clone(), false, extra).await;
    llm.push(Script::text(&["after restart"]));
    assert_eq!(
        turn(&gw, &sid, "after restart").await.event,
        "turn.completed"
    );
    let text = text_of(model_requests(&llm).last().unwrap());
    assert!(text.contains("SUMMARY-7731"), "{text}");
    assert!(!text.contains("request number 0"));
}

#[tokio::test(flavor = "multi_thread")]
async fn compact_on_request_summarises_with_the_users_focus() {
    let llm = FixtureLlm::start().await;
    llm.set_summary_reply(Some("SUMMARY-FOCUS-99"));
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    for i in 0..2 {
        llm.push(Script::text(&[format!("reply {i}")]));
        turn(&gw, &sid, &format!("old request {i}")).await;
    }
    let last = turn(&gw, &sid, "/compact keep the parser in view").await;
    assert_eq!(last.event, "turn.completed", "{:?}", last.data);
    assert!(last.data.to_string().contains("SUMMARY-FOCUS-99"));
    let summary_req = llm
        .requests()
        .into_iter()
        .find(|r| is_summary_request(&r.body))
        .expect("a summarising request");
    let asked = text_of(&summary_req.body);
    assert!(asked.contains("keep the parser in view"), "{asked}");
    assert!(asked.contains("old request 0"), "{asked}");
    llm.push(Script::text(&["next"]));
    turn(&gw, &sid, "next one").await;
    let text = text_of(model_requests(&llm).last().unwrap());
    assert!(text.contains("SUMMARY-FOCUS-99"), "{text}");
    assert!(!text.contains("old request 0"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_context_length_refusal_compacts_once_and_retries_once() {
    let llm = FixtureLlm::start().await;
    llm.set_summary_reply(Some("SUMMARY-OVERFLOW"));
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    for i in 0..4 {
        llm.push(big_output(6_000, &format!("t{i}")));
        llm.push(Script::text(&[format!("a{i}")]));
        turn(&gw, &sid, &format!("earlier {i}")).await;
    }
    // The gateway believes gpt-4.1's million tokens; the server holds 5,000.
    llm.set_context_window(Some(5_000));
    llm.push(Script::text(&["fits now"]));
    let last = turn(&gw, &sid, "now").await;
    assert_eq!(last.event, "turn.completed", "{:?}", last.data);
    let summaries = llm
        .requests()
        .iter()
        .filter(|r| is_summary_request(&r.body))
        .count();
    assert_eq!(summaries, 1);
    assert!(text_of(model_requests(&llm).last().unwrap()).contains("SUMMARY-OVERFLOW"));
    // A window too small for anything: one retry, then the turn fails (no loop).
    llm.set_context_window(Some(50));
    let before = llm.request_count();
    let last = turn(&gw, &sid, "again").await;
    assert_eq!(last.event, "turn.failed");
    assert!(
        llm.request_count() - before <= 4,
        "{}",
        llm.request_count() - before
    );
}

fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "git {args:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_system_prompt_carries_agents_md_the_workspace_the_branch_and_mcp_servers() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let repo = dirs.root();
    git(&repo, &["init", "-q", "-b", "topic-branch"]);
    std::fs::write(repo.join("AGENTS.md"), "ROOT-RULE: run make check").unwrap();
    let sub = repo.join("service");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("AGENTS.md"), "SUB-RULE: use tabs").unwrap();
    std::fs::write(dirs.home().join("AGENTS.md"), "HOME-RULE: be brief").unwrap();
    std::fs::write(
        sub.join("vis.yml"),
        "append_system_prompt: APPENDED-KEY\nmcp:\n  servers:\n    docs-server:\n      transport: stdio\n      command: /bin/false\n",
    )
    .unwrap();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&sub).await;
    llm.push(Script::text(&["ok"]));
    turn(&gw, &sid, "hi").await;
    let system = system_text(model_requests(&llm).last().unwrap());
    let at = |s: &str| {
        system
            .find(s)
            .unwrap_or_else(|| panic!("{s} missing from:\n{system}"))
    };
    assert!(at("HOME-RULE") < at("ROOT-RULE"));
    assert!(at("ROOT-RULE") < at("SUB-RULE"));
    assert!(at("SUB-RULE") < at("APPENDED-KEY"));
    at(&sub.display().to_string());
    at("branch `topic-branch`");
    at("docs-server");
    // `/prompt` shows the same prompt.
    let last = turn(&gw, &sid, "/prompt").await;
    assert_eq!(last.event, "turn.completed");
    let shown = last.data.to_string();
    assert!(
        shown.contains("SUB-RULE") && shown.contains("topic-branch"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turns_extra_body_reaches_the_provider_and_its_iterations_name_provider_and_model() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "x", "extra_body": "not an object"}),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(v.to_string().contains("extra_body"), "{v}");
    llm.push(Script::text(&["ok"]));
    let mut sse = gw.events(&sid, -1).await;
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "tiered", "extra_body": {"service_tier": "flex", "messages": []}}),
        )
        .await;
    assert!(s.is_success(), "{v}");
    sse.collect_until("context.updated", WAIT).await;
    let body = model_requests(&llm).last().unwrap().clone();
    assert_eq!(body["service_tier"], "flex");
    assert!(
        body["messages"].as_array().unwrap().len() > 1,
        "the conversation is kept"
    );
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    let it = &tr["turns"][0]["iterations"][0];
    assert_eq!(
        it["llm_selected"],
        json!({"provider": "openai", "model": "gpt-4.1"}),
        "{it}"
    );
    assert_eq!(it["llm_actual"], it["llm_selected"]);
    assert_eq!(it["is_llm_fallback"], false);
}
