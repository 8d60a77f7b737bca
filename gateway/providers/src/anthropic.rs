//! Anthropic messages dialect (`POST {base}/messages`, streaming, `tool_use`).

use std::collections::{HashMap, VecDeque};

use serde_json::{json, Map, Value};

use crate::sse::{EventParser, SseEvent};
use crate::{
    ChatMessage, ChatRequest, ProviderConfig, ProviderError, StopReason, StreamEvent, Usage,
};

pub(crate) const API_VERSION: &str = "2023-06-01";
/// `max_tokens` is mandatory in this dialect.
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Builds the JSON request body. Consecutive messages of the same role are
/// merged (tool results and the following user text share one user turn), and
/// inside a user turn `tool_result` blocks come first, as the API requires.
pub(crate) fn request_body(cfg: &ProviderConfig, req: &ChatRequest) -> Value {
    let model = if req.model.is_empty() {
        cfg.default_model.as_str()
    } else {
        req.model.as_str()
    };
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in &req.messages {
        let (role, blocks) = match m {
            ChatMessage::User { text } => {
                let text = if text.is_empty() { "(empty)" } else { text };
                ("user", vec![json!({"type": "text", "text": text})])
            }
            ChatMessage::UserImages { text, images } => {
                let mut blocks: Vec<Value> = images
                    .iter()
                    .map(|i| {
                        json!({"type": "image", "source": {"type": "base64",
                        "media_type": i.media_type, "data": i.base64}})
                    })
                    .collect();
                let text = if text.is_empty() { "(empty)" } else { text };
                blocks.push(json!({"type": "text", "text": text}));
                ("user", blocks)
            }
            ChatMessage::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for c in tool_calls {
                    let input = serde_json::from_str::<Value>(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                ("assistant", blocks)
            }
            ChatMessage::ToolResult {
                call_id,
                content,
                is_error,
            } => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": content,
                    "is_error": is_error,
                })],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, existing)) if *r == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // Stable: tool results first, then text, order otherwise kept.
                blocks.sort_by_key(|b| b["type"] != "tool_result");
            }
            json!({"role": role, "content": blocks})
        })
        .collect();

    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    let mut max_tokens = req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if let Some(level) = req.reasoning {
        // Extended thinking: the budget must stay below max_tokens.
        let budget = thinking_budget(level);
        max_tokens = max_tokens.max(budget + 4096);
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    body.insert("max_tokens".into(), json!(max_tokens));
    body.insert("stream".into(), json!(true));
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    // The messages API refuses members it does not know: only the ones it accepts pass.
    for (k, v) in req.extra.iter().flatten() {
        if ACCEPTED_EXTRA.contains(&k.as_str()) {
            body.insert(k.clone(), v.clone());
        }
    }
    Value::Object(body)
}

/// `extra_body` members the messages API accepts.
const ACCEPTED_EXTRA: &[&str] = &[
    "temperature",
    "top_p",
    "top_k",
    "metadata",
    "stop_sequences",
    "service_tier",
];

/// Extended-thinking budget per reasoning level.
pub(crate) fn thinking_budget(level: crate::Level) -> u32 {
    match level {
        crate::Level::Low => 2048,
        crate::Level::Medium => 8192,
        crate::Level::High => 24576,
    }
}

enum Block {
    Text,
    Thinking,
    Tool {
        ordinal: usize,
        got_args: bool,
        /// `input` of `content_block_start`, sent if no `input_json_delta` follows.
        initial: String,
    },
    Other,
}

#[derive(Default)]
pub(crate) struct Parser {
    blocks: HashMap<u64, Block>,
    tools: usize,
    usage: Usage,
    stop: Option<StopReason>,
    done: bool,
}

fn map_stop(s: &str) -> StopReason {
    match s {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_string()),
    }
}

