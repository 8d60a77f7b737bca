//! A tool call on the stream: its display record (`block.started`, then `block.output` with
//! the result) and the `activity` lines that say what Vis is doing while it runs.

use serde::Serialize;
use serde_json::Value;

/// A tool call's display record as it starts (`block.started`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolBlock {
    pub turn_id: String,
    pub block_id: String,
    /// The call as the card shows it (Python source for `python_execution`, else `name(args)`).
    pub code: String,
    pub display_code: String,
    pub display_language: String,
    pub op: String,
    pub tool_call_id: String,
    pub iteration: usize,
    pub started_at_ms: i64,
    /// Always `tool`.
    pub tag: &'static str,
    pub is_repaired: bool,
    /// The extension presenter that renders the card, when the tool declares one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presenter: Option<String>,
}

/// The same record with the call's result (`block.output`; also what the iteration stores).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolBlockOutput {
    #[serde(flatten)]
    pub block: ToolBlock,
    pub result: String,
    /// The result's first line, or the presentation's headline when an extension presented.
    pub result_summary: String,
    pub stdout: Option<String>,
    pub error: Option<String>,
    pub silent: bool,
    pub is_timeout: bool,
    pub duration_ms: u64,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub presented: Option<Presented>,
}

/// The display fields an extension's presentation gives a tool card
/// (`{headline, summary, content, sections?}` rendered).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Presented {
    pub result_detail: String,
    /// The card body as Markdown.
    pub result_render: String,
    /// The presentation's content blocks, as the extension gave them.
    pub render_segments: Value,
    /// Always `activity`.
    pub result_kind: &'static str,
}

/// What an `activity` line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActivityKind {
    Tool,
    ProviderCall,
    /// A shell command the turn waits for.
    ShellRun,
    /// A background job started (it runs on after the call returns).
    ShellBg,
}

/// What Vis is doing right now (`activity`, live-only). Members that do not apply are left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Activity {
    pub activity: ActivityKind,
    /// Set by the running turn when the producer did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The sentence the app shows (`Vis is running …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phrase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presenter: Option<String>,
    /// Why the provider is called (`user-submit`, `tool-result`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_id: Option<String>,
    /// The command line of a `shell-run` / `shell-bg` activity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmd: Option<String>,
    /// The tool a nested call runs inside (`python_execution`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_op: Option<String>,
    /// An extension's presentation of the running call: who published it, what it gave, and
    /// the card's display fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extension: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presentation: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_summary: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub presented: Option<Presented>,
}

impl Activity {
    /// An activity line of `kind` with every optional member left out.
    pub fn new(kind: ActivityKind) -> Activity {
        Activity {
            activity: kind,
            turn_id: None,
            iteration: None,
            op: None,
            label: None,
            phrase: None,
            presenter: None,
            reason: None,
            block_id: None,
            cmd: None,
            parent_op: None,
            extension: None,
            presentation: None,
            result_summary: None,
            presented: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn block() -> ToolBlock {
        ToolBlock {
            turn_id: "t".into(),
            block_id: "t:tool:1:0".into(),
            code: "cat()".into(),
            display_code: "cat()".into(),
            display_language: "json".into(),
            op: "cat".into(),
            tool_call_id: "c1".into(),
            iteration: 1,
            started_at_ms: 5,
            tag: "tool",
            is_repaired: false,
            presenter: None,
        }
    }

    #[test]
    fn a_tool_output_carries_the_started_record_plus_its_result_and_null_streams() {
        let out = ToolBlockOutput {
            block: block(),
            result: "ok".into(),
            result_summary: "ok".into(),
            stdout: None,
            error: None,
            silent: false,
            is_timeout: false,
            duration_ms: 3,
            presented: None,
        };
        let v = serde_json::to_value(&out).unwrap();
        assert_eq!(v["op"], "cat");
        assert_eq!(v["tag"], "tool");
        assert_eq!(v["stdout"], Value::Null);
        assert!(v.get("presenter").is_none());
        assert!(v.get("result_kind").is_none());
    }

    #[test]
    fn an_activity_line_names_its_kind_in_kebab_case_and_leaves_out_what_does_not_apply() {
        let mut a = Activity::new(ActivityKind::ProviderCall);
        a.iteration = Some(2);
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v, json!({"activity": "provider-call", "iteration": 2}));
    }
}
