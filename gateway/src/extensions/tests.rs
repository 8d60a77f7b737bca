//! Host tests: real CPython in real `vis-gateway worker` processes, real files.
//!
//! The worker binary is `target/<profile>/vis-gateway` (built by `cargo test` because the
//! package has integration tests), or `VIS_TEST_WORKER_EXE`.

use super::*;
use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::json;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vis_proxy::FilterVerdict;

/// The `GET /v1/extensions` listing, as JSON.
async fn listing(host: &ExtensionHost, project: Option<&Path>) -> Value {
    serde_json::to_value(host.catalog().list(project).await).expect("the listing as JSON")
}

fn worker_exe() -> PathBuf {
    if let Some(p) = std::env::var_os("VIS_TEST_WORKER_EXE") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().expect("current exe");
    let dir = me.parent().and_then(Path::parent).expect("target dir");
    let exe = dir.join("vis-gateway");
    assert!(
        exe.exists(),
        "{} is missing: run `cargo test -p vis-gateway` (it builds the binary)",
        exe.display()
    );
    exe
}

/// `(session, extension, text, level)`.
type Note = (Option<String>, String, String, String);

#[derive(Default)]
struct RecordingEvents {
    notes: Mutex<Vec<Note>>,
    activities: AtomicUsize,
}

impl HostEvents for RecordingEvents {
    fn notify(&self, session_id: Option<&str>, extension: &str, text: &str, level: &str) {
        self.notes.lock().push((
            session_id.map(str::to_string),
            extension.to_string(),
            text.to_string(),
            level.to_string(),
        ));
    }
    fn activity(&self, _: Option<&str>, _: &str, _: Value) -> bool {
        self.activities.fetch_add(1, Ordering::SeqCst);
        true
    }
}

struct Fixture {
    root: PathBuf,
    home: PathBuf,
    project: PathBuf,
    host: ExtensionHost,
    state: Arc<MemoryState>,
    events: Arc<RecordingEvents>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn fixture_with(tune: impl FnOnce(&mut HostConfig)) -> Fixture {
    let root = std::env::temp_dir().join(format!("vis-ext-{}", uuid::Uuid::new_v4()));
    let home = root.join("home");
    let project = root.join("project");
    std::fs::create_dir_all(home.join("extensions")).expect("mkdir");
    std::fs::create_dir_all(project.join(".vis/extensions")).expect("mkdir");
    let home = std::fs::canonicalize(home).expect("canon");
    let project = std::fs::canonicalize(project).expect("canon");
    let mut cfg = HostConfig::new(&home);
    cfg.worker_exe = worker_exe();
    cfg.call_timeout = Duration::from_secs(5);
    cfg.filter_timeout = Duration::from_secs(2);
    tune(&mut cfg);
    let state = Arc::new(MemoryState::default());
    let events = Arc::new(RecordingEvents::default());
    let host = ExtensionHost::new(cfg, state.clone(), events.clone(), Arc::new(NoHumanDoors));
    Fixture {
        root,
        home,
        project,
        host,
        state,
        events,
    }
}

fn fixture() -> Fixture {
    fixture_with(|_| {})
}

impl Fixture {
    fn global(&self, name: &str, src: &str) -> PathBuf {
        let p = self.home.join("extensions").join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, src).expect("write");
        p
    }
    fn project_ext(&self, name: &str, src: &str) -> PathBuf {
        let p = self.project.join(".vis/extensions").join(name);
        std::fs::write(&p, src).expect("write");
        p
    }
    fn session(&self, id: &str) -> SessionCtx {
        SessionCtx {
            id: id.to_string(),
            project_root: Some(self.project.clone()),
            workspace_root: self.project.clone(),
        }
    }
}

const TODO_EXTENSION: &str = r#"
import blockether.vis.extension as vis

def add(text: str) -> dict:
    """Add one todo item and return the new count."""
    items = vis.state.get("items", [])
    items.append(text)
    vis.state["items"] = items
    return {"count": len(items)}

def secret() -> str:
    """A hidden helper."""
    return "hidden-ok"

def no_force(call):
    if "--force" in vis.strings_of(call["args"]):
        return vis.block("force needs the user's approval")

def no_delete(ctx):
    if ctx["method"] == "DELETE":
        return vis.block(f"no DELETE to {ctx['host']}")

