//! The model loop of one turn: call the provider, stream text into coalesced content
//! blocks, run the tool calls it asks for, repeat until it answers without tools
//! (docs/decisions.md, G6). Every phase is published as a session event.

use super::coalesce::{Coalescer, Out};
use super::turn::{prose_block, Tokens};
use super::Gateway;
use crate::tools::{Tool, ToolCtx, ToolOutput};
use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use vis_companion_api::events::{
    Activity, ActivityKind, BlockCompleted, BlockDelta, BlockPreview, BlockStartedData, Event,
    EventKind, IterationCompleted, IterationError, IterationErrorData, ProviderFallback,
    ProviderRetry, ToolBlock, ToolBlockOutput,
};
use vis_providers::{
    ChatMessage, ChatRequest, Client, ProviderError, RetryInfo, StreamEvent, ToolCall,
};

/// Iterations before a turn is stopped as runaway.
pub const MAX_ITERATIONS: usize = 24;
const STDOUT_CAP: usize = 4000;
const ERROR_CAP: usize = 2000;

/// What the loop has produced so far; read by the finisher even after a cancel.
#[derive(Debug, Default)]
pub struct Progress {
    pub iterations: Vec<Value>,
    pub open_blocks: Vec<String>,
    pub answer: String,
    pub tokens: Tokens,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// When the turn last produced output (any turn event but `activity`); `None` before
    /// the first. Read by the silence watchdog.
    pub last_output: Option<Instant>,
    /// Tool calls running now (the silence watchdog exempts tool phases).
    pub tools_running: usize,
}

/// Counts a tool call as running until dropped (also when the call is abandoned).
struct ToolPhase<'a>(&'a Mutex<Progress>);

impl<'a> ToolPhase<'a> {
    fn enter(p: &'a Mutex<Progress>) -> Self {
        p.lock().tools_running += 1;
        ToolPhase(p)
    }
}

impl Drop for ToolPhase<'_> {
    fn drop(&mut self) {
        let mut p = self.0.lock();
        p.tools_running = p.tools_running.saturating_sub(1);
    }
}

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