impl Parser {
    /// Applies whichever usage fields are present (`message_start` has them
    /// all, `message_delta` usually only `output_tokens`).
    fn apply_usage(&mut self, u: &Value) {
        let get = |k: &str| u.get(k).and_then(Value::as_u64);
        if let Some(input) = get("input_tokens") {
            let read = get("cache_read_input_tokens").unwrap_or(0);
            let created = get("cache_creation_input_tokens").unwrap_or(0);
            self.usage.input_tokens = input + read + created;
            self.usage.cached_input_tokens = read;
            self.usage.cache_write_tokens = created;
        }
        if let Some(out) = get("output_tokens") {
            self.usage.output_tokens = out;
        }
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

impl Parser {
    fn on_value(
        &mut self,
        v: &Value,
        event_name: Option<&str>,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(event_name)
            .unwrap_or("");
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.apply_usage(u);
                }
            }
            "content_block_start" => {
                let cb = v.get("content_block").unwrap_or(&Value::Null);
                let block = match cb.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text" => {
                        if let Some(t) = str_at(cb, "/text").filter(|t| !t.is_empty()) {
                            out.push_back(StreamEvent::TextDelta(t.to_string()));
                        }
                        Block::Text
                    }
                    "thinking" => {
                        if let Some(t) = str_at(cb, "/thinking").filter(|t| !t.is_empty()) {
                            out.push_back(StreamEvent::ReasoningDelta(t.to_string()));
                        }
                        Block::Thinking
                    }
                    "tool_use" => {
                        let ordinal = self.tools;
                        self.tools += 1;
                        let id = str_at(cb, "/id")
                            .filter(|s| !s.is_empty())
                            .map(str::to_string)
                            .unwrap_or_else(|| format!("toolu_{ordinal}"));
                        let name = str_at(cb, "/name").unwrap_or("").to_string();
                        out.push_back(StreamEvent::ToolCallStarted {
                            index: ordinal,
                            id,
                            name,
                        });
                        let initial = match cb.get("input") {
                            Some(i @ Value::Object(m)) if !m.is_empty() => i.to_string(),
                            _ => "{}".to_string(),
                        };
                        Block::Tool {
                            ordinal,
                            got_args: false,
                            initial,
                        }
                    }
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text_delta" => {
                        if let Some(t) = str_at(delta, "/text").filter(|t| !t.is_empty()) {
                            out.push_back(StreamEvent::TextDelta(t.to_string()));
                        }
                    }
                    "thinking_delta" => {
                        if let Some(t) = str_at(delta, "/thinking").filter(|t| !t.is_empty()) {
                            out.push_back(StreamEvent::ReasoningDelta(t.to_string()));
                        }
                    }
                    "input_json_delta" => {
                        let Some(Block::Tool {
                            ordinal, got_args, ..
                        }) = self.blocks.get_mut(&index)
                        else {
                            return Err(ProviderError::Protocol(format!(
                                "input_json_delta for content block {index}, which is not a tool_use block"
                            )));
                        };
                        if let Some(p) = str_at(delta, "/partial_json").filter(|p| !p.is_empty()) {
                            *got_args = true;
                            out.push_back(StreamEvent::ToolCallDelta {
                                index: *ordinal,
                                arguments_delta: p.to_string(),
                            });
                        }
                    }
                    _ => {} // signature_delta, citations_delta, …
                }
            }
            "content_block_stop" => {
                if let Some(Block::Tool {
                    ordinal,
                    got_args: false,
                    initial,
                }) = self.blocks.remove(&index)
                {
                    out.push_back(StreamEvent::ToolCallDelta {
                        index: ordinal,
                        arguments_delta: initial,
                    });
                }
            }
            "message_delta" => {
                if let Some(s) = str_at(v, "/delta/stop_reason") {
                    self.stop = Some(map_stop(s));
                }
                if let Some(u) = v.get("usage") {
                    self.apply_usage(u);
                }
            }
            "message_stop" => {
                let stop = self.stop.take().unwrap_or(if self.tools > 0 {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                });
                out.push_back(StreamEvent::Completed {
                    stop_reason: stop,
                    usage: self.usage,
                });
                self.done = true;
            }
            "error" => {
                return Err(ProviderError::Stream {
                    kind: str_at(v, "/error/type").unwrap_or("error").to_string(),
                    message: str_at(v, "/error/message")
                        .unwrap_or("unknown error")
                        .to_string(),
                });
            }
            _ => {} // ping and future event types
        }
        Ok(())
    }
}

/// Events for a non-streamed `message` object (a server that ignored
/// `stream: true`), replayed through the streaming parser.
pub(crate) fn events_from_whole(v: &Value) -> Result<Vec<StreamEvent>, ProviderError> {
    let mut p = Parser::default();
    let mut out = VecDeque::new();
    if v.get("type").and_then(Value::as_str) == Some("error") {
        p.on_value(v, None, &mut out)?;
    }
    p.on_value(
        &json!({"type": "message_start", "message": {"usage": v.get("usage").cloned().unwrap_or(Value::Null)}}),
        None,
        &mut out,
    )?;
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, block) in blocks.into_iter().enumerate() {
        p.on_value(
            &json!({"type": "content_block_start", "index": i, "content_block": block}),
            None,
            &mut out,
        )?;
        p.on_value(
            &json!({"type": "content_block_stop", "index": i}),
            None,
            &mut out,
        )?;
    }
    p.on_value(
        &json!({"type": "message_delta", "delta": {"stop_reason": v.get("stop_reason").cloned().unwrap_or(Value::Null)}}),
        None,
        &mut out,
    )?;
    p.on_value(&json!({"type": "message_stop"}), None, &mut out)?;
    Ok(out.into())
}

