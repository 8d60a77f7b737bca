//! What one model request holds: the session's summary, the settled turns after it and the
//! running turn, rendered as native messages and shaped to fit the budget
//! (docs/decisions.md, T1, T2).
//!
//! Shaping goes in levels: older tool outputs are shortened (head and tail kept, a line
//! saying how much was cut), then the running turn's older outputs, then every output
//! harder; only when the newest material alone does not fit are the oldest settled turns
//! left out. Compaction (a model-written summary of the older part) is decided here and
//! done by the caller.

use super::window::{message_tokens, Budget};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use vis_providers::ChatMessage;

/// How a settled turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    Completed,
    Failed {
        code: String,
        message: String,
    },
    Cancelled,
    /// The gateway stopped (or crashed) while it ran.
    Interrupted,
}

/// One turn as the model saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    pub tid: String,
    pub ord: i64,
    /// The user's message (text and images).
    pub request: ChatMessage,
    /// What followed, in order: assistant messages (text, tool calls) and tool results.
    pub steps: Vec<ChatMessage>,
    /// `None` while the turn runs.
    pub ending: Option<Ending>,
}

impl Exchange {
    /// Model requests that asked for tools.
    pub fn step_count(&self) -> usize {
        self.steps
            .iter()
            .filter(|m| matches!(m, ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty()))
            .count()
    }

    /// The line a failed, cancelled or interrupted turn is replayed with.
    pub fn marker(&self) -> Option<String> {
        let n = self.step_count();
        let steps = if n == 1 { "step" } else { "steps" };
        Some(match self.ending.as_ref()? {
            Ending::Completed => return None,
            Ending::Failed { code, message } => {
                let first: String = message
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(300)
                    .collect();
                format!(
                    "[Vis: this turn failed after {n} {steps} ({code}: {first}). Its work may be incomplete.]"
                )
            }
            Ending::Cancelled => format!(
                "[Vis: the user cancelled this turn after {n} {steps}. Its work may be incomplete.]"
            ),
            Ending::Interrupted => format!(
                "[Vis: this turn was interrupted after {n} {steps} (the gateway stopped). Its work may be incomplete.]"
            ),
        })
    }
}

/// Everything a request is built from.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The stored summary of the session's older part.
    pub summary: Option<String>,
    /// Settled turns after the summary, oldest first.
    pub past: Vec<Exchange>,
    /// The running turn.
    pub current: Option<Exchange>,
    /// Messages at the start of the running turn's steps already folded into the summary
    /// (a compaction in the middle of a long turn).
    pub current_folded: usize,
    /// Every turn up to this `ord` is folded into the summary.
    pub through_ord: i64,
}

/// The words that introduce the summary in a request.
pub const SUMMARY_HEADING: &str = "[Vis: summary of the earlier part of this session. The older turns were compacted to fit the model's context window; this summary replaces them.]";

/// How hard outputs are shortened at one level.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// Outputs of settled turns older than the newest `whole_turns`, in bytes.
    old: usize,
    whole_turns: usize,
    /// Outputs of the running turn before its newest `whole_steps` steps.
    current_old: usize,
    whole_steps: usize,
    /// User texts of settled turns (long pasted logs), in bytes.
    old_request: usize,
}

const SHAPES: [Shape; 4] = [
    Shape {
        old: 8_000,
        whole_turns: 2,
        current_old: usize::MAX,
        whole_steps: usize::MAX,
        old_request: usize::MAX,
    },
    Shape {
        old: 2_000,
        whole_turns: 0,
        current_old: 8_000,
        whole_steps: 2,
        old_request: usize::MAX,
    },
    Shape {
        old: 600,
        whole_turns: 0,
        current_old: 2_000,
        whole_steps: 1,
        old_request: 8_000,
    },
    Shape {
        old: 200,
        whole_turns: 0,
        current_old: 300,
        whole_steps: 1,
        old_request: 2_000,
    },
];

