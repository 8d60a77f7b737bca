//! What an extension author hit writing from the reference page alone: filters isolated per
//! extension, the project's own environment names, per-extension `os.environ`, named
//! non-finite results, single error lines, `vis.log` in the home, idle reaping, the older API,
//! dialects, slash data and channel, `ctx` in the prompt.

use super::*;
use vis_proxy::{FilterVerdict, Phase};

fn filter_ext(name: &str) -> String {
    format!(
        r#"
import time
import blockether.vis.extension as vis
def decide(ctx):
    if ctx["host"] == "hang.test":
        time.sleep(60)
    if ctx["host"] == "block.test":
        return vis.block("{name} blocks")
    return None
vis.register(vis.Extension(name="{name}", description="d",
    network_filters=[vis.NetworkFilter(decide)]))
"#
    )
}

fn project_dir(f: &Fixture, name: &str, ext: &str) -> PathBuf {
    let root = f.root.join(name);
    std::fs::create_dir_all(root.join(".vis/extensions")).expect("mkdir");
    std::fs::write(
        root.join(".vis/extensions").join(format!("{ext}.py")),
        filter_ext(ext),
    )
    .expect("write");
    std::fs::canonicalize(root).expect("canon")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_waiting_behind_a_hung_filter_runs_again_on_the_fresh_worker_and_is_allowed() {
    let (f, filter) = lane_fixture(Duration::from_millis(1500)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    let pid = f.host.workers().filter_pid("lane").expect("pid");
    let hung = {
        let filter = filter.clone();
        tokio::spawn(async move { filter.check(&pctx(Phase::Http, "hang.test")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Only waiting behind the hung call (calls into one extension are serialized) …
    let waiting: Vec<_> = ["ok.test", "block.test", "odd3.test"]
        .into_iter()
        .map(|host| {
            let filter = filter.clone();
            tokio::spawn(async move { filter.check(&pctx(Phase::Http, host)).await })
        })
        .collect();
    let err = hung
        .await
        .expect("join")
        .expect_err("the hung call is denied");
    assert!(err.message.contains("timed out"), "{}", err.message);
    // … so each is answered on its own merits by the fresh worker, never denied in the
    // hung call's name.
    let verdicts: Vec<_> = futures::future::join_all(waiting)
        .await
        .into_iter()
        .map(|r| r.expect("join"))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            Ok(FilterVerdict::Allow),
            Ok(FilterVerdict::Block(
                "no POST /p?q=1 (http, port 8080)".into()
            )),
            Ok(FilterVerdict::Block("odd3.test".into())),
        ]
    );
    assert_ne!(f.host.workers().filter_pid("lane"), Some(pid));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_filter_of_one_project_does_not_delay_another_projects_filter() {
    use vis_proxy::FilterSet;
    let f = fixture_with(|c| c.filter_timeout = Duration::from_secs(4));
    let a = project_dir(&f, "proj-a", "stall_a");
    let b = project_dir(&f, "proj-b", "calm_b");
    f.host.catalog().ensure_project(Some(&a)).await;
    f.host.catalog().ensure_project(Some(&b)).await;
    let set = crate::engine::ext::HostFilters(f.host.clone());
    let fa = set.filters(&principal_of(Some(&a)));
    let fb = set.filters(&principal_of(Some(&b)));
    assert_eq!(fa.iter().map(|x| x.name()).collect::<Vec<_>>(), ["stall_a"]);
    assert_eq!(fb.iter().map(|x| x.name()).collect::<Vec<_>>(), ["calm_b"]);
    let ok = pctx(Phase::Http, "ok.test");
    assert_eq!(fb[0].check(&ok).await, Ok(FilterVerdict::Allow), "warm");
    let stalled = {
        let fa = fa[0].clone();
        tokio::spawn(async move { fa.check(&pctx(Phase::Http, "hang.test")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // While A's filter hangs, B's requests are decided at once, by B.
    for _ in 0..20 {
        let started = std::time::Instant::now();
        assert_eq!(fb[0].check(&ok).await, Ok(FilterVerdict::Allow));
        assert!(
            started.elapsed() < Duration::from_millis(1000),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        fb[0].check(&pctx(Phase::Http, "block.test")).await,
        Ok(FilterVerdict::Block("calm_b blocks".into()))
    );
    assert!(!stalled.is_finished(), "A is still stalled");
    let err = stalled
        .await
        .expect("join")
        .expect_err("A's own call fails");
    assert!(
        err.message.contains("timed out"),
        "denied by its own timeout: {}",
        err.message
    );
    assert_eq!(f.host.workers().filter_count(), 2);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_changes_a_filter_gets_a_new_worker_and_a_no_op_reload_keeps_it() {
    let (f, filter) = lane_fixture(Duration::from_secs(5)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    let pid = f.host.workers().filter_pid("lane").expect("lane pid");
    f.host.catalog().reload(None).await;
    let filters = f.host.filters().global();
    assert_eq!(
        filters[0].check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_eq!(
        f.host.workers().filter_pid("lane"),
        Some(pid),
        "nothing changed"
    );
    f.global("lane.py", &LANE_FILTERS.replace("teapot", "teapot v2"));
    f.host.catalog().reload(None).await;
    let filters = f.host.filters().global();
    let mut teapot = pctx(Phase::HttpResponse, "ok.test");
    teapot.status = Some(418);
    assert_eq!(
        filters[0].check(&teapot).await,
        Ok(FilterVerdict::Block("teapot v2".into()))
    );
    assert_ne!(f.host.workers().filter_pid("lane"), Some(pid));
    assert_eq!(
        f.host.workers().filter_count(),
        1,
        "the old worker is let go"
    );
    f.host.shutdown().await;
}

const ENV_A: &str = r#"
import os
import blockether.vis.extension as vis
NAMES = ("A_SECRET", "B_SECRET", "FROM_DOTENV", "FROM_LOCAL", "FROM_BLOCK", "GATEWAY_ONLY")
def env_a() -> dict:
    """The environment as extension A sees it."""
    return {k: os.environ.get(k) for k in NAMES}
vis.register(vis.Extension(name="env_a", alias="a", description="d", env=["A_SECRET"],
    symbols=[vis.Symbol(env_a)]))
"#;

const ENV_B: &str = r#"
import os, subprocess, sys
import blockether.vis.extension as vis
NAMES = ("A_SECRET", "B_SECRET", "FROM_DOTENV", "FROM_LOCAL", "FROM_BLOCK", "GATEWAY_ONLY")
def env_b() -> dict:
    """The environment as extension B (and its child process) sees it."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('B_SECRET'))"],
                           capture_output=True, text=True).stdout.strip()
    return dict({k: os.environ.get(k) for k in NAMES}, child=child)
vis.register(vis.Extension(name="env_b", alias="b", description="d", env=["B_SECRET"],
    symbols=[vis.Symbol(env_b)]))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn project_names_need_no_declaration_and_declared_names_stay_with_their_extension() {
    std::env::set_var("A_SECRET", "gw-a");
    std::env::set_var("B_SECRET", "gw-b");
    std::env::set_var("GATEWAY_ONLY", "gw-only");
    let f = fixture_with(|c| {
        c.environment = Arc::new(|p| {
            let mut m = BTreeMap::new();
            if p.is_some() {
                m.insert("FROM_BLOCK".to_string(), "block".to_string());
            }
            m
        })
    });
    std::fs::write(f.project.join(".env"), "FROM_DOTENV=dot\n").expect("w");
    std::fs::write(f.project.join(".env.local"), "FROM_LOCAL=loc\n").expect("w");
    f.project_ext("env_a.py", ENV_A);
    f.project_ext("env_b.py", ENV_B);
    let s = f.session("s");
    let a = f
        .host
        .tools()
        .call(&s, "env_a", json!({}))
        .await
        .expect("a");
    let b = f
        .host
        .tools()
        .call(&s, "env_b", json!({}))
        .await
        .expect("b");
    // Both run in the same session worker.
    assert_eq!(
        a.value,
        json!({"A_SECRET": "gw-a", "B_SECRET": null, "FROM_DOTENV": "dot", "FROM_LOCAL": "loc",
               "FROM_BLOCK": "block", "GATEWAY_ONLY": null})
    );
    assert_eq!(
        b.value,
        json!({"A_SECRET": null, "B_SECRET": "gw-b", "FROM_DOTENV": "dot", "FROM_LOCAL": "loc",
               "FROM_BLOCK": "block", "GATEWAY_ONLY": null, "child": "gw-b"})
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nan_result_is_named_and_an_error_line_is_shown_once() {
    let f = fixture();
    f.global(
        "nums.py",
        r#"
import blockether.vis.extension as vis
def ratio() -> dict:
    """A broken ratio."""
    return {"stats": {"ratio": float("nan")}}
def boom(x: int) -> int:
    """Raises."""
    raise ValueError("boom here")
vis.register(vis.Extension(name="nums", alias="n", description="d",
    symbols=[vis.Symbol(ratio), vis.Symbol(boom)]))
"#,
    );
    let s = f.session("s");
    let e = f
        .host
        .tools()
        .call(&s, "ratio", json!({}))
        .await
        .expect_err("nan refused");
    assert!(
        e.message.starts_with(
            "ValueError: the result['stats']['ratio'] is nan, which JSON cannot carry"
        ),
        "{}",
        e.message
    );
    let e = f
        .host
        .tools()
        .call(&s, "boom", json!({"x": 1}))
        .await
        .expect_err("raises");
    let text = e.text();
    assert_eq!(
        text.matches("boom here").count(),
        2,
        "message + source line: {text}"
    );
    assert_eq!(text.matches("ValueError: boom here").count(), 1, "{text}");
    assert!(text.contains("nums.py"), "{text}");
    // A binding error: the message alone, once.
    let e = f
        .host
        .tools()
        .call(&s, "boom", json!({}))
        .await
        .expect_err("missing argument");
    assert!(e.message.starts_with("TypeError:"), "{}", e.message);
    assert_eq!(e.text(), e.message, "nothing repeated: {}", e.text());
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vis_log_lines_land_in_the_homes_log_folder() {
    let f = fixture();
    f.global(
        "logger.py",
        r#"
import blockether.vis.extension as vis
def note() -> str:
    """Log a line."""
    vis.log("warn", "disk almost full")
    print("printed by the tool")
    return "ok"
vis.register(vis.Extension(name="logger", alias="l", description="d", symbols=[vis.Symbol(note)]))
"#,
    );
    let s = f.session("s9");
    f.host
        .tools()
        .call(&s, "note", json!({}))
        .await
        .expect("note");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = walk_logs(&f.home.join("logs"));
        if text.contains("printed by the tool") || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        text.contains("WARN  [logger] session=s9 disk almost full"),
        "{text}"
    );
    assert!(
        text.contains("PRINT [session:s9] printed by the tool"),
        "{text}"
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_worker_serving_requests_stays_and_an_idle_one_stops_until_the_next_request() {
    let f = fixture_with(|c| c.session_idle = Duration::from_millis(400));
    f.global("idler.py", &filter_ext("idler"));
    f.host.catalog().reload(None).await;
    let filters = f.host.filters().global();
    assert_eq!(filters.len(), 1);
    let ok = pctx(Phase::Http, "ok.test");
    assert_eq!(filters[0].check(&ok).await, Ok(FilterVerdict::Allow));
    let pid = f.host.workers().filter_pid("idler").expect("running");
    // Busy: a request every 100 ms for longer than the idle time keeps the same worker.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(filters[0].check(&ok).await, Ok(FilterVerdict::Allow));
        assert_eq!(
            f.host.workers().filter_pid("idler"),
            Some(pid),
            "kept while busy"
        );
    }
    // Idle: stopped, and the process is gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while f.host.workers().filter_pid("idler").is_some() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(f.host.workers().filter_pid("idler"), None, "reaped");
    // SAFETY: signal 0 only checks whether the process exists.
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        unsafe { libc::kill(pid as i32, 0) != 0 }
    });
    assert!(gone, "the idle filter worker's process ended");
    // The next request starts a fresh worker and is decided as before.
    assert_eq!(
        filters[0].check(&pctx(Phase::Http, "block.test")).await,
        Ok(FilterVerdict::Block("idler blocks".into()))
    );
    let fresh = f.host.workers().filter_pid("idler").expect("fresh worker");
    assert_ne!(fresh, pid);
    f.host.shutdown().await;
}

fn walk_logs(dir: &Path) -> String {
    let mut out = String::new();
    for day in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if let Ok(t) = std::fs::read_to_string(day.path().join("extensions.log")) {
            out.push_str(&t);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_session_worker_stops_and_the_next_call_starts_a_fresh_one() {
    let f = fixture_with(|c| c.session_idle = Duration::from_millis(400));
    f.global("todo.py", TODO_EXTENSION);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "add", json!({"text": "a"}))
        .await
        .expect("add");
    let pid = f.host.workers().session_pid("s").expect("running");
    assert_eq!(f.host.workers().running_sessions(), 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while f.host.workers().running_sessions() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(f.host.workers().running_sessions(), 0, "reaped");
    // SAFETY: signal 0 only checks whether the process exists.
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        let alive = unsafe { libc::kill(pid as i32, 0) };
        alive != 0
    });
    assert!(gone, "the process ended");
    let out = f
        .host
        .tools()
        .call(&s, "add", json!({"text": "b"}))
        .await
        .expect("the next call starts a fresh worker");
    assert_eq!(out.value, json!({"count": 2}), "vis.state survives");
    assert_ne!(f.host.workers().session_pid("s"), Some(pid));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_session_worker_is_not_reaped() {
    let f = fixture_with(|c| {
        c.session_idle = Duration::from_millis(200);
        c.call_timeout = Duration::from_secs(5);
    });
    f.global(
        "slowtool.py",
        r#"
import time
import blockether.vis.extension as vis
def slow() -> str:
    """Takes a while."""
    time.sleep(1.2)
    return "done"
vis.register(vis.Extension(name="slowtool", alias="s", description="d", symbols=[vis.Symbol(slow)]))
"#,
    );
    let s = f.session("s");
    let out = f
        .host
        .tools()
        .call(&s, "slow", json!({}))
        .await
        .expect("slow");
    assert_eq!(out.text, "done", "not reaped in the middle of a call");
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_background_thread_calls_the_host_is_not_reaped() {
    let f = fixture_with(|c| c.session_idle = Duration::from_millis(400));
    f.global(
        "ticker.py",
        r#"
import threading, time
import blockether.vis.extension as vis
def start() -> str:
    """Start a background job that reports for 1.6 s."""
    def job():
        for i in range(16):
            vis.log("info", f"tick {i}")
            time.sleep(0.1)
    threading.Thread(target=job, daemon=True).start()
    return "started"
vis.register(vis.Extension(name="ticker", alias="t", description="d", symbols=[vis.Symbol(start)]))
"#,
    );
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "start", json!({}))
        .await
        .expect("start");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        f.host.workers().running_sessions(),
        1,
        "the job still calls the host"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while f.host.workers().running_sessions() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        f.host.workers().running_sessions(),
        0,
        "reaped once the job ended"
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_for_the_older_api_fails_with_the_legacy_calls_and_their_new_form() {
    let f = fixture();
    f.global(
        "old.py",
        r#"
import vis

def hello(name):
    """Say hello."""
    return "hi " + name

vis.extension(name="old", description="d", alias="o",
              symbols=[vis.symbol(hello)], slash_commands=[vis.slash("hi", lambda ctx: "hi")])
"#,
    );
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.failures.len(), 1);
    let e = &report.failures[0].error;
    assert_eq!(e.kind, "LegacyExtensionAPI");
    assert!(
        e.message
            .contains("write 'import blockether.vis.extension as vis' instead"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("line 8: vis.extension(...) -> vis.register(vis.Extension(...))"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("line 9: vis.slash(...) -> vis.SlashCommand("),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("Porting from the older API"),
        "{}",
        e.message
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_dialect_the_gateway_does_not_drive_is_refused_at_load() {
    let f = fixture();
    f.global(
        "gem.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="gem", description="d", providers=[vis.Provider("gem", "Gem",
    preset=vis.ProviderPreset(base_url="https://g.test", api_style="gemini"))]))
"#,
    );
    f.global(
        "fine.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="fine", description="d", providers=[vis.Provider("fine", "Fine",
    preset=vis.ProviderPreset(base_url="https://f.test", api_style="openai_compatible"))]))
"#,
    );
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.loaded, vec!["fine".to_string()]);
    assert_eq!(report.failures.len(), 1);
    let e = &report.failures[0].error;
    assert_eq!(
        e.message,
        "ValueError: vis.Provider 'gem' preset api_style 'gemini' names the gemini dialect, which \
         this gateway does not drive; accepted: anthropic, anthropic-messages, claude, messages, \
         openai, openai-chat, openai-compatible, openai-compatible-chat, chat, chat-completions"
    );
    let ids: Vec<String> = f
        .host
        .providers()
        .list(None)
        .await
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["fine"]);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slash_commands_data_and_channel_come_through() {
    let f = fixture();
    f.global(
        "report.py",
        r#"
import blockether.vis.extension as vis
def report(ctx):
    return vis.ok("Report", body="**3** items", data={"count": 3, "channel": ctx["channel"]})
def broken(ctx):
    return vis.ok("Broken", data={"ratio": float("inf")})
vis.register(vis.Extension(name="report", description="d", slash_commands=[
    vis.SlashCommand("report", report), vis.SlashCommand("broken", broken)]))
"#,
    );
    let s = f.session("s");
    let out = f.host.sessions().slash(&s, "report", "", Some("web")).await;
    assert!(out.ok);
    assert_eq!(out.data, Some(json!({"count": 3, "channel": "web"})));
    assert!(
        out.markdown
            .starts_with("Report\n\n**3** items\n\n```json\n"),
        "{}",
        out.markdown
    );
    assert!(out.markdown.contains("\"count\": 3"), "{}", out.markdown);
    let out = f.host.sessions().slash(&s, "broken", "", Some("web")).await;
    assert!(!out.ok);
    assert!(
        out.markdown
            .starts_with("ValueError: the slash command's data['ratio'] is inf"),
        "{}",
        out.markdown
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ctx_dicts_of_a_turn_become_a_session_env_prompt_section() {
    let f = fixture();
    f.global(
        "ctxy.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="ctxy", description="d", prompt="Use ctxy.",
    ctx=lambda env: {"session_env": {"ctxy": {"open": 3, "channel": env["channel"]}}}))
"#,
    );
    let s = f.session("s");
    let prompts = f.host.sessions().turn(&s, Some("web")).await.into_prompts();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert_eq!(prompts[0], "Use ctxy.");
    assert!(prompts[1].contains("session_env"), "{}", prompts[1]);
    assert!(prompts[1].contains("\"open\": 3"), "{}", prompts[1]);
    assert!(
        prompts[1].contains("\"channel\": \"web\""),
        "{}",
        prompts[1]
    );
    f.host.shutdown().await;
}
