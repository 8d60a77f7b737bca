//! Every transition of the turn's life, without I/O: a session state, a clock value, and the
//! effects read back as short names ("save-row", "publish turn.started", "spawn t1", …).

use super::*;
use crate::records::turn::{Status, Turn};
use vis_companion_api::events::Event;

fn session() -> SessionState {
    SessionState::new(SessionRow {
        id: "s1".into(),
        root: "/work".into(),
        last_status: "idle".into(),
        ..Default::default()
    })
}

fn turn(tid: &str, request: &str) -> Turn {
    Turn::new(tid.into(), "s1", 1, request.into(), 10)
}

fn keyed(tid: &str, key: &str) -> Turn {
    let mut t = turn(tid, "do it");
    t.idempotency_key = Some(key.into());
    t
}

fn names(fx: &Effects) -> Vec<String> {
    fx.iter()
        .map(|e| match e {
            Effect::SaveRow(_) => "save-row".into(),
            Effect::SaveTurn(t) => format!("save-turn {} {}", t.tid, t.status.as_str()),
            Effect::DeleteTurn(tid) => format!("delete-turn {tid}"),
            Effect::Publish(ev) => format!("publish {}", ev.kind().as_str()),
            Effect::PublishStarted(ev) => format!("publish-started {}", started_id(ev)),
            Effect::PublishTerminal(ev, t) => format!("terminal {} {}", ev.kind().as_str(), t.tid),
            Effect::Title(t) => format!("title {t}"),
            Effect::Spawn(l) => format!("spawn {}", l.tid),
            Effect::CancelBackstop(tid) => format!("backstop {tid}"),
            Effect::Count(Count::Started) => "count started".into(),
            Effect::Count(Count::Failed) => "count failed".into(),
            Effect::Count(Count::Settled { .. }) => "count settled".into(),
        })
        .collect()
}

fn started_id(ev: &Event) -> String {
    match ev {
        Event::TurnStarted(s) => s.turn_id.clone(),
        other => format!("not a start: {:?}", other.kind()),
    }
}

fn has(fx: &Effects, name: &str) -> bool {
    names(fx).iter().any(|n| n == name)
}

/// A session running `t1` with `t2` queued at 20 and `t3` at 40.
fn busy() -> SessionState {
    let mut st = session();
    st.submit(turn("t1", "first"), 10);
    st.submit(turn("t2", "second"), 20);
    st.submit(turn("t3", "third"), 40);
    st
}

fn completed() -> Terminal {
    Terminal::Completed {
        content: vec![serde_json::json!({"id": "b", "type": "prose", "markdown": "done"})],
    }
}

fn failed() -> Terminal {
    Terminal::Failed {
        code: "provider_error".into(),
        message: "boom".into(),
    }
}

#[test]
fn a_turn_submitted_to_an_idle_session_starts_at_once_and_titles_the_session() {
    let mut st = session();
    let s = st.submit(turn("t1", "Fix the login page\nplease"), 100);
    assert_eq!(
        names(&s.effects),
        [
            "save-row",
            "save-turn t1 streaming",
            "publish-started t1",
            "title Fix the login page",
            "count started",
            "spawn t1"
        ]
    );
    assert_eq!(
        s.record.status,
        vis_companion_api::wire::TurnStatus::Streaming
    );
    let r = st.running.as_ref().expect("running");
    assert_eq!(r.turn.started_at, Some(100));
    assert_eq!(st.row.turn_count, 1);
    assert_eq!(st.row.last_status, "running");
    assert_eq!(st.row.first_request.as_deref(), Some("Fix the login page…"));
}

#[test]
fn a_session_with_a_title_keeps_it() {
    let mut st = session();
    st.row.title = Some("Mine".into());
    let s = st.submit(turn("t1", "something else"), 100);
    assert!(!names(&s.effects).iter().any(|n| n.starts_with("title")));
    assert_eq!(st.row.title.as_deref(), Some("Mine"));
}

#[test]
fn a_turn_submitted_while_another_runs_queues_without_a_worker() {
    let mut st = session();
    st.submit(turn("t1", "first"), 10);
    let s = st.submit(turn("t2", "second"), 20);
    assert_eq!(
        names(&s.effects),
        ["save-turn t2 queued", "publish turn.queued"]
    );
    assert_eq!(s.record.status, vis_companion_api::wire::TurnStatus::Queued);
    assert_eq!(st.queue.front().and_then(|q| q.queued_at), Some(20));
}

