//! An extension written from the reference page, against the real gateway: its `ctx` reaches
//! the model in both tool modes, a slash command's `data` and channel come through, a
//! project's `.env` names reach extensions without a declaration, a stalled filter of one
//! project leaves another project's traffic alone.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

fn project_ext(root: &Path, name: &str, src: &str) {
    let d = root.join(".vis/extensions");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), src).unwrap();
}

const CTX_EXT: &str = r#"
import blockether.vis.extension as vis

def _ctx(env):
    return {"session_env": {"todo": {"open": 7, "channel": env["channel"]}}}

vis.register(vis.Extension(name="todo", description="Todo list.", ctx=_ctx))
"#;

/// The system prompt text of a recorded provider request (OpenAI or Anthropic shape).
fn request_text(body: &Value) -> String {
    body.to_string()
}

async fn ctx_reaches_the_model(opts: Opts, llm: &FixtureLlm) {
    let dirs = Dirs::new();
    project_ext(&dirs.root(), "todo.py", CTX_EXT);
    let gw = Gateway::start_in(dirs.clone(), opts).await;
    llm.push(Script::text(&["Noted."]));
    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "what is open?").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 1);
    let text = request_text(&reqs[0].body);
    assert!(text.contains("session_env"), "{text}");
    assert!(
        text.contains(r#"\"open\": 7"#) && text.contains(r#"\"channel\": \"web\""#),
        "the ctx dict reaches the provider request: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extensions_ctx_reaches_the_provider_request_in_the_sandbox_mode() {
    let llm = FixtureLlm::start().await;
    ctx_reaches_the_model(Opts::openai(&llm).sandbox(), &llm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extensions_ctx_reaches_the_provider_request_in_the_function_tool_mode() {
    let llm = FixtureLlm::start().await;
    ctx_reaches_the_model(Opts::openai(&llm), &llm).await;
}

const SLASH_EXT: &str = r#"
import os
import blockether.vis.extension as vis

def stats(ctx):
    return vis.ok("Stats", body="all **fine**",
                  data={"channel": ctx["channel"], "token": os.environ.get("PROJECT_TOKEN")})

vis.register(vis.Extension(name="stats", description="d",
    slash_commands=[vis.SlashCommand("stats", stats)]))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_commands_data_reaches_the_turn_and_the_transcript_with_the_web_channel() {
    let dirs = Dirs::new();
    project_ext(&dirs.root(), "stats.py", SLASH_EXT);
    // A name the project defines in its .env reaches the extension without env=[…].
    std::fs::write(dirs.root().join(".env"), "PROJECT_TOKEN=from-dotenv\n").unwrap();
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "/stats").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let content = last.data.to_string();
    assert!(content.contains("all **fine**"), "{content}");
    assert!(
        content.contains(r#"\"channel\": \"web\""#),
        "the data (and the web channel) are in the turn content: {content}"
    );
    assert!(content.contains("from-dotenv"), "{content}");
    let (s, rows) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(s, StatusCode::OK);
    let form = &rows["turns"][0]["iterations"][0]["forms"][0];
    assert_eq!(form["tag"], "user-slash", "{rows}");
    assert_eq!(
        form["result"]["slash/data"],
        json!({"channel": "web", "token": "from-dotenv"}),
        "{form}"
    );
}

fn filter_ext(name: &str, stall: bool) -> String {
    let body = if stall {
        "    if ctx[\"phase\"] == \"http\":\n        time.sleep(20)\n"
    } else {
        ""
    };
    format!(
        "import time\nimport blockether.vis.extension as vis\n\ndef decide(ctx):\n{body}    return None\n\n\
         vis.register(vis.Extension(name=\"{name}\", description=\"d\", network_filters=[vis.NetworkFilter(decide)]))\n"
    )
}

/// A plain-HTTP GET through the session's proxy: (status, deny kind, seconds).
async fn proxied_get(proxy: &str, url: &str) -> (u16, String, f64) {
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::http(proxy).unwrap())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let started = Instant::now();
    match client.get(url).send().await {
        Ok(r) => {
            let kind = r
                .headers()
                .get("x-vis-egress-error")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            (
                status,
                format!("{kind} {body}"),
                started.elapsed().as_secs_f64(),
            )
        }
        Err(e) => (0, e.to_string(), started.elapsed().as_secs_f64()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_filter_in_one_project_leaves_another_projects_requests_alone() {
    let dirs = Dirs::new();
    let a = dirs.root().join("proj-a");
    let b = dirs.root().join("proj-b");
    for (root, name, stall) in [(&a, "stall_a", true), (&b, "calm_b", false)] {
        std::fs::create_dir_all(root).unwrap();
        std::fs::write(
            root.join("vis.yml"),
            "jail:\n  network:\n    allowed_domains: [\"127.0.0.1\"]\n",
        )
        .unwrap();
        project_ext(root, &format!("{name}.py"), &filter_ext(name, stall));
    }
    let origin = Origin::start().await;
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let sid_a = gw.create_session_at(&a).await;
    let sid_b = gw.create_session_at(&b).await;
    let proxy_a = gw.sandbox_env(&sid_a).await["env"]["HTTP_PROXY"]
        .as_str()
        .unwrap()
        .to_string();
    let proxy_b = gw.sandbox_env(&sid_b).await["env"]["HTTP_PROXY"]
        .as_str()
        .unwrap()
        .to_string();
    let url = format!("{}/ok", origin.url());
    let (s, _, _) = proxied_get(&proxy_b, &url).await;
    assert_eq!(s, 200, "B works before A stalls");
    // A's filter hangs; its request is denied at the filter deadline, in A's name.
    let stalled = {
        let (proxy_a, url) = (proxy_a.clone(), url.clone());
        tokio::spawn(async move { proxied_get(&proxy_a, &url).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut slowest = 0f64;
    for _ in 0..20 {
        let (s, why, secs) = proxied_get(&proxy_b, &url).await;
        assert_eq!(s, 200, "B is never denied while A stalls: {why}");
        slowest = slowest.max(secs);
    }
    assert!(slowest < 1.0, "B waited {slowest:.2} s behind A");
    assert!(!stalled.is_finished(), "A is still stalled");
    let (s, why, _) = stalled.await.unwrap();
    assert_eq!(s, 403, "{why}");
    assert!(
        why.starts_with("filter-error network filter error in 'stall_a'"),
        "{why}"
    );
}
