//! Turns (docs/decisions.md, G6, G7) over the OpenAI and Anthropic dialects against the fixture LLM, tool calls.

mod common;

use common::*;
use serde_json::{json, Value};

fn anthropic(llm: &FixtureLlm) -> Opts {
    Opts {
        provider: Provider::Anthropic(llm.anthropic_base_url()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_provider_from_vis_yml_streams_a_turn() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Reasoning {
        reasoning: vec!["Let me think. ".into(), "Done thinking.".into()],
        text: vec!["Bonjour. ".into(), "Ça va?".into()],
    });
    let gw = Gateway::start(anthropic(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "salut").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    let done = evs.last().unwrap();
    assert_eq!(done.event, "turn.completed", "{:?}", done.data);
    let md: String = done.data["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["markdown"].as_str())
        .collect();
    assert_eq!(md, "Bonjour. Ça va?");
    let started: Vec<&Event> = evs
        .iter()
        .filter(|e| e.event == "content.block.started")
        .collect();
    let kinds: Vec<&str> = started
        .iter()
        .map(|e| e.data["block"]["type"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"reasoning") && kinds.contains(&"prose"),
        "{kinds:?}"
    );
    let reasoning = started
        .iter()
        .find(|e| e.data["block"]["type"] == "reasoning")
        .unwrap();
    assert_eq!(reasoning.data["block"]["visibility"], "private");
    let deltas: Vec<&Event> = evs
        .iter()
        .filter(|e| e.event == "content.block.delta")
        .collect();
    assert!(deltas.iter().any(|d| d.data["field"] == "text"
        && d.data["cumulative"]
            .as_str()
            .unwrap()
            .contains("Done thinking")));
    assert!(deltas
        .iter()
        .any(|d| d.data["field"] == "markdown" && d.data["cumulative"] == "Bonjour. Ça va?"));
    // the fixture saw the Anthropic dialect with the configured key and model
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].header("x-api-key"), Some("k"));
    assert_eq!(reqs[0].body["model"], "m");
    assert_eq!(reqs[0].body["stream"], true);
    let last_user = reqs[0].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(last_user.to_string().contains("salut"), "{last_user}");
}

fn tool_flow_check(evs: &[Event]) -> (Value, Value) {
    let tys = ev_types(evs);
    let pos = |t: &str| {
        tys.iter()
            .position(|x| *x == t)
            .unwrap_or_else(|| panic!("no {t}: {tys:?}"))
    };
    assert!(pos("block.preview") < pos("block.started"), "{tys:?}");
    assert!(pos("block.started") < pos("block.output"), "{tys:?}");
    assert!(pos("block.output") < pos("turn.completed"), "{tys:?}");
    let started = evs.iter().find(|e| e.event == "block.started").unwrap();
    let output = evs.iter().find(|e| e.event == "block.output").unwrap();
    assert_eq!(started.data["block_id"], output.data["block_id"]);
    assert!(started.data["code"].as_str().unwrap().contains("apropos"));
    assert!(output.data.get("result").is_some(), "{:?}", output.data);
    assert_eq!(output.data["silent"], false);
    assert!(output.data["duration_ms"].is_u64());
    (started.data.clone(), output.data.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_tool_call_runs_the_tool_and_sends_its_result_back() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::tool_call("apropos", json!({"pattern": "x"})));
    llm.push(Script::text(&["Nothing matched."]));
    let gw = Gateway::start(anthropic(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "find x").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(
        evs.last().unwrap().event,
        "turn.completed",
        "{:?}",
        ev_types(&evs)
    );
    let (_, output) = tool_flow_check(&evs);
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "a second provider call after the tool");
    assert!(
        reqs[0].body["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "apropos")),
        "{}",
        reqs[0].body["tools"]
    );
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let assistant = msgs
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("assistant turn");
    let tool_use = assistant["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("tool_use block");
    assert_eq!(tool_use["name"], "apropos");
    assert_eq!(tool_use["input"], json!({"pattern": "x"}));
    let result = msgs.last().unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_result")
        .cloned()
        .expect("tool_result");
    assert_eq!(result["tool_use_id"], tool_use["id"]);
    let text = match &result["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        other => other.to_string(),
    };
    assert_eq!(text, output["result"].as_str().unwrap());
    // the answer text
    let done = &evs.last().unwrap().data;
    assert!(done["content"].to_string().contains("Nothing matched."));
    // iteration boundaries
    assert!(
        ev_types(&evs)
            .iter()
            .filter(|t| **t == "iteration.completed")
            .count()
            >= 2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_tool_call_runs_the_tool_and_sends_its_result_back() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::ToolCall {
        name: "apropos".into(),
        arguments: json!({"pattern": "x"}),
        text_before: Some("Let me look.".into()),
    });
    llm.push(Script::text(&["Done."]));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "find x").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(
        evs.last().unwrap().event,
        "turn.completed",
        "{:?}",
        ev_types(&evs)
    );
    tool_flow_check(&evs);
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].header("authorization"), Some("Bearer test"));
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let call = msgs
        .iter()
        .find(|m| m["role"] == "assistant")
        .and_then(|m| m["tool_calls"].as_array())
        .and_then(|c| c.first())
        .cloned()
        .expect("assistant tool_calls");
    assert_eq!(call["function"]["name"], "apropos");
    let tool_msg = msgs
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool message");
    assert_eq!(tool_msg["tool_call_id"], call["id"]);
    // the transcript keeps the tool form for history parity
    gw.wait_idle(&sid).await;
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    let row = &tr["turns"][0];
    assert_eq!(row["status"], "success");
    let forms: Vec<Value> = row["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| i["forms"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(
        forms
            .iter()
            .any(|f| f["code"].as_str().is_some_and(|c| c.contains("apropos"))),
        "{row}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_error_fails_the_turn_with_a_provider_error_block() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::error(400, "context too long"));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "hi").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    let failed = evs.last().unwrap();
    assert_eq!(failed.event, "turn.failed");
    let block = failed.data["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "error")
        .cloned()
        .unwrap();
    assert_eq!(block["code"], "provider_error", "{block}");
    assert!(
        block["message"]
            .as_str()
            .unwrap()
            .contains("context too long"),
        "{block}"
    );
    assert!(
        !block.to_string().contains("Bearer"),
        "no credentials: {block}"
    );
    assert!(ev_types(&evs).contains(&"iteration.error"));
    gw.wait_idle(&sid).await;
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(tr["turns"][0]["status"], "error", "{tr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earlier_turns_are_sent_as_conversation_history() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "first question").await;
    sse.collect_until("context.updated", WAIT).await;
    gw.submit(&sid, "second question").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert!(evs.last().unwrap().data["content"]
        .to_string()
        .contains("You said: second question"));
    let reqs = llm.requests();
    let body = reqs[1].body["messages"].to_string();
    assert!(body.contains("first question"), "{body}");
    assert!(body.contains("You said: first question"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_tool_turn_follows_the_documented_event_sequence() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::ToolCall {
        name: "apropos".into(),
        arguments: json!({"pattern": "x"}),
        text_before: Some("Let me look. ".into()),
    });
    llm.push(Script::text(&["Done. ", "Really done."]));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (_, t) = gw.submit(&sid, "find x").await;
    let tid = t["turn_id"].as_str().unwrap().to_string();
    let evs = sse.collect_until("context.updated", WAIT).await;
    let seq: Vec<&str> = ev_types(&evs)
        .into_iter()
        .filter(|t| *t != "subscription.ready" && *t != "session.title_updated")
        .collect();
    // collapse repeated deltas / previews
    let mut compact: Vec<&str> = Vec::new();
    for t in seq {
        if compact.last() != Some(&t) {
            compact.push(t);
        }
    }
    assert_eq!(
        compact,
        [
            "turn.started",
            "activity",
            "content.block.started",
            "content.block.delta",
            "block.preview",
            "block.started",
            "activity",
            "block.output",
            "iteration.completed",
            "content.block.completed",
            "activity",
            "content.block.started",
            "content.block.delta",
            "iteration.completed",
            "content.block.completed",
            "turn.completed",
            "context.updated"
        ]
    );
    let acts: Vec<&Event> = evs.iter().filter(|e| e.event == "activity").collect();
    assert_eq!(acts[0].data["activity"], "provider-call");
    assert_eq!(acts[0].data["reason"], "user-submit");
    assert_eq!(acts[0].data["iteration"], 1);
    assert_eq!(acts[1].data["activity"], "tool");
    assert_eq!(acts[2].data["activity"], "provider-call");
    assert_eq!(acts[2].data["reason"], "tool-result");
    assert_eq!(acts[2].data["iteration"], 2);
    for e in evs.iter().filter(|e| e.event == "content.block.started") {
        let id = e.data["block"]["id"].as_str().unwrap();
        assert!(id.starts_with(&format!("{tid}:")), "{id}");
        assert_eq!(e.data["block"]["markdown"], "", "{:?}", e.data);
    }
    for e in evs.iter().filter(|e| e.event == "content.block.delta") {
        assert_eq!(e.data["turn_id"], tid.as_str());
        assert!(e.data["iteration"].is_u64());
        assert!(e.data["text"].is_string());
    }
    let it: Vec<&Event> = evs
        .iter()
        .filter(|e| e.event == "iteration.completed")
        .collect();
    assert_eq!(it[0].data["done"], false);
    assert_eq!(it[0].data["assistant_prose"], "Let me look. ");
    assert_eq!(it[1].data["done"], true);
    let done = evs.iter().find(|e| e.event == "turn.completed").unwrap();
    assert!(done.data["content"]
        .to_string()
        .contains("Done. Really done."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_the_last_good_config_and_applies_a_fixed_one() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(anthropic(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let yml = gw.dirs.root().join("vis.yml");
    std::fs::write(&yml, "providers:\n  claude:\n    modle: typo\n").unwrap();
    gw.submit(&sid, "/reload").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    let term = evs.last().unwrap();
    let text = term.data.to_string();
    assert!(text.contains("modle") && text.contains("vis.yml"), "{text}");
    // the previous provider still answers
    gw.submit(&sid, "still there?").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().event, "turn.completed");
    assert_eq!(llm.requests().last().unwrap().body["model"], "m");
    // a fixed config with another model applies after /reload
    std::fs::write(
        &yml,
        format!(
            "providers:\n  claude:\n    api_style: anthropic\n    base_url: {}\n    api_key: k\n    model: m2\n",
            llm.anthropic_base_url()
        ),
    )
    .unwrap();
    gw.submit(&sid, "/reload").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(
        evs.last().unwrap().event,
        "turn.completed",
        "{:?}",
        evs.last().unwrap().data
    );
    gw.submit(&sid, "new model?").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().event, "turn.completed");
    assert_eq!(llm.requests().last().unwrap().body["model"], "m2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_turn_shows_in_the_transcript_and_its_trace_by_engine_id() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::ToolCall {
        name: "apropos".into(),
        arguments: json!({"pattern": "x"}),
        text_before: Some("Looking. ".into()),
    });
    llm.push(Script::Stall {
        chunks: vec!["Halfway there. ".into()],
    });
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (_, t) = gw.submit(&sid, "work").await;
    let tid = t["turn_id"].as_str().unwrap().to_string();
    // wait for the second iteration to stream
    let evs = sse.collect_until("iteration.completed", WAIT).await;
    assert!(ev_types(&evs).contains(&"block.output"));
    sse.collect_until("content.block.delta", WAIT).await;
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    let row = &tr["turns"][0];
    assert_eq!(row["status"], "running", "{row}");
    let its = row["iterations"].as_array().unwrap();
    assert!(!its.is_empty(), "iterations so far are inlined: {row}");
    let engine_id = row["id"].as_str().unwrap().to_string();
    let (s, trace) = gw
        .get(format!("/v1/sessions/{sid}/turns/{engine_id}/trace"))
        .await;
    assert_eq!(s, reqwest::StatusCode::OK);
    assert_eq!(
        trace["iterations"].as_array().map(Vec::len),
        Some(its.len()),
        "{trace}"
    );
    assert!(trace["iterations"][0]["forms"]
        .to_string()
        .contains("apropos"));
    if engine_id != tid {
        let (_, by_gateway_id) = gw
            .get(format!("/v1/sessions/{sid}/turns/{tid}/trace"))
            .await;
        assert_eq!(by_gateway_id["iterations"], json!([]));
    }
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(soul["running_request"], "work");
    assert!(soul["running_started_at"].is_i64(), "{soul}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_a_failed_block_and_the_model_goes_on() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::tool_call("no_such_tool", json!({"a": 1})));
    llm.push(Script::text(&["Recovered."]));
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "try").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(evs.last().unwrap().event, "turn.completed");
    let out = evs.iter().find(|e| e.event == "block.output").unwrap();
    assert!(out.data["error"].is_string(), "{:?}", out.data);
    let second = &llm.requests()[1].body;
    let tool_msg = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .expect("the failure goes back to the model");
    assert!(
        tool_msg["content"].to_string().contains("no_such_tool"),
        "{tool_msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tool_calls_each_get_a_block_and_a_result() {
    for anthropic_style in [false, true] {
        let llm = FixtureLlm::start().await;
        llm.push(Script::ToolCalls(vec![
            ("apropos".into(), json!({"pattern": "a"})),
            ("doc".into(), json!({"name": "b"})),
        ]));
        llm.push(Script::text(&["Both done."]));
        let opts = if anthropic_style {
            anthropic(&llm)
        } else {
            Opts::openai(&llm)
        };
        let gw = Gateway::start(opts).await;
        let sid = gw.create_session().await;
        let mut sse = gw.events(&sid, -1).await;
        gw.submit(&sid, "two tools").await;
        let evs = sse.collect_until_any(TERMINALS, WAIT).await;
        assert_eq!(
            evs.last().unwrap().event,
            "turn.completed",
            "anthropic={anthropic_style}"
        );
        let outs: Vec<&Event> = evs.iter().filter(|e| e.event == "block.output").collect();
        assert_eq!(outs.len(), 2, "anthropic={anthropic_style}");
        assert_ne!(outs[0].data["block_id"], outs[1].data["block_id"]);
        assert_ne!(outs[0].data["tool_call_id"], outs[1].data["tool_call_id"]);
        let second = llm.requests()[1].body["messages"].to_string();
        let n = if anthropic_style {
            second.matches("\"tool_result\"").count()
        } else {
            second.matches("\"role\":\"tool\"").count()
        };
        assert_eq!(n, 2, "anthropic={anthropic_style}: {second}");
    }
}
