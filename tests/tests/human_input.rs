//! Human input end to end (docs/decisions.md, human input rules): an extension slash command calls
//! `vis.ask` / `vis.live` / `vis.shell` in the session worker, and the HTTP routes and the
//! session stream answer and observe it.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const EXT: &str = r#"
import blockether.vis.extension as vis

def no_bad(value):
    return "no bad names" if value == "bad" else None

def ask(ctx):
    a = vis.ask("Deploy?", [
        vis.row(vis.plaintext("name", is_required=True, validate=no_bad), vis.password("token")),
        vis.select("env", ["dev", "prod"]),
        vis.multiselect("regions", ["eu", "us", "ap"]),
        vis.checkbox("sure"),
        vis.slider("n", min=0, max=10, step=1),
    ], is_cancellable=False, timeout_ms=15000)
    if not a:
        return vis.ok(f"refused: {a.reason}")
    tok = a["token"]
    return vis.ok(f"hello {a['name']} env={a['env']} regions={a['regions']} sure={a['sure']} "
                  f"n={a['n']!r} handle={tok.startswith('vis-secret:')} secret={vis.reveal(tok)}")

def ask_soft(ctx):
    a = vis.ask("Continue?", [vis.plaintext("why")], timeout_ms=15000)
    return vis.ok("yes" if a else f"refused: {a.reason}")

def watch(ctx):
    with vis.live("Job", [vis.status("st", "starting"), vis.output("out")]) as view:
        view.node("st").set("running", tone="running")
        for i in range(5):
            view.node("out").write(f"line {i}")
    return vis.ok(f"watched {view.id}")

def sh(ctx):
    r = vis.shell({"command": "echo hi; echo err >&2"})
    return vis.ok(f"status={r['status']} exit={r['exit']} out={r['out'].split()}")

def fetch(ctx):
    r = vis.shell({"command": "curl -s -o /dev/null -w '%{http_code}' http://denied.example/x"})
    return vis.ok(f"code={r['out']}")

def job(ctx):
    view = vis.live("Long job", [
        vis.table("t", [vis.table_column("a")],
                  rows=[vis.table_row("r1", {"a": 1}), vis.table_row("r2", {"a": 2})]),
        vis.output("out")])
    try:
        for i in range(300):
            view.node("out").write(f"tick {i}")
            view.sleep(0.05)
    except vis.Interrupted as e:
        view.close("interrupted")
        return vis.ok(f"interrupted note={e.note}")
    view.close("completed")
    return vis.ok("ran out")

def jhi(ctx):
    r = vis.jailed_shell_session({"command": ["printf", "%s|", "a b", "c"]})
    return vis.ok(f"jailed out={r['out']} status={r['status']}")

vis.register(vis.Extension(name="hi", description="human input",
    slash_commands=[vis.SlashCommand("askme", ask), vis.SlashCommand("asksoft", ask_soft),
                    vis.SlashCommand("watch", watch), vis.SlashCommand("shhi", sh),
                    vis.SlashCommand("fetch", fetch), vis.SlashCommand("jhi", jhi),
                    vis.SlashCommand("job", job)]))
"#;

async fn start() -> Gateway {
    let dirs = Dirs::new();
    std::fs::create_dir_all(dirs.home().join("extensions")).unwrap();
    std::fs::write(dirs.home().join("extensions/hi.py"), EXT).unwrap();
    write_network_policy(&dirs.root(), &loopback_policy());
    Gateway::start_in(dirs, Opts::default()).await
}

