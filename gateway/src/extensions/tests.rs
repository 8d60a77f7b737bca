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

fn principal_of(project: Option<&Path>) -> vis_proxy::Principal {
    vis_proxy::Principal {
        session_id: "s".into(),
        policy: Arc::new(vis_proxy::policy::Policy::unrestricted()),
        reserved_ports: Arc::from([]),
        project: project.map(Arc::from),
        label: None,
    }
}

mod catalog;
mod fidelity;
mod filters;
mod providers;
mod sessions;
mod tools;
mod workers;
