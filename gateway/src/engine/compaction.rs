//! Fitting a turn's next request into the model's window, compacting when it would pass
//! the threshold (docs/decisions.md, T2): the summary is written by the model, stored,
//! announced to the phone (`context.compacted`), and replaces the older part from then on.

use super::run_ctx::{Conversation, Outcome, RunCtx};
use crate::agent::compact;
use crate::agent::context::{fold_text, Fit, Fitted, Fold};
use crate::agent::memory::{self, Compaction, Trigger};
use vis_companion_api::events::{Activity, ActivityKind, ContextCompacted, Event};
use vis_providers::Client;

/// How much of each tool output a summarising request sees.
const FOLD_OUTPUT_BYTES: usize = 1_500;

/// The next request's messages, compacting first when the context asks for it (at most
/// once per request, and not when `may_compact` is false: right after a compaction). A
/// request that cannot fit even so fails the turn.
pub async fn fit(
    ctx: &RunCtx,
    client: &Client,
    model: &str,
    conv: &mut Conversation,
    fixed: u64,
    mut may_compact: bool,
) -> Result<Fitted, Outcome> {
    loop {
        match conv.context.fit(&conv.budget, fixed, may_compact) {
            Fit::Ready(f) => {
                if f.dropped > 0 {
                    tracing::warn!(session = %ctx.sid, turn = %ctx.tid, dropped = f.dropped,
                        "older turns left out of the request to fit the context window");
                }
                return Ok(f);
            }
            Fit::Compact => {
                may_compact = false;
                compact(ctx, client, model, conv, fixed, How::auto(Trigger::Auto)).await?;
            }
            Fit::TooLarge { tokens } => {
                return Err(Outcome::Failed {
                    code: "context_overflow",
                    message: format!(
                        "the newest part of this turn needs about {tokens} tokens, more than \
                         {model}'s context window of {} tokens holds; shorten the request or set \
                         `context_window` for the provider if the model's window is larger",
                        conv.budget.window
                    ),
                })
            }
        }
    }
}

/// Why and how much to compact.
pub struct How<'a> {
    pub trigger: Trigger,
    /// What the user asked the summary to keep in view (`/compact FOCUS`).
    pub focus: Option<&'a str>,
    /// Fold every settled turn (`/compact`), not only what the window needs.
    pub all: bool,
}

impl How<'_> {
    pub fn auto(trigger: Trigger) -> How<'static> {
        How {
            trigger,
            focus: None,
            all: false,
        }
    }
}

/// Summarises the older part of the conversation and applies the summary; returns the
/// stored record (`None` when there was nothing to fold or the summary failed). A failed
/// summary leaves the conversation as it was (the request is then shaped without it);
/// only a cancel ends the turn.
pub async fn compact(
    ctx: &RunCtx,
    client: &Client,
    model: &str,
    conv: &mut Conversation,
    fixed: u64,
    how: How<'_>,
) -> Result<Option<Compaction>, Outcome> {
    let (trigger, focus) = (how.trigger, how.focus);
    let fold = if how.all {
        Fold {
            past: conv.context.past.len(),
            current_upto: None,
        }
    } else {
        conv.context.plan_fold(&conv.budget)
    };
    if fold.is_empty() {
        return Ok(None);
    }
    let mut activity = Activity::new(ActivityKind::ProviderCall);
    activity.reason = Some("compaction".into());
    activity.phrase = Some("Vis is summarising the older part of the session".into());
    ctx.emit(Event::Activity(activity));
    let before = conv.context.estimate(&conv.budget) + fixed;
    let pieces = fold_text(&conv.context, &fold, FOLD_OUTPUT_BYTES);
    let previous = conv.context.summary.clone();
    let result = compact::summarise(
        client,
        model,
        &conv.budget,
        previous,
        pieces,
        focus,
        &ctx.cancel,
    )
    .await;
    let (summary, usage) = match result {
        Ok(r) => r,
        Err(e) => {
            if ctx.cancel.is_cancelled() {
                return Err(Outcome::Failed {
                    code: "turn_cancelled",
                    message: "cancelled".into(),
                });
            }
            tracing::warn!(session = %ctx.sid, turn = %ctx.tid, error = %e,
                "compaction failed; the request is shortened instead");
            return Ok(None);
        }
    };
    {
        let mut p = ctx.progress.lock();
        p.tokens.input += usage.input_tokens;
        p.tokens.output += usage.output_tokens;
        p.tokens.cached += usage.cached_input_tokens;
        p.compactions += 1;
    }
    let folded_turns = fold.past;
    let record = apply(conv, &fold, summary, trigger, &ctx.tid, before, fixed);
    let sid = ctx.sid.clone();
    let stored = record.clone();
    if let Err(e) = ctx
        .gw
        .store
        .with(move |db| memory::save_compaction(db, &sid, &stored))
        .await
    {
        tracing::error!(session = %ctx.sid, error = %e, "the compaction could not be stored");
    }
    ctx.emit(Event::ContextCompacted(ContextCompacted {
        turn_id: ctx.tid.clone(),
        trigger: trigger.as_str().into(),
        summary: record.summary.clone(),
        folded_turns,
        tokens_before: record.tokens_before,
        tokens_after: record.tokens_after,
        window: conv.budget.window,
    }));
    Ok(Some(record))
}

/// Replaces the folded part of `conv` by `summary`; returns the record to store.
pub fn apply(
    conv: &mut Conversation,
    fold: &Fold,
    summary: String,
    trigger: Trigger,
    tid: &str,
    before: u64,
    fixed: u64,
) -> Compaction {
    let cx = &mut conv.context;
    let n = fold.past.min(cx.past.len());
    if n > 0 {
        cx.through_ord = cx.through_ord.max(cx.past[n - 1].ord);
    }
    cx.past.drain(..n);
    if let Some(upto) = fold.current_upto {
        cx.current_folded = upto;
    }
    cx.summary = Some(summary.clone());
    let partial = (cx.current_folded > 0)
        .then(|| {
            cx.current
                .as_ref()
                .map(|c| (c.tid.clone(), cx.current_folded))
        })
        .flatten();
    let after = cx.estimate(&conv.budget) + fixed;
    Compaction {
        summary,
        through_ord: cx.through_ord,
        partial,
        trigger,
        turn_id: tid.to_string(),
        tokens_before: before,
        tokens_after: after,
        created_at: super::now_ms(),
    }
}
