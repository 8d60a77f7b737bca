//! The shipped deployment files work with the real binary: the example configuration loads,
//! the systemd and container command lines start, and the container health check is open.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use std::path::Path;
use std::time::{Duration, Instant};

fn deploy_file(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_vis_yml_is_accepted_and_its_providers_are_listed() {
    let dirs = Dirs::new();
    std::fs::write(dirs.root().join("vis.yml"), deploy_file("vis.yml.example")).unwrap();
    let gw = Gateway::start_in(dirs, Opts::default().env("OPENAI_API_KEY", "sk-test")).await;
    let (s, v) = gw.get("/v1/router").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ids: Vec<&str> = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert!(ids.contains(&"openai") && ids.contains(&"local"), "{v}");
    assert!(
        !v.to_string().contains("sk-test"),
        "no secrets in /v1/router: {v}"
    );
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/reload").await;
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(
        evs.last().unwrap().event,
        "turn.completed",
        "{:?}",
        evs.last().unwrap().data
    );
}

/// Kills a raw child on drop (a failing assertion must not leak a gateway).
struct Guard(Option<std::process::Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts the binary with exactly `args` (no `--home`), `VIS_HOME` set, and waits for the
/// registry. Returns (child, registry).
async fn start_raw(
    dirs: &Dirs,
    args: &[&str],
) -> (std::process::Child, serde_json::Value, std::path::PathBuf) {
    let mut cmd = std::process::Command::new(binary());
    for k in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("VIS_HOME", dirs.home()).args(args);
    let err = dirs.base.path().join("raw-stderr.log");
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            panic!(
                "exited {st}: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        if let Some(r) = std::fs::read_to_string(dirs.registry())
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        {
            return (child, r, err);
        }
        assert!(Instant::now() < deadline, "no registry");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_systemd_command_line_starts_with_vis_home_and_json_logs() {
    let unit = deploy_file("vis-gateway.service");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut args: Vec<String> = exec
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect();
    // the same flags, with a free port
    let i = args.iter().position(|a| a == "--port").expect("--port");
    args[i + 1] = "0".into();
    let dirs = Dirs::new();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (child, reg, err) = start_raw(&dirs, &argv).await;
    let mut guard = Guard(Some(child));
    assert_eq!(reg["require_token"], false);
    let url = format!("http://127.0.0.1:{}/healthz", reg["port"]);
    let r = client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        dirs.home().join("gateway.token").exists(),
        "home from VIS_HOME"
    );
    // ExecStop
    let (code, out, e) = run_cli_reaping(&dirs, &["stop"], &mut guard).await;
    assert_eq!(code, Some(0), "{out} {e}");
    let log = std::fs::read_to_string(err).unwrap();
    let first = log.lines().next().expect("a log line");
    let parsed: serde_json::Value = serde_json::from_str(first).expect("JSON log line");
    assert!(parsed.is_object(), "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_command_line_requires_the_token_and_keeps_healthz_open() {
    let df = deploy_file("Dockerfile");
    let cmd_line = df
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("CMD");
    let mut args: Vec<String> = serde_json::from_str(cmd_line).expect("exec-form CMD");
    let i = args.iter().position(|a| a == "--port").unwrap();
    args[i + 1] = "0".into();
    let dirs = Dirs::new();
    let j = args.iter().position(|a| a == "--root").unwrap();
    args[j + 1] = dirs.root().display().to_string();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (child, reg, _) = start_raw(&dirs, &argv).await;
    let _guard = Guard(Some(child));
    assert_eq!(reg["require_token"], true);
    let base = format!("http://127.0.0.1:{}", reg["port"]);
    let c = client();
    // HEALTHCHECK: curl -fsS http://127.0.0.1:7890/healthz
    let r = c.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = c
        .request(Method::GET, format!("{base}/v1/sessions"))
        .header("X-Vis-Protocol", "2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = c
        .request(Method::GET, format!("{base}/v1/sessions"))
        .header("X-Vis-Protocol", "2")
        .bearer_auth(reg["token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // `docker compose exec gateway vis-gateway pair`
    let (code, out, e) = run_cli(&dirs, &["pair"]).await;
    assert_eq!(code, Some(0), "{out} {e}");
    assert!(out.contains("vis://gateway?url="));
}

/// Runs a CLI command while reaping the guarded child as soon as it exits; asserts it
/// exited cleanly.
async fn run_cli_reaping(
    dirs: &Dirs,
    args: &[&str],
    guard: &mut Guard,
) -> (Option<i32>, String, String) {
    let cli = run_cli(dirs, args);
    tokio::pin!(cli);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut exited = None;
    loop {
        if exited.is_none() {
            if let Some(c) = guard.0.as_mut() {
                exited = c.try_wait().unwrap();
            }
        }
        tokio::select! {
            r = &mut cli => {
                let status = exited.or_else(|| guard.0.as_mut().and_then(|c| c.wait().ok()));
                assert!(status.is_some_and(|s| s.success()), "{status:?}");
                guard.0 = None;
                return r;
            }
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        assert!(Instant::now() < deadline);
    }
}
