//! The turn model and its wire shapes: the turn record and the transcript row.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use vis_companion_api::wire::{
    AttachmentPreview, TranscriptRow, TurnCost, TurnOutcome, TurnRecord, TurnStatus, TurnTokens,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Queued,
    Streaming,
    Completed,
    Failed,
    Cancelled,
    Suspended,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Streaming => "streaming",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Suspended => "suspended",
        }
    }
    /// The raw engine status the transcript ships.
    pub fn raw(self) -> &'static str {
        match self {
            Status::Queued | Status::Streaming => "running",
            Status::Completed | Status::Suspended => "success",
            Status::Failed => "error",
            Status::Cancelled => "interrupted",
        }
    }
    /// The same state as the wire's type.
    pub fn wire(self) -> TurnStatus {
        match self {
            Status::Queued => TurnStatus::Queued,
            Status::Streaming => TurnStatus::Streaming,
            Status::Completed => TurnStatus::Completed,
            Status::Failed => TurnStatus::Failed,
            Status::Cancelled => TurnStatus::Cancelled,
            Status::Suspended => TurnStatus::Suspended,
        }
    }
    pub fn is_terminal(self) -> bool {
        !matches!(self, Status::Queued | Status::Streaming)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cached: u64,
    pub reasoning: u64,
    /// The part of `input` written to the prompt cache.
    #[serde(default)]
    pub cache_write: u64,
}

/// A turn as the gateway keeps it (stored as JSON in `turns.record`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Turn {
    pub tid: String,
    pub sid: String,
    pub ord: i64,
    pub engine_turn_id: String,
    pub status: Status,
    pub request: String,
    pub display_request: Option<String>,
    pub idempotency_key: Option<String>,
    pub model: Option<String>,
    pub reasoning_default: Option<Value>,
    pub created_at: i64,
    pub queued_at: Option<i64>,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub cancelling_at: Option<i64>,
    #[serde(default)]
    pub attachments: Vec<Value>,
    #[serde(default)]
    pub content: Vec<Value>,
    pub error: Option<String>,
    #[serde(default)]
    pub iterations: Vec<Value>,
    pub provider: Option<String>,
    #[serde(default)]
    pub tokens: Tokens,
    pub duration_ms: Option<i64>,
    pub utilization: Option<f64>,
    #[serde(default)]
    pub is_slash: bool,
    /// The last model request's estimated size and the model's window, in tokens.
    #[serde(default)]
    pub context_tokens: Option<u64>,
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Compactions that ran in this turn.
    #[serde(default)]
    pub compactions: u32,
    /// Members the submit asked to add to each provider request (never on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_body: Option<serde_json::Map<String, Value>>,
}

/// First line of a request, ≤ 240 chars plus `…`.
pub fn preview(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut out: String = line.chars().take(240).collect();
    if line.chars().count() > 240 || text.trim().lines().count() > 1 {
        out.push('…');
    }
    out
}

fn attachment_previews(atts: &[Value]) -> Vec<AttachmentPreview> {
    atts.iter()
        .map(|a| {
            let size = a
                .get("size")
                .and_then(Value::as_u64)
                .map(|n| n as usize)
                .or_else(|| {
                    a.get("base64")
                        .and_then(|b| b.as_str())
                        .map(|b| b.len() * 3 / 4)
                })
                .unwrap_or(0);
            AttachmentPreview {
                filename: a.get("filename").cloned(),
                media_type: a.get("media_type").cloned(),
                size,
                size_label: size_label(size),
            }
        })
        .collect()
}

