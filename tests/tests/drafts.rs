//! Drafts and forks end to end: the real binary, real git, the fixture LLM driving the
//! `shell` tool (and `python_execution`), `/draft …` turns and the Companion routes.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with one commit (`a.txt`) on `main`.
fn repo(root: &Path) {
    git(root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
    git(root, &["add", "."]);
    git(root, &["commit", "-qm", "init"]);
}

fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read: {e}"))
}

async fn start(llm: &FixtureLlm, dirs: Arc<Dirs>) -> Gateway {
    Gateway::start_in(dirs, Opts::openai(llm)).await
}

/// Runs a `/draft …` turn; `Ok(reply)` on completion, `Err(message)` on failure.
async fn slash(gw: &Gateway, sid: &str, cmd: &str) -> Result<String, String> {
    let (_, last) = gw.run_turn(sid, cmd).await;
    let text = last.data.to_string();
    match last.event.as_str() {
        "turn.completed" => Ok(text),
        "turn.failed" => Err(text),
        other => panic!("{cmd}: {other} {text}"),
    }
}

/// A turn whose model runs one shell command, then answers.
async fn shell_turn(gw: &Gateway, llm: &FixtureLlm, sid: &str, cmd: &str) {
    llm.push(Script::tool_call("shell", json!({ "command": cmd })));
    llm.push(Script::text(&["done"]));
    let (evs, last) = gw.run_turn(sid, "edit").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
}

async fn workspace(gw: &Gateway, sid: &str) -> Value {
    let (s, v) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["workspace"].clone()
}

/// The folder the session works in now (its draft's while it is in one).
async fn draft_root(gw: &Gateway, sid: &str) -> PathBuf {
    PathBuf::from(workspace(gw, sid).await["root"].as_str().unwrap())
}