/// Polls `GET …/human-input` until one request is pending; returns it.
async fn pending(gw: &Gateway, sid: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (s, v) = gw.get(format!("/v1/sessions/{sid}/human-input")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        if let Some(r) = v["requests"].as_array().and_then(|a| a.first()) {
            return r.clone();
        }
        assert!(Instant::now() < deadline, "no pending request: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The stored `turn.completed` / `turn.failed` of the session as text.
async fn terminal_text(gw: &Gateway, sid: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let evs = gw.events_since(sid, 0).await;
        if let Some(e) = evs
            .iter()
            .rev()
            .find(|e| e["type"] == "turn.completed" || e["type"] == "turn.failed")
        {
            return e.to_string();
        }
        assert!(Instant::now() < deadline, "no terminal: {:?}", types(&evs));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_form_from_a_slash_command_is_listed_validated_answered_and_closed() {
    let gw = start().await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (s, v) = gw.submit(&sid, "/askme").await;
    assert!(s.is_success(), "{v}");
    let req = pending(&gw, &sid).await;
    let rid = req["id"].as_str().expect("id").to_string();
    assert_eq!(req["title"], "Deploy?");
    assert_eq!(req["is_cancellable"], false);
    assert_eq!(req["submit_label"], "Submit");
    assert_eq!(req["session_id"], json!(sid));
    let evs = gw.wait_stored(&sid, "human_input.request").await;
    let ev = evs
        .iter()
        .find(|e| e["type"] == "human_input.request")
        .unwrap();
    assert_eq!(ev["request"]["id"], json!(rid));
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(soul["is_awaiting_input"], true, "{soul}");

    let submit = format!("/v1/sessions/{sid}/human-input/{rid}/actions/submit");
    let (s, v) = gw.post(&submit, json!({"values": {"n": 11}})).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["is_accepted"], false, "{v}");
    assert_eq!(v["errors"]["name"], "is required", "{v}");
    assert!(v["errors"]["n"].is_string(), "out of range: {v}");
    let (_, v) = gw.post(&submit, json!({"values": {"name": "bad"}})).await;
    assert_eq!(
        v["errors"]["name"], "no bad names",
        "the extension's validator ran: {v}"
    );
    let (s, v) = gw.post(&submit, json!({"values": "nope"})).await;
    assert_eq!(
        (s, error_type(&v)),
        (StatusCode::BAD_REQUEST, "bad-request".into())
    );
    let (s, v) = gw
        .post_empty(&format!(
            "/v1/sessions/{sid}/human-input/{rid}/actions/cancel"
        ))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(error_type(&v), "human-input-not-cancellable");
    assert_eq!(pending(&gw, &sid).await["id"], json!(rid), "still pending");

    let values = json!({"name": "Ann", "token": "s3cr3t", "env": "prod",
        "regions": ["us", "eu"], "sure": "on", "n": "3"});
    let (s, v) = gw.post(&submit, json!({"values": values})).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["is_accepted"], true, "{v}");
    let evs = gw.wait_stored(&sid, "human_input.close").await;
    let close = evs
        .iter()
        .find(|e| e["type"] == "human_input.close")
        .unwrap();
    assert_eq!(close["request_id"], json!(rid));
    assert_eq!(close["reason"], "submitted");
    let text = terminal_text(&gw, &sid).await;
    assert!(
        text.contains(
            "hello Ann env=prod regions=['eu', 'us'] sure=True n=3 handle=True secret=s3cr3t"
        ),
        "{text}"
    );
    // The extension itself echoes the revealed secret in its answer (turn.completed may
    // already be stored); the form's own events must never carry it.
    assert!(
        !evs.iter()
            .filter(|e| e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("human_input")))
            .any(|e| e.to_string().contains("s3cr3t")),
        "the secret is never in the form's events"
    );
    let (_, v) = gw.post(&submit, json!({"values": values})).await;
    assert_eq!(v["is_accepted"], false, "late submit: {v}");
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(soul["is_awaiting_input"], false);
    let (s, v) = gw
        .post(
            &format!(
                "/v1/sessions/{sid}/human-input/{}/actions/submit",
                uuid::Uuid::new_v4()
            ),
            json!({"values": {}}),
        )
        .await;
    assert_eq!(
        (s, error_type(&v)),
        (StatusCode::NOT_FOUND, "human-input-not-found".into())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_form_answers_the_extension_with_reason_cancelled() {
    let gw = start().await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    gw.submit(&sid, "/asksoft").await;
    let rid = pending(&gw, &sid).await["id"].as_str().unwrap().to_string();
    let (s, v) = gw
        .post_empty(&format!(
            "/v1/sessions/{sid}/human-input/{rid}/actions/cancel"
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["is_cancelled"], true);
    let text = terminal_text(&gw, &sid).await;
    assert!(text.contains("refused: cancelled"), "{text}");
    let evs = gw.events_since(&sid, 0).await;
    let close = evs
        .iter()
        .find(|e| e["type"] == "human_input.close")
        .unwrap();
    assert_eq!(close["reason"], "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_view_opens_patches_and_closes_and_its_log_stays_readable() {
    let gw = start().await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    gw.submit(&sid, "/watch").await;
    let text = terminal_text(&gw, &sid).await;
    assert!(text.contains("watched "), "{text}");
    let evs = gw.wait_stored(&sid, "human_input.live.close").await;
    let kinds = types(&evs);
    let open = evs
        .iter()
        .find(|e| e["type"] == "human_input.live.open")
        .unwrap();
    let vid = open["view_id"].as_str().unwrap().to_string();
    assert_eq!(open["view"]["title"], "Job");
    let patches: Vec<&Value> = evs
        .iter()
        .filter(|e| e["type"] == "human_input.live.patch")
        .collect();
    assert!(!patches.is_empty(), "{kinds:?}");
    assert!(
        patches.len() < 6,
        "six pushes within 100 ms are coalesced: {kinds:?}"
    );
    let last = patches.last().unwrap();
    assert_eq!(last["patch"]["view_id"], json!(vid));
    assert!(last["first_seq"].as_u64() <= last["patch"]["seq"].as_u64());
    let close = evs
        .iter()
        .find(|e| e["type"] == "human_input.live.close")
        .unwrap();
    assert_eq!(close["result"]["reason"], "completed");
    assert_eq!(close["result"]["is_completed"], true);
    let (_, v) = gw.get(format!("/v1/sessions/{sid}/human-input/live")).await;
    assert_eq!(v["views"], json!([]), "closed views are not listed");
    let (s, v) = gw
        .get(format!(
            "/v1/sessions/{sid}/human-input/live/{vid}/log/out?from=1&limit=2"
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["total"], 5);
    assert_eq!(v["lines"], json!(["line 1", "line 2"]));
    let (s, v) = gw
        .get(format!(
            "/v1/sessions/{sid}/human-input/live/not-a-uuid/log/out"
        ))
        .await;
    assert_eq!(
        (s, error_type(&v)),
        (StatusCode::NOT_FOUND, "live-view-not-found".into())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_extension_shell_runs_in_the_session_sandbox_and_its_egress_is_decided() {
    let gw = start().await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/shhi").await;
    let text = terminal_text(&gw, &sid).await;
    // stdout and stderr arrive on separate pipes: their relative order is not defined.
    assert!(
        text.contains("status=exited exit=0 out=['hi', 'err']")
            || text.contains("status=exited exit=0 out=['err', 'hi']"),
        "{text}"
    );
    gw.wait_idle(&sid).await;
    gw.submit(&sid, "/fetch").await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let decision = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = sse.next_event(left).await.expect("an egress.decision");
        if e.ty() == "egress.decision" {
            break e.data;
        }
    };
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert_eq!(decision["host"], "denied.example", "{decision}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_the_turn_settles_its_pending_form_as_cancelled() {
    let gw = start().await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (_, t) = gw.submit(&sid, "/asksoft").await;
    let tid = t["turn_id"].as_str().expect("turn_id").to_string();
    let rid = pending(&gw, &sid).await["id"].as_str().unwrap().to_string();
    let (s, v) = gw
        .post_empty(&format!("/v1/sessions/{sid}/turns/{tid}/cancel"))
        .await;
    assert!(s.is_success(), "{v}");
    let evs = gw.wait_stored(&sid, "human_input.close").await;
    let close = evs
        .iter()
        .find(|e| e["type"] == "human_input.close")
        .unwrap();
    assert_eq!(close["request_id"], json!(rid));
    assert_eq!(close["reason"], "cancelled");
    let (_, v) = gw.get(format!("/v1/sessions/{sid}/human-input")).await;
    assert_eq!(v["requests"], json!([]));
    let (_, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/human-input/{rid}/actions/submit"),
            json!({"values": {"why": "late"}}),
        )
        .await;
    assert_eq!(v["is_accepted"], false, "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jailed_session_shell_takes_an_argv_list() {
    let gw = start().await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    gw.submit(&sid, "/jhi").await;
    let text = terminal_text(&gw, &sid).await;
    assert!(text.contains("jailed out=a b|c| status=exited"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_human_focuses_and_interrupts_a_live_view_and_the_extension_learns_it() {
    let gw = start().await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    gw.submit(&sid, "/job").await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let vid = loop {
        let (_, v) = gw.get(format!("/v1/sessions/{sid}/human-input/live")).await;
        if let Some(id) = v["views"][0]["id"].as_str() {
            assert_eq!(v["views"][0]["title"], "Long job");
            break id.to_string();
        }
        assert!(Instant::now() < deadline, "no live view: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let base = format!("/v1/sessions/{sid}/human-input/live/{vid}/actions");
    let (s, v) = gw
        .post(
            &format!("{base}/focus"),
            json!({"node_id": "t", "item_ids": ["r2"]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"focused_ids": ["r2"], "node_id": "t", "view_id": vid})
    );
    for bad in [
        json!({"node_id": "t", "item_ids": ["zz"]}),
        json!({"node_id": "nope", "item_ids": []}),
        json!({"item_ids": ["r1"]}),
        json!({"node_id": "t", "item_ids": "r1"}),
    ] {
        let (s, v) = gw.post(&format!("{base}/focus"), bad.clone()).await;
        assert_eq!(
            (s, error_type(&v)),
            (StatusCode::BAD_REQUEST, "invalid-live-focus".into()),
            "{bad}"
        );
    }
    let (s, v) = gw
        .post(&format!("{base}/interrupt"), json!({"note": "enough"}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"is_interrupted": true, "view_id": vid}));
    let text = terminal_text(&gw, &sid).await;
    assert!(text.contains("interrupted note=enough"), "{text}");
    let evs = gw.wait_stored(&sid, "human_input.live.close").await;
    let close = evs
        .iter()
        .find(|e| e["type"] == "human_input.live.close")
        .unwrap();
    assert_eq!(close["result"]["reason"], "interrupted", "{close}");
    assert_eq!(close["result"]["is_from_human"], true);
    assert_eq!(close["result"]["note"], "enough");
    let (s, v) = gw
        .post(
            &format!(
                "/v1/sessions/{sid}/human-input/live/{}/actions/interrupt",
                uuid::Uuid::new_v4()
            ),
            json!({}),
        )
        .await;
    assert_eq!(
        (s, error_type(&v)),
        (StatusCode::NOT_FOUND, "live-view-not-found".into())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forms_and_live_views_left_open_by_a_crash_are_closed_as_interrupted_at_the_next_start() {
    let gw = start().await;
    let root = gw.dirs.root();
    let (form_sid, view_sid) = (
        gw.create_session_at(&root).await,
        gw.create_session_at(&root).await,
    );
    gw.submit(&form_sid, "/asksoft").await;
    let rid = pending(&gw, &form_sid).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    gw.submit(&view_sid, "/job").await;
    let evs = gw.wait_stored(&view_sid, "human_input.live.open").await;
    let vid = evs
        .iter()
        .find(|e| e["type"] == "human_input.live.open")
        .unwrap()["view_id"]
        .as_str()
        .unwrap()
        .to_string();

    let gw = gw.restart_after_kill().await;

    let evs = gw.wait_stored(&form_sid, "turn.failed").await;
    let kinds = types(&evs);
    let close = evs
        .iter()
        .position(|e| e["type"] == "human_input.close")
        .unwrap_or_else(|| panic!("no human_input.close after the restart: {kinds:?}"));
    assert_eq!(evs[close]["request_id"], json!(rid));
    assert_eq!(evs[close]["reason"], "interrupted");
    let failed = evs.iter().position(|e| e["type"] == "turn.failed").unwrap();
    assert!(
        close < failed,
        "the form closes before the turn's terminal: {kinds:?}"
    );
    let (_, v) = gw.get(format!("/v1/sessions/{form_sid}/human-input")).await;
    assert_eq!(v["requests"], json!([]), "{v}");

    let evs = gw.wait_stored(&view_sid, "human_input.live.close").await;
    let close = evs
        .iter()
        .find(|e| e["type"] == "human_input.live.close")
        .unwrap();
    assert_eq!(close["view_id"], json!(vid));
    assert_eq!(close["result"]["reason"], "interrupted");
    assert_eq!(close["result"]["is_completed"], false);
    let (_, v) = gw
        .get(format!("/v1/sessions/{view_sid}/human-input/live"))
        .await;
    assert_eq!(v["views"], json!([]), "{v}");
}
