//! Tool-call presentation from extension activity: what
//! `vis.publish_activity` and an `Activity.render` callback publish while a tool runs becomes
//! the display fields of that call's block — live on an `activity` update while it runs, and
//! on its `block.output` (so the stored transcript renders like the live card).

use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;
use vis_companion_api::events::{Activity, ActivityKind, Presented};

/// The tool call running in each session and the last presentation published for it.
#[derive(Default)]
pub struct Presentations {
    running: Mutex<HashMap<String, Running>>,
}

struct Running {
    block_id: String,
    op: String,
    latest: Option<Value>,
}

impl Presentations {
    /// A tool call of `sid` starts (`block_id` names its block).
    pub fn start(&self, sid: &str, block_id: &str, op: &str) {
        self.running.lock().insert(
            sid.to_string(),
            Running {
                block_id: block_id.to_string(),
                op: op.to_string(),
                latest: None,
            },
        );
    }

    /// The call ended: its last presentation, if one was published.
    pub fn finish(&self, sid: &str, block_id: &str) -> Option<Value> {
        let mut map = self.running.lock();
        if map.get(sid).is_some_and(|r| r.block_id == block_id) {
            return map.remove(sid).and_then(|r| r.latest);
        }
        None
    }

    /// A presentation published in `sid`: the `activity` update to emit (with the running
    /// block's id and display fields), or `None` when no tool call is running there.
    pub fn publish(&self, sid: &str, extension: &str, presentation: Value) -> Option<Activity> {
        let mut map = self.running.lock();
        let run = map.get_mut(sid)?;
        let (headline, presented) = display_fields(&presentation);
        let mut update = Activity::new(ActivityKind::Tool);
        update.op = Some(run.op.clone());
        update.block_id = Some(run.block_id.clone());
        update.extension = Some(extension.to_string());
        update.result_summary = Some(headline);
        update.presented = Some(presented);
        update.presentation = Some(presentation.clone());
        run.latest = Some(presentation);
        Some(update)
    }
}

/// The display fields of a presentation (`{headline, summary, content, sections?}`): its
/// headline (the card's summary line) and the rest.
pub fn display_fields(p: &Value) -> (String, Presented) {
    let text = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let presented = Presented {
        result_detail: text("summary"),
        result_render: markdown(p),
        render_segments: p.get("content").cloned().unwrap_or_else(|| json!([])),
        result_kind: "activity",
    };
    (text("headline"), presented)
}

/// The card body as Markdown: the summary, the blocks, then each section.
pub fn markdown(p: &Value) -> String {
    let mut out = String::new();
    let summary = p.get("summary").and_then(Value::as_str).unwrap_or("");
    if !summary.trim().is_empty() {
        out.push_str(summary.trim());
        out.push_str("\n\n");
    }
    blocks(&mut out, p.get("content"));
    for s in p
        .get("sections")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let _ = write!(out, "#### {}\n\n", one_line(s.get("headline")));
        let summary = s.get("summary").and_then(Value::as_str).unwrap_or("");
        if !summary.trim().is_empty() {
            out.push_str(summary.trim());
            out.push_str("\n\n");
        }
        blocks(&mut out, s.get("content"));
    }
    out.trim_end().to_string()
}

fn one_line(v: Option<&Value>) -> String {
    v.and_then(Value::as_str)
        .unwrap_or("")
        .replace(['\n', '\r'], " ")
}

