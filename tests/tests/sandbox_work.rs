//! The sandbox for real work, end to end against the real binary with the scripted fixture
//! LLM: long commands, background jobs, names kept between blocks (and restored after a
//! restart), the search functions, and the interpreters the runtime runs on.

mod common;

use common::*;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn start(llm: &FixtureLlm, dirs: Arc<Dirs>) -> Gateway {
    Gateway::start_in(dirs, Opts::openai(llm).sandbox()).await
}

fn vis_yml(root: &Path, text: &str) {
    std::fs::write(root.join("vis.yml"), text).unwrap();
}

/// Whether a process runs (a zombie does not count).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

async fn gone(pid: u32) -> bool {
    for _ in 0..100 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn pid_in(root: &Path, file: &str) -> u32 {
    std::fs::read_to_string(root.join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_calls_own_timeout_outlasts_the_block_limit_and_a_shorter_one_kills_its_tree() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    vis_yml(&dirs.root(), "python_execution: {timeout_s: 5}\n");
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let (_, result) = gw
        .run_block(
            &llm,
            &sid,
            r#"print(shell("sleep 8; echo done", timeout=20))"#,
        )
        .await;
    assert_eq!(result.trim(), "done", "{result}");

    let t0 = Instant::now();
    let code = r#"print(shell("echo $$ > sh.pid; sleep 30 & echo $! > bg.pid; sleep 8; echo done", timeout=3))"#;
    let (_, result) = gw.run_block(&llm, &sid, code).await;
    let took = t0.elapsed();
    assert!(result.contains("timed out"), "{result}");
    assert!(!result.contains("done"), "{result}");
    assert!(took < Duration::from_secs(7), "{took:?}");
    for f in ["sh.pid", "bg.pid"] {
        let pid = pid_in(&dirs.root(), f);
        assert!(gone(pid).await, "{f} ({pid}) is still running");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_block_past_its_limit_kills_the_shell_command_it_was_waiting_for() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    vis_yml(&dirs.root(), "python_execution: {timeout_s: 2}\n");
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"shell("python3 -c 'import os,time; open(\"srv.pid\",\"w\").write(str(os.getpid())); time.sleep(60)'")"#;
    let (_, result) = gw.run_block(&llm, &sid, code).await;
    assert!(result.contains("past its limit"), "{result}");
    let pid = pid_in(&dirs.root(), "srv.pid");
    assert!(gone(pid).await, "the command outlived its block");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trailing_ampersand_returns_at_once_and_its_process_ends_with_the_block() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
import time
t0 = time.monotonic()
print(shell("sleep 60 & echo $! > amp.pid"))
print("took", round(time.monotonic() - t0, 2))
"#;
    let (_, result) = gw.run_block(&llm, &sid, code).await;
    let took: f64 = result
        .lines()
        .find_map(|l| l.strip_prefix("took "))
        .unwrap_or_else(|| panic!("{result}"))
        .parse()
        .unwrap();
    assert!(took < 2.0, "{result}");
    assert!(result.contains("still run"), "{result}");
    let pid = pid_in(&dirs.root(), "amp.pid");
    assert!(gone(pid).await, "the background sleep outlived its block");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_background_job_lives_across_turns_and_ends_with_stop_and_with_its_session() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
j = shell("for i in 1 2 3; do echo tick $i; done; echo oops >&2; sleep 60", background=True)
print(j.id, j.pid)
"#;
    let (evs, result) = gw.run_block(&llm, &sid, code).await;
    let pid: u32 = result.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(alive(pid), "{result}");
    let bg = evs
        .iter()
        .find(|e| e.event == "activity" && e.data["activity"] == "shell-bg")
        .unwrap_or_else(|| panic!("no shell-bg activity: {:?}", ev_types(&evs)));
    assert!(
        bg.data["cmd"].as_str().unwrap().starts_with("for i in"),
        "{}",
        bg.data
    );

    // The next turn: listed, its logs readable, stopped by its handle.
    let code = r#"
import time
js = jobs()
print(js)
time.sleep(0.3)
print(js[0].logs(tail=3))
print("alive", js[0].alive)
print(js[0].stop(), js[0].alive)
"#;
    let (_, result) = gw.run_block(&llm, &sid, code).await;
    assert!(result.contains("running"), "{result}");
    assert!(result.contains("tick 2\ntick 3\noops"), "{result}");
    assert!(result.contains("alive True"), "{result}");
    assert!(result.contains("stopped False"), "{result}");
    assert!(gone(pid).await, "stop() left the job running");

    // A job left running ends with its session.
    let (_, result) = gw
        .run_block(
            &llm,
            &sid,
            r#"print(shell("sleep 60", background=True).pid)"#,
        )
        .await;
    let left: u32 = result.trim().parse().unwrap();
    assert!(alive(left));
    let (s, _) = gw.delete(&format!("/v1/sessions/{sid}")).await;
    assert!(s.is_success(), "{s}");
    assert!(
        gone(left).await,
        "deleting the session left its job running"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn background_jobs_count_against_the_sessions_limit() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    vis_yml(&dirs.root(), "python_execution: {max_background_jobs: 2}\n");
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
a = shell("sleep 30", background=True)
b = shell("sleep 30", background=True)
try:
    shell("sleep 30", background=True)
except RuntimeError as e:
    print("refused:", e)
a.stop()
print(shell("true", background=True).id)
"#;
    let (_, result) = gw.run_block(&llm, &sid, code).await;
    assert!(
        result.contains("refused: 2 background jobs are running")
            && result.contains("max_background_jobs"),
        "{result}"
    );
    assert!(result.trim_end().ends_with('3'), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_five_mebibyte_output_keeps_its_last_line_and_the_whole_of_it_is_in_a_file() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    let code = r#"
out = shell("seq 1 800000; echo THE-LAST-LINE")
print(out)
path = out.split("all of it is in ")[1].split("]")[0]
data = open(path).read()
print("file bytes", len(data), data.endswith("THE-LAST-LINE\n"))
print(grep("THE-LAST", paths=[path]).hits)
"#;
    let (_, result) = gw.run_block(&llm, &sid, code).await;
    assert!(result.len() < 64 * 1024, "{}", result.len());
    assert!(result.contains("799999\n800000\nTHE-LAST-LINE"), "{result}");
    assert!(result.contains("file bytes 5488909 True"), "{result}");
    assert!(result.trim_end().ends_with('1'), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn names_persist_between_blocks_and_model_functions_survive_a_restart() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    vis_yml(&dirs.root(), "python_execution: {timeout_s: 3}\n");
    let mut gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&dirs.root()).await;
    gw.run_block(&llm, &sid, "x = 41\ndef twice(n):\n    return 2 * n\n")
        .await;
    let (_, result) = gw.run_block(&llm, &sid, "print(x + 1)").await;
    assert_eq!(result.trim(), "42");
    let (_, result) = gw.run_block(&llm, &sid, "print(defs())").await;
    assert!(
        result.contains("def twice(n)") && result.contains("x: int"),
        "{result}"
    );

    // A block past its limit restarts the sandbox.
    let (_, result) = gw.run_block(&llm, &sid, "while True: pass").await;
    assert!(result.contains("past its limit"), "{result}");
    let code = "print(twice(21))\ntry:\n    x\nexcept NameError:\n    print('x is gone')\n";
    let (_, result) = gw.run_block(&llm, &sid, code).await;
    let mut lines = result.lines();
    let first = lines.next().unwrap();
    assert!(
        first.starts_with("[sandbox restarted") && first.contains("twice"),
        "{result}"
    );
    assert_eq!(lines.collect::<Vec<_>>(), ["42", "x is gone"]);

    // A gateway restart keeps them too.
    gw.stop().await;
    let gw = start(&llm, dirs.clone()).await;
    let (_, result) = gw.run_block(&llm, &sid, "print(twice(4))").await;
    assert!(result.contains("gateway restarted"), "{result}");
    assert!(result.trim_end().ends_with('8'), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grep_takes_several_terms_context_and_file_names_and_apropos_and_doc_need_no_argument() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    let root = dirs.root();
    std::fs::write(
        root.join("notes.txt"),
        "zero\nalpha one\nBeta two\nbeta three\nfour\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/alpha_tool.py"), "print(1)\n").unwrap();
    let gw = start(&llm, dirs.clone()).await;
    let sid = gw.create_session_at(&root).await;
    let code = r#"
g = grep(["alpha", "Beta"])
print(g.hits, g.names)
print(g)
print("--ctx--")
print(grep("one", context=1))
print("--files--")
print(grep("", paths=["src"]))
print("--apropos--")
print(apropos())
h = apropos("anchored lines")
print(type(h[0]).__name__, doc(h[0]).splitlines()[0])
print("--doc--")
print(doc().splitlines()[0])
"#;
    let (_, result) = gw.run_block(&llm, &sid, code).await;
    assert!(result.starts_with("2 1\n"), "{result}");
    assert!(
        result.contains("files whose path matches:\n  src/alpha_tool.py"),
        "{result}"
    );
    assert!(
        result.contains("│ alpha one") && result.contains("│ Beta two"),
        "{result}"
    );
    assert!(!result.contains("│ beta three"), "{result}");
    assert!(
        result.contains("┆ zero")
            && result.contains("│ alpha one\n  ")
            && result.contains("┆ Beta two"),
        "{result}"
    );
    assert!(result.contains("files:\n  src/alpha_tool.py"), "{result}");
    assert!(
        result.contains("sandbox built-ins:\n  apropos — ")
            && result.contains("\n  cat — Read a file"),
        "{result}"
    );
    assert!(
        result.contains("\nHit cat(path") || result.contains("\nHit grep("),
        "{result}"
    );
    assert!(result.contains("What this sandbox offers"), "{result}");
}

/// An interpreter installed beside Debian's (pyenv's builds on the development machines).
fn interpreter(version: &str) -> Option<String> {
    let root = std::env::var("PYENV_ROOT").unwrap_or_else(|_| "/root/.pyenv".into());
    let dir = std::fs::read_dir(format!("{root}/versions")).ok()?;
    let mut found: Vec<String> = dir
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(&format!("{version}.")))
        .collect();
    found.sort();
    found
        .pop()
        .map(|v| format!("{root}/versions/{v}/bin/python3"))
        .filter(|p| Path::new(p).exists())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_runtime_works_on_the_oldest_and_newest_python_it_supports() {
    let mut tried = Vec::new();
    for version in ["3.9", "3.13"] {
        let Some(python) = interpreter(version) else {
            eprintln!("skipped: no CPython {version} here");
            continue;
        };
        tried.push(version);
        let llm = FixtureLlm::start().await;
        let dirs = Dirs::new();
        let gw = Gateway::start_in(
            dirs.clone(),
            Opts::openai(&llm)
                .sandbox()
                .env("VIS_SANDBOX_PYTHON", &python),
        )
        .await;
        let sid = gw.create_session_at(&dirs.root()).await;
        let code = "import sys\nprint('%d.%d' % sys.version_info[:2])\ndef f(): raise ValueError('boom')\nf()";
        let (_, result) = gw.run_block(&llm, &sid, code).await;
        assert!(
            result.contains(&format!("{version}\n")),
            "{version}: {result}"
        );
        assert!(result.contains("ValueError: boom"), "{version}: {result}");
        assert!(
            !result.contains("sandbox runtime error"),
            "{version}: {result}"
        );
        let (_, result) = gw.run_block(&llm, &sid, "print(f.__name__)").await;
        assert_eq!(result.trim(), "f", "{version}");
    }
    if tried.is_empty() {
        eprintln!("skipped: no CPython 3.9 or 3.13 found to test with (see scripts/install-deps)");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_older_than_three_nine_is_refused_at_start_with_the_version_it_needs() {
    let Some(python) = interpreter("3.8") else {
        eprintln!("skipped: no CPython 3.8 here");
        return;
    };
    let dirs = Dirs::new();
    let mut cmd = command(
        &dirs,
        &Opts::default().sandbox().env("VIS_SANDBOX_PYTHON", &python),
    );
    cmd.args(["start", "--port", "0", "--root"])
        .arg(dirs.root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("run the gateway");
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the gateway started with CPython 3.8");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs CPython 3.9 or newer") && err.contains("3.8."),
        "{err}"
    );
}
