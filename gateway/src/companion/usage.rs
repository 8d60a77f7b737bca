//! A session's usage (tokens per turn and in total, as the providers reported them) and its
//! Markdown export.

use crate::records::turn::{Status, Turn};
use crate::records::SessionReader;
use crate::records::SessionResult;
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::Arc;
use vis_companion_api::records::{SessionUsage, TurnUsage, UsageAnswer};

fn tool_calls(t: &Turn) -> u64 {
    t.iterations
        .iter()
        .map(|it| {
            it.get("forms")
                .and_then(Value::as_array)
                .map_or(0, |f| f.len() as u64)
        })
        .sum()
}

/// One turn's row (`turn` is its 1-based position).
pub fn turn_usage(t: &Turn, turn: i64) -> TurnUsage {
    let k = &t.tokens;
    TurnUsage {
        turn_id: t.tid.clone(),
        turn,
        status: t.status.as_str().to_string(),
        provider: t.provider.clone(),
        model: t.model.clone(),
        iteration_count: t.iterations.len() as u64,
        tool_call_count: tool_calls(t),
        input_tokens: k.input,
        input_regular_tokens: k.input.saturating_sub(k.cached + k.cache_write),
        input_cache_write_tokens: k.cache_write,
        input_cache_read_tokens: k.cached,
        output_tokens: k.output,
        output_reasoning_tokens: k.reasoning,
        cost_usd: None,
        duration_ms: t.duration_ms,
        created_at: t.created_at,
        context_tokens: t.context_tokens,
        context_window: t.context_window,
    }
}

/// The rollup of the session's non-queued turns; `None` before its first turn.
pub fn rollup(turns: &[Turn]) -> Option<SessionUsage> {
    let rows: Vec<TurnUsage> = turns
        .iter()
        .filter(|t| t.status != Status::Queued)
        .enumerate()
        .map(|(i, t)| turn_usage(t, i as i64 + 1))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut u = SessionUsage {
        turn_count: rows.len() as u64,
        first_turn_at: rows.first().map(|r| r.created_at),
        last_turn_at: rows.last().map(|r| r.created_at),
        ..Default::default()
    };
    for r in &rows {
        u.iteration_count += r.iteration_count;
        u.tool_call_count += r.tool_call_count;
        u.input_tokens += r.input_tokens;
        u.input_regular_tokens += r.input_regular_tokens;
        u.input_cache_write_tokens += r.input_cache_write_tokens;
        u.input_cache_read_tokens += r.input_cache_read_tokens;
        u.output_tokens += r.output_tokens;
        u.output_reasoning_tokens += r.output_reasoning_tokens;
        u.duration_ms += r.duration_ms.unwrap_or(0).max(0);
        if r.provider.is_some() {
            u.provider = r.provider.clone();
            u.model = r.model.clone();
        }
        if let (Some(used), Some(window)) = (r.context_tokens, r.context_window) {
            u.context_tokens = Some(used);
            u.context_window = Some(window);
            u.context_utilization = Some((used as f64 / window.max(1) as f64).min(1.0));
        }
    }
    u.fold_count = turns.iter().map(|t| u64::from(t.compactions)).sum();
    u.cache_hit_rate = if u.input_tokens == 0 {
        0.0
    } else {
        u.input_cache_read_tokens as f64 / u.input_tokens as f64
    };
    u.turns = rows;
    Some(u)
}

fn when(ms: i64) -> String {
    // UTC, minute precision, without a date crate: days since the epoch → civil date.
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

fn text_of(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

/// The session as Markdown: a heading, then each turn's request, tool calls in one line
/// each, the answer, and what went wrong if anything did.
pub fn markdown(title: &str, sid: &str, root: &str, turns: &[Turn]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", title.trim());
    let _ = writeln!(out, "_Session `{sid}` · project `{root}`_\n");
    for (i, t) in turns
        .iter()
        .filter(|t| t.status != Status::Queued)
        .enumerate()
    {
        let _ = writeln!(out, "---\n\n## {}. You · {}\n", i + 1, when(t.created_at));
        let request = t.display_request.as_deref().unwrap_or(&t.request);
        let _ = writeln!(out, "{}\n", request.trim());
        for a in &t.attachments {
            let _ = writeln!(
                out,
                "- attached `{}` ({})",
                text_of(a.get("filename")),
                text_of(a.get("media_type"))
            );
        }
        if !t.attachments.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(out, "### Vis\n");
        let mut calls = Vec::new();
        for it in &t.iterations {
            for f in it
                .get("forms")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let op = text_of(f.get("op"));
                let summary = text_of(f.get("result_summary"));
                let failed = f.get("error").is_some_and(|e| !e.is_null());
                calls.push(format!(
                    "- {} `{}`{}{}",
                    if failed { "✗" } else { "✓" },
                    op,
                    if summary.is_empty() { "" } else { " — " },
                    summary.lines().next().unwrap_or("")
                ));
            }
        }
        if !calls.is_empty() {
            let _ = writeln!(
                out,
                "<details><summary>{} tool call(s)</summary>\n",
                calls.len()
            );
            let _ = writeln!(out, "{}\n\n</details>\n", calls.join("\n"));
        }
        for b in &t.content {
            match text_of(b.get("type")) {
                "prose" => {
                    let _ = writeln!(out, "{}\n", text_of(b.get("markdown")).trim());
                }
                "error" => {
                    let _ = writeln!(out, "> **Error:** {}\n", text_of(b.get("message")));
                }
                "notice" => {
                    let _ = writeln!(out, "> _{}_\n", text_of(b.get("message")));
                }
                _ => {}
            }
        }
        let k = &t.tokens;
        if k.input + k.output > 0 {
            let _ = writeln!(
                out,
                "<sub>{} · {} in / {} out tokens{}</sub>\n",
                t.model.as_deref().unwrap_or("model"),
                k.input,
                k.output,
                t.duration_ms
                    .map(|d| format!(" · {:.1} s", d as f64 / 1000.0))
                    .unwrap_or_default()
            );
        }
    }
    out
}

/// The usage and export job, over the sessions' turns.
pub struct Usage {
    sessions: Arc<dyn SessionReader>,
}

impl Usage {
    pub fn new(sessions: Arc<dyn SessionReader>) -> Self {
        Usage { sessions }
    }

    /// The session's token rollup (`None` before its first turn).
    pub async fn of_session(&self, sid: &str) -> SessionResult<UsageAnswer> {
        let turns = self.sessions.turns(sid).await?;
        Ok(UsageAnswer {
            usage: rollup(&turns),
        })
    }

    /// The session as Markdown.
    pub async fn markdown(&self, sid: &str) -> SessionResult<String> {
        let turns = self.sessions.turns(sid).await?;
        let row = self.sessions.row(sid).await?;
        let title = row
            .title
            .clone()
            .unwrap_or_else(|| "Untitled session".into());
        Ok(markdown(&title, sid, &row.root, &turns))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_render_in_utc() {
        assert_eq!(super::when(0), "1970-01-01 00:00 UTC");
        assert_eq!(super::when(1_700_000_000_000), "2023-11-14 22:13 UTC");
    }
}