#[test]
fn a_known_idempotency_key_replays_the_live_turn_and_later_its_stored_one() {
    let mut st = session();
    st.submit(keyed("t1", "k1"), 10);
    match st.replay(Some("k1")) {
        Some(Replay::Live(rec)) => assert_eq!(rec.id, "t1"),
        other => panic!("expected the live turn, got {other:?}"),
    }
    st.finish("t1", completed(), 20, false);
    match st.replay(Some("k1")) {
        Some(Replay::Stored(tid)) => assert_eq!(tid, "t1"),
        other => panic!("expected the stored turn, got {other:?}"),
    }
    assert!(st.replay(Some("other")).is_none());
    assert!(st.replay(None).is_none());
}

#[test]
fn a_completed_turn_lands_once_and_the_oldest_queued_turn_starts() {
    let mut st = busy();
    let fx = st.finish("t1", completed(), 50, false);
    assert_eq!(
        names(&fx),
        [
            "count settled",
            "terminal turn.completed t1",
            "publish context.updated",
            "publish turn.queued.drained",
            "save-row",
            "save-turn t2 streaming",
            "publish-started t2",
            "count started",
            "spawn t2",
            "save-row"
        ]
    );
    assert_eq!(st.running.as_ref().map(|r| r.turn.tid.as_str()), Some("t2"));
    assert_eq!(st.row.last_status, "running");
    // a second terminal for the same turn (a cancel backstop racing the worker) does nothing
    assert!(st.finish("t1", Terminal::Cancelled, 60, false).is_empty());
}

#[test]
fn the_settled_record_carries_what_the_worker_produced() {
    let mut st = session();
    st.submit(turn("t1", "go"), 1_000);
    {
        let r = st.running.as_ref().expect("running");
        let mut p = r.progress.lock();
        p.tokens.input = 1_200;
        p.tokens.output = 300;
        p.context = Some((50_000, 200_000));
        p.open_blocks = vec!["t1:b1".into()];
        p.model = Some("m".into());
    }
    let fx = st.finish("t1", completed(), 4_000, false);
    assert_eq!(names(&fx)[0], "publish content.block.completed");
    let settled = fx.iter().find_map(|e| match e {
        Effect::PublishTerminal(_, t) => Some(t.clone()),
        _ => None,
    });
    let t = settled.expect("a terminal");
    assert_eq!(t.status, Status::Completed);
    assert_eq!(t.duration_ms, Some(3_000));
    assert_eq!(t.utilization, Some(0.25));
    assert_eq!(t.model.as_deref(), Some("m"));
    assert!(fx.iter().any(|e| matches!(
        e,
        Effect::Count(Count::Settled {
            duration_ms: 3_000,
            tokens_in: 1_200,
            tokens_out: 300
        })
    )));
    assert_eq!(st.row.last_status, "idle");
}

#[test]
fn a_failed_turn_pauses_the_queue_it_leaves_behind() {
    let mut st = busy();
    let fx = st.finish("t1", failed(), 50, false);
    assert!(has(&fx, "terminal turn.failed t1"));
    assert!(has(&fx, "count failed"));
    assert!(has(&fx, "publish queue.paused"));
    assert!(!names(&fx).iter().any(|n| n.starts_with("spawn")));
    assert!(st.row.queue_paused);
    assert_eq!(st.queue.len(), 2);
    assert_eq!(st.row.last_status, "idle");
    // a paused queue does not drain on request
    let (rec, fx) = st.drain(60);
    assert!(rec.is_none() && fx.is_empty());
}

#[test]
fn a_failed_turn_with_nothing_queued_pauses_nothing() {
    let mut st = session();
    st.submit(turn("t1", "go"), 10);
    let fx = st.finish("t1", failed(), 20, false);
    assert!(!has(&fx, "publish queue.paused"));
    assert!(!st.row.queue_paused);
}

#[test]
fn resuming_a_paused_queue_starts_its_oldest_turn_and_clears_the_cancel_floor() {
    let mut st = busy();
    st.finish("t1", failed(), 50, false);
    st.row.cancel_floor = Some(1_000);
    let (rec, fx) = st.resume(60);
    assert_eq!(rec.map(|r| r.id), Some("t2".to_string()));
    assert_eq!(names(&fx)[0], "publish queue.resumed");
    assert!(has(&fx, "spawn t2"));
    assert!(!st.row.queue_paused);
    assert_eq!(st.row.cancel_floor, None);
    // an unpaused queue has nothing to resume
    let (rec, fx) = st.resume(70);
    assert!(rec.is_none() && fx.is_empty());
}