/// `text` cut to about `max` bytes: a head, the tail (where errors are), and a line in
/// between saying how much was cut and how to see it again.
pub fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let keep = max.saturating_sub(120);
    let head_len = floor_boundary(text, keep * 2 / 5);
    let tail_start = ceil_boundary(text, text.len() - (keep - keep * 2 / 5));
    let cut = tail_start - head_len;
    format!(
        "{}\n[… {cut} bytes of this output cut to save context; run the call again to see them …]\n{}",
        &text[..head_len],
        &text[tail_start..]
    )
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

fn shorten_user(m: &ChatMessage, max: usize) -> ChatMessage {
    match m {
        ChatMessage::User { text } => ChatMessage::User {
            text: shorten(text, max),
        },
        ChatMessage::UserImages { text, images } => ChatMessage::UserImages {
            text: shorten(text, max),
            images: images.clone(),
        },
        other => other.clone(),
    }
}

/// Appends an exchange's steps with every tool call answered: a call without its result
/// (the turn ended first) gets one saying so; a result without its call is left out. The
/// providers refuse either. Outputs are cut to `budget(step index from the end)`.
fn push_steps(
    out: &mut Vec<ChatMessage>,
    steps: &[ChatMessage],
    output_max: impl Fn(usize) -> usize,
) {
    let total = steps
        .iter()
        .filter(|m| matches!(m, ChatMessage::Assistant { .. }))
        .count();
    let mut seen = 0usize;
    let mut open: Vec<String> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    let close = |out: &mut Vec<ChatMessage>, open: &mut Vec<String>, answered: &HashSet<String>| {
        for id in open.drain(..) {
            if !answered.contains(&id) {
                out.push(ChatMessage::ToolResult {
                    call_id: id,
                    content: "[no result: the turn ended before this call finished]".into(),
                    is_error: true,
                });
            }
        }
    };
    for m in steps {
        match m {
            ChatMessage::Assistant { tool_calls, .. } => {
                close(out, &mut open, &answered);
                answered.clear();
                seen += 1;
                open = tool_calls.iter().map(|c| c.id.clone()).collect();
                out.push(m.clone());
            }
            ChatMessage::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                if open.contains(call_id) && answered.insert(call_id.clone()) {
                    let from_end = total - seen;
                    out.push(ChatMessage::ToolResult {
                        call_id: call_id.clone(),
                        content: shorten(content, output_max(from_end)),
                        is_error: *is_error,
                    });
                }
            }
            other => out.push(other.clone()),
        }
    }
    close(out, &mut open, &answered);
}

/// The marker of a settled turn, appended to its last assistant text (or as one).
fn push_marker(out: &mut Vec<ChatMessage>, marker: String) {
    if let Some(ChatMessage::Assistant { text, tool_calls }) = out.last_mut() {
        if tool_calls.is_empty() {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&marker);
            return;
        }
    }
    out.push(ChatMessage::Assistant {
        text: marker,
        tool_calls: vec![],
    });
}

/// One settled turn as messages.
fn render_past(ex: &Exchange, output_max: usize, request_max: usize) -> Vec<ChatMessage> {
    let mut out = vec![shorten_user(&ex.request, request_max)];
    push_steps(&mut out, &ex.steps, |_| output_max);
    if let Some(m) = ex.marker() {
        push_marker(&mut out, m);
    }
    out
}

fn tokens(msgs: &[ChatMessage]) -> u64 {
    msgs.iter().map(message_tokens).sum()
}

/// A request's messages and their estimated size.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub messages: Vec<ChatMessage>,
    /// Estimated tokens of the messages (without the system prompt and tools).
    pub tokens: u64,
    /// The shaping level used (0: only older outputs cut).
    pub level: usize,
    /// Settled turns left out because even their shortest form did not fit.
    pub dropped: usize,
}

/// What to do before the next request.
#[derive(Debug, Clone, PartialEq)]
pub enum Fit {
    Ready(Fitted),
    /// Above the threshold with an older part to summarise: compact, then fit again.
    Compact,
    /// The newest material alone does not fit the window.
    TooLarge {
        tokens: u64,
    },
}

