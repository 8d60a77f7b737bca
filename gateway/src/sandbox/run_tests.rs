use super::*;

#[tokio::test]
async fn a_command_sees_only_the_given_environment_and_runs_in_the_root() {
    let dir = std::env::temp_dir();
    let mut env = BTreeMap::new();
    env.insert("ONLY".to_string(), "this".to_string());
    env.insert("PATH".to_string(), "/usr/bin:/bin".to_string());
    let out = run(
        "echo $ONLY; echo ${HOME:-none}; pwd",
        &dir,
        &env,
        Duration::from_secs(10),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(out.exit_code, Some(0));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "this");
    assert_eq!(lines[1], "none");
    assert_eq!(
        std::path::Path::new(lines[2]).canonicalize().unwrap(),
        dir.canonicalize().unwrap()
    );
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let env: BTreeMap<String, String> = [("PATH".to_string(), "/usr/bin:/bin".to_string())].into();
    let t0 = std::time::Instant::now();
    let out = run(
        "sleep 30 & sleep 30; echo never",
        &std::env::temp_dir(),
        &env,
        Duration::from_millis(300),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(out.timed_out);
    assert!(!out.stdout.contains("never"));
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the background sleep must not keep the pipes open"
    );
}

#[tokio::test]
async fn a_jailed_command_is_killed_with_its_group_and_its_stderr_is_clean() {
    if super::super::jail::find_binaries().is_err() {
        eprintln!("skipped: pasta/bwrap not installed");
        return;
    }
    let root = std::env::temp_dir().canonicalize().unwrap();
    let spec = super::super::jail::JailSpec {
        proxy_port: 9,
        root: root.clone(),
        hide: vec![],
        expose_ro: vec![],
        as_root: super::super::jail::running_as_root(),
        log_file: None,
    };
    let prefix = super::super::jail::prepare(&spec).expect("the jail works here");
    let env: BTreeMap<String, String> = [("PATH".to_string(), "/usr/bin:/bin".to_string())].into();
    let out = run_with(
        "echo in; echo err >&2; cat /proc/net/route | wc -l",
        &root,
        &env,
        Some(&prefix),
        Duration::from_secs(20),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "in\n1\n", "no route but the header line");
    assert_eq!(out.stderr, "err\n");
    let t0 = std::time::Instant::now();
    let out = run_with(
        "sleep 30 & sleep 30; echo never",
        &root,
        &env,
        Some(&prefix),
        Duration::from_millis(1500),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(out.timed_out && !out.stdout.contains("never"));
    assert!(t0.elapsed() < Duration::from_secs(10));
}

fn path_env() -> BTreeMap<String, String> {
    [("PATH".to_string(), "/usr/bin:/bin".to_string())].into()
}

fn alive(pid: u32) -> bool {
    // A zombie has no `/proc/<pid>/cwd` target it can show; count it as gone.
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

#[tokio::test]
async fn a_trailing_ampersand_returns_at_once_and_the_leftover_dies_with_its_guard() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let mut out = run(
        "sleep 30 & echo $! > bg.pid; echo started",
        dir.path(),
        &path_env(),
        Duration::from_secs(20),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(out.stdout, "started\n");
    let pid: u32 = std::fs::read_to_string(dir.path().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid), "runs until the guard goes");
    drop(out.leftover.take());
    for _ in 0..50 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the background sleep survived its guard");
}

#[tokio::test]
async fn a_long_output_keeps_its_head_and_tail_and_spills_whole_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let spill = dir.path().join("out.log");
    let out = run_full(
        "seq 1 400000; echo the-last-line",
        dir.path(),
        &path_env(),
        None,
        Duration::from_secs(30),
        &CancellationToken::new(),
        Some(spill.clone()),
    )
    .await
    .unwrap();
    assert!(out.stdout.starts_with("1\n2\n"), "{}", &out.stdout[..20]);
    assert!(out.stdout.ends_with("400000\nthe-last-line\n"));
    assert!(out.stdout.len() < HEAD + TAIL + 200, "{}", out.stdout.len());
    assert!(out.stdout.contains(&spill.display().to_string()));
    let whole = std::fs::read_to_string(&spill).unwrap();
    assert_eq!(whole.len() as u64, out.stdout_bytes);
    assert!(whole.ends_with("the-last-line\n"));
}

#[tokio::test]
async fn a_dropped_run_kills_the_whole_tree_including_a_new_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let env = path_env();
    let fut = run(
        "set -m; sleep 30 & echo $! > bg.pid; sleep 30",
        dir.path(),
        &env,
        Duration::from_secs(60),
        &cancel,
    );
    let _ = tokio::time::timeout(Duration::from_millis(600), fut).await;
    let pid: u32 = std::fs::read_to_string(dir.path().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for _ in 0..50 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the job-controlled sleep survived");
}