#[test]
fn a_success_after_a_pause_resumes_the_queue_by_itself() {
    let mut st = busy();
    st.finish("t1", failed(), 50, false);
    st.resume(60); // t2 runs, t3 waits
    st.row.queue_paused = true; // paused again meanwhile (a failure elsewhere)
    let fx = st.finish("t2", completed(), 70, false);
    assert!(has(&fx, "publish queue.resumed"));
    assert!(has(&fx, "spawn t3"));
    assert!(!st.row.queue_paused);
}

#[test]
fn a_cancel_sweeps_the_turns_queued_before_it_and_keeps_the_later_ones() {
    let mut st = session();
    st.submit(keyed("t1", "k1"), 10);
    st.submit(keyed("t2", "k2"), 20);
    let fx = st.cancel("t1", 30).expect("t1 runs");
    assert_eq!(names(&fx), ["backstop t1"]);
    let r = st.running.as_ref().expect("still running until it lands");
    assert!(r.cancel.is_cancelled());
    assert_eq!(r.turn.cancelling_at, Some(30));
    st.submit(keyed("t3", "k3"), 40); // submitted after the cancel: kept
    let fx = st.finish("t1", Terminal::Cancelled, 50, false);
    let n = names(&fx);
    assert!(n.contains(&"terminal turn.cancelled t1".to_string()));
    assert!(n.contains(&"delete-turn t2".to_string()));
    assert!(n.contains(&"publish turn.queued.deleted".to_string()));
    assert!(n.contains(&"spawn t3".to_string()));
    assert_eq!(st.row.cancel_floor, Some(30));
    assert!(
        !st.keys.contains_key("k2"),
        "a swept turn's key can be used again"
    );
    assert!(st.keys.contains_key("k3"));
}

#[test]
fn a_second_cancel_keeps_the_first_cancel_time() {
    let mut st = session();
    st.submit(turn("t1", "go"), 10);
    st.cancel("t1", 30).expect("runs");
    st.cancel("t1", 90).expect("still runs");
    assert_eq!(
        st.running.as_ref().and_then(|r| r.turn.cancelling_at),
        Some(30)
    );
}

#[test]
fn cancelling_a_turn_that_is_not_running_says_where_it_is() {
    let mut st = busy();
    assert_eq!(
        st.cancel("t2", 50).err(),
        Some(Elsewhere::Here(Status::Queued))
    );
    assert_eq!(st.cancel("gone", 50).err(), Some(Elsewhere::Stored));
    assert!(!st.running.as_ref().expect("t1").cancel.is_cancelled());
}

#[test]
fn cancel_current_needs_the_running_turns_own_key() {
    let mut st = session();
    assert_eq!(
        st.cancel_current(Some("k1"), 5).err(),
        Some(TurnError::NoRunningTurn)
    );
    st.submit(keyed("t1", "k1"), 10);
    let not_owner = TurnError::NotOwner { tid: "t1".into() };
    assert_eq!(
        st.cancel_current(Some("k2"), 20).err(),
        Some(not_owner.clone())
    );
    assert_eq!(st.cancel_current(None, 20).err(), Some(not_owner));
    let (tid, fx) = st.cancel_current(Some("k1"), 20).expect("owner");
    assert_eq!(tid, "t1");
    assert_eq!(names(&fx), ["backstop t1"]);
}

#[test]
fn a_stopping_gateway_lands_the_turn_and_leaves_the_queue_for_the_next_start() {
    let mut st = busy();
    let fx = st.finish("t1", Terminal::Cancelled, 50, true);
    assert!(has(&fx, "terminal turn.cancelled t1"));
    assert!(!names(&fx)
        .iter()
        .any(|n| n.starts_with("delete-turn") || n.starts_with("spawn")));
    assert_eq!(st.queue.len(), 2);
    assert_eq!(st.row.cancel_floor, None);
    assert_eq!(st.row.last_status, "idle");
}

