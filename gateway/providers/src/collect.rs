//! Folding a finished event stream into the assistant message and usage.

use futures::{Stream, StreamExt};

use crate::{ChatMessage, ProviderError, StopReason, StreamEvent, ToolCall, Usage};

/// Everything one model response produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    pub text: String,
    pub reasoning: String,
    /// In call order; empty arguments are normalised to `{}`.
    pub tool_calls: Vec<ToolCall>,
    pub stop_reason: StopReason,
    pub usage: Usage,
}

impl Collected {
    /// The assistant history entry for the next request.
    pub fn to_message(&self) -> ChatMessage {
        ChatMessage::Assistant {
            text: self.text.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// Drains `stream`; fails with the stream's first error, or with
/// [`ProviderError::Protocol`] when it ends without `Completed`.
pub async fn collect<S>(stream: S) -> Result<Collected, ProviderError>
where
    S: Stream<Item = Result<StreamEvent, ProviderError>>,
{
    let mut stream = std::pin::pin!(stream);
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev? {
            StreamEvent::TextDelta(t) => text.push_str(&t),
            StreamEvent::ReasoningDelta(r) => reasoning.push_str(&r),
            StreamEvent::ToolCallStarted { index, id, name } => {
                if calls.len() <= index {
                    calls.resize_with(index + 1, || ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                }
                calls[index].id = id;
                calls[index].name = name;
            }
            StreamEvent::ToolCallDelta {
                index,
                arguments_delta,
            } => match calls.get_mut(index) {
                Some(c) => c.arguments.push_str(&arguments_delta),
                None => {
                    return Err(ProviderError::Protocol(format!(
                        "arguments for tool call {index} before it started"
                    )))
                }
            },
            StreamEvent::Completed { stop_reason, usage } => {
                for c in &mut calls {
                    if c.arguments.trim().is_empty() {
                        c.arguments = "{}".to_string();
                    }
                }
                return Ok(Collected {
                    text,
                    reasoning,
                    tool_calls: calls,
                    stop_reason,
                    usage,
                });
            }
        }
    }
    Err(ProviderError::Protocol(
        "stream ended without a completion event".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn deltas_are_assembled_into_text_and_tool_calls() {
        let events = vec![
            Ok(StreamEvent::TextDelta("Hel".into())),
            Ok(StreamEvent::TextDelta("lo".into())),
            Ok(StreamEvent::ToolCallStarted {
                index: 0,
                id: "a".into(),
                name: "f".into(),
            }),
            Ok(StreamEvent::ToolCallStarted {
                index: 1,
                id: "b".into(),
                name: "g".into(),
            }),
            Ok(StreamEvent::ToolCallDelta {
                index: 0,
                arguments_delta: "{\"x\":".into(),
            }),
            Ok(StreamEvent::ToolCallDelta {
                index: 0,
                arguments_delta: "1}".into(),
            }),
            Ok(StreamEvent::Completed {
                stop_reason: StopReason::ToolUse,
                usage: Usage::default(),
            }),
        ];
        let c = collect(futures::stream::iter(events)).await.unwrap();
        assert_eq!(c.text, "Hello");
        assert_eq!(c.tool_calls[0].arguments, "{\"x\":1}");
        assert_eq!(c.tool_calls[1].arguments, "{}");
        assert_eq!(c.stop_reason, StopReason::ToolUse);
    }

    #[tokio::test]
    async fn a_stream_without_completion_is_an_error() {
        let events = vec![Ok(StreamEvent::TextDelta("x".into()))];
        assert!(matches!(
            collect(futures::stream::iter(events)).await,
            Err(ProviderError::Protocol(_))
        ));
    }
}