fn branches(root: &Path) -> String {
    git(root, &["branch", "--list"])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_edit_in_a_draft_leaves_the_real_file_alone_until_apply_merges_it() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    // Uncommitted and untracked (not ignored) work is part of the draft's start.
    std::fs::write(root.join("notes.txt"), "wip\n").unwrap();
    std::fs::create_dir_all(root.join("ignored")).unwrap();
    std::fs::write(root.join("ignored/big.bin"), "x").unwrap();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;

    let reply = slash(&gw, &sid, "/draft new feat").await.unwrap();
    assert!(reply.contains("feat"), "{reply}");
    let ws = workspace(&gw, &sid).await;
    assert_eq!(ws["is_draft"], true, "{ws}");
    assert_eq!(ws["label"], "feat");
    assert_eq!(ws["repo_root"], root.to_string_lossy().as_ref());
    let draft = PathBuf::from(ws["root"].as_str().unwrap());
    assert!(
        draft.starts_with(dirs.home()),
        "drafts live under the home: {draft:?}"
    );
    assert_eq!(read(draft.join("notes.txt")), "wip\n");
    assert!(
        !draft.join("ignored").exists(),
        "ignored files are not copied"
    );

    shell_turn(&gw, &llm, &sid, "echo two >> a.txt && echo new > b.txt").await;
    assert_eq!(read(root.join("a.txt")), "one\n", "trunk is untouched");
    assert!(!root.join("b.txt").exists());
    assert_eq!(read(draft.join("a.txt")), "one\ntwo\n");
    let status = slash(&gw, &sid, "/draft").await.unwrap();
    assert!(status.contains("2 changed file"), "{status}");

    let reply = slash(&gw, &sid, "/draft apply add b").await.unwrap();
    assert!(reply.contains("committed on main"), "{reply}");
    assert_eq!(read(root.join("a.txt")), "one\ntwo\n");
    assert_eq!(read(root.join("b.txt")), "new\n");
    assert_eq!(
        read(root.join("notes.txt")),
        "wip\n",
        "trunk's own work stays"
    );
    let log = git(&root, &["log", "--oneline", "-3"]);
    assert!(
        log.starts_with(&format!(
            "{} add b",
            &git(&root, &["rev-parse", "--short", "HEAD"]).trim()
        )),
        "{log}"
    );
    let clean = git(&root, &["status", "--porcelain"]);
    assert_eq!(
        clean.trim(),
        "?? notes.txt",
        "the merge is checked out: {clean}"
    );
    assert!(!draft.exists(), "an applied draft's worktree is removed");
    assert!(!branches(&root).contains("vis-draft/feat"));
    assert_eq!(workspace(&gw, &sid).await["is_draft"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stashed_draft_survives_a_restart_and_resumes_by_name() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    let mut gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    slash(&gw, &sid, "/draft new parked").await.unwrap();
    shell_turn(&gw, &llm, &sid, "echo parked > p.txt").await;
    slash(&gw, &sid, "/draft stash").await.unwrap();
    assert_eq!(workspace(&gw, &sid).await["is_draft"], false);
    // Back on trunk: the shell runs in the real folder.
    shell_turn(&gw, &llm, &sid, "echo trunk > t.txt").await;
    assert!(root.join("t.txt").exists());
    assert!(!root.join("p.txt").exists());

    gw.stop().await;
    let gw = start(&llm, dirs.clone()).await;
    let list = slash(&gw, &sid, "/draft list").await.unwrap();
    assert!(list.contains("parked"), "{list}");
    slash(&gw, &sid, "/draft resume parked").await.unwrap();
    let ws = workspace(&gw, &sid).await;
    assert_eq!(ws["is_draft"], true, "{ws}");
    let draft = PathBuf::from(ws["root"].as_str().unwrap());
    assert_eq!(read(draft.join("p.txt")), "parked\n");

    // Inside a draft across a restart too.
    let gw = gw.restart_after_kill().await;
    assert_eq!(workspace(&gw, &sid).await["label"], "parked");
    shell_turn(&gw, &llm, &sid, "echo again >> p.txt").await;
    assert_eq!(read(draft.join("p.txt")), "parked\nagain\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn abandon_removes_the_worktree_and_the_branch() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    slash(&gw, &sid, "/draft new gone").await.unwrap();
    let draft = draft_root(&gw, &sid).await;
    assert!(draft.is_dir());
    assert!(branches(&root).contains("vis-draft/gone"));
    slash(&gw, &sid, "/draft abandon not needed").await.unwrap();
    assert!(!draft.exists());
    assert!(!branches(&root).contains("vis-draft/gone"));
    assert!(!git(&root, &["worktree", "list"]).contains("gone"));
    let list = slash(&gw, &sid, "/draft list").await.unwrap();
    assert!(list.contains("No drafts"), "{list}");
    // Trunk cannot be abandoned.
    let e = slash(&gw, &sid, "/draft abandon").await.unwrap_err();
    assert!(e.contains("trunk"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conflicting_change_on_trunk_refuses_apply_and_leaves_both_sides_intact() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    slash(&gw, &sid, "/draft new clash").await.unwrap();
    let draft = draft_root(&gw, &sid).await;
    shell_turn(&gw, &llm, &sid, "echo draft > a.txt").await;
    std::fs::write(root.join("a.txt"), "trunk\n").unwrap();
    let head = git(&root, &["rev-parse", "HEAD"]);

    let e = slash(&gw, &sid, "/draft apply").await.unwrap_err();
    assert!(e.contains("a.txt"), "{e}");
    assert_eq!(read(root.join("a.txt")), "trunk\n");
    assert_eq!(read(draft.join("a.txt")), "draft\n");
    assert_eq!(git(&root, &["rev-parse", "HEAD"]), head, "no commit landed");
    assert_eq!(
        workspace(&gw, &sid).await["is_draft"],
        true,
        "still in the draft"
    );

    // A committed change to the same line conflicts in the merge itself.
    git(&root, &["commit", "-qam", "trunk edit"]);
    let head = git(&root, &["rev-parse", "HEAD"]);
    let e = slash(&gw, &sid, "/draft apply").await.unwrap_err();
    assert!(e.contains("conflicts") && e.contains("a.txt"), "{e}");
    assert_eq!(git(&root, &["rev-parse", "HEAD"]), head);
    assert_eq!(read(root.join("a.txt")), "trunk\n");
    assert_eq!(read(draft.join("a.txt")), "draft\n");
}

const APPROVAL_GUARD: &str = r#"
import json
import blockether.vis.extension as vis

def no_approval(call):
    args = call["args"][0]
    with open(args["repo_root"] + "/../approve-args.json", "w") as f:
        json.dump(args, f)
    return vis.block("drafts need a review before they land")

vis.register(vis.Extension(
    name="review", description="Refuses draft approval.",
    op_hooks=[vis.OpHook(["draft/approve"], no_approval)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_op_hook_on_draft_approve_refuses_with_its_reason_and_sees_the_drafts_args() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    let d = dirs.home().join("extensions");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("review.py"), APPROVAL_GUARD).unwrap();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    slash(&gw, &sid, "/draft new guarded").await.unwrap();
    shell_turn(&gw, &llm, &sid, "echo x > a.txt").await;
    let e = slash(&gw, &sid, "/draft apply ship it").await.unwrap_err();
    assert!(e.contains("drafts need a review before they land"), "{e}");
    assert_eq!(read(root.join("a.txt")), "one\n");
    assert_eq!(workspace(&gw, &sid).await["is_draft"], true);
    let args: Value =
        serde_json::from_str(&read(dirs.base.path().join("approve-args.json"))).unwrap();
    assert_eq!(args["label"], "guarded");
    assert_eq!(args["backend"], "git");
    assert_eq!(args["branch"], "vis-draft/guarded");
    assert_eq!(args["target_branch"], "main");
    assert_eq!(args["message"], "ship it");
    assert_eq!(args["files"], json!(["a.txt"]));
    assert!(args["workspace_id"].as_str().is_some_and(|s| !s.is_empty()));
}

#[tokio::test(flavor = "multi_thread")]
async fn outside_git_a_copy_draft_lands_its_changes_on_apply() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::write(root.join("old.txt"), "old\n").unwrap();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    slash(&gw, &sid, "/draft new plain").await.unwrap();
    let (_, list) = gw.get(format!("/v1/sessions/{sid}/workspace/drafts")).await;
    assert_eq!(list["drafts"][0]["backend"], "copy", "{list}");
    shell_turn(
        &gw,
        &llm,
        &sid,
        "echo two > a.txt && rm old.txt && echo n > n.txt",
    )
    .await;
    assert_eq!(read(root.join("a.txt")), "one\n");
    assert!(root.join("old.txt").exists());
    let reply = slash(&gw, &sid, "/draft apply").await.unwrap();
    assert!(reply.contains("3 file(s) landed"), "{reply}");
    assert_eq!(read(root.join("a.txt")), "two\n");
    assert!(!root.join("old.txt").exists());
    assert_eq!(read(root.join("n.txt")), "n\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_execution_makes_a_draft_and_the_rest_of_the_block_works_in_it() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    // The model may land its drafts without asking in this project.
    std::fs::write(root.join(".gitignore"), "ignored/\nvis.yml\n").unwrap();
    std::fs::write(root.join("vis.yml"), "drafts:\n  model_may_approve: true\n").unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let sid = gw.create_session_at(&root).await;
    let code = r#"
w = draft_create("py")
open("a.txt", "w").write("from python\n")
print(w["workspace"]["is_draft"], shell("cat a.txt").strip())
"#;
    llm.push(Script::tool_call(
        "python_execution",
        json!({ "code": code }),
    ));
    llm.push(Script::text(&["done"]));
    let (_, last) = gw.run_turn(&sid, "go").await;
    assert_eq!(last.event, "turn.completed", "{}", last.data);
    let sent = llm.requests().last().unwrap().body.to_string();
    assert!(sent.contains("True from python"), "{sent}");
    assert_eq!(read(root.join("a.txt")), "one\n");
    let code = r#"print(draft_approve("from the sandbox")["files"])"#;
    llm.push(Script::tool_call(
        "python_execution",
        json!({ "code": code }),
    ));
    llm.push(Script::text(&["done"]));
    gw.run_turn(&sid, "land").await;
    assert_eq!(read(root.join("a.txt")), "from python\n");
    assert!(git(&root, &["log", "--format=%B", "-1"]).contains("from the sandbox"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_at_turn_2_of_4_keeps_2_turns_is_listed_and_can_start_in_a_draft() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    repo(&dirs.root());
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    for i in 1..=4 {
        llm.push(Script::text(&[format!("answer {i}")]));
        gw.run_turn(&sid, &format!("question {i}")).await;
    }
    let (_, pts) = gw.get(format!("/v1/sessions/{sid}/forks")).await;
    let second = pts["turns"][1]["turn_id"].as_str().unwrap().to_string();
    let mut sse = gw.events(&sid, -1).await;
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/forks"),
            json!({"through_turn_id": second, "draft_label": "forked"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let fork = v["session"]["id"].as_str().unwrap().to_string();
    assert_eq!(v["session"]["workspace"]["is_draft"], true, "{v}");
    assert_eq!(v["session"]["workspace"]["label"], "forked");
    let evs = sse
        .collect_until("session.forked", std::time::Duration::from_secs(5))
        .await;
    assert_eq!(evs.last().unwrap().data["fork_session_id"], fork.as_str());
    let (_, tr) = gw.get(format!("/v1/sessions/{fork}/transcript")).await;
    assert_eq!(tr["total"], 2, "{tr}");
    assert_eq!(tr["turns"][1]["user_request"], "question 2");
    let (_, pts) = gw.get(format!("/v1/sessions/{sid}/forks")).await;
    assert_eq!(pts["forks"][0]["session_id"], fork.as_str(), "{pts}");
    assert_eq!(pts["forks"][0]["through_turn_id"], second.as_str());
    // The fork's turns are its own from now on.
    llm.push(Script::text(&["only in the fork"]));
    gw.run_turn(&fork, "question 5").await;
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(tr["total"], 4);
    // A turn of another session is not a fork point here.
    let (_, fork_pts) = gw.get(format!("/v1/sessions/{fork}/forks")).await;
    let foreign = fork_pts["turns"][2]["turn_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, e) = gw
        .post(
            &format!("/v1/sessions/{sid}/forks"),
            json!({"through_turn_id": foreign}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{e}");
    assert_eq!(error_type(&e), "unknown-turn");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_companion_workspace_routes_answer_the_apps_shapes_and_publish_changes() {
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let sid = gw.create_session_at(&root).await;
    let other = gw.create_session_at(&root).await;
    let mut sse = gw.events(&sid, -1).await;
    let base = format!("/v1/sessions/{sid}/workspace");

    let (s, v) = gw
        .post(
            &format!("{base}/drafts"),
            json!({"label": "app", "clean": false}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["workspace"]["is_draft"], true);
    let id = v["draft"]["workspace_id"].as_str().unwrap().to_string();
    let evs = sse
        .collect_until(
            "session.workspace_updated",
            std::time::Duration::from_secs(5),
        )
        .await;
    assert_eq!(evs.last().unwrap().data["action"], "created");

    let (s, v) = gw.get(format!("{base}/drafts")).await;
    assert_eq!(s, StatusCode::OK);
    let item = &v["drafts"][0];
    for key in [
        "workspace_id",
        "label",
        "root",
        "repo_root",
        "fork_ms",
        "is_current",
    ] {
        assert!(item.get(key).is_some(), "{key} missing: {item}");
    }
    assert_eq!(item["is_current"], true);
    assert_eq!(item["repo_root"], root.to_string_lossy().as_ref());
    // Another session of the repository lists it too, not as its own.
    let (_, v) = gw
        .get(format!("/v1/sessions/{other}/workspace/drafts"))
        .await;
    assert_eq!(v["drafts"][0]["is_current"], false);
    let (s, e) = gw
        .post(
            &format!("/v1/sessions/{other}/workspace/resume"),
            json!({"workspace_id": id}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{e}");
    assert_eq!(error_type(&e), "draft-in-use");

    let (s, v) = gw.post(&format!("{base}/stash"), json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["workspace"]["is_draft"], false);
    let (s, v) = gw
        .post(&format!("{base}/resume"), json!({"workspace_id": id}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["workspace"]["workspace_id"], id.as_str());
    let (_, list) = gw.get("/v1/sessions?limit=10").await;
    let row = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == sid.as_str())
        .cloned();
    if let Some(row) = row {
        assert_eq!(row["workspace"]["is_draft"], true, "{row}");
    }
    let (s, v) = gw.delete(&format!("{base}/drafts/{id}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["workspace"]["is_draft"], false);
    let (_, v) = gw.get(format!("{base}/drafts")).await;
    assert_eq!(v["drafts"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn draft_sizes_list_each_draft_with_the_bytes_and_files_it_holds_largest_first() {
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let sid = gw.create_session_at(&root).await;
    let base = format!("/v1/sessions/{sid}/workspace");
    let (s, v) = gw.get(format!("{base}/draft-sizes")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"drafts": [], "total_bytes": 0}));
    for label in ["small", "big"] {
        let (s, v) = gw
            .post(&format!("{base}/drafts"), json!({ "label": label }))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }
    // 1 MiB more in the current draft ("big").
    let big = draft_root(&gw, &sid).await;
    std::fs::write(big.join("blob.bin"), vec![7u8; 1 << 20]).unwrap();
    let (s, v) = gw.get(format!("{base}/draft-sizes")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let drafts = v["drafts"].as_array().unwrap();
    assert_eq!(drafts.len(), 2, "{v}");
    assert_eq!(drafts[0]["label"], "big", "largest first: {v}");
    assert_eq!(drafts[0]["is_current"], true);
    assert_eq!(drafts[1]["is_current"], false);
    let (b0, b1) = (
        drafts[0]["bytes"].as_u64().unwrap(),
        drafts[1]["bytes"].as_u64().unwrap(),
    );
    assert!(b0 >= (1 << 20) && b0 > b1, "{v}");
    assert!(drafts[1]["files"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["total_bytes"].as_u64().unwrap(), b0 + b1);
    let (s, e) = gw
        .get("/v1/sessions/00000000-0000-4000-8000-00000000dead/workspace/draft-sizes")
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_draft_input_is_refused_clearly_and_changes_nothing_on_disk() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    let base = format!("/v1/sessions/{sid}/workspace");
    for bad in ["a/b", "../up", "x..y", ""] {
        let (s, e) = gw
            .post(&format!("{base}/drafts"), json!({"label": bad}))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {e}");
        assert_eq!(error_type(&e), "invalid-draft-label", "{bad}");
    }
    let (s, e) = gw.post(&format!("{base}/drafts"), json!({})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    let e = slash(&gw, &sid, "/draft new ../../etc").await.unwrap_err();
    assert!(e.contains("slash"), "{e}");
    let e = slash(&gw, &sid, "/draft resume nothing-here")
        .await
        .unwrap_err();
    assert!(e.contains("no draft named 'nothing-here'"), "{e}");
    let (s, e) = gw
        .post(
            &format!("{base}/resume"),
            json!({"workspace_id": "00000000-0000-4000-8000-000000000000"}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{e}");
    assert_eq!(error_type(&e), "draft-not-found");
    let e = slash(&gw, &sid, "/draft apply").await.unwrap_err();
    assert!(e.contains("trunk"), "{e}");
    let e = slash(&gw, &sid, "/draft frobnicate").await.unwrap_err();
    assert!(e.contains("unknown /draft command"), "{e}");
    assert!(
        !dirs.home().join("drafts").exists()
            || std::fs::read_dir(dirs.home().join("drafts"))
                .unwrap()
                .all(|e| {
                    std::fs::read_dir(e.unwrap().path())
                        .map(|mut d| d.next().is_none())
                        .unwrap_or(true)
                }),
        "no draft folder was made"
    );
    assert_eq!(branches(&root).trim(), "* main");
    assert_eq!(git(&root, &["status", "--porcelain"]).trim(), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn sh_and_the_exec_environment_of_a_drafted_session_run_in_the_draft() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    slash(&gw, &sid, "/draft new kids").await.unwrap();
    let draft = workspace(&gw, &sid).await["root"]
        .as_str()
        .unwrap()
        .to_string();
    let out = slash(&gw, &sid, "/sh pwd && echo sh > s.txt")
        .await
        .unwrap();
    assert!(out.contains(&draft), "{out}");
    assert!(!root.join("s.txt").exists());
    let env = gw.sandbox_env(&sid).await;
    assert_eq!(env["cwd"], draft.as_str(), "{env}");
    let ran = gw.exec(&sid, &["sh", "-c", "pwd"]).await;
    assert!(ran.ok(), "{}", ran.stderr);
    assert_eq!(ran.stdout.trim(), draft);
    // The palette lists the draft commands.
    let (_, pal) = gw.get(format!("/v1/sessions/{sid}/slashes")).await;
    let names = pal["commands"].to_string();
    for c in [
        "/draft",
        "/draft new",
        "/draft apply",
        "/draft stash",
        "/draft resume",
    ] {
        assert!(names.contains(&format!("\"{c}\"")), "{c}: {names}");
    }
}

/// A repository whose user has work in progress: a staged change, an unstaged change to a
/// tracked file, and an untracked file.
fn repo_with_work_in_progress(root: &Path) {
    repo(root);
    std::fs::write(root.join("s.txt"), "s\n").unwrap();
    git(root, &["add", "s.txt"]);
    git(root, &["commit", "-qm", "two"]);
    std::fs::write(root.join("s.txt"), "s staged\n").unwrap();
    git(root, &["add", "s.txt"]);
    std::fs::write(root.join("a.txt"), "one\nuser wip\n").unwrap();
    std::fs::write(root.join("notes.txt"), "private notes\n").unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_lands_only_the_drafts_own_changes_as_one_commit_on_the_branch_tip() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo_with_work_in_progress(&root);
    let tip = git(&root, &["rev-parse", "HEAD"]).trim().to_string();
    let status_before = git(&root, &["status", "--porcelain"]);
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    slash(&gw, &sid, "/draft new wip").await.unwrap();
    let draft = draft_root(&gw, &sid).await;
    // The draft started from the user's uncommitted files: a snapshot commit.
    let snapshot = git(&draft, &["rev-parse", "HEAD"]).trim().to_string();
    assert_ne!(snapshot, tip, "the snapshot holds the uncommitted work");
    assert_eq!(read(draft.join("notes.txt")), "private notes\n");
    shell_turn(&gw, &llm, &sid, "echo new > b.txt").await;

    let reply = slash(&gw, &sid, "/draft apply add b").await.unwrap();
    assert!(reply.contains("committed on main"), "{reply}");
    let head = git(&root, &["rev-parse", "HEAD"]).trim().to_string();
    assert_eq!(
        git(&root, &["rev-parse", "HEAD^"]).trim(),
        tip,
        "one commit whose parent is the tip"
    );
    assert_eq!(
        git(&root, &["rev-list", "--count", &format!("{tip}..{head}")]).trim(),
        "1",
        "{}",
        git(&root, &["log", "--oneline", "-4"])
    );
    let ancestor = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["merge-base", "--is-ancestor", &snapshot, "main"])
        .status()
        .unwrap();
    assert!(
        !ancestor.success(),
        "the snapshot of uncommitted work is not in the branch's history"
    );
    assert_eq!(
        git(&root, &["show", "--name-only", "--format=%s", "HEAD"]).trim(),
        "add b\n\nb.txt",
        "the commit holds the draft's change only"
    );
    assert_eq!(git(&root, &["show", "HEAD:a.txt"]), "one\n");
    assert_eq!(read(root.join("b.txt")), "new\n");
    // The user's uncommitted work stays exactly as it was.
    assert_eq!(read(root.join("a.txt")), "one\nuser wip\n");
    assert_eq!(read(root.join("notes.txt")), "private notes\n");
    assert_eq!(git(&root, &["status", "--porcelain"]), status_before);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_apply_uncommitted_the_drafts_changes_land_as_files_and_nothing_is_committed() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo_with_work_in_progress(&root);
    std::fs::write(root.join("vis.yml"), "drafts:\n  apply: uncommitted\n").unwrap();
    git(&root, &["add", "vis.yml"]);
    git(&root, &["commit", "-qm", "config", "--", "vis.yml"]);
    let tip = git(&root, &["rev-parse", "HEAD"]).trim().to_string();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    slash(&gw, &sid, "/draft new loose").await.unwrap();
    shell_turn(&gw, &llm, &sid, "echo new > b.txt && echo changed > s.txt").await;
    // The draft edits a file the user has staged work in: refused, both sides intact.
    let e = slash(&gw, &sid, "/draft apply").await.unwrap_err();
    assert!(e.contains("s.txt"), "{e}");
    assert_eq!(workspace(&gw, &sid).await["is_draft"], true);
    let draft = draft_root(&gw, &sid).await;
    assert_eq!(read(draft.join("s.txt")), "changed\n");
    assert_eq!(read(root.join("s.txt")), "s staged\n");
    // Without that edit it lands as files.
    shell_turn(&gw, &llm, &sid, "echo 's staged' > s.txt").await;
    let reply = slash(&gw, &sid, "/draft apply").await.unwrap();
    assert!(reply.contains("uncommitted"), "{reply}");
    assert_eq!(git(&root, &["rev-parse", "HEAD"]).trim(), tip);
    assert_eq!(read(root.join("b.txt")), "new\n");
    assert_eq!(read(root.join("a.txt")), "one\nuser wip\n");
    let status = git(&root, &["status", "--porcelain"]);
    assert!(status.contains("?? b.txt"), "{status}");
    assert!(
        status.contains("M  s.txt") && status.contains(" M a.txt"),
        "{status}"
    );
}

/// A block that lands the session's draft, printing the answer or the error.
const APPROVE_BLOCK: &str = r#"
try:
    print("landed", draft_approve("from the model")["files"])
except Exception as e:
    print("refused:", type(e).__name__, e)
"#;

/// Starts a turn whose model creates a draft, edits a file and asks to land it.
async fn model_approves(gw: &Gateway, llm: &FixtureLlm, sid: &str) -> Sse {
    let code = "draft_create('m')\nopen('a.txt', 'w').write('model\\n')\nprint('ok')";
    llm.push(Script::tool_call(
        "python_execution",
        json!({ "code": code }),
    ));
    llm.push(Script::tool_call(
        "python_execution",
        json!({ "code": APPROVE_BLOCK }),
    ));
    llm.push(Script::text(&["done"]));
    let stream = gw.events(sid, -1).await;
    let (s, v) = gw.submit(sid, "land it").await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    stream
}

/// The one pending human-input request of the session.
async fn pending_form(gw: &Gateway, sid: &str) -> Value {
    for _ in 0..400 {
        let (_, v) = gw.get(format!("/v1/sessions/{sid}/human-input")).await;
        if let Some(r) = v["requests"].as_array().and_then(|a| a.first()) {
            return r.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no form was asked");
}

async fn last_block_output(llm: &FixtureLlm) -> String {
    llm.requests().last().unwrap().body.to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_models_draft_approve_asks_the_user_and_a_decline_lands_nothing() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let sid = gw.create_session_at(&root).await;
    let tip = git(&root, &["rev-parse", "HEAD"]);

    let mut stream = model_approves(&gw, &llm, &sid).await;
    let form = pending_form(&gw, &sid).await;
    assert!(
        form["title"].as_str().unwrap_or("").contains("'m'"),
        "{form}"
    );
    assert!(
        form.to_string().contains("a.txt"),
        "the form names the files: {form}"
    );
    assert_eq!(
        read(root.join("a.txt")),
        "one\n",
        "nothing lands while it waits"
    );
    let rid = form["id"].as_str().unwrap();
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/human-input/{rid}/actions/submit"),
            json!({"values": {"decision": "decline"}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["is_accepted"], true, "{v}");
    stream
        .collect_until("turn.completed", std::time::Duration::from_secs(60))
        .await;
    let sent = last_block_output(&llm).await;
    assert!(
        sent.contains("refused:") && sent.contains("declined"),
        "{sent}"
    );
    assert_eq!(read(root.join("a.txt")), "one\n");
    assert_eq!(git(&root, &["rev-parse", "HEAD"]), tip);
    assert_eq!(
        workspace(&gw, &sid).await["is_draft"],
        true,
        "the draft stays"
    );

    // Approved: it lands.
    llm.push(Script::tool_call(
        "python_execution",
        json!({ "code": APPROVE_BLOCK }),
    ));
    llm.push(Script::text(&["done"]));
    let mut stream = gw.events(&sid, -1).await;
    gw.submit(&sid, "again").await;
    let form = pending_form(&gw, &sid).await;
    let rid = form["id"].as_str().unwrap();
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/human-input/{rid}/actions/submit"),
            json!({"values": {"decision": "approve"}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    stream
        .collect_until("turn.completed", std::time::Duration::from_secs(60))
        .await;
    let sent = last_block_output(&llm).await;
    assert!(sent.contains("landed"), "{sent}");
    assert_eq!(read(root.join("a.txt")), "model\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_that_allows_it_lets_the_model_approve_without_asking() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    repo(&root);
    std::fs::write(root.join(".gitignore"), "ignored/\nvis.yml\n").unwrap();
    std::fs::write(root.join("vis.yml"), "drafts:\n  model_may_approve: true\n").unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    let sid = gw.create_session_at(&root).await;
    let mut stream = model_approves(&gw, &llm, &sid).await;
    stream
        .collect_until("turn.completed", std::time::Duration::from_secs(60))
        .await;
    let sent = last_block_output(&llm).await;
    assert!(sent.contains("landed"), "{sent}");
    assert_eq!(read(root.join("a.txt")), "model\n");
    let (_, v) = gw.get(format!("/v1/sessions/{sid}/human-input")).await;
    assert_eq!(v["requests"], json!([]));
}