#[test]
fn a_new_turn_on_an_idle_session_with_a_stored_backlog_queues_behind_it() {
    // what a graceful stop leaves: queued turns, nothing running
    let mut st = busy();
    st.finish("t1", Terminal::Cancelled, 5, true);
    let s = st.submit(turn("t4", "new"), 60);
    assert_eq!(s.record.id, "t4");
    assert_eq!(s.record.status, vis_companion_api::wire::TurnStatus::Queued);
    assert!(
        has(&s.effects, "spawn t2"),
        "the backlog's head starts first"
    );
    assert_eq!(st.queue.back().map(|q| q.tid.as_str()), Some("t4"));
}

#[test]
fn a_restarts_backlog_drains_from_its_oldest_turn() {
    let mut st = busy();
    st.finish("t1", Terminal::Cancelled, 5, true);
    let (rec, fx) = st.drain(60);
    assert_eq!(rec.map(|r| r.id), Some("t2".to_string()));
    assert_eq!(names(&fx)[0], "publish turn.queued.drained");
    let (rec, _) = st.drain(70);
    assert!(rec.is_none(), "a running session does not drain");
}

#[test]
fn a_turn_found_running_after_a_crash_fails_interrupted_and_closes_its_open_blocks() {
    let mut st = session();
    let mut stored = turn("t1", "go");
    stored.status = Status::Streaming;
    stored.started_at = Some(10);
    let mut queued = turn("t2", "next");
    queued.queued_at = Some(20);
    st.queue.push_back(queued);
    let fx = st.settle_stored(
        stored,
        vec!["t1:b1".into(), "t1:b2".into()],
        Terminal::interrupted(),
        99,
        false,
    );
    let n = names(&fx);
    assert_eq!(
        &n[..2],
        [
            "publish content.block.completed",
            "publish content.block.completed"
        ]
    );
    assert!(n.contains(&"terminal turn.failed t1".to_string()));
    assert!(
        n.contains(&"publish queue.paused".to_string()),
        "what was queued waits for the user"
    );
    let t = fx.iter().find_map(|e| match e {
        Effect::PublishTerminal(_, t) => Some(t.clone()),
        _ => None,
    });
    let t = t.expect("terminal");
    assert_eq!(t.status, Status::Failed);
    assert_eq!(
        t.content.last().and_then(|b| b["code"].as_str()),
        Some("interrupted")
    );
    assert!(st.running.is_none());
}

#[test]
fn a_stored_turn_settled_while_another_runs_leaves_the_session_running() {
    let mut st = session();
    st.submit(turn("t2", "now"), 50);
    let mut lost = turn("t1", "earlier");
    lost.status = Status::Queued;
    let fx = st.settle_stored(lost, vec![], failed(), 60, false);
    assert!(has(&fx, "terminal turn.failed t1"));
    assert_eq!(st.running.as_ref().map(|r| r.turn.tid.as_str()), Some("t2"));
    assert_eq!(st.row.last_status, "running");
}

#[test]
fn a_queued_turns_request_can_be_edited_but_not_blanked() {
    let mut st = busy();
    let ok = st.edit("t2", Some("changed".into())).expect("not blank");
    let (rec, fx) = ok.expect("queued");
    assert_eq!(rec.request, "changed");
    assert_eq!(
        names(&fx),
        ["save-turn t2 queued", "publish turn.queued.updated"]
    );
    assert_eq!(
        st.edit("t2", Some("  ".into())).err(),
        Some(TurnError::BlankEdit)
    );
    assert_eq!(st.edit("t2", None).err(), Some(TurnError::BlankEdit));
    match st.edit("t1", Some("x".into())) {
        Ok(Err(Elsewhere::Here(Status::Streaming))) => {}
        _ => panic!("the running turn is not queued"),
    }
}

#[test]
fn deleting_a_queued_turn_frees_its_key() {
    let mut st = session();
    st.submit(keyed("t1", "k1"), 10);
    st.submit(keyed("t2", "k2"), 20);
    let fx = st.delete_queued("t2").expect("queued");
    assert_eq!(
        names(&fx),
        ["delete-turn t2", "publish turn.queued.deleted"]
    );
    assert!(st.queue.is_empty());
    assert!(!st.keys.contains_key("k2"));
    assert_eq!(
        st.delete_queued("t1").err(),
        Some(Elsewhere::Here(Status::Streaming))
    );
    assert_eq!(st.delete_queued("t9").err(), Some(Elsewhere::Stored));
}
