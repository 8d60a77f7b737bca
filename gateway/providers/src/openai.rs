//! OpenAI chat completions dialect (`POST {base}/chat/completions`, streaming),
//! also used for OpenAI-compatible servers (ollama, llama.cpp, vLLM, …).

use std::collections::{HashMap, VecDeque};

use serde_json::{json, Map, Value};

use crate::sse::{EventParser, SseEvent};
use crate::{
    ChatMessage, ChatRequest, ProviderConfig, ProviderError, StopReason, StreamEvent, Usage,
};

/// Builds the JSON request body.
pub(crate) fn request_body(cfg: &ProviderConfig, req: &ChatRequest) -> Value {
    let model = if req.model.is_empty() {
        cfg.default_model.as_str()
    } else {
        req.model.as_str()
    };
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for m in &req.messages {
        messages.push(match m {
            ChatMessage::User { text } => json!({"role": "user", "content": text}),
            ChatMessage::UserImages { text, images } => {
                let mut parts = vec![json!({"type": "text", "text": text})];
                for i in images {
                    parts.push(json!({"type": "image_url", "image_url": {
                        "url": format!("data:{};base64,{}", i.media_type, i.base64)}}));
                }
                json!({"role": "user", "content": parts})
            }
            ChatMessage::Assistant { text, tool_calls } => {
                let mut o = Map::new();
                o.insert("role".into(), json!("assistant"));
                if tool_calls.is_empty() {
                    o.insert("content".into(), json!(text));
                } else {
                    let content = if text.is_empty() {
                        Value::Null
                    } else {
                        json!(text)
                    };
                    o.insert("content".into(), content);
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": {
                                    "name": c.name,
                                    "arguments": if c.arguments.trim().is_empty() { "{}" } else { c.arguments.as_str() },
                                },
                            })
                        })
                        .collect();
                    o.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(o)
            }
            ChatMessage::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                // The dialect has no error flag; the model sees it in the text.
                let content = if *is_error {
                    format!("Error: {content}")
                } else {
                    content.clone()
                };
                json!({"role": "tool", "tool_call_id": call_id, "content": content})
            }
        });
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(level) = req.reasoning {
        body.insert("reasoning_effort".into(), json!(level.as_str()));
    }
    if let Some(level) = req.verbosity {
        body.insert("verbosity".into(), json!(level.as_str()));
    }
    if req.fast {
        body.insert("service_tier".into(), json!("priority"));
    }
    if let Some(max) = req.max_tokens {
        // api.openai.com rejects `max_tokens` for reasoning models; compatible
        // servers mostly only know `max_tokens`.
        let field = if cfg.base_url.contains("api.openai.com") {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(field.into(), json!(max));
    }
    crate::merge_extra(&mut body, req);
    Value::Object(body)
}

/// Streaming chunk parser.
#[derive(Default)]
pub(crate) struct Parser {
    /// Provider tool-call index -> our ordinal.
    by_index: HashMap<u64, usize>,
    /// Ids of the calls, by ordinal.
    ids: Vec<String>,
    finish: Option<StopReason>,
    usage: Usage,
    done: bool,
}

impl Parser {
    fn complete(&mut self, out: &mut VecDeque<StreamEvent>) {
        let stop = match self.finish.take() {
            // ollama and some others say "stop" even after tool calls.
            Some(StopReason::EndTurn) | None if !self.ids.is_empty() => StopReason::ToolUse,
            Some(s) => s,
            None => StopReason::EndTurn,
        };
        out.push_back(StreamEvent::Completed {
            stop_reason: stop,
            usage: self.usage,
        });
        self.done = true;
    }

