//! Running one command as a sandbox child: `sh -c` in the workspace root, the sandbox
//! environment only, its own process group (a timeout or cancel kills the whole group),
//! output captured up to a cap.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

/// Bytes of stdout/stderr kept per stream.
pub const OUTPUT_CAP: usize = 1024 * 1024;

#[derive(Debug, Default)]
pub struct RunOutput {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub cancelled: bool,
}

async fn read_capped<R: tokio::io::AsyncRead + Unpin>(mut r: R) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if buf.len() < OUTPUT_CAP {
                    let take = n.min(OUTPUT_CAP - buf.len());
                    buf.extend_from_slice(&chunk[..take]);
                }
            }
        }
    }
    String::from_utf8_lossy(&buf).to_string()
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid {
        // SAFETY: signalling the process group this runner created for the child.
        unsafe {
            libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
        }
    }
}

/// Runs `command` with `sh -c` (no jail); the tests drive [`run_with`] through it.
#[cfg(test)]
pub async fn run(
    command: &str,
    root: &Path,
    env: &BTreeMap<String, String>,
    timeout: Duration,
    cancel: &CancellationToken,
) -> std::io::Result<RunOutput> {
    run_with(command, root, env, None, timeout, cancel).await
}

/// `sh -c command` as a sandbox child: behind the jail argv prefix (empty: no jail), with
/// exactly `env`, in `cwd`, its own process group, stdout/stderr piped, killed on drop.
pub fn sh_command(
    command: &str,
    cwd: &Path,
    env: &BTreeMap<String, String>,
    jail: &[String],
    stdin: Stdio,
) -> tokio::process::Command {
    let mut argv: Vec<&str> = jail.iter().map(String::as_str).collect();
    argv.extend(["/bin/sh", "-c", command]);
    let mut cmd = tokio::process::Command::new(argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env)
        .env("PWD", cwd)
        .current_dir(cwd)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// Runs `command` with `sh -c`, inside the jail when `jail` (the argv prefix from
/// `Sandbox::jail_prefix`) is given.
pub async fn run_with(
    command: &str,
    root: &Path,
    env: &BTreeMap<String, String>,
    jail: Option<&[String]>,
    timeout: Duration,
    cancel: &CancellationToken,
) -> std::io::Result<RunOutput> {
    let started = std::time::Instant::now();
    let mut child =
        sh_command(command, root, env, jail.unwrap_or_default(), Stdio::null()).spawn()?;
    let pid = child.id();
    let out = tokio::spawn(read_capped(
        child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?,
    ));
    let err = tokio::spawn(read_capped(
        child
            .stderr
            .take()
            .ok_or_else(|| std::io::Error::other("no stderr"))?,
    ));
    let mut result = RunOutput::default();
    tokio::select! {
        status = child.wait() => result.exit_code = status?.code(),
        _ = tokio::time::sleep(timeout) => {
            result.timed_out = true;
            kill_group(pid);
            let _ = child.wait().await;
        }
        _ = cancel.cancelled() => {
            result.cancelled = true;
            kill_group(pid);
            let _ = child.wait().await;
        }
    }
    result.stdout = out.await.unwrap_or_default();
    result.stderr = err.await.unwrap_or_default();
    if jail.is_some() {
        result.stderr = super::jail::strip_pasta_noise(&result.stderr);
    }
    // The program only: the rest of a command line can carry secrets.
    let program: String = command
        .split_whitespace()
        .next()
        .unwrap_or("")
        .chars()
        .take(64)
        .collect();
    tracing::info!(
        session = env.get("VIS_SESSION_ID").map_or("", String::as_str),
        program,
        jailed = jail.is_some(),
        exit_code = result.exit_code.unwrap_or(-1),
        timed_out = result.timed_out,
        cancelled = result.cancelled,
        duration_ms = started.elapsed().as_millis() as u64,
        "sandbox command finished"
    );
    Ok(result)
}

#[cfg(test)]
mod tests {
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
        let env: BTreeMap<String, String> =
            [("PATH".to_string(), "/usr/bin:/bin".to_string())].into();
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
        let env: BTreeMap<String, String> =
            [("PATH".to_string(), "/usr/bin:/bin".to_string())].into();
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
}