fn size_label(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MB", n as f64 / (1 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.0} KB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

impl Turn {
    /// A turn just submitted (status `Queued`); its one id serves every surface (submit
    /// answer, events, transcript, trace, forks).
    pub fn new(tid: String, sid: &str, ord: i64, request: String, now: i64) -> Turn {
        Turn {
            engine_turn_id: tid.clone(),
            tid,
            sid: sid.to_string(),
            ord,
            status: Status::Queued,
            request,
            display_request: None,
            idempotency_key: None,
            model: None,
            reasoning_default: None,
            extra_body: None,
            created_at: now,
            queued_at: None,
            started_at: None,
            completed_at: None,
            cancelling_at: None,
            attachments: vec![],
            content: vec![],
            error: None,
            iterations: vec![],
            provider: None,
            tokens: Default::default(),
            duration_ms: None,
            utilization: None,
            is_slash: false,
            context_tokens: None,
            context_window: None,
            compactions: 0,
        }
    }

    /// The turn record as the routes answer it (inline base64 attachments left out).
    pub fn record(&self) -> TurnRecord {
        let outcome = self.status.is_terminal().then(|| {
            let t = &self.tokens;
            TurnOutcome {
                engine_turn_id: self.tid.clone(),
                provider: self.provider.clone(),
                llm_selected: self.model.clone(),
                llm_actual: self.model.clone(),
                is_llm_fallback: false,
                llm_routing_trace: Vec::new(),
                tokens: TurnTokens {
                    input: t.input,
                    input_regular: t.input.saturating_sub(t.cached + t.cache_write),
                    cache_created: t.cache_write,
                    cached: t.cached,
                    output: t.output,
                    reasoning: t.reasoning,
                },
                cost: TurnCost {
                    total_cost: 0.0,
                    model: self.model.clone(),
                    provider: self.provider.clone(),
                },
                confidence: None,
                eval: None,
                iteration_count: self.iterations.len(),
                duration_ms: self.duration_ms,
                utilization: self.utilization,
                error: self.error.clone(),
                completed_at: self.completed_at,
                is_needs_input: self.status == Status::Suspended,
            }
        });
        TurnRecord {
            id: self.tid.clone(),
            turn_id: self.tid.clone(),
            session_id: self.sid.clone(),
            role: "assistant".into(),
            status: self.status.wire(),
            request: self.request.clone(),
            created_at: self.created_at,
            content: self.content.clone(),
            request_preview: preview(&self.request),
            started_at: self.started_at,
            queued_at: self.queued_at,
            idempotency_key: self.idempotency_key.clone(),
            model: self.model.clone(),
            reasoning_default: self.reasoning_default.clone().filter(|v| !v.is_null()),
            display_request: self.display_request.clone(),
            cancelling_at: self.cancelling_at,
            attachment_previews: (!self.attachments.is_empty())
                .then(|| attachment_previews(&self.attachments)),
            outcome,
        }
    }

    /// The transcript row (raw status). Its id is the turn's one id, the one the submit
    /// answer, the events and `/forks` use (turns stored before ids were unified kept a
    /// second engine id; the trace answers to both).
    pub fn transcript_row(&self) -> TranscriptRow {
        let t = &self.tokens;
        TranscriptRow {
            id: self.tid.clone(),
            user_request: self
                .display_request
                .clone()
                .unwrap_or_else(|| self.request.clone()),
            status: self.status.raw().into(),
            content: self.content.clone(),
            iterations: self.iterations.clone(),
            created_at: self.created_at,
            duration_ms: self.duration_ms,
            iteration_count: self.iterations.len(),
            input_tokens: t.input,
            input_regular_tokens: t.input.saturating_sub(t.cached),
            input_cache_write_tokens: t.cache_write,
            input_cache_read_tokens: t.cached,
            output_tokens: t.output,
            output_reasoning_tokens: t.reasoning,
            total_cost: 0.0,
            model: self.model.clone(),
            provider: self.provider.clone(),
            attachments: self.attachments.clone(),
        }
    }
}

/// An `error` content block.
pub fn error_block(tid: &str, code: &str, message: &str) -> Value {
    json!({"id": format!("{tid}:error"), "type": "error", "code": code, "message": message, "retryable": false})
}

/// A `prose` content block.
pub fn prose_block(id: String, markdown: &str) -> Value {
    json!({"id": id, "type": "prose", "markdown": markdown})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preview_is_the_first_line_cut_at_240_chars() {
        assert_eq!(preview("hello"), "hello");
        assert_eq!(preview("one\ntwo"), "one…");
        let long = "x".repeat(300);
        assert_eq!(preview(&long).chars().count(), 241);
    }
}
