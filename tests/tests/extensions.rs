//! Python extensions end to end: the real gateway loads real extension files from a temporary
//! home (`<home>/extensions/*.py`) and project (`<root>/.vis/extensions/*.py`), lists them,
//! offers their Symbols to the model, runs their op hooks, `fs_access` gates and network
//! filters, keeps their state and survives broken files and killed workers.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writes `<home>/extensions/<name>`.
fn global_ext(dirs: &Dirs, name: &str, src: &str) {
    let d = dirs.home().join("extensions");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), src).unwrap();
}

/// Writes `<root>/.vis/extensions/<name>`.
fn project_ext(root: &Path, name: &str, src: &str) {
    let d = root.join(".vis/extensions");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), src).unwrap();
}

/// `GET /v1/extensions?root=<root>`.
async fn extensions(gw: &Gateway, root: &Path) -> Value {
    let (s, v) = gw
        .get(format!("/v1/extensions?root={}", root.display()))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

/// The provider tool name of the first Symbol of the first extension listed for `root`.
async fn first_tool_name(gw: &Gateway, root: &Path) -> String {
    let list = extensions(gw, root).await;
    list["extensions"][0]["symbols"][0]["tool_name"]
        .as_str()
        .unwrap_or_else(|| panic!("tool_name: {list}"))
        .to_string()
}

/// Runs one turn (e.g. a slash command) and returns every event of it as one string, plus the
/// terminal event's type.
async fn turn_text(gw: &Gateway, sid: &str, request: &str) -> (String, String) {
    let (evs, last) = gw.run_turn(sid, request).await;
    let text = evs
        .iter()
        .map(|e| e.data.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    (text, last.event)
}

/// The first `block.output` of the events (panics if none).
fn first_output(evs: &[Event]) -> Value {
    evs.iter()
        .find(|e| e.event == "block.output")
        .unwrap_or_else(|| panic!("no block.output: {:?}", ev_types(evs)))
        .data
        .clone()
}

/// The tool names the model was offered in one recorded request (OpenAI or Anthropic shape).
fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

const GREETER: &str = r#"
import blockether.vis.extension as vis

class Greeter:
    def hello(self, name: str) -> str:
        """Greet someone by name."""
        return f"hello-from-ext {name}"

def hi(ctx):
    return vis.ok("hi from greeter")

vis.register(vis.Extension(
    name="greeter", alias="greet", description="Says hello.",
    symbols=[vis.Symbol(Greeter(), name="greet")],
    slash_commands=[vis.SlashCommand("hi", hi, doc="Say hi.")],
))
"#;

const RAISES_AT_IMPORT: &str = r#"
import blockether.vis.extension as vis

def explode():
    raise RuntimeError("kaboom at import")

explode()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_good_extension_is_listed_with_its_symbols_and_slash_while_broken_files_are_reported_as_failures(
) {
    let dirs = Dirs::new();
    global_ext(&dirs, "greeter.py", GREETER);
    global_ext(&dirs, "raises.py", RAISES_AT_IMPORT);
    global_ext(&dirs, "syntax.py", "def (:\n    pass\n");
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;

    let list = extensions(&gw, &dirs.root()).await;
    let exts = list["extensions"].as_array().expect("extensions");
    assert_eq!(exts.len(), 1, "{list}");
    let ext = &exts[0];
    assert_eq!(ext["name"], "greeter", "{ext}");
    assert_eq!(ext["scope"], "global", "{ext}");
    assert_eq!(ext["is_stale"], false, "{ext}");
    assert_eq!(ext["symbols"][0]["name"], "greet.hello", "{ext}");
    assert_eq!(ext["symbols"][0]["tool_name"], "greet__hello", "{ext}");
    assert_eq!(ext["slash_commands"][0]["name"], "hi", "{ext}");

    let failures = list["failures"].as_array().expect("failures");
    assert_eq!(failures.len(), 2, "{list}");
    let raises = failures
        .iter()
        .find(|f| f["file"].as_str().unwrap_or("").ends_with("raises.py"))
        .unwrap_or_else(|| panic!("raises.py reported: {list}"));
    assert!(
        raises["error"]
            .as_str()
            .unwrap_or("")
            .contains("kaboom at import"),
        "{raises}"
    );
    let tb = raises["traceback"].as_str().unwrap_or("");
    assert!(
        tb.contains("raises.py") && tb.contains("explode"),
        "{raises}"
    );
    let syntax = failures
        .iter()
        .find(|f| f["file"].as_str().unwrap_or("").ends_with("syntax.py"))
        .unwrap_or_else(|| panic!("syntax.py reported: {list}"));
    assert_eq!(syntax["error_type"], "SyntaxError", "{syntax}");
    assert_eq!(syntax["is_stale"], false, "{syntax}");
    assert!(
        !syntax["error"].as_str().unwrap_or("").is_empty(),
        "{syntax}"
    );

    let root = dirs.root().to_string_lossy().to_string();
    let (code, out, err) = run_cli(&dirs, &["extension", "list", "--root", &root]).await;
    assert_ne!(code, Some(0), "failures make the CLI fail: {out} {err}");
    assert!(out.contains("greeter (global"), "{out}");
    assert!(out.contains("greet.hello"), "{out}");
    assert!(out.contains("hi"), "{out}");
    assert!(out.contains("FAILED") && out.contains("raises.py"), "{out}");
    assert!(out.contains("kaboom at import"), "{out}");
    assert!(out.contains("syntax.py"), "{out}");

    // the good extension still answers
    let sid = gw.create_session_at(&dirs.root()).await;
    let (text, _) = turn_text(&gw, &sid, "/hi").await;
    assert!(text.contains("hi from greeter"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_symbol_called_by_the_model_runs_in_the_extension_and_its_result_goes_back_to_the_model()
{
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    global_ext(&dirs, "greeter.py", GREETER);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm)).await;
    let tool = first_tool_name(&gw, &dirs.root()).await;
    llm.push(Script::tool_call(&tool, json!({"name": "Ada"})));
    llm.push(Script::text(&["Greeted Ada."]));

    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "greet Ada").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let tys = ev_types(&evs);
    let started = tys.iter().position(|t| *t == "block.started");
    let output = tys.iter().position(|t| *t == "block.output");
    assert!(
        started.is_some() && started < output,
        "block.started before block.output: {tys:?}"
    );
    let out = first_output(&evs);
    assert_eq!(
        out["result"], "hello-from-ext Ada",
        "the result is on the stream: {out}"
    );
    assert_eq!(out["op"], json!(tool), "{out}");
    assert!(
        out["error"].is_null() || out["error"] == json!(false),
        "{out}"
    );

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "a second model call after the tool");
    let offered = offered_tools(&reqs[0].body);
    assert!(
        offered.contains(&tool),
        "{tool} offered to the model: {offered:?}"
    );
    let second = reqs[1].body["messages"].to_string();
    assert!(
        second.contains("hello-from-ext Ada"),
        "the tool result reaches the model: {second}"
    );
}

const NO_RM: &str = r#"
import blockether.vis.extension as vis

def guard(call):
    if any("rm " in s or s.startswith("rm") for s in vis.strings_of(call["args"])):
        return vis.block("no rm")
    return None

vis.register(vis.Extension(
    name="guard", description="Refuses rm in the shell.",
    op_hooks=[vis.OpHook(["shell"], guard)],
))
"#;

const BUGGY_HOOK: &str = r#"
import blockether.vis.extension as vis

def buggy(call):
    raise RuntimeError("hook bug")

vis.register(vis.Extension(
    name="buggy", description="A before hook that raises (fails open).",
    op_hooks=[vis.OpHook(["shell"], buggy)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_before_hook_that_blocks_makes_the_shell_tool_call_fail_with_its_reason_while_a_raising_hook_allows(
) {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    global_ext(&dirs, "guard.py", NO_RM);
    global_ext(&dirs, "buggy.py", BUGGY_HOOK);
    std::fs::write(dirs.root().join("victim.txt"), "keep me").unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm)).await;
    llm.push(Script::tool_call(
        "shell",
        json!({"command": "rm -f victim.txt"}),
    ));
    llm.push(Script::text(&["I was not allowed."]));

    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "delete victim.txt").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let out = first_output(&evs);
    assert!(
        !out["error"].is_null() && out["error"] != json!(false),
        "block.output.error is set: {out}"
    );
    let err = out["error"].as_str().unwrap_or("");
    assert!(
        err.starts_with("no rm") && err.contains("Blocked by the 'guard' Python extension"),
        "the reason and the hint naming the extension: {out}"
    );
    assert!(
        dirs.root().join("victim.txt").exists(),
        "the command never ran"
    );
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let second = reqs[1].body["messages"].to_string();
    assert!(
        second.contains("no rm"),
        "the model sees the reason: {second}"
    );

    // a command the guard allows runs, although the other extension's hook raises (fail open)
    llm.push(Script::tool_call(
        "shell",
        json!({"command": "echo allowed-ok"}),
    ));
    llm.push(Script::text(&["It ran."]));
    let (evs, last) = gw.run_turn(&sid, "echo something").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let out = first_output(&evs);
    assert!(
        out["error"].is_null(),
        "a raising before hook allows: {out}"
    );
    assert!(out["result"].to_string().contains("allowed-ok"), "{out}");
}

const FS_GATE_RAISES: &str = r#"
import blockether.vis.extension as vis

def save(path: str, text: str) -> str:
    """Write text to a file through vis.fs."""
    vis.fs.write(path, text)
    return "saved"

def gate(call):
    if call["path"].endswith(".crash"):
        raise RuntimeError("gate is broken")
    if call["operation"] == "file-write" and call["path"].endswith(".ro"):
        return vis.block("read only here")
    return None

vis.register(vis.Extension(
    name="files", alias="files", description="Writes files.",
    symbols=[vis.Symbol(save, tag="mutation")],
    op_hooks=[vis.OpHook(["fs_access"], gate)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_fs_access_gate_that_raises_makes_vis_fs_write_fail_closed_and_a_block_refuses_it() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    global_ext(&dirs, "files.py", FS_GATE_RAISES);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm)).await;
    let list = extensions(&gw, &dirs.root()).await;
    assert_eq!(
        list["extensions"][0]["op_hooks"][0]["phase"], "gate",
        "{list}"
    );
    for path in ["out.crash", "out.ro", "out.txt"] {
        llm.push(Script::tool_call(
            "save",
            json!({"path": path, "text": "data"}),
        ));
    }
    llm.push(Script::text(&["Two writes failed."]));

    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "save some files").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let outs: Vec<&Value> = evs
        .iter()
        .filter(|e| e.event == "block.output")
        .map(|e| &e.data)
        .collect();
    assert_eq!(outs.len(), 3, "{:?}", ev_types(&evs));

    let crashed = outs[0]["error"].as_str().unwrap_or("");
    assert!(
        crashed.starts_with("PermissionError: the 'files' extension's fs_access guard failed, and a boundary fails closed: RuntimeError: gate is broken"),
        "a raising gate fails closed: {}",
        outs[0]
    );
    assert!(
        !dirs.root().join("out.crash").exists(),
        "nothing was written"
    );

    let blocked = outs[1]["error"].as_str().unwrap_or("");
    assert!(
        blocked.starts_with("PermissionError: read only here"),
        "a blocking gate refuses with its reason: {}",
        outs[1]
    );
    assert!(!dirs.root().join("out.ro").exists(), "nothing was written");

    assert!(outs[2]["error"].is_null(), "an allowed write: {}", outs[2]);
    assert_eq!(outs[2]["result"], "saved", "{}", outs[2]);
    assert_eq!(
        std::fs::read_to_string(dirs.root().join("out.txt")).unwrap_or_default(),
        "data"
    );

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 4, "one model call per tool result");
    let last_msgs = reqs[3].body["messages"].to_string();
    assert!(
        last_msgs.contains("gate is broken") && last_msgs.contains("read only here"),
        "the model sees both refusals: {last_msgs}"
    );
}

