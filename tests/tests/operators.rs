//! What an operator reads (issue items 17 and 18): logs that name sessions, turns, exec and
//! egress decisions, without colour codes in files; `/metrics` with `HELP` lines and the
//! egress series; `exec` output free of pasta's start-up lines and run where the user is.

mod common;

use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

const FILTER: &str = r#"
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

/// A gateway on a loopback-only policy with one network filter, logging egress at debug.
async fn start() -> Gateway {
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &loopback_policy());
    let ext = dirs.home().join("extensions");
    std::fs::create_dir_all(&ext).unwrap();
    std::fs::write(ext.join("paths.py"), FILTER).unwrap();
    Gateway::start_in(
        dirs,
        Opts::default().env("VIS_LOG", "info,vis::egress=debug"),
    )
    .await
}

/// One allowed, one filtered and one denied request from a sandbox child.
async fn some_egress(gw: &Gateway, sid: &str, origin: &Origin) {
    let script = format!(
        "curl -s -o /dev/null -w '%{{http_code}} ' {0}/open; \
         curl -s -o /dev/null -w '%{{http_code}} ' {0}/secret; \
         curl -s -o /dev/null -w '%{{http_code}}' http://denied.example/",
        origin.url()
    );
    let ran = gw.exec(sid, &["sh", "-c", &script]).await;
    assert_eq!(ran.stdout, "200 403 403", "{ran:?}");
    let deadline = Instant::now() + WAIT;
    while gw.egress(sid).await.len() < 3 {
        assert!(Instant::now() < deadline, "the decisions were not recorded");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{series} missing:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_in_a_file_name_sessions_turns_exec_and_egress_without_colour_codes() {
    let origin = Origin::start().await;
    let gw = start().await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let mut sse = gw.events(&sid, -1).await;
    let (_, t) = gw.submit(&sid, "/help").await;
    let tid = t["turn_id"].as_str().unwrap().to_string();
    sse.collect_until("turn.completed", WAIT).await;
    some_egress(&gw, &sid, &origin).await;
    let log = gw.stderr();
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escapes in a log file:\n{log}"
    );
    let line = |what: &str, with: &[&str]| {
        assert!(
            log.lines()
                .any(|l| l.contains(what) && with.iter().all(|w| l.contains(w))),
            "no `{what}` line with {with:?}:\n{log}"
        )
    };
    line("session created", &[&sid]);
    line("turn started", &[&sid, &tid]);
    line("turn ended", &[&sid, &tid, "completed"]);
    line("exec: child environment handed out", &[&sid]);
    line("egress allowed", &[&sid, "127.0.0.1"]);
    line(
        "egress denied",
        &[&sid, "denied.example", "blocked-by-allowlist"],
    );
    line("egress denied", &[&sid, "127.0.0.1", "blocked-by-filter"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_explain_every_series_and_count_egress_decisions_bytes_and_filter_time() {
    let origin = Origin::start().await;
    let gw = start().await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    some_egress(&gw, &sid, &origin).await;
    let m = gw.metrics_text().await;
    let lines: Vec<&str> = m.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if let Some(name) = l.strip_prefix("# TYPE ").and_then(|r| r.split(' ').next()) {
            assert!(
                i > 0 && lines[i - 1].starts_with(&format!("# HELP {name} ")),
                "{name} has no HELP line:\n{m}"
            );
        }
    }
    assert!(
        value(
            &m,
            r#"vis_egress_decisions_total{lane="http",decision="allow"}"#
        ) >= 1.0
    );
    assert!(
        value(
            &m,
            r#"vis_egress_decisions_total{lane="http",decision="deny"}"#
        ) >= 2.0
    );
    assert!(
        value(
            &m,
            r#"vis_egress_denials_total{kind="blocked-by-allowlist"}"#
        ) >= 1.0
    );
    assert!(value(&m, r#"vis_egress_denials_total{kind="blocked-by-filter"}"#) >= 1.0);
    assert!(value(&m, r#"vis_egress_bytes_total{direction="down"}"#) > 0.0);
    assert!(
        value(&m, "vis_egress_filter_duration_seconds_count") >= 2.0,
        "{m}"
    );
    assert!(value(&m, "vis_egress_filter_duration_seconds_sum") > 0.0);
    assert!(value(&m, r#"vis_egress_filter_calls_total{outcome="block"}"#) >= 1.0);
    assert_eq!(value(&m, "vis_events_lost_total"), 0.0);
}

fn jailed_root(gw: &Gateway) -> std::path::PathBuf {
    let root = gw.dirs.base.path().join("jailed");
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::write(
        root.join("vis.yml"),
        "jail: {enabled: true, network: {allowed_domains: [\"127.0.0.1\"]}}\n",
    )
    .unwrap();
    root
}

/// `vis-gateway exec --session SID -- argv` run from `cwd`.
async fn exec_from(gw: &Gateway, cwd: &Path, sid: &str, argv: &[&str]) -> Ran {
    let mut cmd = tokio::process::Command::from(command(&gw.dirs, &Opts::default()));
    cmd.args(["exec", "--session", sid, "--"])
        .args(argv)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("exec finished")
        .expect("exec ran");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_where_the_user_is_inside_the_workspace_and_in_its_root_from_outside() {
    let gw = Gateway::start(Opts::default()).await;
    let root = std::fs::canonicalize(gw.dirs.root()).unwrap();
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    let sid = gw.create_session_at(&root).await;
    let inside = exec_from(&gw, &root.join("sub/deeper"), &sid, &["pwd"]).await;
    assert_eq!(
        inside.stdout.trim(),
        root.join("sub/deeper").to_str().unwrap(),
        "{inside:?}"
    );
    let outside = exec_from(&gw, gw.dirs.home().as_path(), &sid, &["pwd"]).await;
    assert_eq!(outside.stdout.trim(), root.to_str().unwrap(), "{outside:?}");
    // The same inside the jail, where the root is bound at its own path.
    let jailed = std::fs::canonicalize(jailed_root(&gw)).unwrap();
    let jsid = gw.create_session_at(&jailed).await;
    let inside = exec_from(&gw, &jailed.join("sub"), &jsid, &["pwd"]).await;
    assert_eq!(
        inside.stdout.trim(),
        jailed.join("sub").to_str().unwrap(),
        "{inside:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_help_says_where_the_command_runs() {
    let dirs = Dirs::new();
    let (code, out, _) = run_cli(&dirs, &["exec", "--help"]).await;
    assert_eq!(code, Some(0));
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("runs in the current directory when that is inside the session's workspace root, otherwise in the root"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jailed_exec_passes_the_commands_stderr_without_pastas_start_up_lines() {
    let gw = Gateway::start(Opts::default()).await;
    let root = jailed_root(&gw);
    let sid = gw.create_session_at(&root).await;
    let ran = exec_from(
        &gw,
        &root,
        &sid,
        &["sh", "-c", "echo out; echo 'err one' >&2; exit 3"],
    )
    .await;
    assert_eq!(ran.code, Some(3), "{ran:?}");
    assert_eq!(ran.stdout, "out\n");
    assert_eq!(ran.stderr, "err one\n", "{ran:?}");
}

const SHELL_EXT: &str = r#"
import blockether.vis.extension as vis

def jerr(ctx):
    r = vis.jailed_shell_session({"command": ["sh", "-c", "echo 'only this' >&2"]})
    return vis.ok("out=" + repr(r["out"]))

vis.register(vis.Extension(name="jerr", description="jailed stderr",
    slash_commands=[vis.SlashCommand("jerr", jerr)]))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jailed_extension_shell_captures_the_childs_stderr_without_pastas_lines() {
    let dirs = Dirs::new();
    std::fs::write(
        dirs.root().join("vis.yml"),
        "jail: {enabled: true, network: {allowed_domains: [\"127.0.0.1\"]}}\n",
    )
    .unwrap();
    let ext = dirs.home().join("extensions");
    std::fs::create_dir_all(&ext).unwrap();
    std::fs::write(ext.join("jerr.py"), SHELL_EXT).unwrap();
    let gw = Gateway::start_in(dirs, Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/jerr").await;
    let evs = sse
        .collect_until_any(TERMINALS, Duration::from_secs(30))
        .await;
    let done = &evs.last().unwrap().data;
    assert_eq!(done["content"][0]["markdown"], "out='only this'", "{done}");
}