vis.register(vis.Extension(
    name="todo", alias="todo", description="A small todo list.",
    symbols=[vis.Symbol(add, tag="mutation"), vis.Symbol(secret, is_hidden=True)],
    slash_commands=[vis.SlashCommand("todos", lambda ctx: vis.ok(
        f"{len(vis.state.get('items', []))} open", body=f"args={ctx['args']}"), doc="Count todos.")],
    op_hooks=[vis.OpHook(["add"], no_force)],
    network_filters=[vis.NetworkFilter(no_delete)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_good_extension_is_listed_with_its_symbol_slash_hook_and_filter() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.loaded, vec!["todo".to_string()]);
    assert!(report.failures.is_empty(), "{:?}", report.failures);

    let list = listing(&f.host, None).await;
    let ext = &list["extensions"][0];
    assert_eq!(ext["name"], "todo");
    assert_eq!(ext["scope"], "global");
    assert_eq!(ext["kind"], "python");
    assert_eq!(ext["alias"], "todo");
    assert_eq!(ext["is_stale"], false);
    assert_eq!(ext["symbols"][0]["name"], "add");
    assert_eq!(ext["slash_commands"][0]["name"], "todos");
    assert_eq!(ext["op_hooks"][0]["ops"][0], "add");
    assert_eq!(ext["network_filters"], 1);
    assert_eq!(list["failures"], json!([]));

    let tools = f.host.tools().list(&f.session("s1")).await;
    let add = tools.iter().find(|t| t.name == "add").expect("add tool");
    assert_eq!(add.extension, "todo");
    assert!(!add.is_hidden);
    assert_eq!(add.parameters["properties"]["text"]["type"], "string");
    assert!(tools.iter().any(|t| t.name == "secret" && t.is_hidden));
    let hidden = f
        .host
        .tools()
        .call(&f.session("s1"), "secret", json!({}))
        .await
        .expect("hidden tools stay callable");
    assert_eq!(hidden.text, "hidden-ok");
    assert_eq!(
        f.host.catalog().slashes(None).await,
        vec![("todos".to_string(), "Count todos.".to_string())]
    );
    assert_eq!(f.host.filters().infos().len(), 1);
    let entries = f.host.tools().entries(&f.session("s1")).await;
    assert!(entries
        .iter()
        .any(|e| e.name == "add" && e.summary.starts_with("Add one todo")));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_file_is_reported_with_a_traceback_while_the_others_load() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    f.global(
        "broken.py",
        "import blockether.vis.extension as vis\n\ndef helper():\n    raise ValueError('boom at import')\n\nhelper()\n",
    );
    f.global("syntax.py", "def (:\n");
    f.global("silent.py", "x = 1\n");
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.loaded, vec!["todo".to_string()]);
    assert_eq!(report.failures.len(), 3, "{:?}", report.failures);
    let broken = report
        .failures
        .iter()
        .find(|x| x.file.ends_with("broken.py"))
        .expect("broken reported");
    assert_eq!(broken.error.message, "ValueError: boom at import");
    let tb = broken.error.traceback.clone().unwrap_or_default();
    assert!(tb.contains("broken.py") && tb.contains("helper"), "{tb}");
    assert!(!broken.is_stale);
    let syntax = report
        .failures
        .iter()
        .find(|x| x.file.ends_with("syntax.py"))
        .expect("syntax reported");
    assert_eq!(syntax.error.kind, "SyntaxError");
    let silent = report
        .failures
        .iter()
        .find(|x| x.file.ends_with("silent.py"))
        .expect("silent reported");
    assert!(silent.error.message.contains("never called vis.register"));
    let list = listing(&f.host, None).await;
    assert_eq!(list["failures"].as_array().map(Vec::len), Some(3));
    let out = f
        .host
        .tools()
        .call(&f.session("s"), "add", json!({"text": "a"}))
        .await
        .expect("the good extension still works");
    assert_eq!(out.value, json!({"count": 1}));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_extension_replaces_a_global_one_with_the_same_name() {
    let f = fixture();
    let ext = |who: &str| {
        format!(
            "import blockether.vis.extension as vis\n\ndef who() -> str:\n    \"\"\"Say who.\"\"\"\n    return '{who}'\n\nvis.register(vis.Extension(name='same', alias='same', description='d', symbols=[vis.Symbol(who)]))\n"
        )
    };
    f.global("same.py", &ext("global"));
    f.project_ext("same.py", &ext("project"));
    let in_project = f.session("p");
    let out = f
        .host
        .tools()
        .call(&in_project, "who", json!({}))
        .await
        .expect("call");
    assert_eq!(out.text, "project");
    let elsewhere = SessionCtx {
        id: "g".into(),
        project_root: None,
        workspace_root: f.project.clone(),
    };
    let out = f
        .host
        .tools()
        .call(&elsewhere, "who", json!({}))
        .await
        .expect("call");
    assert_eq!(out.text, "global");
    assert_eq!(
        f.host
            .tools()
            .list(&in_project)
            .await
            .iter()
            .filter(|t| t.name == "who")
            .count(),
        1
    );
    let list = listing(&f.host, Some(&f.project)).await;
    let scopes: Vec<&str> = list["extensions"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|e| e["scope"].as_str())
        .collect();
    assert_eq!(scopes, vec!["global", "project"]);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn positional_only_and_keyword_only_parameters_are_bound_from_named_arguments() {
    let f = fixture();
    f.global(
        "search.py",
        r#"
from dataclasses import dataclass
from typing import Annotated
import blockether.vis.extension as vis

@dataclass(frozen=True)
class Hit:
    query: str
    limit: int
    repo: str | None

def find(query: Annotated[str, "Search text."], /, *, limit: int = 20, repo: str | None = None) -> Hit:
    """Find things."""
    return Hit(query, limit, repo)

class Tracker:
    def count(self, *labels: str) -> int:
        """Count labels."""
        return len(labels)

def fails(x: int) -> int:
    """Always fails."""
    raise ValueError(f"bad x {x}")

vis.register(vis.Extension(name="search", alias="s", description="d",
    symbols=[vis.Symbol(find), vis.Symbol(Tracker(), name="tracker"), vis.Symbol(fails)]))
"#,
    );
    let s = f.session("s");
    let tools = f.host.tools().list(&s).await;
    let find = tools.iter().find(|t| t.name == "find").expect("find");
    assert_eq!(find.parameters["required"], json!(["query"]));
    assert!(tools.iter().any(|t| t.name == "tracker__count"));
    let out = f
        .host
        .tools()
        .call(&s, "find", json!({"query": "bug", "limit": 3}))
        .await
        .expect("call");
    assert_eq!(
        out.value,
        json!({"__vis_object__": "Hit", "__vis_attrs__": {"query": "bug", "limit": 3, "repo": null}})
    );
    let out = f
        .host
        .tools()
        .call(&s, "tracker__count", json!({"labels": ["a", "b"]}))
        .await
        .expect("namespace call");
    assert_eq!(out.value, json!(2));
    let err = f
        .host
        .tools()
        .call(&s, "fails", json!({"x": 7}))
        .await
        .expect_err("raises");
    assert_eq!(err.message, "ValueError: bad x 7");
    assert_eq!(err.kind, "python");
    let tb = err.traceback.unwrap_or_default();
    assert!(
        tb.contains("search.py") && tb.contains("raise ValueError(f\"bad x {x}\")"),
        "{tb}"
    );
    assert!(!tb.contains("bad x 7"), "the message is not repeated: {tb}");
    assert!(
        !tb.contains("_runtime.py") && !tb.contains("<vis-worker>"),
        "{tb}"
    );
    let err = f
        .host
        .tools()
        .call(&s, "nope", json!({}))
        .await
        .expect_err("unknown");
    assert_eq!(err.kind, "unknown-tool");
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn state_written_by_a_tool_survives_a_worker_restart_and_none_deletes() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    f.global(
        "kv.py",
        r#"
import blockether.vis.extension as vis
def drop(key: str) -> list:
    """Delete a key by writing None."""
    vis.state[key] = None
    return list(vis.state)
vis.register(vis.Extension(name="kv", alias="kv", description="d", symbols=[vis.Symbol(drop)]))
"#,
    );
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "add", json!({"text": "one"}))
        .await
        .expect("first");
    let first_pid = f.host.workers().session_pid("s").expect("running");
    f.host.sessions().stop("s").await;
    assert!(f.host.workers().session_pid("s").is_none());
    let out = f
        .host
        .tools()
        .call(&s, "add", json!({"text": "two"}))
        .await
        .expect("second");
    assert_eq!(out.value, json!({"count": 2}));
    assert_ne!(f.host.workers().session_pid("s"), Some(first_pid));
    assert_eq!(
        f.state.get("todo", "items").await.expect("get"),
        Some(json!(["one", "two"]))
    );
    f.state.put("kv", "k", json!(1)).await.expect("put");
    let out = f
        .host
        .tools()
        .call(&s, "drop", json!({"key": "k"}))
        .await
        .expect("drop");
    assert_eq!(out.value, json!([]));
    assert_eq!(f.state.get("kv", "k").await.expect("get"), None);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_before_hook_block_fails_the_call_with_its_reason_and_other_calls_pass() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    let s = f.session("s");
    let err = f
        .host
        .tools()
        .call(&s, "add", json!({"text": "--force"}))
        .await
        .expect_err("blocked");
    assert_eq!(err.kind, "blocked");
    assert_eq!(err.message, "force needs the user's approval");
    assert_eq!(
        err.hint.as_deref(),
        Some("Blocked by the 'todo' Python extension. Ask the user before retrying.")
    );
    assert_eq!(f.state.get("todo", "items").await.expect("get"), None);
    f.host
        .tools()
        .call(&s, "add", json!({"text": "fine"}))
        .await
        .expect("allowed");
    // The same hooks guard a built-in op by name.
    assert!(f
        .host
        .tools()
        .before_hooks(&s, "shell", &[json!({"command": "--force"})])
        .await
        .is_ok());
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_before_hook_that_raises_allows_the_call_and_after_hooks_observe() {
    let f = fixture();
    f.global(
        "hooks.py",
        r#"
import blockether.vis.extension as vis
def echo(text: str) -> str:
    """Echo."""
    return text
def explode(call):
    raise RuntimeError("hook bug")
def observe(call):
    vis.state["seen"] = call
    return vis.block("after hooks cannot block")
vis.register(vis.Extension(name="hooks", alias="h", description="d", symbols=[vis.Symbol(echo)],
    op_hooks=[vis.OpHook(["echo"], explode), vis.OpHook(["echo"], observe, phase="after")]))
"#,
    );
    let s = f.session("s");
    let out = f
        .host
        .tools()
        .call(&s, "echo", json!({"text": "hi"}))
        .await
        .expect("allowed despite the raising hook");
    assert_eq!(out.text, "hi");
    assert_eq!(
        f.state.get("hooks", "seen").await.expect("get"),
        Some(json!({"op": "echo", "args": [{"text": "hi"}], "result": "hi"}))
    );
    f.host.shutdown().await;
}

const FS_EXT: &str = r#"
import blockether.vis.extension as vis
def read(path: str) -> str:
    """Read a file through vis.fs."""
    return vis.fs.read_text(path)
def write(path: str, text: str) -> bool:
    """Write a file through vis.fs."""
    vis.fs.write(path, text)
    return vis.fs.exists(path)
def gate(call):
    if call["path"].endswith(".secret"):
        return vis.block("secrets are off limits")
    if call["path"].endswith(".crash"):
        raise RuntimeError("guard bug")
    if call["operation"] == "file-write" and call["path"].endswith(".ro"):
        return vis.block("read only")
vis.register(vis.Extension(name="files", alias="files", description="d",
    symbols=[vis.Symbol(read), vis.Symbol(write, tag="mutation")],
    op_hooks=[vis.OpHook(["fs_access"], gate)]))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn vis_fs_reaches_paths_outside_the_workspace_and_fs_access_guards_fail_closed() {
    let f = fixture();
    f.global("files.py", FS_EXT);
    std::fs::write(f.project.join("a.txt"), "alpha").expect("write");
    std::fs::write(f.project.join("x.secret"), "s").expect("write");
    std::fs::write(f.project.join("y.crash"), "c").expect("write");
    std::fs::write(f.project.join("z.ro"), "r").expect("write");
    let s = f.session("s");
    let ok = f
        .host
        .tools()
        .call(&s, "read", json!({"path": "a.txt"}))
        .await
        .expect("read inside");
    assert_eq!(ok.text, "alpha");
    let out = f
        .host
        .tools()
        .call(&s, "write", json!({"path": "new/../b.txt", "text": "beta"}))
        .await
        .expect("write inside");
    assert_eq!(out.value, json!(true));
    assert_eq!(
        std::fs::read_to_string(f.project.join("b.txt")).expect("read"),
        "beta"
    );
    // The extension's permissions, not the workspace: a file beside the project.
    std::fs::write(f.root.join("beside.txt"), "next door").expect("write");
    let outside = f
        .host
        .tools()
        .call(
            &s,
            "read",
            json!({"path": f.root.join("beside.txt").to_string_lossy()}),
        )
        .await
        .expect("outside the workspace");
    assert_eq!(outside.text, "next door");
    let relative = f
        .host
        .tools()
        .call(&s, "read", json!({"path": "../beside.txt"}))
        .await
        .expect("relative to the workspace");
    assert_eq!(relative.text, "next door");
    let blocked = f
        .host
        .tools()
        .call(&s, "read", json!({"path": "x.secret"}))
        .await
        .expect_err("blocked");
    assert_eq!(blocked.message, "PermissionError: secrets are off limits");
    let crashed = f
        .host
        .tools()
        .call(&s, "read", json!({"path": "y.crash"}))
        .await
        .expect_err("fails closed");
    assert!(
        crashed
            .message
            .contains("fs_access guard failed, and a boundary fails closed")
            && crashed.message.contains("guard bug"),
        "{}",
        crashed.message
    );
    f.host
        .tools()
        .call(&s, "read", json!({"path": "z.ro"}))
        .await
        .expect("reading a read-only file is allowed");
    let ro = f
        .host
        .tools()
        .call(&s, "write", json!({"path": "z.ro", "text": "x"}))
        .await
        .expect_err("write refused");
    assert!(ro.message.contains("read only"));
    // The host's own file tools ask the same guards.
    assert_eq!(
        f.host
            .tools()
            .fs_access(&s, "file-read", &f.project.join("y.crash"))
            .await
            .map_err(|e| e.contains("fails closed")),
        Err(true)
    );
    assert!(f
        .host
        .tools()
        .fs_access(&s, "file-read", &f.project.join("a.txt"))
        .await
        .is_ok());
    f.host.shutdown().await;
}

const BAD: &str = r#"
import os, sys, time
import blockether.vis.extension as vis
def ok() -> str:
    """Fine."""
    return "ok"
def hang() -> str:
    """Never returns."""
    while True:
        time.sleep(0.05)
def leave() -> str:
    """Calls sys.exit."""
    sys.exit(3)
def die() -> str:
    """Calls os._exit."""
    os._exit(1)
vis.register(vis.Extension(name="bad", alias="bad", description="d",
    symbols=[vis.Symbol(ok), vis.Symbol(hang), vis.Symbol(leave), vis.Symbol(die)]))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_hangs_times_out_and_the_next_call_runs_on_a_fresh_worker() {
    let f = fixture_with(|c| c.call_timeout = Duration::from_millis(1500));
    f.global("bad.py", BAD);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("warm up");
    let first = f.host.workers().session_pid("s").expect("pid");
    let started = std::time::Instant::now();
    let err = f
        .host
        .tools()
        .call(&s, "hang", json!({}))
        .await
        .expect_err("times out");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(err.kind, "timeout");
    assert!(
        err.message.contains("timed out after 1.5 s"),
        "{}",
        err.message
    );
    let out = f
        .host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("fresh");
    assert_eq!(out.text, "ok");
    assert_ne!(f.host.workers().session_pid("s"), Some(first));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sys_exit_in_extension_code_fails_the_call_and_the_host_recovers() {
    let f = fixture();
    f.global("bad.py", BAD);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("warm up");
    let first = f.host.workers().session_pid("s").expect("pid");
    let err = f
        .host
        .tools()
        .call(&s, "leave", json!({}))
        .await
        .expect_err("fails");
    assert_eq!(err.message, "SystemExit: extension code called sys.exit(3)");
    let out = f
        .host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("recovered");
    assert_eq!(out.text, "ok");
    assert_ne!(f.host.workers().session_pid("s"), Some(first));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn os_exit_in_extension_code_fails_the_call_and_the_host_recovers() {
    let f = fixture();
    f.global("bad.py", BAD);
    let s = f.session("s");
    let other = SessionCtx {
        id: "other".into(),
        ..f.session("other")
    };
    f.host
        .tools()
        .call(&other, "ok", json!({}))
        .await
        .expect("other session");
    let other_pid = f.host.workers().session_pid("other");
    let err = f
        .host
        .tools()
        .call(&s, "die", json!({}))
        .await
        .expect_err("fails");
    assert_eq!(err.kind, "worker-exited");
    assert!(err.message.contains("exit code 1"), "{}", err.message);
    let out = f
        .host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("recovered");
    assert_eq!(out.text, "ok");
    assert_eq!(
        f.host.workers().session_pid("other"),
        other_pid,
        "other session untouched"
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reload_keeps_the_last_good_version_when_a_file_breaks_and_swaps_when_fixed() {
    let f = fixture();
    let version = |v: &str| {
        format!(
            "import blockether.vis.extension as vis\n\ndef v() -> str:\n    \"\"\"Version.\"\"\"\n    return '{v}'\n\nvis.register(vis.Extension(name='ver', alias='ver', description='d', symbols=[vis.Symbol(v)]))\n"
        )
    };
    let file = f.global("ver.py", &version("one"));
    f.host.catalog().reload(None).await;
    let s = f.session("s");
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("v1")
            .text,
        "one"
    );

    std::fs::write(
        &file,
        "import blockether.vis.extension as vis\nraise ImportError('half-saved')\n",
    )
    .expect("break");
    // Not adopted before a reload (the admitted bytes are used).
    f.host.sessions().stop("s").await;
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("v1")
            .text,
        "one"
    );
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.failures.len(), 1);
    assert!(report.failures[0].is_stale);
    assert_eq!(report.failures[0].extension.as_deref(), Some("ver"));
    assert!(
        report.summary().contains("last good kept"),
        "{}",
        report.summary()
    );
    let list = listing(&f.host, None).await;
    assert_eq!(list["extensions"][0]["is_stale"], true);
    assert_eq!(list["failures"][0]["is_stale"], true);
    // The last good version still answers, also from a fresh session worker.
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("stale")
            .text,
        "one"
    );
    f.host.sessions().stop("s").await;
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("stale")
            .text,
        "one"
    );

    std::fs::write(&file, version("two")).expect("fix");
    let report = f.host.catalog().reload(None).await;
    assert!(report.failures.is_empty());
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("v2")
            .text,
        "two"
    );
    let list = listing(&f.host, None).await;
    assert_eq!(list["extensions"][0]["is_stale"], false);

    std::fs::remove_file(&file).expect("delete");
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.removed, vec!["ver".to_string()]);
    assert!(f.host.tools().call(&s, "v", json!({})).await.is_err());
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn network_filters_block_allow_and_deny_when_they_raise_or_hang() {
    let f = fixture_with(|c| c.filter_timeout = Duration::from_millis(1500));
    f.global("todo.py", TODO_EXTENSION);
    f.global(
        "zfilters.py",
        r#"
import time
import blockether.vis.extension as vis
def picky(ctx):
    if ctx["host"] == "raise.test":
        raise KeyError("no such header")
    if ctx["host"] == "hang.test":
        time.sleep(60)
    if ctx.get("body") == "secret":
        return vis.block("body leaks a secret")
    return "strings allow"
vis.register(vis.Extension(name="zfilters", description="d", network_filters=[vis.NetworkFilter(picky)]))
"#,
    );
    f.host.catalog().reload(None).await;
    let ctx = |method: &str, host: &str, body: Option<&str>| {
        json!({"phase": "https", "method": method, "host": host, "port": 443, "path": "/x",
               "headers": {"user-agent": "t"}, "body": body})
    };
    let names: Vec<String> = f
        .host
        .filters()
        .infos()
        .into_iter()
        .map(|i| i.extension)
        .collect();
    assert_eq!(names, vec!["todo", "zfilters"]);
    assert_eq!(
        f.host.filters().run(&ctx("GET", "ok.test", None)).await,
        Ok(FilterVerdict::Allow)
    );
    assert_eq!(
        f.host.filters().run(&ctx("DELETE", "api.test", None)).await,
        Ok(FilterVerdict::Block("no DELETE to api.test".into()))
    );
    assert_eq!(
        f.host
            .filters()
            .run(&ctx("POST", "ok.test", Some("secret")))
            .await,
        Ok(FilterVerdict::Block("body leaks a secret".into()))
    );
    match f.host.filters().run(&ctx("GET", "raise.test", None)).await {
        Err(e) => {
            assert!(e.message.starts_with("KeyError"), "{}", e.message);
            assert!(e.trace.unwrap_or_default().contains("zfilters.py"));
        }
        other => panic!("{other:?}"),
    }
    match f.host.filters().run(&ctx("GET", "hang.test", None)).await {
        Err(e) => assert!(e.message.contains("timed out"), "{}", e.message),
        other => panic!("{other:?}"),
    }
    // The filter worker was replaced and serves again.
    assert_eq!(
        f.host.filters().run(&ctx("GET", "ok.test", None)).await,
        Ok(FilterVerdict::Allow)
    );
    // Through the proxy's trait.
    let filters = f.host.filters().global();
    assert_eq!(filters.len(), 2);
    let pctx = vis_proxy::FilterCtx {
        phase: vis_proxy::Phase::Http,
        method: Some("DELETE".into()),
        host: "x.test".into(),
        port: 80,
        path: Some("/".into()),
        headers: Default::default(),
        body: None,
        status: None,
    };
    assert_eq!(
        filters[0].check(&pctx).await,
        Ok(vis_proxy::FilterVerdict::Block(
            "no DELETE to x.test".into()
        ))
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn slash_commands_get_their_ctx_and_errors_come_back_as_markdown() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    f.global(
        "slashes.py",
        r#"
import blockether.vis.extension as vis
def fail(ctx):
    return vis.err("nope", body="because")
def boom(ctx):
    raise ValueError("slash bug")
vis.register(vis.Extension(name="slashes", description="d", slash_commands=[
    vis.SlashCommand("fail", fail), vis.SlashCommand("boom", boom),
    vis.SlashCommand("quiet", lambda ctx: None)]))
"#,
    );
    let s = f.session("s");
    assert_eq!(
        f.host.sessions().run_slash(&s, "todos", "a b").await,
        Ok("0 open\n\nargs=['a', 'b']".to_string())
    );
    assert_eq!(
        f.host.sessions().run_slash(&s, "/quiet", "").await,
        Ok("slashes: done".to_string())
    );
    assert_eq!(
        f.host.sessions().run_slash(&s, "fail", "").await,
        Err("nope\n\nbecause".to_string())
    );
    let boom = f
        .host
        .sessions()
        .run_slash(&s, "boom", "")
        .await
        .expect_err("raises");
    assert!(boom.starts_with("ValueError: slash bug\n\n```"), "{boom}");
    assert!(f
        .host
        .sessions()
        .run_slash(&s, "missing", "")
        .await
        .is_err());
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn declared_env_log_notify_and_unserved_doors_behave() {
    let f = fixture_with(|c| {
        c.environment = Arc::new(|p| {
            let mut m = BTreeMap::new();
            if p.is_some() {
                m.insert("FROM_BLOCK".to_string(), "block".to_string());
            }
            m
        })
    });
    std::fs::write(f.project.join(".env.local"), "ACME_KEY=local\n").expect("w");
    std::fs::write(f.project.join(".env"), "ACME_KEY=dotenv\nONLY_DOTENV=d\n").expect("w");
    f.project_ext(
        "envy.py",
        r#"
import os
import blockether.vis.extension as vis
def show() -> dict:
    """Show the environment."""
    vis.log("info", "showing")
    vis.notify("hello", "success")
    return {k: os.environ.get(k) for k in ("ACME_KEY", "ONLY_DOTENV", "FROM_BLOCK", "UNSET_X", "HOME")}
def shell() -> str:
    """Try a shell."""
    try:
        vis.shell({"command": "ls"})
    except NotImplementedError as e:
        return str(e)
    return "ran"
vis.register(vis.Extension(name="envy", alias="envy", description="d",
    env=["ACME_KEY", "ONLY_DOTENV", "FROM_BLOCK", "UNSET_X"],
    symbols=[vis.Symbol(show), vis.Symbol(shell)]))
"#,
    );
    let s = f.session("s");
    let out = f
        .host
        .tools()
        .call(&s, "show", json!({}))
        .await
        .expect("show");
    assert_eq!(out.value["ACME_KEY"], "local");
    assert_eq!(out.value["ONLY_DOTENV"], "d");
    assert_eq!(out.value["FROM_BLOCK"], "block");
    assert_eq!(out.value["UNSET_X"], Value::Null);
    let notes = f.events.notes.lock().clone();
    assert_eq!(
        notes,
        vec![(
            Some("s".to_string()),
            "envy".to_string(),
            "hello".to_string(),
            "success".to_string()
        )]
    );
    let out = f
        .host
        .tools()
        .call(&s, "shell", json!({}))
        .await
        .expect("shell");
    assert_eq!(out.text, "shell is not available in this gateway build yet");
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_are_listed_and_their_token_comes_from_get_token_fn() {
    let f = fixture();
    f.global(
        "acme.py",
        r#"
import blockether.vis.extension as vis
def token():
    return vis.ProviderCredential(token="sk-acme", api_url="https://api.acme.test/v1")
vis.register(vis.Extension(name="acme", description="d", providers=[vis.Provider(
    id="acme", label="Acme", preset=vis.ProviderPreset(base_url="https://api.acme.test/v1",
    api_style="openai", default_models=["a-1"]), get_token_fn=token,
    status_fn=lambda: vis.ProviderStatus(is_authenticated=True))]))
"#,
    );
    f.host.catalog().reload(None).await;
    let providers = f.host.providers().list(None).await;
    assert_eq!(providers.len(), 1);
    assert_eq!(providers[0].id, "acme");
    assert!(providers[0].slots.contains(&"get_token_fn".to_string()));
    assert_eq!(providers[0].preset["default_models"], json!(["a-1"]));
    let token = f
        .host
        .providers()
        .token("acme", "acme")
        .await
        .expect("token")
        .expect("some");
    assert_eq!(token["token"], "sk-acme");
    let status = f
        .host
        .providers()
        .call("acme", "acme", "status_fn", vec![])
        .await
        .expect("status");
    assert_eq!(status["is_authenticated"], true);
    assert!(f.host.providers().token("acme", "nope").await.is_err());
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn per_turn_prompt_activation_and_ctx_are_collected() {
    let f = fixture();
    f.global(
        "turny.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="turny", description="d",
    prompt=lambda env: f"cwd is {env['cwd']}", ctx=lambda env: {"session_env": {"turny": 1}}))
"#,
    );
    f.global(
        "zoff.py",
        r#"
import blockether.vis.extension as vis
def act(env):
    raise RuntimeError("no")
vis.register(vis.Extension(name="zoff", description="d", prompt="never", activation=act))
"#,
    );
    let s = f.session("s");
    let t = f.host.sessions().turn(&s, Some("companion")).await;
    assert_eq!(
        t.prompts,
        vec![(
            "turny".to_string(),
            format!("cwd is {}", f.project.display())
        )]
    );
    assert_eq!(t.inactive, vec!["zoff".to_string()]);
    assert_eq!(t.session, json!({"session_env": {"turny": 1}}));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_hangs_or_dies_at_import_fails_alone() {
    let f = fixture_with(|c| c.load_timeout = Duration::from_secs(2));
    f.global(
        "a_hang.py",
        "import time\nwhile True:\n    time.sleep(0.05)\n",
    );
    f.global("b_die.py", "import os\nos._exit(4)\n");
    f.global("todo.py", TODO_EXTENSION);
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.loaded, vec!["todo".to_string()]);
    let kinds: Vec<(String, String)> = report
        .failures
        .iter()
        .map(|x| {
            (
                x.file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                x.error.kind.clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("a_hang.py".to_string(), "Timeout".to_string()),
            ("b_die.py".to_string(), "WorkerExited".to_string())
        ]
    );
    let ctx = json!({"phase": "http", "method": "DELETE", "host": "h.test", "port": 80,
                     "path": "/", "headers": {}});
    assert_eq!(
        f.host.filters().run(&ctx).await,
        Ok(FilterVerdict::Block("no DELETE to h.test".into()))
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_concurrent_calls_into_one_extension_run_one_after_the_other() {
    let f = fixture();
    f.global(
        "serial.py",
        r#"
import time
import blockether.vis.extension as vis
ACTIVE = []
def work(tag: str) -> int:
    """Work a little and report how many calls overlapped."""
    ACTIVE.append(tag)
    overlap = len(ACTIVE)
    time.sleep(0.3)
    ACTIVE.remove(tag)
    return overlap
vis.register(vis.Extension(name="serial", alias="serial", description="d", symbols=[vis.Symbol(work)]))
"#,
    );
    let s = f.session("s");
    let (a, b) = tokio::join!(
        f.host.tools().call(&s, "work", json!({"tag": "a"})),
        f.host.tools().call(&s, "work", json!({"tag": "b"}))
    );
    assert_eq!(a.expect("a").value, json!(1));
    assert_eq!(b.expect("b").value, json!(1));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_without_changes_keeps_session_workers_and_a_change_replaces_them() {
    let f = fixture();
    let file = f.global("todo.py", TODO_EXTENSION);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "add", json!({"text": "a"}))
        .await
        .expect("call");
    let pid = f.host.workers().session_pid("s");
    f.host.catalog().reload(Some(&f.project)).await;
    f.host
        .tools()
        .call(&s, "add", json!({"text": "b"}))
        .await
        .expect("call");
    assert_eq!(f.host.workers().session_pid("s"), pid);
    std::fs::write(&file, format!("{TODO_EXTENSION}\n# edited\n")).expect("edit");
    f.host.catalog().reload(None).await;
    f.host
        .tools()
        .call(&s, "add", json!({"text": "c"}))
        .await
        .expect("call");
    assert_ne!(f.host.workers().session_pid("s"), pid);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apropos_doc_extensions_markdown_describe_the_catalogue_and_a_no_op_reload_keeps_workers() {
    let f = fixture();
    let generation = || f.host.catalog().generation();
    f.global("todo.py", TODO_EXTENSION);
    f.global("broken.py", "raise RuntimeError('nope')\n");
    let before = generation();
    f.host.catalog().reload(None).await;
    let loaded = generation();
    assert_ne!(
        loaded, before,
        "a reload that changed the scope starts a new generation"
    );
    f.host.catalog().reload(None).await;
    assert_eq!(
        generation(),
        loaded,
        "a reload without a change keeps the generation (session workers are not replaced)"
    );
    let s = f.session("s");
    let hits = f.host.tools().apropos(&s, "^a").await.expect("apropos");
    assert_eq!(
        hits.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        vec!["add"]
    );
    assert!(f
        .host
        .tools()
        .apropos(&s, "secret")
        .await
        .expect("apropos")
        .is_empty());
    assert!(f.host.tools().apropos(&s, "(").await.is_err());
    let doc = f.host.tools().doc(&s, "add").await.expect("doc");
    assert!(
        doc.contains("Add one todo item") && doc.contains("Effect: mutation"),
        "{doc}"
    );
    assert!(f.host.tools().doc(&s, "secret").await.is_err());
    let md = f.host.catalog().markdown(None).await;
    assert!(md.starts_with("Extensions: 1 loaded, 1 failed"), "{md}");
    assert!(md.contains("**todo**") && md.contains("/todos") && md.contains("RuntimeError: nope"));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn helper_modules_are_frozen_until_reload_and_packages_load_as_one_extension() {
    let f = fixture();
    let helper = f.global("pkg/helper.py", "WORD = 'one'\n");
    f.global(
        "pkg/extension.py",
        r#"
import blockether.vis.extension as vis
import helper
def word() -> str:
    """The helper's word."""
    return helper.WORD
def where() -> str:
    """This file."""
    return __file__
vis.register(vis.Extension(name="pkg", alias="pkg", description="d",
    symbols=[vis.Symbol(word), vis.Symbol(where)]))
"#,
    );
    f.global("pkg/test_pkg.py", "raise SystemExit('never loaded')\n");
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.loaded, vec!["pkg".to_string()]);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let s = f.session("s");
    assert_eq!(
        f.host
            .tools()
            .call(&s, "word", json!({}))
            .await
            .expect("w")
            .text,
        "one"
    );
    let real = std::fs::canonicalize(f.home.join("extensions/pkg/extension.py")).expect("canon");
    assert_eq!(
        f.host
            .tools()
            .call(&s, "where", json!({}))
            .await
            .expect("w")
            .text,
        real.to_string_lossy()
    );
    std::fs::write(&helper, "WORD = 'two'\n").expect("edit");
    f.host.sessions().stop("s").await;
    assert_eq!(
        f.host
            .tools()
            .call(&s, "word", json!({}))
            .await
            .expect("w")
            .text,
        "one",
        "a fresh worker still runs the admitted copy"
    );
    f.host.catalog().reload(None).await;
    assert_eq!(
        f.host
            .tools()
            .call(&s, "word", json!({}))
            .await
            .expect("w")
            .text,
        "two"
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_host_ends_its_workers() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "add", json!({"text": "a"}))
        .await
        .expect("call");
    let pid = f.host.workers().session_pid("s").expect("pid") as i32;
    drop(f);
    let mut gone = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Signal 0 only checks existence; a reaped child no longer exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            gone = true;
            break;
        }
    }
    assert!(gone, "worker {pid} still running");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_call_stops_its_worker_and_the_next_call_runs_fresh() {
    let f = fixture();
    f.global("bad.py", BAD);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("warm up");
    let first = f.host.workers().session_pid("s");
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        f.host.tools().call(&s, "hang", json!({})),
    )
    .await;
    assert!(cancelled.is_err(), "the caller gave up");
    let started = std::time::Instant::now();
    let out = f
        .host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("fresh");
    assert_eq!(out.text, "ok");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_ne!(f.host.workers().session_pid("s"), first);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_is_not_held_up_by_a_slow_provider_callback_of_its_extension() {
    let f = fixture_with(|c| c.filter_timeout = Duration::from_millis(500));
    f.global(
        "slow.py",
        r#"
import time
import blockether.vis.extension as vis
def slow_status():
    time.sleep(1.5)
    return vis.ProviderStatus(is_authenticated=True)
vis.register(vis.Extension(name="slow", description="d",
    providers=[vis.Provider(id="slow", label="Slow", status_fn=slow_status)],
    network_filters=[vis.NetworkFilter(lambda ctx: None)]))
"#,
    );
    f.host.catalog().reload(None).await;
    let ctx = json!({"phase": "http", "method": "GET", "host": "h.test", "port": 80,
                     "path": "/", "headers": {}});
    assert_eq!(
        f.host.filters().run(&ctx).await,
        Ok(FilterVerdict::Allow),
        "warm"
    );
    let pid = f.host.workers().registration_pid();
    let host = f.host.clone();
    let status = tokio::spawn(async move {
        host.providers()
            .call("slow", "slow", "status_fn", vec![])
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    // The filter runs in the extension's filter worker, not behind the callback.
    assert_eq!(f.host.filters().run(&ctx).await, Ok(FilterVerdict::Allow));
    assert!(started.elapsed() < Duration::from_millis(1000));
    let status = status.await.expect("join").expect("status still answers");
    assert_eq!(status["is_authenticated"], true);
    assert_eq!(f.host.workers().registration_pid(), pid);
    assert_eq!(f.host.filters().run(&ctx).await, Ok(FilterVerdict::Allow));
    f.host.shutdown().await;
}

/// A human-doors double: answers `vis.ask` after the call timeout (holding the worker), with
/// the verdict of the form's own validator for "bad" as the value.
struct SlowHuman;

#[async_trait]
impl HumanDoors for SlowHuman {
    async fn request_input(
        &self,
        session: Option<&SessionCtx>,
        _: &str,
        payload: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError> {
        assert!(session.is_some(), "a tool call has a session");
        let _hold = worker.hold();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let verdict = worker
            .callback(
                &payload["run_validator"],
                vec![json!("name"), json!("bad"), json!({"name": "bad"})],
            )
            .await
            .map_err(client::DoorError::new)?;
        Ok(json!({"status": "submitted", "values": {"name": verdict}, "request_id": "r1"}))
    }
    async fn live(
        &self,
        _: Option<&SessionCtx>,
        _: &str,
        _: Value,
        _: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError> {
        Err(client::DoorError::new("no live"))
    }
    async fn shell(
        &self,
        _: &str,
        _: Option<&SessionCtx>,
        _: &str,
        _: Value,
        _: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError> {
        Err(client::DoorError::new("no shell"))
    }
    fn reveal_secret(&self, _: Option<&str>, handle: &str) -> Option<String> {
        Some(format!("plain of {handle}"))
    }
    fn forget_secret(&self, _: Option<&str>, _: &str) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_form_outlives_the_call_timeout_and_its_validator_runs_in_the_worker() {
    let base = fixture_with(|c| c.call_timeout = Duration::from_secs(1));
    let mut cfg = HostConfig::new(&base.home);
    cfg.worker_exe = worker_exe();
    cfg.call_timeout = Duration::from_secs(1);
    let host = ExtensionHost::new(
        cfg,
        Arc::new(MemoryState::default()),
        Arc::new(RecordingEvents::default()),
        Arc::new(SlowHuman),
    );
    base.global(
        "asker.py",
        r#"
import blockether.vis.extension as vis
def no_bad(v):
    return "no bad names" if v == "bad" else None
def asker() -> str:
    """Ask the human."""
    a = vis.ask("T", [vis.plaintext("name", validate=no_bad)])
    return f"{a.is_submitted}:{a['name']}:{vis.reveal('vis-secret:x')}"
vis.register(vis.Extension(name="asker", alias="asker", description="d", symbols=[vis.Symbol(asker)]))
"#,
    );
    let report = host.catalog().reload(None).await;
    assert!(report.failures.is_empty(), "{}", report.summary());
    let out = host
        .tools()
        .call(&base.session("s"), "asker", json!({}))
        .await
        .expect("no timeout while the human answers");
    assert_eq!(out.text, "True:no bad names:plain of vis-secret:x");
    host.shutdown().await;
}

/// Filter-lane latency probe: `cargo test -p vis-gateway lane_latency_probe -- --ignored
/// --nocapture` (prints p50/p99 of sequential calls; asserts nothing about speed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn lane_latency_probe() {
    let f = fixture();
    f.global(
        "allow.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="allow", description="d",
    network_filters=[vis.NetworkFilter(lambda ctx: None)]))
"#,
    );
    f.host.catalog().reload(None).await;
    let filters = f.host.filters().global();
    let pctx = vis_proxy::FilterCtx {
        phase: vis_proxy::Phase::Http,
        method: Some("GET".into()),
        host: "x.test".into(),
        port: 80,
        path: Some("/".into()),
        headers: [("user-agent".to_string(), "t".to_string())]
            .into_iter()
            .collect(),
        body: None,
        status: None,
    };
    let mut lat = Vec::new();
    for i in 0..3000 {
        let t = std::time::Instant::now();
        let v = filters[0].check(&pctx).await;
        if i >= 200 {
            lat.push(t.elapsed().as_micros());
        }
        assert_eq!(v, Ok(vis_proxy::FilterVerdict::Allow));
        if std::env::var_os("LANE_GAP").is_some() {
            tokio::time::sleep(Duration::from_micros(50)).await;
        }
    }
    lat.sort();
    println!(
        "lane: p50 {} µs, p90 {} µs, p99 {} µs",
        lat[lat.len() / 2],
        lat[lat.len() * 9 / 10],
        lat[lat.len() * 99 / 100]
    );
    f.host.shutdown().await;
}

// -- the filter lane -------------------------------------------------------------------

const LANE_FILTERS: &str = r#"
import os, sys, time
import blockether.vis.extension as vis

def lane(ctx):
    host = ctx["host"]
    if host == "block.test":
        return vis.block(f"no {ctx['method']} {ctx['path']} ({ctx['phase']}, port {ctx['port']})")
    if host == "raise.test":
        raise ValueError("bad " + ctx["headers"].get("x-probe", "?"))
    if host == "hang.test":
        time.sleep(60)
    if host == "slow.test":
        time.sleep(3)
    if host == "exit.test":
        sys.exit(3)
    if host == "door.test":
        vis.state["seen"] = vis.state.get("seen", 0) + 1
        vis.log("info", "door from a filter")
        return vis.block(f"seen={vis.state['seen']}")
    if host.startswith("odd") and int(host[3:].split(".")[0]) % 2:
        return vis.block(host)
    if ctx["phase"].endswith("-response") and ctx["status"] == 418:
        return vis.block("teapot")
    if ctx["body"] == "secret":
        return vis.block("body")
    return None

vis.register(vis.Extension(name="lane", description="d", network_filters=[vis.NetworkFilter(lane)]))
"#;

fn pctx(phase: vis_proxy::Phase, host: &str) -> vis_proxy::FilterCtx {
    vis_proxy::FilterCtx {
        phase,
        method: Some("POST".into()),
        host: host.into(),
        port: 8080,
        path: Some("/p?q=1".into()),
        headers: [("x-probe".to_string(), "é-42".to_string())]
            .into_iter()
            .collect(),
        body: None,
        status: None,
    }
}

async fn lane_fixture(timeout: Duration) -> (Fixture, Arc<dyn vis_proxy::NetworkFilter>) {
    let f = fixture_with(|c| c.filter_timeout = timeout);
    f.global("lane.py", LANE_FILTERS);
    f.host.catalog().reload(None).await;
    let filters = f.host.filters().global();
    assert_eq!(filters.len(), 1);
    let filter = filters[0].clone();
    (f, filter)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_filter_lane_allows_blocks_and_keeps_the_traceback_of_a_raise() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(5)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_eq!(
        filter.check(&pctx(Phase::Https, "block.test")).await,
        Ok(FilterVerdict::Block(
            "no POST /p?q=1 (https, port 8080)".into()
        ))
    );
    let mut teapot = pctx(Phase::HttpsResponse, "ok.test");
    teapot.status = Some(418);
    assert_eq!(
        filter.check(&teapot).await,
        Ok(FilterVerdict::Block("teapot".into()))
    );
    // A body near the 1 MiB bound crosses whole (larger than the socket buffer).
    let mut big = pctx(Phase::Http, "ok.test");
    big.body = Some("x".repeat(1 << 20));
    assert_eq!(filter.check(&big).await, Ok(FilterVerdict::Allow));
    big.body = Some("secret".into());
    assert_eq!(
        filter.check(&big).await,
        Ok(FilterVerdict::Block("body".into()))
    );
    let err = filter
        .check(&pctx(Phase::Http, "raise.test"))
        .await
        .expect_err("a raise denies");
    // The filter reports the raise as it is; the proxy names the filter in the deny reason.
    assert_eq!(err.message, "ValueError: bad é-42");
    let trace = err.trace.unwrap_or_default();
    assert!(trace.contains("lane.py"), "{trace}");
    assert!(trace.contains("raise ValueError(\"bad \""), "{trace}");
    // The message is not repeated as the traceback's last line.
    assert!(!trace.contains("ValueError: bad é-42"), "{trace}");
    f.host.shutdown().await;
}

/// Voluntary context switches of the calling thread.
fn own_voluntary_switches() -> i64 {
    // SAFETY: getrusage writes one rusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    u.ru_nvcsw
}

/// Voluntary context switches of a process's threads named `name`.
fn voluntary_switches_of(pid: u32, name: &str) -> i64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<i64>().ok())
        })
        .sum()
}

// One sleep per call on each side: on a Unix socket, reading wakes whoever waits on the
// peer's socket with "write space", so a gateway thread that also waits for writability,
// or a lane thread blocked in `recv`, used to sleep twice per call.
#[tokio::test(flavor = "current_thread")]
async fn a_filter_call_costs_each_side_one_sleep_not_two() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(5)).await;
    let ok = pctx(Phase::Http, "ok.test");
    assert_eq!(filter.check(&ok).await, Ok(FilterVerdict::Allow));
    let pid = f.host.workers().filter_pid("lane").expect("pid");
    const N: i64 = 200;
    let (gw0, lane0) = (
        own_voluntary_switches(),
        voluntary_switches_of(pid, "vis-filter-lane"),
    );
    for _ in 0..N {
        assert_eq!(filter.check(&ok).await, Ok(FilterVerdict::Allow));
    }
    let gw = own_voluntary_switches() - gw0;
    let lane = voluntary_switches_of(pid, "vis-filter-lane") - lane0;
    assert!(
        gw <= N * 3 / 2,
        "the gateway thread slept {gw} times for {N} calls"
    );
    assert!(
        lane <= N * 3 / 2,
        "the lane thread slept {lane} times for {N} calls"
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_that_hangs_times_out_kills_the_worker_and_the_next_call_recovers() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_millis(700)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    let pid = f.host.workers().filter_pid("lane").expect("pid");
    let started = std::time::Instant::now();
    let err = filter
        .check(&pctx(Phase::Http, "hang.test"))
        .await
        .expect_err("a timeout denies");
    assert!(err.message.contains("timed out"), "{}", err.message);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_ne!(f.host.workers().filter_pid("lane"), Some(pid));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_during_a_filter_call_denies_it_and_the_next_call_recovers() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(10)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    let pid = f.host.workers().filter_pid("lane").expect("pid");
    let slow = {
        let filter = filter.clone();
        tokio::spawn(async move { filter.check(&pctx(Phase::Http, "slow.test")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // SAFETY: signalling a child process of this test.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let started = std::time::Instant::now();
    let err = slow.await.expect("join").expect_err("a crash denies");
    assert!(err.message.contains("exited"), "{}", err.message);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_ne!(f.host.workers().filter_pid("lane"), Some(pid));
    // sys.exit in a filter denies too, and the worker is replaced after that answer.
    let pid = f.host.workers().filter_pid("lane");
    let err = filter
        .check(&pctx(Phase::Http, "exit.test"))
        .await
        .expect_err("sys.exit denies");
    assert!(err.message.contains("SystemExit"), "{}", err.message);
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_ne!(f.host.workers().filter_pid("lane"), pid);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_filter_calls_from_many_tasks_each_get_their_own_verdict() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(10)).await;
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let filter = filter.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for round in 0..5u32 {
                let host = format!("odd{}.test", i * 5 + round);
                out.push((host.clone(), filter.check(&pctx(Phase::Http, &host)).await));
            }
            out
        }));
    }
    let mut n = 0;
    for t in tasks {
        for (host, verdict) in t.await.expect("join") {
            let k: u32 = host[3..host.len() - 5].parse().expect("number");
            let want = if k % 2 == 1 {
                Ok(FilterVerdict::Block(host.clone()))
            } else {
                Ok(FilterVerdict::Allow)
            };
            assert_eq!(verdict, want, "{host}");
            n += 1;
        }
    }
    assert_eq!(n, 1000);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_can_use_host_doors_and_a_reload_swaps_it() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(5)).await;
    for seen in 1..=3 {
        assert_eq!(
            filter.check(&pctx(Phase::Http, "door.test")).await,
            Ok(FilterVerdict::Block(format!("seen={seen}")))
        );
    }
    assert_eq!(
        f.state.get("lane", "seen").await.expect("state"),
        Some(json!(3))
    );
    f.global(
        "lane.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="lane", description="d",
    network_filters=[vis.NetworkFilter(lambda ctx: vis.block("v2"))]))
"#,
    );
    f.host.catalog().reload(None).await;
    let filters = f.host.filters().global();
    assert_eq!(
        filters[0].check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Block("v2".into()))
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_filter_call_that_never_answers_gets_its_worker_replaced() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_millis(600)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    let pid = f.host.workers().filter_pid("lane").expect("pid");
    // The caller gives up first (as the proxy's own timeout or a client that left would).
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        filter.check(&pctx(Phase::Http, "hang.test")),
    )
    .await;
    assert!(gave_up.is_err());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_ne!(f.host.workers().filter_pid("lane"), Some(pid));
    f.host.shutdown().await;
}

