//! The model loop of one turn: fit the conversation to the model's window (compacting when
//! it would pass the threshold), call the provider, stream text into coalesced content
//! blocks, run the tool calls it asks for, repeat until it answers without tools or a
//! budget stops it (docs/decisions.md, G6, T1–T4). Every phase is published as a session
//! event; the exchange is kept in `Progress` for the transcript.

use super::coalesce::{Coalescer, Out};
use super::compaction;
use super::run_ctx::cut;
pub use super::run_ctx::{Conversation, Outcome, Progress, RunCtx};
use crate::agent::budget::LoopGuard;
use crate::agent::memory::Trigger;
use crate::agent::window::{self, Budget};
use crate::records::turn::prose_block;
use crate::tools::Tool;
use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vis_companion_api::events::{
    Activity, ActivityKind, BlockCompleted, BlockDelta, BlockPreview, BlockStartedData, Event,
    IterationCompleted, IterationError, IterationErrorData, ProviderFallback, ProviderRetry,
};
use vis_providers::{
    ChatMessage, ChatRequest, Client, ProviderError, RetryInfo, StreamEvent, ToolCall,
};

const ERROR_CAP: usize = 2000;

/// Resolves once the turn has produced output and then stayed silent for `limit` outside
/// a tool call ("output, then 6 min silence in a non-tool phase"); never before the
/// first output.
pub async fn silence(progress: &Mutex<Progress>, limit: Duration) {
    loop {
        let (last, in_tool) = {
            let p = progress.lock();
            (p.last_output, p.tools_running > 0)
        };
        let wait = match last {
            Some(t) if !in_tool => match limit.checked_sub(t.elapsed()) {
                Some(left) if !left.is_zero() => left,
                _ => return,
            },
            // Not armed yet, or inside a tool: look again later (a tool's end is output).
            _ => limit,
        };
        tokio::time::sleep(wait).await;
    }
}

