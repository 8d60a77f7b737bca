//! Tools: argument binding, `vis.state`, op hooks, `vis.fs` and the `fs_access` gates, the
//! doors (env, log, notify), concurrent calls, forms that outlive the call timeout.

use super::*;

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