impl EventParser for Parser {
    fn on_event(
        &mut self,
        ev: SseEvent,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        if ev.data.trim().is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(&ev.data)
            .map_err(|e| ProviderError::Protocol(format!("invalid JSON in stream event: {e}")))?;
        self.on_value(&v, ev.event.as_deref(), out)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn on_eof(&mut self, _out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        Err(ProviderError::Protocol(
            "stream ended before message_stop".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dialect, ToolCall, ToolSpec};

    fn run(events: &[(&str, &str)]) -> (Vec<StreamEvent>, Result<(), ProviderError>) {
        let mut p = Parser::default();
        let mut out = VecDeque::new();
        for (name, data) in events {
            let r = p.on_event(
                SseEvent {
                    event: Some(name.to_string()),
                    data: data.to_string(),
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
    fn thinking_text_tool_use_and_usage_events_become_stream_events() {
        let (ev, r) = run(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":2,"cache_read_input_tokens":30,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"let me see"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            ("ping", r#"{"type": "ping"}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking."}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"q\":"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":2}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_2","name":"now","input":{}}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":3}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]);
        r.unwrap();
        assert_eq!(
            ev,
            vec![
                StreamEvent::ReasoningDelta("let me see".into()),
                StreamEvent::TextDelta("Checking.".into()),
                StreamEvent::ToolCallStarted {
                    index: 0,
                    id: "toolu_1".into(),
                    name: "get".into()
                },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    arguments_delta: "{\"q\":".into()
                },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    arguments_delta: "1}".into()
                },
                StreamEvent::ToolCallStarted {
                    index: 1,
                    id: "toolu_2".into(),
                    name: "now".into()
                },
                StreamEvent::ToolCallDelta {
                    index: 1,
                    arguments_delta: "{}".into()
                },
                StreamEvent::Completed {
                    stop_reason: StopReason::ToolUse,
                    usage: Usage {
                        input_tokens: 42,
                        output_tokens: 42,
                        cached_input_tokens: 30,
                        reasoning_tokens: 0,
                        cache_write_tokens: 2,
                    },
                },
            ]
        );
    }

    #[test]
    fn an_error_event_mid_stream_becomes_a_stream_error_with_its_message() {
        let (_, r) = run(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"usage":{"input_tokens":1,"output_tokens":1}}}"#,
            ),
            (
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ),
        ]);
        assert_eq!(
            r,
            Err(ProviderError::Stream {
                kind: "overloaded_error".into(),
                message: "Overloaded".into()
            })
        );
    }

    #[test]
    fn a_stream_cut_before_message_stop_is_a_protocol_error() {
        let (_, r) = run(&[(
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":1,"output_tokens":1}}}"#,
        )]);
        assert!(matches!(r, Err(ProviderError::Protocol(_))));
    }

    #[test]
    fn request_body_merges_tool_results_into_one_user_turn_with_results_first() {
        let cfg = ProviderConfig::new("a", Dialect::Anthropic, "http://x/v1", "claude-x");
        let req = ChatRequest {
            model: "claude-y".into(),
            system: Some("sys".into()),
            messages: vec![
                ChatMessage::User { text: "go".into() },
                ChatMessage::Assistant {
                    text: "ok".into(),
                    tool_calls: vec![
                        ToolCall {
                            id: "t1".into(),
                            name: "a".into(),
                            arguments: "{\"k\":1}".into(),
                        },
                        ToolCall {
                            id: "t2".into(),
                            name: "b".into(),
                            arguments: String::new(),
                        },
                    ],
                },
                ChatMessage::ToolResult {
                    call_id: "t1".into(),
                    content: "r1".into(),
                    is_error: false,
                },
                ChatMessage::ToolResult {
                    call_id: "t2".into(),
                    content: "bad".into(),
                    is_error: true,
                },
                ChatMessage::User {
                    text: "and?".into(),
                },
            ],
            tools: vec![ToolSpec {
                name: "a".into(),
                description: "A".into(),
                parameters: json!({"type":"object"}),
            }],
            max_tokens: None,
            ..Default::default()
        };
        let b = request_body(&cfg, &req);
        assert_eq!(b["model"], "claude-y");
        assert_eq!(b["max_tokens"], 8192);
        assert_eq!(b["stream"], true);
        assert_eq!(b["system"], "sys");
        let msgs = b["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(
            msgs[1]["content"][1],
            json!({"type":"tool_use","id":"t1","name":"a","input":{"k":1}})
        );
        assert_eq!(msgs[1]["content"][2]["input"], json!({}));
        assert_eq!(msgs[2]["role"], "user");
        assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
        assert_eq!(
            msgs[2]["content"][1],
            json!({"type":"tool_result","tool_use_id":"t2","content":"bad","is_error":true})
        );
        assert_eq!(msgs[2]["content"][2], json!({"type":"text","text":"and?"}));
        assert_eq!(
            b["tools"][0],
            json!({"name":"a","description":"A","input_schema":{"type":"object"}})
        );
    }
}