const COUNTER: &str = r#"
import blockether.vis.extension as vis

def bump(ctx):
    n = vis.state.get("n", 0) + 1
    vis.state["n"] = n
    return vis.ok(f"counter is now {n}")

vis.register(vis.Extension(
    name="counter", description="Counts.",
    slash_commands=[vis.SlashCommand("bump", bump)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn vis_state_survives_a_reload_and_a_gateway_restart() {
    let dirs = Dirs::new();
    global_ext(&dirs, "counter.py", COUNTER);
    let mut gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let (t, _) = turn_text(&gw, &sid, "/bump").await;
    assert!(t.contains("counter is now 1"), "{t}");
    let (t, _) = turn_text(&gw, &sid, "/reload").await;
    assert!(t.contains("Python extensions: 1 loaded"), "{t}");
    let (t, _) = turn_text(&gw, &sid, "/bump").await;
    assert!(t.contains("counter is now 2"), "after /reload: {t}");

    let status = gw.stop().await;
    assert!(status.success(), "clean stop: {status}");
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let (t, _) = turn_text(&gw, &sid, "/bump").await;
    assert!(t.contains("counter is now 3"), "after a restart: {t}");
}

fn versioned(v: &str) -> String {
    format!(
        r#"
import blockether.vis.extension as vis

def ver(ctx):
    return vis.ok("version is {v}")

vis.register(vis.Extension(
    name="ver", description="Has a version.",
    slash_commands=[vis.SlashCommand("ver", ver)],
))
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn reload_keeps_the_last_good_version_of_a_broken_file_and_adopts_the_fixed_one() {
    let dirs = Dirs::new();
    global_ext(&dirs, "ver.py", &versioned("one"));
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let (t, _) = turn_text(&gw, &sid, "/ver").await;
    assert!(t.contains("version is one"), "{t}");

    global_ext(
        &dirs,
        "ver.py",
        &format!(
            "{}\nraise ValueError('broken on purpose')\n",
            versioned("two")
        ),
    );
    let (t, _) = turn_text(&gw, &sid, "/reload").await;
    assert!(t.contains("broken on purpose") || t.contains("fail"), "{t}");
    let (t, _) = turn_text(&gw, &sid, "/ver").await;
    assert!(t.contains("version is one"), "the last good version: {t}");
    let list = extensions(&gw, &dirs.root()).await;
    assert_eq!(list["extensions"][0]["name"], "ver", "{list}");
    assert_eq!(list["extensions"][0]["is_stale"], true, "{list}");
    let failures = list["failures"].as_array().expect("failures");
    assert_eq!(failures.len(), 1, "{list}");
    assert_eq!(failures[0]["is_stale"], true, "{list}");
    assert_eq!(failures[0]["extension"], "ver", "{list}");
    assert!(
        failures[0]["file"]
            .as_str()
            .unwrap_or("")
            .ends_with("ver.py"),
        "{list}"
    );
    assert!(
        failures[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("broken on purpose"),
        "{list}"
    );

    global_ext(&dirs, "ver.py", &versioned("three"));
    let (t, _) = turn_text(&gw, &sid, "/reload").await;
    assert!(t.contains("Python extensions: 1 loaded"), "{t}");
    let (t, _) = turn_text(&gw, &sid, "/ver").await;
    assert!(t.contains("version is three"), "the fixed file: {t}");
    let list = extensions(&gw, &dirs.root()).await;
    assert_eq!(list["extensions"][0]["is_stale"], false, "{list}");
    assert_eq!(list["failures"], json!([]), "{list}");
}

const RAISING_FILTER: &str = r#"
import blockether.vis.extension as vis

def picky(ctx):
    raise RuntimeError("filter exploded")

vis.register(vis.Extension(
    name="picky", description="A broken network filter.",
    network_filters=[vis.NetworkFilter(picky)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_network_filter_that_raises_denies_real_proxied_traffic_with_a_filter_error() {
    let origin = Origin::start().await;
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &loopback_policy());
    global_ext(&dirs, "picky.py", RAISING_FILTER);
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let list = extensions(&gw, &dirs.root()).await;
    assert_eq!(list["extensions"][0]["network_filters"], 1, "{list}");
    let sid = gw.create_session_at(&dirs.root()).await;
    let url = format!("{}/", origin.url());
    let ran = gw
        .exec(
            &sid,
            &["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", &url],
        )
        .await;
    assert_eq!(ran.stdout, "403", "{ran:?}");
    assert!(
        origin.requests().is_empty(),
        "the origin never saw the request"
    );
    let decisions = gw.wait_egress(&sid, 1).await;
    let deny = decisions
        .iter()
        .find(|d| d["decision"] == "deny")
        .unwrap_or_else(|| panic!("a deny: {decisions:?}"));
    assert_eq!(
        deny["reason"], "network filter error in 'picky': RuntimeError: filter exploded",
        "{deny}"
    );
    assert_eq!(deny["decided_by"]["filter"], "picky", "{deny}");
    assert_eq!(deny["error_kind"], "filter-error", "{deny}");
    assert_eq!(deny["host"], "127.0.0.1", "{deny}");
}

const PATH_FILTER: &str = r#"
import blockether.vis.extension as vis

def no_secret_paths(ctx):
    if (ctx.get("path") or "").startswith("/secret"):
        return vis.block("secret paths are off limits")
    return None

vis.register(vis.Extension(
    name="paths", description="Blocks /secret paths.",
    network_filters=[vis.NetworkFilter(no_secret_paths)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_filtered_traffic_over_every_proxy_threads_lane_gets_each_requests_own_verdict()
{
    let origin = Origin::start().await;
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &loopback_policy());
    global_ext(&dirs, "paths.py", PATH_FILTER);
    let gw = Gateway::start_in(
        dirs.clone(),
        Opts::default().env("VIS_PROXY_IO_THREADS", "3"),
    )
    .await;
    let sid = gw.create_session_at(&dirs.root()).await;
    // Twelve connections at once spread over the three proxy threads, so their filter
    // calls arrive on different lanes of the same worker.
    let base = origin.url();
    let script = format!(
        "for i in $(seq 1 12); do \
           if [ $((i % 3)) = 0 ]; then p=secret; else p=open; fi; \
           curl -s -o /dev/null -w \"$p %{{http_code}}\\n\" {base}/$p/$i & \
         done; wait"
    );
    let ran = gw.exec(&sid, &["sh", "-c", &script]).await;
    let mut codes: Vec<&str> = ran.stdout.lines().collect();
    codes.sort_unstable();
    let mut expected = vec!["open 200"; 8];
    expected.extend(vec!["secret 403"; 4]);
    assert_eq!(codes, expected, "{ran:?}");
    assert_eq!(
        origin.requests().len(),
        8,
        "only the open paths reached the origin"
    );

    // The filters run in the extension's own filter worker, which has the lanes; the
    // registration worker has none.
    let worker = worker_pids_of(gw.pid(), "filter:paths");
    assert_eq!(worker.len(), 1, "one filter worker: {worker:?}");
    let lanes_of = |pid: i32| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        cmdline
            .split(|b| *b == 0)
            .filter(|a| *a == b"--lane-fd")
            .count()
    };
    assert_eq!(lanes_of(worker[0]), 4, "a lane per proxy thread plus one");
    let registration = worker_pids_of(gw.pid(), "registration");
    assert_eq!(registration.len(), 1, "{registration:?}");
    assert_eq!(lanes_of(registration[0]), 0);
}

const SLEEPY: &str = r#"
import time
import blockether.vis.extension as vis

def nap(seconds: float) -> str:
    """Sleep for a while."""
    time.sleep(seconds)
    return "rested"

def quick() -> str:
    """Answer at once."""
    return "quick-ok"

vis.register(vis.Extension(
    name="sleepy", alias="sleepy", description="Sleeps.",
    symbols=[vis.Symbol(nap), vis.Symbol(quick)],
))
"#;

/// The parent pid of a process (from `/proc/<pid>/stat`).
fn parent_of(pid: i32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Pids of the `vis-gateway … worker --label <label>` children of the gateway process `parent`.
fn worker_pids_of(parent: u32, label: &str) -> Vec<i32> {
    worker_pids(label)
        .into_iter()
        .filter(|p| parent_of(*p) == Some(parent))
        .collect()
}

/// Pids of `vis-gateway … worker --label <label>` processes.
fn worker_pids(label: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).to_string())
            .collect();
        let is_worker = args.iter().any(|a| a == "worker")
            && args.windows(2).any(|w| w[0] == "--label" && w[1] == label);
        if is_worker {
            out.push(pid);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_worker_killed_during_a_call_fails_that_call_and_the_next_call_succeeds() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    global_ext(&dirs, "sleepy.py", SLEEPY);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm)).await;
    llm.push(Script::tool_call("nap", json!({"seconds": 8})));
    llm.push(Script::text(&["The nap was interrupted."]));
    let sid = gw.create_session_at(&dirs.root()).await;

    let mut sse = gw.events(&sid, -1).await;
    let (s, v) = gw.submit(&sid, "take a nap").await;
    assert!(s.is_success(), "{s} {v}");
    let mut evs = sse
        .collect_until("block.started", Duration::from_secs(10))
        .await;
    // the session worker exists once the call is in flight
    let deadline = Instant::now() + Duration::from_secs(5);
    let pids = loop {
        let p = worker_pids(&format!("session:{sid}"));
        if !p.is_empty() {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "no session worker with --label session:{sid}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed_at = Instant::now();
    for pid in &pids {
        // SAFETY: SIGKILL to the session worker the gateway started for this test's session.
        unsafe {
            libc::kill(*pid, libc::SIGKILL);
        }
    }
    evs.extend(
        sse.collect_until_any(TERMINALS, Duration::from_secs(15))
            .await,
    );
    assert!(
        killed_at.elapsed() < Duration::from_secs(6),
        "the call failed when the worker died, not after the nap"
    );
    assert_eq!(
        evs.last().unwrap().event,
        "turn.completed",
        "{:?}",
        ev_types(&evs)
    );
    let out = first_output(&evs);
    assert!(
        !out["error"].is_null() && out["error"] != json!(false),
        "the call fails: {out}"
    );
    assert!(!out.to_string().contains("rested"), "{out}");
    let err = out["error"].as_str().unwrap_or("");
    assert!(
        err.contains("the extension worker exited during the call"),
        "a clear error: {out}"
    );

    llm.push(Script::tool_call("quick", json!({})));
    llm.push(Script::text(&["Quick answered."]));
    let (evs, last) = gw.run_turn(&sid, "be quick").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let out = first_output(&evs);
    assert_eq!(out["result"], "quick-ok", "{out}");
    let fresh = worker_pids(&format!("session:{sid}"));
    assert!(
        !fresh.is_empty() && fresh.iter().all(|p| !pids.contains(p)),
        "a fresh session worker serves the next call: {fresh:?} vs {pids:?}"
    );
    assert!(
        out["error"].is_null() || out["error"] == json!(false),
        "{out}"
    );
}

fn who(answer: &str) -> String {
    format!(
        r#"
import blockether.vis.extension as vis

def whoami() -> str:
    """Say which copy answers."""
    return "{answer}"

def who(ctx):
    seen = vis.state.get("seen")
    vis.state["seen"] = "{answer}"
    return vis.ok(f"who says {answer}, seen={{seen}}")

vis.register(vis.Extension(
    name="who", alias="who", description="Which copy?",
    symbols=[vis.Symbol(whoami)],
    slash_commands=[vis.SlashCommand("who", who)],
))
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_extension_overrides_the_global_one_of_the_same_name_in_that_project_only() {
    let llm = FixtureLlm::start().await;
    let dirs: Arc<Dirs> = Dirs::new();
    global_ext(&dirs, "who.py", &who("global-copy"));
    project_ext(&dirs.root(), "who.py", &who("project-copy"));
    let elsewhere = dirs.base.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm)).await;

    let list = extensions(&gw, &dirs.root()).await;
    assert!(
        list["extensions"].as_array().is_some_and(|a| a
            .iter()
            .any(|e| e["name"] == "who" && e["scope"] == "project")),
        "{list}"
    );

    let sid = gw.create_session_at(&dirs.root()).await;
    let (t, _) = turn_text(&gw, &sid, "/who").await;
    assert!(t.contains("who says project-copy, seen=None"), "{t}");
    assert!(!t.contains("global-copy"), "{t}");
    llm.push(Script::tool_call("whoami", json!({})));
    llm.push(Script::text(&["Done."]));
    let (evs, _) = gw.run_turn(&sid, "who are you").await;
    let out = first_output(&evs);
    assert!(out.to_string().contains("project-copy"), "{out}");

    let other = gw.create_session_at(&elsewhere).await;
    let (t, _) = turn_text(&gw, &other, "/who").await;
    assert!(
        t.contains("who says global-copy"),
        "another project still sees the global one: {t}"
    );
    assert!(
        t.contains("seen=project-copy"),
        "the override shares the global extension's state: {t}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_meets_a_broken_extension_file_reports_it_with_an_error_status() {
    let dirs = Dirs::new();
    global_ext(&dirs, "ver.py", &versioned("one"));
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    global_ext(&dirs, "ver.py", "raise ValueError('broken on purpose')\n");
    let (t, terminal) = turn_text(&gw, &sid, "/reload").await;
    assert!(
        t.contains("1 failed") && t.contains("broken on purpose"),
        "the reply lists the failure: {t}"
    );
    // /reload says status `error` when anything failed (docs/decisions.md, E8); a slash error
    // ends its turn as `turn.failed` (a successful one as `turn.completed`).
    assert_eq!(terminal, "turn.failed", "{t}");
}

const TOOLS: &str = r#"
import blockether.vis.extension as vis

def visible(x: int) -> int:
    """Double a number."""
    return x * 2

def secret() -> str:
    """Hidden from the model."""
    return "hidden-ok"

def boom() -> str:
    """Always raises."""
    raise LookupError("nothing here")

vis.register(vis.Extension(
    name="tools", alias="tools", description="Some tools.",
    symbols=[vis.Symbol(visible), vis.Symbol(secret, is_hidden=True), vis.Symbol(boom)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_hidden_symbol_is_not_offered_but_callable_and_a_raise_becomes_a_failure_named_by_its_class(
) {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    global_ext(&dirs, "tools.py", TOOLS);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm)).await;
    llm.push(Script::tool_call("secret", json!({})));
    llm.push(Script::tool_call("boom", json!({})));
    llm.push(Script::tool_call("visible", json!({"x": 21})));
    llm.push(Script::text(&["Done."]));
    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "use the tools").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let offered = offered_tools(&llm.requests()[0].body);
    assert!(offered.contains(&"visible".to_string()), "{offered:?}");
    assert!(offered.contains(&"boom".to_string()), "{offered:?}");
    assert!(
        !offered.contains(&"secret".to_string()),
        "a hidden symbol is not offered: {offered:?}"
    );
    let outs: Vec<&Value> = evs
        .iter()
        .filter(|e| e.event == "block.output")
        .map(|e| &e.data)
        .collect();
    assert_eq!(outs.len(), 3, "{:?}", ev_types(&evs));
    assert_eq!(
        outs[0]["result"], "hidden-ok",
        "still callable: {}",
        outs[0]
    );
    assert!(
        outs[1]["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("LookupError: nothing here"),
        "{}",
        outs[1]
    );
    assert_eq!(outs[2]["result"], "42", "{}", outs[2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn test_files_are_skipped_a_package_folder_loads_and_a_deleted_file_is_dropped_on_reload() {
    let dirs = Dirs::new();
    global_ext(&dirs, "ver.py", &versioned("one"));
    global_ext(
        &dirs,
        "test_ver.py",
        "raise RuntimeError('tests are not entries')\n",
    );
    global_ext(
        &dirs,
        "ver_test.py",
        "raise RuntimeError('tests are not entries')\n",
    );
    let pkg = dirs.home().join("extensions/pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("helper.py"), "WORD = 'from-helper'\n").unwrap();
    std::fs::write(
        pkg.join("extension.py"),
        r#"
import blockether.vis.extension as vis
from helper import WORD

vis.register(vis.Extension(
    name="pkg", description="A package entry.",
    slash_commands=[vis.SlashCommand("pkg", lambda ctx: vis.ok(f"pkg says {WORD}"))],
))
"#,
    )
    .unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let list = extensions(&gw, &dirs.root()).await;
    let mut names: Vec<&str> = list["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["pkg", "ver"], "{list}");
    assert_eq!(
        list["failures"],
        json!([]),
        "test files are not loaded: {list}"
    );
    let sid = gw.create_session_at(&dirs.root()).await;
    let (t, _) = turn_text(&gw, &sid, "/pkg").await;
    assert!(t.contains("pkg says from-helper"), "{t}");

    std::fs::remove_file(dirs.home().join("extensions/ver.py")).unwrap();
    let (t, _) = turn_text(&gw, &sid, "/reload").await;
    assert!(t.contains("removed: ver"), "{t}");
    let list = extensions(&gw, &dirs.root()).await;
    assert_eq!(
        list["extensions"].as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
    let (t, last) = turn_text(&gw, &sid, "/ver").await;
    assert!(
        last == "turn.failed" || !t.contains("version is one"),
        "the deleted extension no longer answers: {t}"
    );
}

const BODY_FILTER: &str = r#"
import blockether.vis.extension as vis

def no_forbidden(ctx):
    if ctx["phase"] == "http" and "forbidden" in (ctx.get("body") or ""):
        return vis.block(f"no forbidden words to port {ctx['port']} ({ctx['method']} {ctx['body']})")
    return None

vis.register(vis.Extension(
    name="words", description="Blocks request bodies with a bad word.",
    network_filters=[vis.NetworkFilter(no_forbidden)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_network_filter_sees_port_and_body_and_its_block_denies_while_none_allows() {
    let origin = Origin::start().await;
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &loopback_policy());
    global_ext(&dirs, "words.py", BODY_FILTER);
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let url = format!("{}/post", origin.url());
    let ok = gw
        .exec(&sid, &["curl", "-sS", "-X", "POST", "-d", "harmless", &url])
        .await;
    assert!(ok.stdout.contains("origin-ok POST /post"), "{ok:?}");
    let denied = gw
        .exec(
            &sid,
            &[
                "curl",
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-X",
                "POST",
                "-d",
                "forbidden",
                &url,
            ],
        )
        .await;
    assert_eq!(denied.stdout, "403", "{denied:?}");
    assert_eq!(
        origin.requests().len(),
        1,
        "only the allowed request arrived"
    );
    let decisions = gw.wait_egress(&sid, 2).await;
    let deny = decisions
        .iter()
        .find(|d| d["decision"] == "deny")
        .unwrap_or_else(|| panic!("a deny: {decisions:?}"));
    assert_eq!(deny["error_kind"], "blocked-by-filter", "{deny}");
    assert_eq!(
        deny["reason"],
        json!(format!(
            "no forbidden words to port {} (POST forbidden)",
            origin.port
        )),
        "{deny}"
    );
}

/// Whether a process is gone (no such pid, or a zombie nobody reaped yet).
fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_extension_worker_that_is_not_reading_dies_with_its_gateway_when_the_gateway_is_sigkilled(
) {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    global_ext(&dirs, "sleepy.py", SLEEPY);
    let mut gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm)).await;
    llm.push(Script::tool_call("quick", json!({})));
    llm.push(Script::text(&["ok"]));
    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, _) = gw.run_turn(&sid, "be quick").await;
    assert_eq!(first_output(&evs)["result"], "quick-ok");
    let mut workers = worker_pids_of(gw.pid(), "registration");
    workers.extend(worker_pids_of(gw.pid(), &format!("session:{sid}")));
    assert_eq!(
        workers.len(),
        2,
        "a registration and a session worker: {workers:?}"
    );

    // A worker notices its closed input only while it reads it; a stopped one stands for a
    // worker still starting up (writing files under the home) or otherwise not reading.
    for p in &workers {
        // SAFETY: SIGSTOP to a worker this test's gateway started.
        unsafe { libc::kill(*p, libc::SIGSTOP) };
    }
    // No clean-up runs in a SIGKILLed gateway: the kernel must end its workers.
    gw.kill9();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !workers.iter().all(|p| is_gone(*p)) {
        let alive: Vec<_> = workers.iter().filter(|p| !is_gone(**p)).collect();
        if Instant::now() > deadline {
            for p in &alive {
                // SAFETY: SIGKILL to a worker this test's gateway started (clean-up).
                unsafe { libc::kill(**p, libc::SIGKILL) };
            }
            panic!("workers outlived their gateway: {alive:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_session_stops_its_extension_worker_while_the_registration_worker_keeps_serving()
{
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    global_ext(&dirs, "sleepy.py", SLEEPY);
    global_ext(&dirs, "counter.py", COUNTER);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm)).await;
    llm.push(Script::tool_call("quick", json!({})));
    llm.push(Script::text(&["ok"]));
    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, _) = gw.run_turn(&sid, "be quick").await;
    assert_eq!(first_output(&evs)["result"], "quick-ok");
    let label = format!("session:{sid}");
    assert!(!worker_pids(&label).is_empty(), "a session worker runs");
    let registration = worker_pids_of(gw.pid(), "registration");
    assert!(!registration.is_empty(), "a registration worker runs");

    let (s, _) = gw.delete(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let deadline = Instant::now() + WAIT;
    while !worker_pids(&label).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the session worker of a deleted session is still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        worker_pids_of(gw.pid(), "registration"),
        registration,
        "the registration worker keeps running"
    );
    let other = gw.create_session_at(&dirs.root()).await;
    let (t, _) = turn_text(&gw, &other, "/bump").await;
    assert!(t.contains("counter is now 1"), "{t}");
}

#[tokio::test(flavor = "multi_thread")]
async fn post_extensions_reload_reports_a_broken_file_then_adopts_the_fixed_one() {
    let dirs = Dirs::new();
    global_ext(&dirs, "ver.py", &versioned("one"));
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let root = dirs.root();
    global_ext(
        &dirs,
        "ver.py",
        &format!(
            "{}\nraise ValueError('broken on purpose')\n",
            versioned("two")
        ),
    );
    let (s, v) = gw
        .post(
            "/v1/extensions/reload",
            json!({"root": root.display().to_string()}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "error", "{v}");
    let title = v["title"].as_str().unwrap_or("");
    assert!(
        title.starts_with(
            "Reloaded — configuration (unchanged); Python extensions: 0 loaded, 1 failed:"
        ),
        "{title}"
    );
    assert!(title.contains("broken on purpose"), "{title}");
    assert_eq!(v["extensions"]["extensions"][0]["is_stale"], true, "{v}");

    global_ext(&dirs, "ver.py", &versioned("three"));
    let (s, v) = gw
        .post_empty(&format!("/v1/extensions/reload?root={}", root.display()))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(
        v["title"], "Reloaded — configuration (unchanged); Python extensions: 1 loaded",
        "{v}"
    );
    assert_eq!(v["extensions"]["extensions"][0]["is_stale"], false, "{v}");

    let (s, v) = gw
        .post("/v1/extensions/reload", json!({"root": "/no/such/dir"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("/no/such/dir"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reload_title_names_the_configuration_keys_that_changed() {
    let dirs = Dirs::new();
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let root = dirs.root();
    let sid = gw.create_session_at(&root).await;
    let (t, _) = turn_text(&gw, &sid, "/reload").await;
    assert!(
        t.contains("Reloaded — configuration (unchanged); Python extensions: 0 loaded"),
        "{t}"
    );
    std::fs::write(
        root.join("vis.yml"),
        "default_model: other-model\nenvironment:\n  GREETING: hi\n",
    )
    .unwrap();
    let (t, _) = turn_text(&gw, &sid, "/reload").await;
    assert!(
        t.contains("Reloaded — configuration (default_model, environment.GREETING); Python extensions: 0 loaded"),
        "{t}"
    );
    let (_, rows) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert!(
        rows.to_string().contains(r#""slash/title":"Reloaded — configuration (default_model, environment.GREETING); Python extensions: 0 loaded""#),
        "the transcript form carries the reply's title: {rows}"
    );
}

const CHECKER: &str = r#"
import blockether.vis.extension as vis

def render(phase, args, kwargs, result, error):
    if phase == "success":
        rows = tuple((f, "yes") for f in result)
        return vis.ActivityPresentation(f"Checked {len(result)} files", "all good",
                                        [vis.ActivityHeading("Files"),
                                         vis.ActivityTable(("file", "ok"), rows=rows)])
    return None

def check(paths: list[str]) -> list[str]:
    """Check the files."""
    shown = vis.publish_activity(vis.ActivityPresentation(
        "Checking", "in progress", [vis.ActivityProgress("files", 1, 2)]))
    return [p for p in paths] + ([] if shown else ["publish_activity was not shown"])

vis.register(vis.Extension(name="checker", alias="chk", description="Checks files.",
    symbols=[vis.Symbol(check, activity=vis.Activity(presenter="tests", label="Run checks",
                                                     render=render))]))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn activity_presentations_reach_the_tool_block_live_and_in_its_output() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    global_ext(&dirs, "checker.py", CHECKER);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm)).await;
    let tool = first_tool_name(&gw, &dirs.root()).await;
    llm.push(Script::tool_call(&tool, json!({"paths": ["a.py", "b.py"]})));
    llm.push(Script::text(&["Checked."]));
    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "check my files").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));

    let started = evs.iter().find(|e| e.event == "block.started").unwrap();
    let block_id = started.data["block_id"].clone();
    assert_eq!(started.data["presenter"], "tests", "{}", started.data);
    let running = evs
        .iter()
        .find(|e| e.event == "activity" && e.data["op"] == json!(tool))
        .unwrap_or_else(|| panic!("no tool activity: {:?}", ev_types(&evs)));
    assert_eq!(running.data["label"], "Run checks", "{}", running.data);
    assert_eq!(running.data["phrase"], "Vis is running Run checks");
    let update = evs
        .iter()
        .find(|e| e.event == "activity" && e.data.get("presentation").is_some())
        .unwrap_or_else(|| {
            panic!(
                "no activity update: {:?}; output: {}",
                ev_types(&evs),
                first_output(&evs)
            )
        });
    assert_eq!(update.data["block_id"], block_id, "{}", update.data);
    assert_eq!(update.data["result_summary"], "Checking");
    assert_eq!(
        update.data["result_render"], "in progress\n\n**files**: 1 / 2 (50 %)",
        "{}",
        update.data
    );

    let out = first_output(&evs);
    assert_eq!(out["block_id"], block_id);
    assert_eq!(
        out["result"], r#"["a.py", "b.py"]"#,
        "publish_activity was shown while the tool ran: {out}"
    );
    assert_eq!(out["result_summary"], "Checked 2 files", "{out}");
    assert_eq!(out["result_detail"], "all good");
    assert_eq!(out["result_kind"], "activity");
    assert_eq!(
        out["result_render"],
        "all good\n\n### Files\n\n| file | ok |\n|---|---|\n| a.py | yes |\n| b.py | yes |",
        "{out}"
    );
    assert_eq!(out["render_segments"][1]["type"], "table", "{out}");

    let (_, rows) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert!(
        rows.to_string()
            .contains(r#""result_summary":"Checked 2 files""#),
        "history renders like the live card: {rows}"
    );
}

const BLOCK_ALL_FILTER: &str = r#"
import blockether.vis.extension as vis

vis.register(vis.Extension(
    name="wall", description="Blocks every request of its project.",
    network_filters=[vis.NetworkFilter(lambda ctx: vis.block("project A allows nothing"))],
))
"#;

/// A filter is policy: a project's filter decides its sessions' traffic from the very first
/// request (whatever path started the child, with no catalog listing first), and never the
/// traffic of another project's sessions.
#[tokio::test(flavor = "multi_thread")]
async fn a_project_filter_applies_from_the_first_request_and_only_to_its_own_project() {
    let origin = Origin::start().await;
    let dirs = Dirs::new();
    let (a, b) = (dirs.root().join("a"), dirs.root().join("b"));
    for p in [&a, &b] {
        std::fs::create_dir_all(p).unwrap();
        write_network_policy(p, &loopback_policy());
    }
    project_ext(&a, "wall.py", BLOCK_ALL_FILTER);
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let url = format!("{}/", origin.url());
    let curl = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", &url];

    // `exec --session` in project A: denied by A's filter on the first try.
    let sid_a = gw.create_session_at(&a).await;
    let ran = gw.exec(&sid_a, &curl).await;
    assert_eq!(ran.stdout, "403", "{ran:?}");
    let denied = gw.wait_egress(&sid_a, 1).await;
    assert_eq!(denied[0]["decided_by"]["filter"], "wall", "{denied:?}");

    // `exec --root A` (a new session per call): denied too.
    let mut cmd = tokio::process::Command::from(command(&gw.dirs, &Opts::default()));
    let root_a = a.to_string_lossy().to_string();
    let mut args = vec!["exec", "--root", root_a.as_str(), "--"];
    args.extend_from_slice(&curl);
    let out = cmd.args(&args).stdin(std::process::Stdio::null()).output();
    let out = tokio::time::timeout(Duration::from_secs(20), out)
        .await
        .expect("exec finishes")
        .expect("exec runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403");

    // Project B (no extensions) is untouched by A's loaded filter.
    let sid_b = gw.create_session_at(&b).await;
    let ran = gw.exec(&sid_b, &curl).await;
    assert_eq!(ran.stdout, "200", "{ran:?}");
    assert_eq!(
        origin.requests().len(),
        1,
        "only B's request reached the origin"
    );
}

/// In the default sandbox mode a Symbol called from a `python_execution` block presents on
/// that block's card: `publish_activity` inside it is shown (an `activity` update carrying the
/// block's id) and the block's stored output carries the last presentation.
#[tokio::test(flavor = "multi_thread")]
async fn a_symbol_called_from_a_block_presents_on_the_blocks_card() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    global_ext(&dirs, "checker.py", CHECKER);
    let gw = Gateway::start_in(dirs.clone(), Opts::openai(&llm).sandbox()).await;
    llm.push(Script::tool_call(
        "python_execution",
        json!({"code": "print(await check(['a.py', 'b.py']))"}),
    ));
    llm.push(Script::text(&["Checked."]));
    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "check my files").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let started = evs.iter().find(|e| e.event == "block.started").unwrap();
    assert_eq!(started.data["display_language"], "python");
    let block_id = started.data["block_id"].clone();
    let update = evs
        .iter()
        .find(|e| e.event == "activity" && e.data.get("presentation").is_some())
        .unwrap_or_else(|| panic!("no activity update: {:?}", ev_types(&evs)));
    assert_eq!(update.data["block_id"], block_id, "{}", update.data);
    assert_eq!(update.data["result_summary"], "Checking");
    let nested = evs
        .iter()
        .find(|e| e.event == "activity" && e.data["op"] == "check")
        .unwrap_or_else(|| panic!("the nested call is shown: {:?}", ev_types(&evs)));
    assert_eq!(nested.data["block_id"], block_id);
    let out = first_output(&evs);
    assert_eq!(out["block_id"], block_id);
    assert!(
        out["result"]
            .as_str()
            .unwrap_or("")
            .contains("['a.py', 'b.py']"),
        "publish_activity was shown inside the block: {out}"
    );
    assert!(out["result_summary"].is_string(), "{out}");
    // The stored transcript carries the same card.
    gw.wait_idle(&sid).await;
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    let form = &tr["turns"][0]["iterations"][0]["forms"][0];
    assert_eq!(form["block_id"], block_id, "{tr}");
    assert_eq!(form["result_summary"], out["result_summary"], "{tr}");
}