impl Context {
    /// Messages at one shaping level; `any` caps every output (the newest included).
    fn render(&self, shape: Shape, any: usize, skip_past: usize) -> Vec<ChatMessage> {
        let mut out = Vec::new();
        if let Some(s) = &self.summary {
            out.push(ChatMessage::User {
                text: format!("{SUMMARY_HEADING}\n\n{s}"),
            });
        }
        let past = &self.past[skip_past.min(self.past.len())..];
        let whole_from = past.len().saturating_sub(shape.whole_turns);
        for (i, ex) in past.iter().enumerate() {
            let max = if i >= whole_from {
                any
            } else {
                shape.old.min(any)
            };
            out.extend(render_past(ex, max, shape.old_request));
        }
        if let Some(cur) = &self.current {
            out.push(cur.request.clone());
            let steps = &cur.steps[self.current_folded.min(cur.steps.len())..];
            push_steps(&mut out, steps, |from_end| {
                if from_end < shape.whole_steps {
                    any
                } else {
                    shape.current_old.min(any)
                }
            });
        }
        out
    }

    /// Estimated tokens of the messages with only older outputs shortened.
    pub fn estimate(&self, budget: &Budget) -> u64 {
        tokens(&self.render(SHAPES[0], budget.limit as usize, 0))
    }

    /// True when there is an older part a summary could replace.
    pub fn compactable(&self) -> bool {
        !self.past.is_empty() || self.fold_point().is_some()
    }

    /// Where the running turn's steps could be folded: before its newest two steps.
    fn fold_point(&self) -> Option<usize> {
        let cur = self.current.as_ref()?;
        let starts: Vec<usize> = cur
            .steps
            .iter()
            .enumerate()
            .filter(|(_, m)| matches!(m, ChatMessage::Assistant { .. }))
            .map(|(i, _)| i)
            .filter(|i| *i >= self.current_folded)
            .collect();
        (starts.len() > 2).then(|| starts[starts.len() - 2])
    }

    /// Shapes the request for `budget`, `fixed` tokens being the system prompt and tools.
    /// With `may_compact`, a request above the threshold asks for a compaction first.
    pub fn fit(&self, budget: &Budget, fixed: u64, may_compact: bool) -> Fit {
        let any = budget.limit as usize; // ≈ a third of the limit, at three bytes a token
        let room = budget.limit.saturating_sub(fixed);
        let first = self.render(SHAPES[0], any, 0);
        let t0 = tokens(&first);
        if t0 <= budget.threshold.saturating_sub(fixed) {
            return Fit::Ready(Fitted {
                messages: first,
                tokens: t0,
                level: 0,
                dropped: 0,
            });
        }
        if may_compact && self.compactable() {
            return Fit::Compact;
        }
        if t0 <= room {
            return Fit::Ready(Fitted {
                messages: first,
                tokens: t0,
                level: 0,
                dropped: 0,
            });
        }
        for (level, shape) in SHAPES.iter().enumerate().skip(1) {
            let any = if level == 3 { any / 2 } else { any };
            let msgs = self.render(*shape, any, 0);
            let t = tokens(&msgs);
            if t <= room {
                return Fit::Ready(Fitted {
                    messages: msgs,
                    tokens: t,
                    level,
                    dropped: 0,
                });
            }
        }
        // Leave out the oldest settled turns, shortest form, until the rest fits.
        let last = SHAPES.len() - 1;
        let mut t = u64::MAX;
        for skip in 1..=self.past.len() {
            let msgs = self.render(SHAPES[last], any / 2, skip);
            t = tokens(&msgs);
            if t <= room {
                return Fit::Ready(Fitted {
                    messages: msgs,
                    tokens: t,
                    level: last,
                    dropped: skip,
                });
            }
        }
        Fit::TooLarge {
            tokens: t.min(tokens(&self.render(SHAPES[last], any / 2, self.past.len()))) + fixed,
        }
    }

