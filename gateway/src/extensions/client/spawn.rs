//! Starting a worker process: its environment, its filter lanes, its tie to the gateway's
//! life, and the tasks that own its pipes and its exit.

use super::running::{Running, WorkerOwner};
use super::types::{CallCtx, CallError, WorkerSpec};
use crate::extensions::lane::{self, Lane, Lanes};
use crate::extensions::protocol::{Msg, WireError};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

/// Environment a worker process starts with: not the gateway's whole environment (an
/// extension sees only what `env=[…]` declares, decision E5), just what processes need.
const KEPT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "VIS_WORKER_PYTHONHOME",
];

/// Starts a worker process. `sdk` is the SDK import root the gateway wrote (the worker
/// writes nothing under the home by itself).
pub(super) fn spawn(
    spec: &WorkerSpec,
    sdk: &Path,
    base_ctx: CallCtx,
    owner: Arc<dyn WorkerOwner>,
    generation: u64,
) -> Result<Arc<Running>, CallError> {
    let mut cmd = tokio::process::Command::new(&spec.exe);
    cmd.arg("--home")
        .arg(&spec.home)
        .arg("worker")
        .arg("--label")
        .arg(&spec.label)
        .arg("--sdk")
        .arg(sdk)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .env_clear();
    for (k, v) in crate::start_env::vars() {
        let name = k.as_str();
        if KEPT_ENV.contains(&name) || name.starts_with("LC_") {
            cmd.env(&k, &v);
        }
    }
    if let Some(cwd) = spec.cwd.as_ref().filter(|c| c.is_dir()) {
        cmd.current_dir(cwd);
    }
    // The filter lanes (one per proxy thread, plus one): one end of each stays here, the
    // other is inherited by this child only (it is close-on-exec everywhere else). A filter
    // worker does not start without them: lanes are the only way filters run.
    let lane_pairs = if spec.filter_lane {
        (0..Lanes::wanted())
            .map(|_| lane_socketpair())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| CallError::Start(format!("no filter lane: {e}")))?
    } else {
        Vec::new()
    };
    use std::os::fd::AsRawFd;
    let fds: Vec<i32> = lane_pairs.iter().map(|(_, t)| t.as_raw_fd()).collect();
    for fd in &fds {
        cmd.arg("--lane-fd").arg(fd.to_string());
    }
    if spec.filter_lane {
        let spin = lane::worker_spin_us();
        if spin > 0 {
            cmd.arg("--lane-spin-us").arg(spin.to_string());
        }
    }
    let gateway = std::process::id();
    // SAFETY: only async-signal-safe calls (prctl, getppid, fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            tie_to_parent(gateway)?;
            for &fd in &fds {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| CallError::Start(format!("{}: {e}", spec.exe.display())))?;
    let pid = child.id();
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(CallError::Start("the worker's pipes are missing".into()));
    };
    let lanes = lane_pairs
        .into_iter()
        .map(|(ours, theirs)| {
            drop(theirs);
            Lane::new(ours)
        })
        .collect::<std::io::Result<Vec<_>>>();
    let lane = match lanes {
        Ok(lanes) => Lanes::new(lanes),
        Err(e) => return Err(CallError::Start(format!("no filter lane: {e}"))),
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let (kill_tx, kill_rx) = oneshot::channel::<()>();
    let (exit_tx, exit_rx) = watch::channel::<Option<String>>(None);
    let running = Arc::new(Running {
        label: spec.label.clone(),
        #[cfg(test)]
        pid,
        generation,
        tx,
        pending: Mutex::new(HashMap::new()),
        ctxs: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        alive: AtomicBool::new(true),
        doomed: AtomicBool::new(false),
        kill: Mutex::new(Some(kill_tx)),
        failures: Mutex::new(HashMap::new()),
        holds: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        lane,
        exit: exit_rx.clone(),
        killed_for: Mutex::new(None),
        last_door: Mutex::new(std::time::Instant::now()),
        lane_busy: AtomicUsize::new(0),
        lane_used_ns: AtomicU64::new(lane::mono_ns()),
    });
    tracing::debug!(worker = %spec.label, pid, "extension worker started");

    // Writer.
    tokio::spawn(async move {
        let mut stdin = stdin;
        while let Some(line) = rx.recv().await {
            let ok = stdin.write_all(line.as_bytes()).await.is_ok()
                && stdin.write_all(b"\n").await.is_ok()
                && stdin.flush().await.is_ok();
            if !ok {
                break;
            }
        }
    });

    // Reaper: owns the child, kills it on request, publishes how it ended.
    let label = spec.label.clone();
    tokio::spawn(async move {
        let mut child = child;
        let status = tokio::select! {
            s = child.wait() => s,
            _ = kill_rx => {
                let _ = child.start_kill();
                child.wait().await
            }
        };
        let why = match status {
            Ok(s) => describe_exit(s),
            Err(e) => format!("cannot wait for it: {e}"),
        };
        tracing::debug!(worker = %label, "extension worker ended: {why}");
        let _ = exit_tx.send(Some(why));
    });

    // stderr → tracing and the extensions' log file.
    let label = spec.label.clone();
    let log = spec.log.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::info!(target: "vis::extension", worker = %label, "{line}");
            if let Some(log) = &log {
                log.line("print", &label, None, &line);
            }
        }
    });

    // stdout: responses and door calls.
    let r = running.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        loop {
            let line = match lines.next_line().await {
                Ok(Some(l)) => l,
                Ok(None) | Err(_) => break,
            };
            if line.trim().is_empty() {
                continue;
            }
            match Msg::parse(&line) {
                Ok(Msg::Response {
                    id,
                    ok,
                    value,
                    error,
                    restart,
                }) => {
                    if restart {
                        r.doomed.store(true, Ordering::SeqCst);
                    }
                    let outcome = if ok {
                        Ok(value)
                    } else {
                        Err(CallError::Python(error.unwrap_or_else(|| {
                            WireError::host("Exception", "the call failed without a message")
                        })))
                    };
                    if let Some(tx) = r.pending.lock().remove(&id) {
                        let _ = tx.send(outcome);
                    }
                }
                Ok(Msg::Door {
                    id,
                    on,
                    op,
                    payload,
                }) => {
                    *r.last_door.lock() = std::time::Instant::now();
                    let ctx = on
                        .and_then(|on| r.ctxs.lock().get(&on).cloned())
                        .unwrap_or_else(|| base_ctx.clone());
                    let owner = owner.clone();
                    let worker = r.clone();
                    tokio::spawn(async move {
                        let reply = match owner.door(worker.clone(), ctx, op, payload).await {
                            Ok(value) => Msg::DoorReply {
                                id,
                                ok: true,
                                value,
                                error: None,
                                error_type: None,
                            },
                            Err(e) => Msg::DoorReply {
                                id,
                                ok: false,
                                value: Value::Null,
                                error: Some(e.message),
                                error_type: e.python_type.map(str::to_string),
                            },
                        };
                        let _ = worker.tx.send(reply.to_line());
                    });
                }
                Ok(_) => tracing::warn!(worker = %r.label, "unexpected message from a worker"),
                Err(e) => tracing::warn!(worker = %r.label, "unreadable worker message: {e}"),
            }
        }
        // EOF: the process is gone (or going). Say how it ended when we can.
        r.alive.store(false, Ordering::SeqCst);
        let mut exit_rx = exit_rx;
        let why =
            match tokio::time::timeout(Duration::from_secs(2), exit_rx.wait_for(|v| v.is_some()))
                .await
            {
                Ok(Ok(v)) => v.clone().unwrap_or_default(),
                _ => "its output closed".to_string(),
            };
        r.fail_all(&why);
    });
    Ok(running)
}