pub enum Outcome {
    Completed { content: Vec<Value> },
    Failed { code: &'static str, message: String },
}

pub struct RunCtx {
    pub gw: Arc<Gateway>,
    pub sid: String,
    pub tid: String,
    pub root: std::path::PathBuf,
    /// The session's real folder (`root` is a draft's while the session is in one).
    pub trunk: std::path::PathBuf,
    pub progress: Arc<Mutex<Progress>>,
    pub cancel: CancellationToken,
}

impl RunCtx {
    /// Publishes an event of the running turn (display records get its `turn_id`); any
    /// event but an activity line counts as output for the silence watchdog.
    pub fn emit(&self, mut event: Event) -> i64 {
        if let Event::Activity(a) = &mut event {
            a.turn_id.get_or_insert_with(|| self.tid.clone());
        }
        if event.kind() != EventKind::Activity {
            self.progress.lock().last_output = Some(Instant::now());
        }
        self.gw.bus.publish(&self.sid, event)
    }
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
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

/// Runs one tool call with its display events; returns the output.
async fn run_tool(
    ctx: &RunCtx,
    tools: &[Arc<dyn Tool>],
    call: &ToolCall,
    iteration: usize,
    n: usize,
) -> (ToolBlockOutput, ToolOutput) {
    let block_id = format!("{}:tool:{iteration}:{n}", ctx.tid);
    let started = super::now_ms();
    let tool = tools.iter().find(|t| t.spec().name == call.name);
    let parsed = serde_json::from_str::<Value>(if call.arguments.trim().is_empty() {
        "{}"
    } else {
        &call.arguments
    });
    let (code, language) = tool
        .zip(parsed.as_ref().ok())
        .and_then(|(t, args)| t.display(args))
        .unwrap_or_else(|| (format!("{}({})", call.name, call.arguments), "json"));
    let declared = tool.and_then(|t| t.activity());
    let text = |k: &str| {
        declared
            .as_ref()
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let (presenter, label) = (text("presenter"), text("label"));
    let shown = label.unwrap_or_else(|| call.name.clone());
    let display = ToolBlock {
        turn_id: ctx.tid.clone(),
        block_id: block_id.clone(),
        display_code: code.clone(),
        code,
        display_language: language.to_string(),
        op: call.name.clone(),
        tool_call_id: call.id.clone(),
        iteration,
        started_at_ms: started,
        tag: "tool",
        is_repaired: false,
        presenter: presenter.clone(),
    };
    let mut activity = Activity::new(ActivityKind::Tool);
    activity.iteration = Some(iteration);
    activity.op = Some(call.name.clone());
    activity.phrase = Some(format!("Vis is running {shown}"));
    activity.label = Some(shown);
    activity.presenter = presenter;
    ctx.emit(Event::BlockStarted(display.clone()));
    ctx.gw.presentations.start(&ctx.sid, &block_id, &call.name);
    ctx.emit(Event::Activity(activity));
    let t0 = Instant::now();
    let phase = ToolPhase::enter(&ctx.progress);
    let out = match tool {
        None => ToolOutput::fail(format!("unknown tool {:?}", call.name)),
        Some(tool) => match parsed {
            Err(e) => ToolOutput::fail(format!("the arguments are not valid JSON: {e}")),
            Ok(args) => {
                let tctx = ToolCtx {
                    session_id: ctx.sid.clone(),
                    turn_id: ctx.tid.clone(),
                    block_id: block_id.clone(),
                    // Where the session is now: a draft made or left by an earlier call counts.
                    root: ctx
                        .gw
                        .workspaces
                        .work_root(&ctx.sid, &ctx.trunk.to_string_lossy()),
                    cancel: ctx.cancel.clone(),
                };
                tool.call(&tctx, args).await
            }
        },
    };
    let duration_ms = t0.elapsed().as_millis() as u64;
    drop(phase);
    let mut form = ToolBlockOutput {
        block: display,
        result: out.result.clone(),
        result_summary: cut(out.result.lines().next().unwrap_or(""), 200),
        stdout: out.stdout.as_deref().map(|s| cut(s, STDOUT_CAP)),
        error: out.error.as_deref().map(|s| cut(s, ERROR_CAP)),
        silent: false,
        is_timeout: out.is_timeout,
        duration_ms,
        presented: None,
    };
    if let Some(p) = ctx.gw.presentations.finish(&ctx.sid, &block_id) {
        let (headline, presented) = super::presentation::display_fields(&p);
        form.result_summary = headline;
        form.presented = Some(presented);
    }
    ctx.emit(Event::BlockOutput(form.clone()));
    (form, out)
}

/// The agent loop.
pub async fn run(
    ctx: &RunCtx,
    client: Arc<Client>,
    model: String,
    mut messages: Vec<ChatMessage>,
    tools: Vec<Arc<dyn Tool>>,
    prompts: &[String],
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
    let sandbox = tools
        .iter()
        .any(|t| t.spec().name == crate::model_sandbox::TOOL_NAME);
    let system = system_prompt(prompts, sandbox);
    let settings = ctx
        .gw
        .companion
        .settings()
        .current()
        .await
        .unwrap_or_default();
    for iteration in 1..=MAX_ITERATIONS {
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
        let mut req = ChatRequest {
            model: model.clone(),
            system: Some(system.clone()),
            messages: messages.clone(),
            tools: specs.clone(),
            max_tokens: None,
            ..Default::default()
        };
        settings.shape(&mut req);
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
                let (code, cause) = match &e {
                    ProviderError::Stalled => ("provider_stream_stalled", "stalled"),
                    ProviderError::Http { .. } => ("provider_error", "http"),
                    _ => ("provider_error", "transport"),
                };
                let status = if let ProviderError::Http { status, .. } = &e {
                    Some(*status)
                } else {
                    None
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
                        status,
                        cause_class: cause.to_string(),
                    },
                }));
                return Outcome::Failed { code, message: msg };
            }
        };
        let mut forms = Vec::new();
        let mut results = Vec::new();
        // Files the calls write are found by their modification time.
        let mark = super::companion::artifacts::mark();
        for (n, call) in calls.iter().enumerate() {
            let (form, out) = run_tool(ctx, &tools, call, iteration, n).await;
            forms.push(form);
            results.push(ChatMessage::ToolResult {
                call_id: call.id.clone(),
                content: out.result.clone(),
                is_error: out.error.is_some(),
            });
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
                "llm_selected": model, "llm_actual": model, "is_llm_fallback": false, "llm_routing_trace": []}));
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
        messages.push(ChatMessage::Assistant {
            text: prose,
            tool_calls: calls,
        });
        messages.extend(results);
    }
    Outcome::Failed {
        code: "turn_failed",
        message: format!("the model kept calling tools for {MAX_ITERATIONS} iterations; stopped"),
    }
}

/// [`run`], then once more on the fallback provider when the first provider call failed
/// with a provider error before anything was produced.
pub async fn run_with_fallback(
    ctx: &RunCtx,
    client: Arc<Client>,
    model: String,
    messages: Vec<ChatMessage>,
    tools: Vec<Arc<dyn Tool>>,
    prompts: &[String],
    fallback: Option<(Arc<Client>, String)>,
) -> Outcome {
    let first = run(ctx, client, model, messages.clone(), tools.clone(), prompts).await;
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
            run(ctx, fb, fb_model, messages, tools, prompts).await
        }
        (outcome, _) => outcome,
    }
}

fn system_prompt(extension_prompts: &[String], sandbox: bool) -> String {
    let mut s = if sandbox {
        "You are Vis, a coding agent working in the user's project. You act by writing Python for \
         the `python_execution` tool; every capability is a function inside it: cat, grep, patch \
         (edits by the anchors cat/grep print), ls, shell, and the extensions' symbols as async \
         functions. Call apropos(text) and doc(name) first to find what exists. Each block starts \
         with a fresh namespace; print what you need to see. Answer in Markdown."
            .to_string()
    } else {
        "You are Vis, a coding agent working in the user's project through the tools you are given. \
         Answer in Markdown. Use `apropos` and `doc` to discover extension symbols."
            .to_string()
    };
    for p in extension_prompts {
        s.push_str("\n\n");
        s.push_str(p);
    }
    s
}