/// Streams one provider call, publishing text as it comes. Returns the collected message.
async fn stream_once(
    ctx: &RunCtx,
    client: &Client,
    req: &ChatRequest,
    iteration: usize,
) -> Result<(String, String, Vec<ToolCall>), ProviderError> {
    let retry_ctx = (ctx.gw.bus.clone(), ctx.sid.clone(), ctx.tid.clone());
    let on_retry = move |r: RetryInfo| {
        let (bus, sid, tid) = &retry_ctx;
        let retry = ProviderRetry {
            turn_id: tid.clone(),
            iteration,
            attempt: r.attempt,
            max_retries: r.max_retries,
            delay_ms: r.delay_ms,
            error: r.error,
        };
        bus.publish(sid, Event::ProviderRetry(retry));
    };
    let mut stream = client.stream(req, ctx.cancel.clone(), &on_retry).await?;
    let mut reasoning = Coalescer::default();
    let mut prose = Coalescer::default();
    let mut calls: Vec<ToolCall> = Vec::new();
    let ids = (
        format!("{}:reasoning:{iteration}", ctx.tid),
        format!("{}:content:{iteration}", ctx.tid),
    );
    let publish = |ctx: &RunCtx, out: Out, id: &str, kind: &str, field: &str| {
        let (text, cumulative, open) = match out {
            Out::Open { text, cumulative } => (text, cumulative, true),
            Out::Delta { text, cumulative } => (text, cumulative, false),
        };
        if open {
            let block = if kind == "reasoning" {
                json!({"id": id, "type": "reasoning", "text": "", "visibility": "private"})
            } else {
                json!({"id": id, "type": "prose", "markdown": ""})
            };
            ctx.emit(Event::ContentBlockStarted(BlockStartedData {
                turn_id: ctx.tid.clone(),
                block,
                iteration,
            }));
            ctx.progress.lock().open_blocks.push(id.to_string());
        }
        ctx.emit(Event::ContentBlockDelta(BlockDelta {
            turn_id: ctx.tid.clone(),
            block_id: id.to_string(),
            field: field.to_string(),
            text: text.to_string(),
            cumulative: cumulative.to_string(),
            iteration,
        }));
    };
    while let Some(ev) = stream.next().await {
        let now = Instant::now();
        match ev? {
            StreamEvent::ReasoningDelta(t) => {
                if let Some(o) = reasoning.push(&t, now) {
                    publish(ctx, o, &ids.0, "reasoning", "text");
                }
            }
            StreamEvent::TextDelta(t) => {
                if let Some(o) = prose.push(&t, now) {
                    publish(ctx, o, &ids.1, "prose", "markdown");
                }
            }
            StreamEvent::ToolCallStarted { index, id, name } => {
                while calls.len() <= index {
                    calls.push(ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                }
                calls[index].id = id.clone();
                calls[index].name = name.clone();
                ctx.emit(Event::BlockPreview(BlockPreview {
                    turn_id: ctx.tid.clone(),
                    block_id: format!("{}:tool:{iteration}:{index}", ctx.tid),
                    code: format!("{name}(…)"),
                    display_code: name.clone(),
                    op: name.clone(),
                    tool_call_id: id.clone(),
                    iteration,
                }));
            }
            StreamEvent::ToolCallDelta {
                index,
                arguments_delta,
            } => {
                if let Some(c) = calls.get_mut(index) {
                    c.arguments.push_str(&arguments_delta);
                }
            }
            StreamEvent::Completed { usage, .. } => {
                let mut p = ctx.progress.lock();
                p.tokens.input += usage.input_tokens;
                p.tokens.output += usage.output_tokens;
                p.tokens.cached += usage.cached_input_tokens;
                p.tokens.reasoning += usage.reasoning_tokens;
                p.tokens.cache_write += usage.cache_write_tokens;
            }
        }
    }
    let now = Instant::now();
    if let Some(o) = reasoning.finish(now) {
        publish(ctx, o, &ids.0, "reasoning", "text");
    }
    if let Some(o) = prose.finish(now) {
        publish(ctx, o, &ids.1, "prose", "markdown");
    }
    calls.retain(|c| !c.name.is_empty());
    Ok((
        reasoning.text().to_string(),
        prose.text().to_string(),
        calls,
    ))
}

/// Stops the turn for a budget, with a message that says which and how to go on.
fn budget_stop(code: &'static str, message: String) -> Outcome {
    Outcome::Failed { code, message }
}

/// The agent loop.
pub async fn run(
    ctx: &RunCtx,
    client: Arc<Client>,
    model: String,
    mut conv: Conversation,
    tools: Vec<Arc<dyn Tool>>,
) -> Outcome {
    {
        let mut p = ctx.progress.lock();
        p.provider = Some(client.config().id.clone());
        p.model = Some(model.clone());
    }
    let specs = tools
        .iter()
        .filter(|t| !t.is_hidden())
        .map(|t| t.spec())
        .collect::<Vec<_>>();
    let settings = ctx
        .gw
        .companion
        .settings()
        .current()
        .await
        .unwrap_or_default();
    let fixed = window::fixed_tokens(&conv.system, &specs);
    let started = Instant::now();
    let mut guard = LoopGuard::default();
    let mut overflow_retried = false;
    // Set after the compaction a refusal caused: the retry is not compacted again.
    let mut just_compacted = false;
    let mut iteration = 0usize;
    loop {
        if iteration >= conv.budgets.max_steps {
            return budget_stop(
                "step_budget",
                format!(
                    "stopped after {iteration} model requests (agent.max_steps is {}); the work so far is kept, ask Vis to continue",
                    conv.budgets.max_steps
                ),
            );
        }
        if started.elapsed() >= conv.budgets.wall_clock {
            return budget_stop(
                "time_budget",
                format!(
                    "stopped after {} minutes (agent.max_minutes); the work so far is kept, ask Vis to continue",
                    conv.budgets.wall_clock.as_secs() / 60
                ),
            );
        }
        iteration += 1;
        let t0 = Instant::now();
        let reason = if iteration == 1 {
            "user-submit"
        } else {
            "tool-result"
        };
        let mut activity = Activity::new(ActivityKind::ProviderCall);
        activity.iteration = Some(iteration);
        activity.reason = Some(reason.to_string());
        activity.phrase = Some("Vis is calling the provider".to_string());
        ctx.emit(Event::Activity(activity));
        let may_compact = !std::mem::take(&mut just_compacted);
        let fitted =
            match compaction::fit(ctx, &client, &model, &mut conv, fixed, may_compact).await {
                Ok(f) => f,
                Err(outcome) => return outcome,
            };
        ctx.progress.lock().context = Some((fitted.tokens + fixed, conv.budget.window));
        let mut req = ChatRequest {
            model: model.clone(),
            system: Some(conv.system.clone()),
            messages: fitted.messages,
            tools: specs.clone(),
            max_tokens: conv.budget.max_answer_tokens(),
            ..Default::default()
        };
        settings.shape(&mut req);
        req.extra = conv.extra.clone();
        let (thinking, prose, calls) = match stream_once(ctx, &client, &req, iteration).await {
            Ok(r) => r,
            Err(e) => {
                if matches!(e, ProviderError::Cancelled) || ctx.cancel.is_cancelled() {
                    // A user cancel, not a provider failure: the worker lands turn.cancelled.
                    return Outcome::Failed {
                        code: "turn_cancelled",
                        message: "cancelled".into(),
                    };
                }
                if e.is_context_overflow() && !overflow_retried {
                    // Once per turn: believe the refusal, compact, and ask again.
                    overflow_retried = true;
                    let window = e
                        .overflow_window()
                        .filter(|w| *w < conv.budget.window)
                        .unwrap_or(conv.budget.window * 3 / 4);
                    conv.budget = Budget::new(window);
                    let how = compaction::How::auto(Trigger::Overflow);
                    if let Err(outcome) =
                        compaction::compact(ctx, &client, &model, &mut conv, fixed, how).await
                    {
                        return outcome;
                    }
                    just_compacted = true;
                    iteration -= 1;
                    continue;
                }
                return provider_failure(ctx, iteration, &e);
            }
        };
        let mut forms = Vec::new();
        let assistant = ChatMessage::Assistant {
            text: prose.clone(),
            tool_calls: calls.clone(),
        };
        remember(ctx, &mut conv, assistant);
        let mut stop = None;
        // Files the calls write are found by their modification time.
        let mark = crate::companion::artifacts::mark();
        for (n, call) in calls.iter().enumerate() {
            let (form, out) = super::tool_call::run_tool(ctx, &tools, call, iteration, n).await;
            forms.push(form);
            let failed = out.error.is_some();
            remember(
                ctx,
                &mut conv,
                ChatMessage::ToolResult {
                    call_id: call.id.clone(),
                    content: out.result.clone(),
                    is_error: failed,
                },
            );
            if stop.is_none() {
                stop = guard.observe(call, failed, conv.budgets.repeated_failures);
            }
        }
        let done = calls.is_empty();
        let iteration_id = format!("{}:{iteration}", ctx.tid);
        let produced = if done {
            Vec::new()
        } else {
            let call_id = (calls.len() == 1).then(|| calls[0].id.clone());
            ctx.gw
                .companion
                .artifacts()
                .record(
                    &ctx.sid,
                    &ctx.tid,
                    &iteration_id,
                    call_id,
                    ctx.root.clone(),
                    mark,
                )
                .await
        };
        let produced = json!(produced);
        ctx.emit(Event::IterationCompleted(IterationCompleted {
            turn_id: ctx.tid.clone(),
            iteration,
            done,
            thinking: thinking.clone(),
            assistant_prose: prose.clone(),
            attachments: produced.clone(),
        }));
        let open = std::mem::take(&mut ctx.progress.lock().open_blocks);
        for block_id in open {
            ctx.emit(Event::ContentBlockCompleted(BlockCompleted {
                turn_id: ctx.tid.clone(),
                block_id,
                iteration: Some(iteration),
            }));
        }
        {
            let mut p = ctx.progress.lock();
            p.iterations.push(json!({"id": iteration_id, "position": iteration - 1, "attachments": produced,
                "thinking": thinking, "assistant_prose": prose, "answer": if done { json!(prose) } else { Value::Null },
                "code": calls.iter().map(|c| format!("{}({})", c.name, c.arguments)).collect::<Vec<_>>(),
                "forms": forms, "duration_ms": t0.elapsed().as_millis() as u64, "cost_usd": 0.0, "error": null,
                "llm_selected": {"provider": conv.selected.0, "model": conv.selected.1},
                "llm_actual": {"provider": client.config().id, "model": model},
                "is_llm_fallback": (client.config().id.as_str(), model.as_str()) != (conv.selected.0.as_str(), conv.selected.1.as_str()),
                "llm_routing_trace": []}));
            if done {
                p.answer = prose.clone();
            }
        }
        if done {
            let id = format!("{}:assistant-prose:{iteration}", ctx.tid);
            return Outcome::Completed {
                content: if prose.is_empty() {
                    vec![]
                } else {
                    vec![prose_block(id, &prose)]
                },
            };
        }
        if let Some(message) = stop {
            return budget_stop("repeated_failure", message);
        }
    }
}

/// Adds a message to this turn's exchange: the request context and the kept transcript.
fn remember(ctx: &RunCtx, conv: &mut Conversation, m: ChatMessage) {
    ctx.progress.lock().transcript.push(m.clone());
    if let Some(cur) = conv.context.current.as_mut() {
        cur.steps.push(m);
    }
}

/// A provider error as the iteration's error event and the turn's failure.
fn provider_failure(ctx: &RunCtx, iteration: usize, e: &ProviderError) -> Outcome {
    let (code, cause) = match e {
        ProviderError::Stalled => ("provider_stream_stalled", "stalled"),
        ProviderError::Http { .. } => ("provider_error", "http"),
        _ => ("provider_error", "transport"),
    };
    let msg = cut(&e.to_string(), ERROR_CAP);
    ctx.emit(Event::IterationError(IterationError {
        turn_id: ctx.tid.clone(),
        iteration,
        error: msg.clone(),
        thinking: String::new(),
        error_data: IterationErrorData {
            kind: code.to_string(),
            message: msg.clone(),
            status: e.status(),
            cause_class: cause.to_string(),
        },
    }));
    Outcome::Failed { code, message: msg }
}

/// [`run`], then once more on the fallback provider when the first provider call failed
/// with a provider error before anything was produced.
pub async fn run_with_fallback(
    ctx: &RunCtx,
    client: Arc<Client>,
    model: String,
    conv: Conversation,
    tools: Vec<Arc<dyn Tool>>,
    fallback: Option<(Arc<Client>, String)>,
) -> Outcome {
    let first = run(ctx, client, model, conv.clone(), tools.clone()).await;
    let untouched = ctx.progress.lock().iterations.is_empty();
    match (first, fallback) {
        (
            Outcome::Failed {
                code: "provider_error",
                message,
            },
            Some((fb, fb_model)),
        ) if untouched && !ctx.cancel.is_cancelled() => {
            ctx.emit(Event::ChunkProviderFallback(ProviderFallback {
                turn_id: ctx.tid.clone(),
                detail: format!("{message}; retrying on {}/{fb_model}", fb.config().id),
                provider: fb.config().id.clone(),
                model: fb_model.clone(),
            }));
            run(ctx, fb, fb_model, conv, tools).await
        }
        (outcome, _) => outcome,
    }
}
