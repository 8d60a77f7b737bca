//! The `status`, `stop` and `pair` sub-commands and `start --pair`.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_a_running_gateway_and_exits_3_when_none_runs() {
    let dirs = Dirs::new();
    let (code, out, _) = run_cli(&dirs, &["status"]).await;
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("not running"), "{out}");
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let (code, out, err) = run_cli(&dirs, &["status"]).await;
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.contains("running"), "{out}");
    assert!(out.contains(&gw.pid().to_string()), "{out}");
    assert!(out.contains(&format!("127.0.0.1:{}", gw.port)), "{out}");
    assert!(out.contains("\"secret_match\":true"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_sends_sigterm_removes_the_registry_and_the_gateway_exits_cleanly() {
    let dirs = Dirs::new();
    let mut gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let pid = gw.pid();
    // reap our child as soon as it exits (a zombie would still look alive to `stop`)
    let mut child = gw.child.take().unwrap();
    let reaper = tokio::task::spawn_blocking(move || child.wait().unwrap());
    let (code, out, err) = run_cli(&dirs, &["stop"]).await;
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.contains(&format!("stopped (pid {pid})")), "{out}");
    assert!(!dirs.registry().exists());
    let status = reaper.await.unwrap();
    assert!(status.success(), "{status}");
    let (code, out, _) = run_cli(&dirs, &["status"]).await;
    assert_eq!(code, Some(3), "{out}");
    let (code, out, _) = run_cli(&dirs, &["stop"]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("not running"), "{out}");
    // the home can be started again
    let gw2 = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let (s, _) = gw2.get("/healthz").await;
    assert_eq!(s, reqwest::StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_treats_a_stale_registry_of_a_killed_gateway_as_not_running() {
    let dirs = Dirs::new();
    let mut gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    gw.kill9();
    assert!(dirs.registry().exists(), "a SIGKILL leaves the registry");
    let (code, out, _) = run_cli(&dirs, &["status"]).await;
    assert_eq!(code, Some(3), "{out}");
    // and a new start on the same home works
    let gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let (s, _) = gw.get("/healthz").await;
    assert_eq!(s, reqwest::StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pair_refuses_a_loopback_gateway_with_a_remedy() {
    let dirs = Dirs::new();
    let _gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let (code, out, err) = run_cli(&dirs, &["pair"]).await;
    assert_ne!(code, Some(0), "{out} {err}");
    assert!(err.contains("refusing to pair"), "{err}");
    assert!(
        err.contains("--pair") || err.contains("--host"),
        "remedy: {err}"
    );
    assert!(!out.contains("vis://"), "{out}");
    assert!(!out.contains('█'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pair_prints_the_link_with_the_token_and_a_qr_code_on_0_0_0_0() {
    let dirs = Dirs::new();
    let gw = Gateway::start_in(dirs.clone(), Opts::default().host("0.0.0.0")).await;
    let (code, out, err) = run_cli(&dirs, &["pair"]).await;
    assert_eq!(code, Some(0), "{out} {err}");
    let link = out
        .lines()
        .find(|l| l.starts_with("vis://gateway?url="))
        .unwrap_or_else(|| panic!("no link: {out}"));
    assert!(link.contains(&format!("&token={}", gw.token)), "{link}");
    assert!(link.contains(&format!("%3A{}", gw.port)), "{link}");
    assert!(link.contains("url=http%3A%2F%2F"), "{link}");
    assert!(
        !link.contains("127.0.0.1"),
        "a phone cannot reach loopback: {link}"
    );
    assert!(out.contains('█'), "QR code");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_with_pair_binds_all_interfaces_and_prints_link_and_qr() {
    let mut opts = Opts::default();
    opts.extra_args.push("--pair".into());
    let gw = Gateway::start(opts).await;
    assert_eq!(gw.registry["require_token"], true);
    assert_eq!(gw.registry["host"], "0.0.0.0");
    let deadline = std::time::Instant::now() + WAIT;
    while !gw.stdout().contains('█') && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let out = gw.stdout();
    assert!(out.contains("vis://gateway?url="), "{out}");
    assert!(out.contains(&format!("token={}", gw.token)), "{out}");
    assert!(out.contains('█'), "{out}");
    // token required on this bind
    let (s, _) = into_json(
        gw.raw(reqwest::Method::GET, "/v1/sessions")
            .header("X-Vis-Protocol", "2")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, reqwest::StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_with_pair_on_loopback_refuses_the_qr_but_serves() {
    let mut opts = Opts::default().host("127.0.0.1");
    opts.extra_args.push("--pair".into());
    let gw = Gateway::start(opts).await;
    let deadline = std::time::Instant::now() + WAIT;
    while !gw.stderr().contains("refusing to pair") && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!gw.stdout().contains('█'));
    assert!(!gw.stdout().contains("vis://"));
    assert!(gw.stderr().contains("refusing to pair"), "{}", gw.stderr());
    let (s, _) = gw.get("/v1/sessions").await;
    assert_eq!(s, reqwest::StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_file_fails_the_start_with_the_key_and_file_named() {
    let dirs = Dirs::new();
    std::fs::write(
        dirs.root().join("vis.yml"),
        "providers:\n  a:\n    modle: x\n",
    )
    .unwrap();
    let mut cmd = command(&dirs, &Opts::default());
    cmd.args(["start", "--port", "0", "--root"])
        .arg(dirs.root());
    let out = tokio::time::timeout(WAIT, tokio::process::Command::from(cmd).output())
        .await
        .expect("start hung")
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("vis.yml") && err.contains("modle"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_stop_answers_then_the_gateway_exits_cleanly() {
    let dirs = Dirs::new();
    let mut gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    let (s, v) = gw.post_empty("/v1/admin/stop").await;
    assert_eq!(s, reqwest::StatusCode::OK, "{v}");
    assert_eq!(v["stopping"], true);
    assert_eq!(v["status"]["status"], "running");
    let mut child = gw.child.take().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "did not stop");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
    assert!(!dirs.registry().exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_and_help_answer_without_a_home() {
    let dirs = Dirs::new();
    let (code, out, _) = run_cli(&dirs, &["--version"]).await;
    assert_eq!(code, Some(0));
    assert!(out.starts_with("vis-gateway "), "{out}");
    let (code, out, _) = run_cli(&dirs, &["start", "--help"]).await;
    assert_eq!(code, Some(0));
    for flag in [
        "--host",
        "--port",
        "--require-token",
        "--token-file",
        "--pair",
        "--root",
    ] {
        assert!(out.contains(flag), "{flag}: {out}");
    }
}

/// A registry left by a killed gateway names a pid that may since belong to an unrelated
/// process: `stop` must not signal it (the home's lock is free, so no gateway runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_never_signals_a_process_that_reused_a_dead_gateways_pid() {
    let dirs = Dirs::new();
    let mut gw = Gateway::start_in(dirs.clone(), Opts::default()).await;
    gw.kill9();
    // An unrelated process stands in for the reused pid.
    let mut bystander = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let text = std::fs::read_to_string(dirs.registry()).unwrap();
    let mut reg: serde_json::Value = serde_json::from_str(&text).unwrap();
    reg["pid"] = serde_json::json!(bystander.id());
    std::fs::write(dirs.registry(), reg.to_string()).unwrap();
    let (code, out, err) = run_cli(&dirs, &["stop"]).await;
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.contains("not running"), "{out}");
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "the bystander must still run"
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
}

/// `status` dials the address the gateway is bound to, not always 127.0.0.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reaches_a_gateway_bound_to_another_loopback_address() {
    let dirs = Dirs::new();
    let _gw = Gateway::start_in(dirs.clone(), Opts::default().host("127.0.0.2")).await;
    let (code, out, err) = run_cli(&dirs, &["status"]).await;
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.contains("\"status\""), "the health body: {out}");
}

/// Behind a container's port mapping or a reverse proxy the interfaces' addresses are not
/// what the phone dials: `pair --public-url` puts the given URL (and the token) in the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pair_with_a_public_url_links_that_url_and_refuses_a_malformed_one() {
    let dirs = Dirs::new();
    let gw = Gateway::start_in(dirs.clone(), Opts::default().host("0.0.0.0")).await;
    let (code, out, err) = run_cli(
        &dirs,
        &["pair", "--public-url", "https://vis.example.net:8443/"],
    )
    .await;
    assert_eq!(code, Some(0), "{out} {err}");
    let link = out.lines().next().unwrap_or_default();
    assert_eq!(
        link,
        format!(
            "vis://gateway?url=https%3A%2F%2Fvis.example.net%3A8443&token={}",
            gw.token
        )
    );
    let (code, out, err) = run_cli(&dirs, &["pair", "--public-url", "vis.example.net"]).await;
    assert_ne!(code, Some(0), "{out} {err}");
    assert!(err.contains("--public-url"), "{err}");
}

/// Asks `GET /healthz` on `port` as fast as it can until the gateway answers 200.
fn first_healthz(port: u16, deadline: std::time::Instant) -> bool {
    use std::io::{Read, Write};
    while std::time::Instant::now() < deadline {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            std::thread::yield_now();
            continue;
        };
        let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
        if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .is_err()
        {
            continue;
        }
        let mut head = [0u8; 12];
        if s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200") {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_json_exists_as_soon_as_the_gateway_answers_healthz() {
    // A script that waits for /healthz and then runs `vis-gateway exec` must find the
    // gateway: its registry is written before anything is served. Several starts, as the
    // window was short.
    for attempt in 0..8 {
        let dirs = Dirs::new();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = command(&dirs, &Opts::default());
        cmd.arg("start").arg("--port").arg(port.to_string());
        cmd.arg("--root").arg(dirs.root());
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().expect("spawn vis-gateway");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let answered = tokio::task::spawn_blocking(move || first_healthz(port, deadline))
            .await
            .unwrap();
        let registry = std::fs::read_to_string(dirs.registry()).ok();
        let exec = if attempt == 0 && answered {
            let root = dirs.root().to_string_lossy().to_string();
            Some(run_cli(&dirs, &["exec", "--root", &root, "--", "true"]).await)
        } else {
            None
        };
        let _ = child.kill();
        let _ = child.wait();
        assert!(answered, "start {attempt}: /healthz never answered");
        let registry = registry.unwrap_or_else(|| {
            panic!("start {attempt}: /healthz answered before gateway.json existed")
        });
        let r: serde_json::Value = serde_json::from_str(&registry).expect("registry is JSON");
        assert_eq!(r["port"].as_u64(), Some(port as u64), "{r}");
        if let Some((code, out, err)) = exec {
            assert_eq!(code, Some(0), "exec right after start: {out} {err}");
        }
    }
}