    /// What a compaction folds: how many settled turns (oldest first) and up to which
    /// message of the running turn. The newest settled turns that fit in a quarter of the
    /// limit stay whole; the running turn's older steps are folded when it fills half.
    pub fn plan_fold(&self, budget: &Budget) -> Fold {
        let level1 = SHAPES[1];
        let any = budget.limit as usize;
        let mut kept = 0u64;
        let mut keep_from = self.past.len();
        for (i, ex) in self.past.iter().enumerate().rev() {
            let t = tokens(&render_past(ex, level1.old.min(any), level1.old_request));
            if kept + t > budget.limit / 4 {
                break;
            }
            kept += t;
            keep_from = i;
        }
        let current_tokens = self
            .current
            .as_ref()
            .map(|c| {
                let mut v = vec![c.request.clone()];
                push_steps(
                    &mut v,
                    &c.steps[self.current_folded.min(c.steps.len())..],
                    |_| level1.current_old.min(any),
                );
                tokens(&v)
            })
            .unwrap_or(0);
        let current_upto = if current_tokens > budget.limit / 2 {
            self.fold_point()
        } else {
            None
        };
        if keep_from == 0 && current_upto.is_none() && !self.past.is_empty() {
            // Nothing would be folded although the request is too large: fold every
            // settled turn.
            keep_from = self.past.len();
        }
        Fold {
            past: keep_from,
            current_upto,
        }
    }
}

/// The part of a context a compaction replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fold {
    /// The oldest settled turns folded.
    pub past: usize,
    /// The running turn's steps before this message index are folded too.
    pub current_upto: Option<usize>,
}

impl Fold {
    pub fn is_empty(&self) -> bool {
        self.past == 0 && self.current_upto.is_none()
    }
}

/// Plain text of what a compaction folds, one piece per turn (outputs cut to `output_max`),
/// for the summarising request.
pub fn fold_text(ctx: &Context, fold: &Fold, output_max: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    for ex in &ctx.past[..fold.past.min(ctx.past.len())] {
        let mut msgs = Vec::new();
        push_steps(&mut msgs, &ex.steps, |_| output_max);
        let ending = ex.marker().unwrap_or_else(|| "(completed)".into());
        pieces.push(turn_text(&ex.request, &msgs, &ending, output_max));
    }
    if let (Some(cur), Some(upto)) = (&ctx.current, fold.current_upto) {
        let mut msgs = Vec::new();
        let from = ctx.current_folded.min(upto);
        push_steps(&mut msgs, &cur.steps[from..upto], |_| output_max);
        pieces.push(turn_text(
            &cur.request,
            &msgs,
            "(this turn is still running; its newest steps follow the summary)",
            output_max,
        ));
    }
    pieces
}

fn turn_text(request: &ChatMessage, msgs: &[ChatMessage], ending: &str, max: usize) -> String {
    let mut s = String::new();
    let user = match request {
        ChatMessage::User { text } | ChatMessage::UserImages { text, .. } => text.as_str(),
        _ => "",
    };
    s.push_str("### User\n");
    s.push_str(&shorten(user, max.max(4_000)));
    for m in msgs {
        match m {
            ChatMessage::Assistant { text, tool_calls } => {
                if !text.is_empty() {
                    s.push_str("\n### Assistant\n");
                    s.push_str(text);
                }
                for c in tool_calls {
                    s.push_str(&format!("\n### Tool call {}\n", c.name));
                    s.push_str(&shorten(&call_code(&c.arguments), max.max(2_000)));
                }
            }
            ChatMessage::ToolResult {
                content, is_error, ..
            } => {
                s.push_str(if *is_error {
                    "\n### Tool error\n"
                } else {
                    "\n### Tool result\n"
                });
                s.push_str(content);
            }
            ChatMessage::User { text } | ChatMessage::UserImages { text, .. } => {
                s.push_str("\n### User\n");
                s.push_str(text);
            }
        }
    }
    s.push_str("\n### Outcome\n");
    s.push_str(ending);
    s
}

/// A call's arguments as the model wrote them: the `code` of a Python block, else the JSON.
fn call_code(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_string))
        .unwrap_or_else(|| arguments.to_string())
}

#[cfg(test)]
#[path = "context_tests.rs"]
mod tests;