/// The SDK import root under `home`, written by the gateway (once per home and process) on
/// a blocking thread; workers are handed its path.
pub(super) async fn sdk_root(home: &Path) -> Result<PathBuf, CallError> {
    static ROOTS: OnceLock<Mutex<HashMap<PathBuf, PathBuf>>> = OnceLock::new();
    let roots = ROOTS.get_or_init(Mutex::default);
    if let Some(root) = roots.lock().get(home) {
        return Ok(root.clone());
    }
    let owned = home.to_path_buf();
    let root = tokio::task::spawn_blocking(move || crate::extensions::embed::materialize(&owned))
        .await
        .map_err(|e| CallError::Start(format!("cannot write the SDK: {e}")))?
        .map_err(|e| CallError::Start(format!("{e:#}")))?;
    roots.lock().insert(home.to_path_buf(), root.clone());
    Ok(root)
}

/// In the child, before exec: the kernel kills the worker when the gateway dies, however it
/// dies (a SIGKILLed gateway runs no clean-up), so no worker outlives its gateway and keeps
/// writing under a home that may be gone. The signal is tied to the forking thread, a
/// runtime thread that lives as long as the gateway. A gateway that died before the tie
/// was made is noticed by the parent id having changed.
fn tie_to_parent(gateway: u32) -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; getppid cannot fail.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if u32::try_from(libc::getppid()).ok() != Some(gateway) {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// `(ours, theirs)`: a close-on-exec Unix stream socket pair.
fn lane_socketpair() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(9)) => "killed".to_string(),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".to_string(),
    }
}
