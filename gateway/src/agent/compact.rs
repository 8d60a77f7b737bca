//! Compaction: the model summarises the older part of a session, and the summary replaces
//! it in every later request (docs/decisions.md, T2). A part too large for one request is
//! folded in chunks, each chunk summarised together with the summary so far.

use super::context::shorten;
use super::window::{text_tokens, Budget};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use vis_providers::{ChatMessage, ChatRequest, Client, ProviderError, StreamEvent, Usage};

/// The summariser's instructions.
pub const COMPACT_PROMPT: &str = "You keep the working memory of Vis, a coding agent, when its \
conversation with a user grows too long for the model's context window. Below is the older part \
of the session (and the summary written so far, if any). Write the summary that will replace it: \
the agent will continue from your summary and the newest turns alone, so keep everything it needs \
and nothing it does not.\n\nUse these Markdown sections, leaving out empty ones:\n\
## Goal: what the user wants overall, and what they asked most recently.\n\
## Instructions and preferences: what the user told the agent to do or avoid.\n\
## Decisions: choices made and why.\n\
## Files: paths read, created or changed, and what changed in each.\n\
## Commands and results: what was run and what happened; quote exact error lines that still matter.\n\
## Verified: what was checked, and how.\n\
## Open: what is unfinished or failing, and the next step.\n\n\
Keep names, paths, numbers, commands and error messages exact. Never invent anything. \
Write plain statements, no preamble.";

/// The summary's own budget in tokens.
pub fn summary_tokens(budget: &Budget) -> u32 {
    (budget.limit / 5).clamp(256, 4_096) as u32
}

/// Groups `pieces` into chunks that each fit `room` tokens (a piece larger than `room`
/// alone is cut to it).
pub fn chunks(pieces: Vec<String>, room: u64) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for p in pieces {
        let p = if text_tokens(p.len()) > room {
            shorten(&p, (room as usize).saturating_mul(3))
        } else {
            p
        };
        if !cur.is_empty() && text_tokens(cur.len() + p.len() + 2) > room {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push_str("\n\n");
        }
        cur.push_str(&p);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// One summarising request's user message.
fn request_text(previous: Option<&str>, chunk: &str, focus: Option<&str>) -> String {
    let mut s = String::new();
    if let Some(p) = previous.filter(|p| !p.trim().is_empty()) {
        s.push_str("# The summary so far\n\n");
        s.push_str(p);
        s.push_str("\n\n");
    }
    s.push_str("# The conversation to fold into the summary\n\n");
    s.push_str(chunk);
    if let Some(f) = focus.filter(|f| !f.trim().is_empty()) {
        s.push_str("\n\n# The user's focus for this summary\n\n");
        s.push_str(f.trim());
    }
    s
}

/// Asks the model for the summary of `previous` plus `pieces`. Returns the summary and the
/// tokens the requests used.
pub async fn summarise(
    client: &Client,
    model: &str,
    budget: &Budget,
    previous: Option<String>,
    pieces: Vec<String>,
    focus: Option<&str>,
    cancel: &CancellationToken,
) -> Result<(String, Usage), ProviderError> {
    let answer = summary_tokens(budget);
    let fixed = text_tokens(COMPACT_PROMPT.len()) + u64::from(answer) + 64;
    let room = budget
        .limit
        .saturating_sub(fixed + u64::from(answer))
        .max(512);
    let mut summary = previous;
    let mut usage = Usage::default();
    for chunk in chunks(pieces, room) {
        let req = ChatRequest {
            model: model.to_string(),
            system: Some(COMPACT_PROMPT.to_string()),
            messages: vec![ChatMessage::User {
                text: request_text(summary.as_deref(), &chunk, focus),
            }],
            max_tokens: Some(answer),
            ..Default::default()
        };
        let mut stream = client.stream(&req, cancel.clone(), &|_| {}).await?;
        let mut text = String::new();
        while let Some(ev) = stream.next().await {
            match ev? {
                StreamEvent::TextDelta(t) => text.push_str(&t),
                StreamEvent::Completed { usage: u, .. } => {
                    usage.input_tokens += u.input_tokens;
                    usage.output_tokens += u.output_tokens;
                    usage.cached_input_tokens += u.cached_input_tokens;
                    usage.reasoning_tokens += u.reasoning_tokens;
                    usage.cache_write_tokens += u.cache_write_tokens;
                }
                _ => {}
            }
        }
        let text = text.trim().to_string();
        if text.is_empty() {
            return Err(ProviderError::Protocol(
                "the model answered the summary request with no text".into(),
            ));
        }
        summary = Some(text);
    }
    Ok((summary.unwrap_or_default(), usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_grouped_into_chunks_that_fit_and_an_oversized_piece_is_cut() {
        let pieces = vec!["a".repeat(900), "b".repeat(900), "c".repeat(9_000)];
        let out = chunks(pieces, 700);
        assert_eq!(
            out.len(),
            2,
            "{:?}",
            out.iter().map(String::len).collect::<Vec<_>>()
        );
        assert!(out.iter().all(|c| text_tokens(c.len()) <= 700 + 60));
        assert!(out[1].starts_with('c') && out[1].ends_with('c'));
    }

    #[test]
    fn the_request_carries_the_summary_so_far_and_the_focus() {
        let t = request_text(Some("old"), "turns", Some("the parser"));
        assert!(t.find("old").unwrap() < t.find("turns").unwrap());
        assert!(t.ends_with("the parser"));
    }
}
