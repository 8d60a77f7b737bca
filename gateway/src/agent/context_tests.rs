use super::*;
use vis_providers::ToolCall;

fn call(id: &str, code: &str) -> ChatMessage {
    ChatMessage::Assistant {
        text: String::new(),
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: "python_execution".into(),
            arguments: serde_json::json!({ "code": code }).to_string(),
        }],
    }
}

fn result(id: &str, content: &str) -> ChatMessage {
    ChatMessage::ToolResult {
        call_id: id.into(),
        content: content.into(),
        is_error: false,
    }
}

fn answer(text: &str) -> ChatMessage {
    ChatMessage::Assistant {
        text: text.into(),
        tool_calls: vec![],
    }
}

fn turn(n: i64, output: &str, ending: Option<Ending>) -> Exchange {
    let id = format!("c{n}");
    Exchange {
        tid: format!("t{n}"),
        ord: n,
        request: ChatMessage::User {
            text: format!("request {n}"),
        },
        steps: vec![
            call(&id, &format!("print({n})")),
            result(&id, output),
            answer(&format!("answer {n}")),
        ],
        ending,
    }
}

fn bytes(msgs: &[ChatMessage]) -> usize {
    msgs.iter()
        .map(|m| match m {
            ChatMessage::ToolResult { content, .. } => content.len(),
            _ => 0,
        })
        .sum()
}

#[test]
fn a_call_without_its_result_is_answered_and_a_result_without_its_call_is_left_out() {
    let ex = Exchange {
        tid: "t".into(),
        ord: 1,
        request: ChatMessage::User { text: "go".into() },
        steps: vec![result("stray", "x"), call("a", "sleep(99)")],
        ending: Some(Ending::Cancelled),
    };
    let msgs = render_past(&ex, 1000, 1000);
    assert_eq!(msgs.len(), 4, "{msgs:?}");
    assert!(
        matches!(&msgs[1], ChatMessage::Assistant { tool_calls, .. } if tool_calls[0].id == "a")
    );
    assert!(
        matches!(&msgs[2], ChatMessage::ToolResult { call_id, is_error: true, .. } if call_id == "a")
    );
    let ChatMessage::Assistant { text, .. } = &msgs[3] else {
        panic!("{msgs:?}")
    };
    assert!(text.contains("cancelled this turn after 1 step"), "{text}");
}

#[test]
fn a_failed_turn_is_replayed_with_its_code_and_step_count() {
    let mut ex = turn(
        1,
        "ok",
        Some(Ending::Failed {
            code: "provider_error".into(),
            message: "HTTP 500\nmore".into(),
        }),
    );
    ex.steps.pop();
    let msgs = render_past(&ex, 1000, 1000);
    let ChatMessage::Assistant { text, .. } = msgs.last().unwrap() else {
        panic!()
    };
    assert!(
        text.contains("failed after 1 step (provider_error: HTTP 500)"),
        "{text}"
    );
}

#[test]
fn a_long_output_keeps_its_head_and_its_last_line_and_says_what_was_cut() {
    let text = format!("first line\n{}\nlast line", "x".repeat(50_000));
    let s = shorten(&text, 2_000);
    assert!(s.len() < 2_200, "{}", s.len());
    assert!(s.starts_with("first line"));
    assert!(s.ends_with("last line"));
    assert!(s.contains("bytes of this output cut"), "{s}");
    let multibyte = "é".repeat(5_000);
    assert!(shorten(&multibyte, 999).len() < 1_200);
}

#[test]
fn older_outputs_are_shortened_while_the_newest_turns_stay_whole() {
    let big = "y".repeat(20_000);
    let ctx = Context {
        past: (1..=4)
            .map(|n| turn(n, &big, Some(Ending::Completed)))
            .collect(),
        current: Some(Exchange {
            tid: "t5".into(),
            ord: 5,
            request: ChatMessage::User { text: "now".into() },
            steps: vec![],
            ending: None,
        }),
        ..Default::default()
    };
    let Fit::Ready(f) = ctx.fit(&Budget::new(1_000_000), 100, true) else {
        panic!()
    };
    assert_eq!(f.level, 0);
    let outputs: Vec<usize> = f
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::ToolResult { content, .. } => Some(content.len()),
            _ => None,
        })
        .collect();
    assert!(outputs[0] < 8_200 && outputs[1] < 8_200, "{outputs:?}");
    assert_eq!(&outputs[2..], &[20_000, 20_000]);
}

#[test]
fn above_the_threshold_a_compaction_is_asked_for_once_then_the_request_fits_anyway() {
    let big = "z".repeat(30_000);
    let ctx = Context {
        past: (1..=30)
            .map(|n| turn(n, &big, Some(Ending::Completed)))
            .collect(),
        current: Some(Exchange {
            tid: "t31".into(),
            ord: 31,
            request: ChatMessage::User { text: "now".into() },
            steps: vec![call("n1", "x"), result("n1", &big)],
            ending: None,
        }),
        ..Default::default()
    };
    let budget = Budget::new(6_000);
    assert_eq!(ctx.fit(&budget, 500, true), Fit::Compact);
    let Fit::Ready(f) = ctx.fit(&budget, 500, false) else {
        panic!()
    };
    assert!(
        f.tokens + 500 <= budget.limit,
        "{} > {}",
        f.tokens,
        budget.limit
    );
    // The running turn's request and newest output are there.
    assert!(f
        .messages
        .iter()
        .any(|m| matches!(m, ChatMessage::User { text } if text == "now")));
    assert!(bytes(&f.messages) > 1_000);
}

#[test]
fn a_fold_keeps_the_newest_turns_that_fit_a_quarter_and_folds_a_long_running_turn() {
    let medium = "s".repeat(1_000);
    let ctx = Context {
        past: (1..=10)
            .map(|n| turn(n, &medium, Some(Ending::Completed)))
            .collect(),
        current: None,
        ..Default::default()
    };
    let fold = ctx.plan_fold(&Budget::new(6_000));
    assert!(fold.past > 0 && fold.past < 10, "{fold:?}");
    assert_eq!(fold.current_upto, None);
    let big = "b".repeat(9_000);
    let mut steps = Vec::new();
    for i in 0..6 {
        steps.push(call(&format!("k{i}"), "x"));
        steps.push(result(&format!("k{i}"), &big));
    }
    let ctx = Context {
        current: Some(Exchange {
            tid: "t".into(),
            ord: 1,
            request: ChatMessage::User {
                text: "long".into(),
            },
            steps,
            ending: None,
        }),
        ..Default::default()
    };
    let fold = ctx.plan_fold(&Budget::new(20_000));
    assert_eq!(fold.current_upto, Some(8));
    let text = fold_text(&ctx, &fold, 500);
    assert_eq!(text.len(), 1);
    assert!(text[0].contains("still running"));
}

#[test]
fn a_running_turn_alone_larger_than_the_window_is_too_large() {
    let ctx = Context {
        current: Some(Exchange {
            tid: "t".into(),
            ord: 1,
            request: ChatMessage::User {
                text: "q".repeat(100_000),
            },
            steps: vec![],
            ending: None,
        }),
        ..Default::default()
    };
    assert!(matches!(
        ctx.fit(&Budget::new(6_000), 100, true),
        Fit::TooLarge { .. }
    ));
}