fn principal_of(project: Option<&Path>) -> vis_proxy::Principal {
    vis_proxy::Principal {
        session_id: "s".into(),
        policy: Arc::new(vis_proxy::policy::Policy::unrestricted()),
        reserved_ports: vec![],
        project: project.map(Arc::from),
    }
}

#[tokio::test]
async fn a_projects_filters_decide_only_its_own_sessions_and_load_on_their_first_request() {
    use vis_proxy::FilterSet;
    let f = fixture();
    f.project_ext(
        "wall.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="wall", description="d",
    network_filters=[vis.NetworkFilter(lambda ctx: vis.block("nothing leaves project A"))]))
"#,
    );
    let set = crate::engine::ext::HostFilters(f.host.clone());
    let ctx = vis_proxy::FilterCtx {
        phase: vis_proxy::Phase::Http,
        method: Some("GET".into()),
        host: "x.test".into(),
        port: 80,
        path: Some("/".into()),
        headers: Default::default(),
        body: None,
        status: None,
    };
    // Nothing loaded yet: the project's first request loads it and is decided by it.
    let first = set.filters(&principal_of(Some(&f.project)));
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].check(&ctx).await,
        Ok(vis_proxy::FilterVerdict::Block(
            "nothing leaves project A".into()
        ))
    );
    // Loaded now: the project's own filter, by name.
    let loaded = set.filters(&principal_of(Some(&f.project)));
    assert_eq!(
        loaded.iter().map(|x| x.name()).collect::<Vec<_>>(),
        ["wall"]
    );
    // Another project (loaded, no extensions) and a session without a project: none of A's.
    let other = f.root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    f.host.catalog().ensure_project(Some(&other)).await;
    assert!(set.filters(&principal_of(Some(&other))).is_empty());
    assert!(set.filters(&principal_of(None)).is_empty());
    f.host.shutdown().await;
}

mod fidelity;