    fn tool_call(&mut self, tc: &Value, out: &mut VecDeque<StreamEvent>) {
        let id = tc
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let func = tc.get("function");
        let name = func
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        // Some compatible servers send the arguments as a JSON object, not text.
        let args = match func.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            Some(v @ Value::Object(_)) => v.to_string(),
            _ => String::new(),
        };
        let existing = match tc.get("index").and_then(Value::as_u64) {
            Some(i) => self.by_index.get(&i).copied(),
            // No index: a new id starts a new call, otherwise continue the last one.
            None => match id {
                Some(id) => self.ids.iter().position(|x| x == id),
                None => self.ids.len().checked_sub(1),
            },
        };
        let ordinal = match existing {
            Some(o) => o,
            None => {
                let o = self.ids.len();
                let id = id
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("call_{o}"));
                if let Some(i) = tc.get("index").and_then(Value::as_u64) {
                    self.by_index.insert(i, o);
                }
                self.ids.push(id.clone());
                out.push_back(StreamEvent::ToolCallStarted {
                    index: o,
                    id,
                    name: name.to_string(),
                });
                o
            }
        };
        if !args.is_empty() {
            out.push_back(StreamEvent::ToolCallDelta {
                index: ordinal,
                arguments_delta: args,
            });
        }
    }
}

fn map_finish(s: &str) -> StopReason {
    match s {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_string()),
    }
}

fn parse_usage(u: &Value) -> Usage {
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n("/prompt_tokens"),
        output_tokens: n("/completion_tokens"),
        cached_input_tokens: n("/prompt_tokens_details/cached_tokens"),
        reasoning_tokens: n("/completion_tokens_details/reasoning_tokens"),
        cache_write_tokens: 0,
    }
}

impl EventParser for Parser {
    fn on_event(
        &mut self,
        ev: SseEvent,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        let data = ev.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.complete(out);
            return Ok(());
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| ProviderError::Protocol(format!("invalid JSON in stream chunk: {e}")))?;
        self.on_chunk(&v, out)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn on_eof(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        if self.finish.is_some() {
            // No `[DONE]`, but the model had finished: accept.
            self.complete(out);
            Ok(())
        } else {
            Err(ProviderError::Protocol(
                "stream ended before finish_reason / [DONE]".into(),
            ))
        }
    }
}

impl Parser {
    fn on_chunk(
        &mut self,
        v: &Value,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| err.as_str())
                .unwrap_or("unknown error")
                .to_string();
            let kind = err
                .get("type")
                .or_else(|| err.get("code"))
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_string();
            return Err(ProviderError::Stream { kind, message });
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = parse_usage(u);
        }
        let Some(choice) = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(());
        };
        if let Some(delta) = choice.get("delta") {
            for field in ["reasoning_content", "reasoning"] {
                if let Some(r) = delta
                    .get(field)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                {
                    out.push_back(StreamEvent::ReasoningDelta(r.to_string()));
                    break;
                }
            }
            if let Some(t) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                out.push_back(StreamEvent::TextDelta(t.to_string()));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for tc in calls {
                    self.tool_call(tc, out);
                }
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(map_finish(f));
        }
        Ok(())
    }
}

