//! The model's sandbox end to end: a fixture LLM (both dialects) answers with
//! `python_execution` calls, the real gateway runs each block in its per-session Python
//! runtime, and the block's functions (file tools, shell, Symbols, apropos) run on the host.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A gateway in the default tool mode with the OpenAI dialect.
async fn start(llm: &FixtureLlm, dirs: Arc<Dirs>) -> Gateway {
    Gateway::start_in(dirs, Opts::openai(llm).sandbox()).await
}

/// One block and its closing answer (two requests to the model), as `Gateway::run_block`.
async fn run_block(gw: &Gateway, llm: &FixtureLlm, sid: &str, code: &str) -> (Vec<Event>, String) {
    let before = llm.request_count();
    let out = gw.run_block(llm, sid, code).await;
    assert_eq!(llm.requests().len(), before + 2, "one block, one answer");
    out
}

fn output_event(evs: &[Event]) -> Value {
    evs.iter()
        .find(|e| e.event == "block.output")
        .unwrap_or_else(|| panic!("no block.output: {:?}", ev_types(evs)))
        .data
        .clone()
}

fn ext(dirs: &Dirs, name: &str, src: &str) {
    let d = dirs.home().join("extensions");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), src).unwrap();
}

fn write(root: &Path, name: &str, text: &str) {
    std::fs::write(root.join(name), text).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_is_offered_only_python_execution_and_the_card_shows_python() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, result) = run_block(&gw, &llm, &sid, "print(1 + 1)").await;
    assert_eq!(result.trim(), "2");
    let tools: Vec<String> = llm.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(tools, ["python_execution"]);
    let started = evs.iter().find(|e| e.event == "block.started").unwrap();
    assert_eq!(
        started.data["display_language"], "python",
        "{}",
        started.data
    );
    assert_eq!(started.data["code"], "print(1 + 1)");
    let system = llm.requests()[0].body["messages"][0]["content"].to_string();
    assert!(system.contains("apropos"), "{system}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grep_then_cat_then_patch_edits_a_real_file_by_its_anchors() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    write(&dirs.root(), "notes.txt", "alpha\nneedle here\ngamma\n");
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
g = grep("needle")
print(g)
text = cat("notes.txt")
print(text)
anchor = text.splitlines()[1].split("│")[0]
print(patch("notes.txt", [{"from": anchor, "replace": "threaded needle"}]))
"#;
    let (_, result) = run_block(&gw, &llm, &sid, code).await;
    assert!(result.contains("notes.txt"), "{result}");
    assert!(
        result.contains("2:") && result.contains("│ needle here"),
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(dirs.root().join("notes.txt")).unwrap(),
        "alpha\nthreaded needle\ngamma\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_anchor_is_refused_and_the_file_is_untouched() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    write(&dirs.root(), "a.txt", "one\ntwo\nthree\n");
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
import pathlib
anchor = cat("a.txt").splitlines()[1].split("│")[0]
pathlib.Path("a.txt").write_text("one\nTWO changed\nthree\n")
try:
    patch("a.txt", [{"from": anchor, "replace": "2"}])
except ValueError as e:
    print("refused:", e)
"#;
    let (_, result) = run_block(&gw, &llm, &sid, code).await;
    assert!(result.starts_with("refused:"), "{result}");
    assert_eq!(
        std::fs::read_to_string(dirs.root().join("a.txt")).unwrap(),
        "one\nTWO changed\nthree\n"
    );
}

const RECORDS: &str = r#"
from dataclasses import dataclass
import blockether.vis.extension as vis

@dataclass
class Person:
    name: str

@dataclass
class Greeting:
    text: str
    to: Person

class Greeter:
    def hello(self, name: str) -> Greeting:
        """Greet somebody warmly by name."""
        return Greeting(text=f"hi {name}", to=Person(name=name))

vis.register(vis.Extension(
    name="greet", alias="greet", description="Greetings.",
    symbols=[vis.Symbol(Greeter(), name="greet")],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_symbol_returns_a_frozen_record_with_nested_records_and_has_its_contract() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    ext(&dirs, "greet.py", RECORDS);
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
g = await greet.hello("Ann")
print(g.text, "|", g.to.name)
print(type(greet.hello.contract).__name__, greet.hello.contract["name"])
try:
    g.text = "changed"
except Exception as e:
    print("frozen:", type(e).__name__)
print(apropos("warmly"))
"#;
    let (_, result) = run_block(&gw, &llm, &sid, code).await;
    assert!(result.contains("hi Ann | Ann"), "{result}");
    assert!(result.contains("dict greet.hello"), "{result}");
    assert!(result.contains("frozen:"), "{result}");
    assert!(result.contains("greet.hello"), "apropos finds it: {result}");
}

const GUARDS: &str = r#"
import blockether.vis.extension as vis

def no_patch_of_locked(call):
    args = (call.get("args") or [{}])[0]
    if str(args.get("path", "")).endswith(".locked"):
        return vis.block("locked files are not patched")
    return None

def gate(call):
    if call["operation"] == "file-write" and call["path"].endswith(".ro"):
        return vis.block("read only here")
    return None

vis.register(vis.Extension(
    name="guard", description="Guards files.",
    op_hooks=[vis.OpHook(["patch"], no_patch_of_locked), vis.OpHook(["fs_access"], gate)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_op_hook_blocks_patch_and_an_fs_access_gate_refuses_a_write_with_their_reasons() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    ext(&dirs, "guard.py", GUARDS);
    write(&dirs.root(), "x.locked", "keep\n");
    write(&dirs.root(), "y.ro", "keep\n");
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
for name in ["x.locked", "y.ro"]:
    a = cat(name).splitlines()[0].split("│")[0]
    try:
        patch(name, [{"from": a, "replace": "gone"}])
        print(name, "patched")
    except PermissionError as e:
        print(name, "refused:", e)
"#;
    let (_, result) = run_block(&gw, &llm, &sid, code).await;
    assert!(
        result.contains("x.locked refused: locked files are not patched"),
        "{result}"
    );
    assert!(
        result.contains("y.ro refused:") && result.contains("read only here"),
        "{result}"
    );
    for f in ["x.locked", "y.ro"] {
        assert_eq!(
            std::fs::read_to_string(dirs.root().join(f)).unwrap(),
            "keep\n"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocks_http_request_denied_by_the_policy_names_the_denial_and_is_recorded() {
    let llm = FixtureLlm::start().await;
    let origin = Origin::start().await;
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &json!({"allowed_domains": ["allowed.test"]}));
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = format!(
        r#"
import urllib.request
try:
    urllib.request.urlopen("{}/x", timeout=10)
    print("reached")
except Exception as e:
    print("denied:", e)
"#,
        origin.url()
    );
    let (_, result) = run_block(&gw, &llm, &sid, &code).await;
    assert!(
        result.starts_with("denied:") && result.contains("403"),
        "{result}"
    );
    assert!(origin.requests().is_empty());
    let decisions = gw.wait_egress(&sid, 1).await;
    assert_eq!(decisions[0]["decision"], "deny", "{decisions:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_block_that_loops_forever_is_killed_by_its_limit_and_the_next_block_works() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    std::fs::write(
        dirs.root().join("vis.yml"),
        "python_execution: {timeout_s: 2}\n",
    )
    .unwrap();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let t0 = Instant::now();
    let (evs, result) = run_block(&gw, &llm, &sid, "while True:\n    pass\n").await;
    assert!(
        result.contains("past its limit") && result.contains("after 2 s"),
        "{result}"
    );
    assert_eq!(output_event(&evs)["is_timeout"], true);
    assert!(t0.elapsed() < Duration::from_secs(10));
    let (_, result) = run_block(&gw, &llm, &sid, "print('alive')").await;
    assert_eq!(result.trim(), "alive");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_cancelled_mid_block_stops_the_block_and_the_next_block_works() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    llm.push(Script::tool_call(
        "python_execution",
        json!({"code": "import time\nprint('started', flush=True)\ntime.sleep(60)"}),
    ));
    let mut sse = gw.events(&sid, -1).await;
    let (s, v) = gw.submit(&sid, "sleep").await;
    assert!(s.is_success(), "{v}");
    sse.collect_until("block.started", Duration::from_secs(15))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tid = v["turn_id"]
        .as_str()
        .or(v["id"].as_str())
        .unwrap_or_default()
        .to_string();
    let (s, v) = gw
        .post_empty(&format!("/v1/sessions/{sid}/turns/{tid}/cancel"))
        .await;
    assert!(s.is_success(), "{s} {v}");
    let evs = sse
        .collect_until_any(TERMINALS, Duration::from_secs(15))
        .await;
    assert_eq!(evs.last().unwrap().event, "turn.cancelled");
    let (_, result) = run_block(&gw, &llm, &sid, "print('after cancel')").await;
    assert_eq!(result.trim(), "after cancel");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_syntax_error_names_its_line_and_a_megabyte_of_output_is_truncated() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, result) = run_block(&gw, &llm, &sid, "x = 1\nif x\n    print(x)\n").await;
    assert!(
        result.contains("line 2") && result.contains("SyntaxError"),
        "{result}"
    );
    assert!(!output_event(&evs)["error"].is_null());
    let (_, result) = run_block(&gw, &llm, &sid, "print('x' * (1024 * 1024))").await;
    assert!(result.len() < 70 * 1024, "{}", result.len());
    assert!(result.contains("truncated"), "{}", &result[..200]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_anthropic_dialect_runs_blocks_too() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = Gateway::start_in(
        dirs.clone(),
        Opts {
            provider: Provider::Anthropic(llm.anthropic_base_url()),
            ..Default::default()
        }
        .sandbox(),
    )
    .await;
    let sid = gw.create_session_at(&dirs.root()).await;
    write(&dirs.root(), "hello.txt", "hello from the workspace\n");
    let (_, result) = run_block(&gw, &llm, &sid, "print(cat('hello.txt'))").await;
    assert!(result.contains("│ hello from the workspace"), "{result}");
    let tools = &llm.requests()[0].body["tools"];
    assert_eq!(tools[0]["name"], "python_execution", "{tools}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jailed_block_reaches_only_the_proxy() {
    let have = |b: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join(b).exists())
    };
    if !(have("pasta") && have("bwrap")) {
        panic!("pasta and bwrap are needed: run scripts/install-deps");
    }
    let llm = FixtureLlm::start().await;
    let origin = Origin::start().await;
    let dirs = Dirs::new();
    std::fs::write(
        dirs.root().join("vis.yml"),
        "jail: {enabled: true, network: {allowed_domains: [\"127.0.0.1\"]}}\n",
    )
    .unwrap();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = format!(
        r#"
import socket, urllib.request
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3)
    print("direct: connected")
except OSError as e:
    print("direct: refused")
print("proxied:", urllib.request.urlopen("{url}/x", timeout=10).status)
"#,
        port = origin.port,
        url = origin.url()
    );
    let (_, result) = run_block(&gw, &llm, &sid, &code).await;
    assert!(result.contains("direct: refused"), "{result}");
    assert!(result.contains("proxied: 200"), "{result}");
    let (s, _) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::OK);
}

const RAISES_AND_GUARDS: &str = r#"
import blockether.vis.extension as vis

class Tools:
    def explode(self, why: str) -> str:
        """Always fails."""
        raise ValueError(f"cannot do it: {why}")

def no_forbidden(call):
    code = str((call.get("args") or [{}])[0].get("code", ""))
    if "forbidden" in code:
        return vis.block("that block is not allowed")
    return None

vis.register(vis.Extension(
    name="tools", alias="tools", description="Tools.",
    symbols=[vis.Symbol(Tools(), name="tools")],
    op_hooks=[vis.OpHook(["python_execution"], no_forbidden)],
))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_extension_exception_is_raised_in_the_block_and_an_op_hook_can_refuse_a_block() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    ext(&dirs, "tools.py", RAISES_AND_GUARDS);
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code =
        "try:\n    await tools.explode('now')\nexcept ValueError as e:\n    print('caught:', e)\n";
    let (_, result) = run_block(&gw, &llm, &sid, code).await;
    assert!(result.contains("caught: cannot do it: now"), "{result}");
    let (evs, result) = run_block(&gw, &llm, &sid, "print('forbidden')").await;
    assert!(result.contains("that block is not allowed"), "{result}");
    assert!(!output_event(&evs)["error"].is_null());
}
