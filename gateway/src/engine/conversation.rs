//! A session's conversation as the model sees it (docs/decisions.md, T1): loaded from the
//! stored turns, exchanges and newest summary at a turn's start; the running turn's
//! exchange kept when it settles. Turns kept before exchanges were stored replay as their
//! request and answer.

use super::turn_machine::Terminal;
use crate::agent::context::{Context, Ending, Exchange};
use crate::agent::memory::{self, TranscriptRecord};
use crate::records::turn::{Status, Turn};
use crate::store::Store;
use serde_json::Value;
use vis_providers::ChatMessage;

/// The session's newest summary and the settled turns after it, for the turn `tid` whose
/// user message is `request`.
pub async fn load(store: &Store, sid: &str, tid: &str, request: ChatMessage) -> Context {
    let id = sid.to_string();
    let loaded = store
        .with(move |db| {
            let comp = memory::latest_compaction(db, &id)?;
            let through = comp.as_ref().map_or(0, |k| k.through_ord);
            Ok((comp, memory::turns_after(db, &id, through)?))
        })
        .await;
    let (comp, rows) = match loaded {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(session = sid, error = %e, "the session's history could not be read");
            (None, Vec::new())
        }
    };
    let mut past = Vec::new();
    let mut current = None;
    for (record, kept) in rows {
        let Ok(turn) = serde_json::from_str::<Turn>(&record) else {
            continue;
        };
        if turn.tid == tid {
            current = Some(Exchange {
                tid: turn.tid.clone(),
                ord: turn.ord,
                request: request.clone(),
                steps: Vec::new(),
                ending: None,
            });
            continue;
        }
        if let Some(mut ex) = exchange_of(&turn, kept) {
            if let Some((ptid, n)) = comp.as_ref().and_then(|k| k.partial.as_ref()) {
                if *ptid == ex.tid {
                    ex.steps.drain(..(*n).min(ex.steps.len()));
                }
            }
            past.push(ex);
        }
    }
    Context {
        summary: comp.as_ref().map(|k| k.summary.clone()),
        through_ord: comp.as_ref().map_or(0, |k| k.through_ord),
        past,
        current: Some(current.unwrap_or(Exchange {
            tid: tid.to_string(),
            ord: i64::MAX,
            request,
            steps: Vec::new(),
            ending: None,
        })),
        current_folded: 0,
    }
}

/// The code of a settled turn's `error` block.
fn error_code(t: &Turn) -> Option<&str> {
    t.content
        .iter()
        .find(|b| b.get("type").and_then(Value::as_str) == Some("error"))
        .and_then(|b| b.get("code").and_then(Value::as_str))
}

/// A settled turn as the model saw it; `None` for turns that are not replayed (slash
/// commands, turns still queued or running).
pub fn exchange_of(t: &Turn, kept: Option<TranscriptRecord>) -> Option<Exchange> {
    if t.is_slash {
        return None;
    }
    let ending = match t.status {
        Status::Completed | Status::Suspended => Ending::Completed,
        Status::Cancelled => Ending::Cancelled,
        Status::Failed => match error_code(t) {
            Some("interrupted") => Ending::Interrupted,
            code => Ending::Failed {
                code: code.unwrap_or("turn_failed").to_string(),
                message: t.error.clone().unwrap_or_default(),
            },
        },
        Status::Queued | Status::Streaming => return None,
    };
    let request = crate::companion::attachments::user_message(&t.request, &t.attachments);
    let steps = match kept {
        Some(k) => k.steps,
        None => {
            let answer: String = t
                .content
                .iter()
                .filter_map(|b| b.get("markdown").and_then(Value::as_str))
                .collect();
            if answer.is_empty() {
                Vec::new()
            } else {
                vec![ChatMessage::Assistant {
                    text: answer,
                    tool_calls: vec![],
                }]
            }
        }
    };
    Some(Exchange {
        tid: t.tid.clone(),
        ord: t.ord,
        request,
        steps,
        ending: Some(ending),
    })
}

/// Keeps a settled turn's exchange (nothing for a turn that never reached the model).
pub async fn keep(store: &Store, sid: &str, tid: &str, steps: Vec<ChatMessage>, t: &Terminal) {
    let ending = match t {
        Terminal::Completed { .. } => Ending::Completed,
        Terminal::Cancelled => Ending::Cancelled,
        Terminal::Failed { code, message } => Ending::Failed {
            code: code.clone(),
            message: message.clone(),
        },
    };
    if steps.is_empty() && ending == Ending::Completed {
        return;
    }
    let record = TranscriptRecord { steps, ending };
    let (s, id) = (sid.to_string(), tid.to_string());
    if let Err(e) = store
        .with(move |db| memory::save_transcript(db, &s, &id, &record))
        .await
    {
        tracing::error!(session = sid, turn = tid, error = %e, "the turn's exchange could not be stored");
    }
}