fn cell(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn fence(out: &mut String, lang: &str, text: &str) {
    let ticks = if text.contains("```") { "````" } else { "```" };
    let _ = write!(
        out,
        "{ticks}{lang}\n{}\n{ticks}\n\n",
        text.trim_end_matches('\n')
    );
}

fn number(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

fn blocks(out: &mut String, content: Option<&Value>) {
    for b in content.and_then(Value::as_array).into_iter().flatten() {
        let text = b.get("text").and_then(Value::as_str).unwrap_or("");
        match b.get("type").and_then(Value::as_str).unwrap_or("") {
            "heading" => {
                let _ = write!(out, "### {}\n\n", one_line(b.get("text")));
            }
            "text" | "markdown" => {
                out.push_str(text.trim_end());
                out.push_str("\n\n");
            }
            "code" => fence(
                out,
                b.get("language").and_then(Value::as_str).unwrap_or(""),
                text,
            ),
            "diff" => fence(out, "diff", text),
            "table" => {
                let cols: Vec<String> = b
                    .get("columns")
                    .and_then(Value::as_array)
                    .map(|c| c.iter().map(cell).collect())
                    .unwrap_or_default();
                if cols.is_empty() {
                    continue;
                }
                let _ = writeln!(out, "| {} |", cols.join(" | "));
                let _ = writeln!(out, "|{}", "---|".repeat(cols.len()));
                for row in b
                    .get("rows")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let cells: Vec<String> = row
                        .as_array()
                        .map(|r| r.iter().map(cell).collect())
                        .unwrap_or_default();
                    let _ = writeln!(out, "| {} |", cells.join(" | "));
                }
                out.push('\n');
            }
            "progress" => {
                let label = one_line(b.get("label"));
                let _ = match (number(b.get("value")), number(b.get("total"))) {
                    (Some(v), Some(t)) if t > 0.0 => {
                        write!(out, "**{label}**: {v} / {t} ({:.0} %)\n\n", v / t * 100.0)
                    }
                    (Some(v), _) => write!(out, "**{label}**: {v}\n\n"),
                    _ => write!(out, "**{label}**: …\n\n"),
                };
            }
            kind @ ("image" | "video" | "audio" | "file") => {
                let id = one_line(b.get("attachment_id"));
                let label = b
                    .get("label")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| kind.to_string());
                let _ = write!(out, "[{label}](attachment:{id})\n\n");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_type_renders_to_markdown() {
        let p = json!({"headline": "Checks", "summary": "2 of 3 passed", "content": [
            {"type": "heading", "text": "Results"},
            {"type": "text", "text": "plain"},
            {"type": "markdown", "text": "*md*"},
            {"type": "code", "text": "print(1)\n", "language": "python"},
            {"type": "diff", "text": "-a\n+b"},
            {"type": "table", "columns": ["name", "ok"], "rows": [["a|b", true], ["c", null]]},
            {"type": "progress", "label": "Run", "value": 1, "total": 4},
            {"type": "image", "attachment_id": "att-1"},
            {"type": "file", "attachment_id": "att-2", "label": "log.txt"},
        ], "sections": [{"headline": "More", "summary": "", "content": [{"type": "text", "text": "x"}]}]});
        let md = markdown(&p);
        let want = "2 of 3 passed\n\n### Results\n\nplain\n\n*md*\n\n```python\nprint(1)\n```\n\n\
                    ```diff\n-a\n+b\n```\n\n| name | ok |\n|---|---|\n| a\\|b | true |\n| c |  |\n\n\
                    **Run**: 1 / 4 (25 %)\n\n[image](attachment:att-1)\n\n[log.txt](attachment:att-2)\n\n\
                    #### More\n\nx";
        assert_eq!(md, want);
        let (headline, f) = display_fields(&p);
        assert_eq!(headline, "Checks");
        assert_eq!(f.result_detail, "2 of 3 passed");
        assert_eq!(f.result_kind, "activity");
        assert_eq!(f.render_segments[0]["type"], "heading");
    }

    #[test]
    fn a_presentation_belongs_to_the_running_call_of_its_session_only() {
        let p = Presentations::default();
        let pres = json!({"headline": "h", "summary": "", "content": []});
        assert!(
            p.publish("s1", "ext", pres.clone()).is_none(),
            "nothing runs"
        );
        p.start("s1", "b1", "ext__tool");
        let update = p.publish("s1", "ext", pres.clone()).expect("shown");
        assert_eq!(update.block_id.as_deref(), Some("b1"));
        assert_eq!(update.op.as_deref(), Some("ext__tool"));
        assert_eq!(update.result_summary.as_deref(), Some("h"));
        assert!(
            p.publish("s2", "ext", pres.clone()).is_none(),
            "other session"
        );
        assert_eq!(p.finish("s1", "other-block"), None);
        assert_eq!(p.finish("s1", "b1"), Some(pres));
        assert_eq!(p.finish("s1", "b1"), None, "finished once");
    }
}
