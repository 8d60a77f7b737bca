//! One tool call of a model turn: its display record (`block.started`), the activity line,
//! the call itself inside the tool phase the silence watchdog exempts, and its output
//! (`block.output`) with what an extension presented.

use super::run_ctx::{cut, Progress, RunCtx};
use crate::tools::{Tool, ToolCtx, ToolOutput};
use parking_lot::Mutex;
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;
use vis_companion_api::events::{Activity, ActivityKind, Event, ToolBlock, ToolBlockOutput};
use vis_providers::ToolCall;

const STDOUT_CAP: usize = 4000;
const ERROR_CAP: usize = 2000;

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

/// Runs one tool call with its display events; returns the output.
pub(super) async fn run_tool(
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
