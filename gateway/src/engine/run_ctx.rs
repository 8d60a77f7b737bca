//! What one running turn shares with its parts (the model loop, a tool call, a
//! compaction): its context (`RunCtx`), what it has produced so far (`Progress`), what the
//! loop is given (`Conversation`) and how it ended (`Outcome`).

use super::Turns;
use crate::agent::budget::Budgets;
use crate::agent::context::Context;
use crate::agent::window::Budget;
use crate::records::turn::Tokens;
use parking_lot::Mutex;
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use vis_companion_api::events::{Event, EventKind};
use vis_providers::ChatMessage;

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
    /// The exchange so far as the model saw it (assistant messages and tool results),
    /// kept when the turn settles, also after a cancel or a failure.
    pub transcript: Vec<ChatMessage>,
    /// The last request's estimated size and the model's window, in tokens.
    pub context: Option<(u64, u64)>,
    /// Compactions that ran in this turn.
    pub compactions: u32,
}

pub enum Outcome {
    Completed { content: Vec<Value> },
    Failed { code: &'static str, message: String },
}

pub struct RunCtx {
    pub gw: Arc<Turns>,
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

pub fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// What one turn's model loop is given besides the provider.
#[derive(Clone)]
pub struct Conversation {
    /// The session's summary, settled turns and this turn's request.
    pub context: Context,
    pub budget: Budget,
    pub budgets: Budgets,
    pub system: String,
    /// The turn's `extra_body`, added to each provider request.
    pub extra: Option<serde_json::Map<String, Value>>,
    /// The provider and model the turn was routed to (a fallback runs on another).
    pub selected: (String, String),
}