/// Events for a non-streamed `chat.completion` object (a server that ignored
/// `stream: true`): its message is treated as one big delta.
pub(crate) fn events_from_whole(v: &Value) -> Result<Vec<StreamEvent>, ProviderError> {
    let mut chunk = v.clone();
    if let Some(choices) = chunk.get_mut("choices").and_then(Value::as_array_mut) {
        for c in choices {
            if let Some(mut m) = c.get_mut("message").map(Value::take) {
                if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                    for (i, call) in calls.iter_mut().enumerate() {
                        if call.get("index").is_none() {
                            call["index"] = json!(i);
                        }
                    }
                }
                c["delta"] = m;
            }
        }
    }
    let mut p = Parser::default();
    let mut out = VecDeque::new();
    p.on_chunk(&chunk, &mut out)?;
    if p.finish.is_none() {
        p.finish = Some(StopReason::EndTurn);
    }
    p.complete(&mut out);
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dialect, ToolCall, ToolSpec};

    fn run(lines: &[&str]) -> (Vec<StreamEvent>, Result<(), ProviderError>) {
        let mut p = Parser::default();
        let mut out = VecDeque::new();
        for l in lines {
            let r = p.on_event(
                SseEvent {
                    event: None,
                    data: l.to_string(),
                },
                &mut out,
            );
            if r.is_err() {
                return (out.into(), r);
            }
        }
        let r = if p.is_done() {
            Ok(())
        } else {
            p.on_eof(&mut out)
        };
        (out.into(), r)
    }

    #[test]
    fn text_reasoning_and_usage_chunks_become_events() {
        let (ev, r) = run(&[
            r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":3}}}"#,
            "[DONE]",
        ]);
        r.unwrap();
        assert_eq!(
            ev,
            vec![
                StreamEvent::ReasoningDelta("hmm".into()),
                StreamEvent::TextDelta("Hi".into()),
                StreamEvent::Completed {
                    stop_reason: StopReason::EndTurn,
                    usage: Usage {
                        input_tokens: 12,
                        output_tokens: 5,
                        cached_input_tokens: 8,
                        reasoning_tokens: 3,
                        cache_write_tokens: 0,
                    }
                }
            ]
        );
    }

    #[test]
    fn interleaved_parallel_tool_call_chunks_are_routed_by_index() {
        let (ev, r) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{\"y\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":":2}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        r.unwrap();
        assert_eq!(
            ev,
            vec![
                StreamEvent::ToolCallStarted {
                    index: 0,
                    id: "call_a".into(),
                    name: "f".into()
                },
                StreamEvent::ToolCallStarted {
                    index: 1,
                    id: "call_b".into(),
                    name: "g".into()
                },
                StreamEvent::ToolCallDelta {
                    index: 1,
                    arguments_delta: "{\"y\"".into()
                },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    arguments_delta: "{\"x\":1}".into()
                },
                StreamEvent::ToolCallDelta {
                    index: 1,
                    arguments_delta: ":2}".into()
                },
                StreamEvent::Completed {
                    stop_reason: StopReason::ToolUse,
                    usage: Usage::default()
                },
            ]
        );
    }

    #[test]
    fn a_stop_finish_reason_after_tool_calls_is_reported_as_tool_use() {
        let (ev, r) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"x","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        r.unwrap();
        assert!(matches!(
            ev.last(),
            Some(StreamEvent::Completed {
                stop_reason: StopReason::ToolUse,
                ..
            })
        ));
    }

    #[test]
    fn an_error_object_inside_the_stream_becomes_a_stream_error() {
        let (_, r) = run(&[r#"{"error":{"message":"model overloaded","type":"server_error"}}"#]);
        assert_eq!(
            r,
            Err(ProviderError::Stream {
                kind: "server_error".into(),
                message: "model overloaded".into()
            })
        );
    }

    #[test]
    fn a_stream_cut_before_finish_is_a_protocol_error() {
        let (_, r) = run(&[r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#]);
        assert!(matches!(r, Err(ProviderError::Protocol(_))));
    }

    #[test]
    fn request_body_has_system_tools_tool_calls_and_tool_results() {
        let mut cfg = ProviderConfig::new("p", Dialect::OpenAiChat, "http://x/v1", "m-default");
        cfg.api_key = None;
        let req = ChatRequest {
            model: String::new(),
            system: Some("be brief".into()),
            messages: vec![
                ChatMessage::User { text: "hi".into() },
                ChatMessage::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "f".into(),
                        arguments: "{\"a\":1}".into(),
                    }],
                },
                ChatMessage::ToolResult {
                    call_id: "call_1".into(),
                    content: "boom".into(),
                    is_error: true,
                },
            ],
            tools: vec![ToolSpec {
                name: "f".into(),
                description: "does f".into(),
                parameters: json!({"type":"object","properties":{}}),
            }],
            max_tokens: Some(100),
            ..Default::default()
        };
        let b = request_body(&cfg, &req);
        assert_eq!(b["model"], "m-default");
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["max_tokens"], 100);
        assert_eq!(
            b["messages"][0],
            json!({"role":"system","content":"be brief"})
        );
        assert_eq!(b["messages"][2]["content"], Value::Null);
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1}"
        );
        assert_eq!(
            b["messages"][3],
            json!({"role":"tool","tool_call_id":"call_1","content":"Error: boom"})
        );
        assert_eq!(b["tools"][0]["type"], "function");
        assert_eq!(b["tools"][0]["function"]["name"], "f");
        assert_eq!(b["tools"][0]["function"]["parameters"]["type"], "object");
    }
}
