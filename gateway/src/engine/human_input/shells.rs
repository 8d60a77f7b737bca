//! The extension shell doors (`shell`, `jailed_shell`, `jailed_shell_session`): sandboxed
//! children of the session, run to completion or in the background (logs, wait, send, stop).

use super::HumanInput;
use crate::engine::now_ms;
use crate::extensions::client::DoorError;
use crate::extensions::{DoorWorker, SessionCtx};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Combined output kept per shell child.
const SHELL_OUT_CAP: usize = 8 * 1024 * 1024;
const SHELL_DEFAULT_TIMEOUT_SECS: u64 = 120;

/// (status, exit code, finished_at, duration_ms) of a background child.
type ProcStatus = (String, Option<i32>, Option<i64>, Option<u64>);

/// One background child of an extension.
pub(super) struct Proc {
    pub(super) id: String,
    command: String,
    cwd: PathBuf,
    pid: Option<u32>,
    started_at: i64,
    started: Instant,
    timeout_secs: Option<u64>,
    out: Mutex<(String, usize)>,
    status: Mutex<ProcStatus>,
    done: watch::Receiver<bool>,
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl Proc {
    pub(super) fn kill(&self) {
        if let Some(tx) = self.stop.lock().take() {
            let _ = tx.send(());
        }
    }

    fn record(&self, window: Option<(i64, Option<u64>)>) -> Value {
        let (status, exit, finished_at, duration) = self.status.lock().clone();
        let finished = status != "running";
        let (text, omitted) = self.out.lock().clone();
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len();
        let (offset, limit) = window.unwrap_or((0, None));
        let offset = if offset < 0 {
            total.saturating_sub(offset.unsigned_abs() as usize)
        } else {
            (offset as usize).min(total)
        };
        let end = limit
            .map(|l| (offset + l as usize).min(total))
            .unwrap_or(total);
        let out = lines[offset..end].join("\n");
        json!({
            "stage": if finished { "finished" } else { "running" },
            "id": self.id, "cwd": self.cwd.to_string_lossy(), "command": self.command,
            "status": status, "pid": self.pid, "exit": exit,
            "duration_ms": duration, "uptime_ms": self.started.elapsed().as_millis() as u64,
            "started_at": self.started_at, "finished_at": finished_at, "log_path": null,
            "cpu_ms": null, "cpu_percent": null, "rss_bytes": null,
            "timed_out": status == "timed_out", "timeout_secs": self.timeout_secs,
            "out": out, "out_omitted_chars": omitted, "offset": offset, "next_offset": end,
            "is_eof": finished && end >= total, "attach": null, "already_running": false,
            "keys": null, "note": null,
        })
    }
}

fn shell_quote(a: &str) -> String {
    if !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

fn command_line(opts: &Value) -> Result<String, DoorError> {
    match opts.get("command") {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::Array(a)) if !a.is_empty() => Ok(a
            .iter()
            .map(|x| shell_quote(x.as_str().unwrap_or("")))
            .collect::<Vec<_>>()
            .join(" ")),
        _ => Err(DoorError::typed(
            "ValueError",
            "shell needs 'command': a string or a list of strings",
        )),
    }
}

/// Environment of an extension child with no session (`vis.shell` from a provider
/// callback): the basics only, no proxy.
fn plain_env() -> BTreeMap<String, String> {
    [
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "TERM",
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
    .collect()
}

fn append_capped(buf: &Mutex<(String, usize)>, chunk: &str) {
    let mut b = buf.lock();
    let room = SHELL_OUT_CAP.saturating_sub(b.0.len());
    if chunk.len() <= room {
        b.0.push_str(chunk);
    } else {
        let mut cut = room;
        while cut > 0 && !chunk.is_char_boundary(cut) {
            cut -= 1;
        }
        b.0.push_str(&chunk[..cut]);
        b.1 += chunk.len() - cut;
    }
}

impl HumanInput {
    fn proc_of(&self, sid: &str, id: &str) -> Option<Arc<Proc>> {
        self.sessions.lock().get(sid)?.procs.get(id).cloned()
    }

    pub(super) async fn shell_door(
        &self,
        door: &str,
        session: Option<&SessionCtx>,
        extension: &str,
        opts: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        if !opts.is_object() {
            return Err(DoorError::typed(
                "TypeError",
                "shell takes one options map — use shell({'command': 'ls'})",
            ));
        }
        if door == "jailed_shell_session" && session.is_none() {
            return Err(DoorError::new(
                "jailed_shell_session is available only while handling a session",
            ));
        }
        let key = session.map(|s| s.id.clone()).unwrap_or_default();
        let op = opts.get("op").and_then(Value::as_str).unwrap_or("run");
        if matches!(op, "logs" | "wait" | "send" | "stop") {
            let id = opts.get("id").and_then(Value::as_str).unwrap_or("");
            let p = self.proc_of(&key, id).ok_or_else(|| {
                DoorError::typed("KeyError", format!("no shell process with id '{id}'"))
            })?;
            return match op {
                "logs" => {
                    let offset = opts.get("offset").and_then(Value::as_i64).unwrap_or(0);
                    let limit = opts.get("limit").and_then(Value::as_u64);
                    Ok(p.record(Some((offset, limit))))
                }
                "wait" => {
                    let secs = opts.get("seconds").and_then(Value::as_f64).unwrap_or(120.0);
                    let _hold = worker.hold();
                    let mut done = p.done.clone();
                    let _ = tokio::time::timeout(
                        Duration::from_secs_f64(secs.clamp(0.0, 86_400.0)),
                        done.wait_for(|d| *d),
                    )
                    .await;
                    Ok(p.record(None))
                }
                "send" => {
                    let mut text = opts
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    if opts
                        .get("is_enter")
                        .and_then(Value::as_bool)
                        .unwrap_or(true)
                    {
                        text.push('\n');
                    }
                    use tokio::io::AsyncWriteExt;
                    let mut stdin = p.stdin.lock().await;
                    let Some(w) = stdin.as_mut() else {
                        return Err(DoorError::new("the process's input is closed"));
                    };
                    w.write_all(text.as_bytes())
                        .await
                        .map_err(|e| DoorError::new(format!("cannot write to the process: {e}")))?;
                    let _ = w.flush().await;
                    Ok(p.record(None))
                }
                _ => {
                    p.kill();
                    let mut done = p.done.clone();
                    let _ =
                        tokio::time::timeout(Duration::from_secs(5), done.wait_for(|d| *d)).await;
                    Ok(p.record(None))
                }
            };
        }
        if !matches!(op, "run" | "background") {
            return Err(DoorError::typed(
                "ValueError",
                format!("shell op '{op}' is not supported"),
            ));
        }
        let gw = self
            .shells
            .as_ref()
            .ok_or_else(|| DoorError::new("the gateway is shutting down"))?;
        let command = command_line(&opts)?;
        let root = session
            .map(|s| s.workspace_root.clone())
            .unwrap_or_else(|| gw.default_root.clone());
        let cwd = match opts.get("cwd").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => {
                let p = Path::new(c);
                if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    root.join(p)
                }
            }
            _ => root.clone(),
        };
        if !cwd.is_dir() {
            return Err(DoorError::typed(
                "FileNotFoundError",
                format!("shell cwd {} is not a directory", cwd.display()),
            ));
        }
        // `shell`: the session's proxy environment (its traffic is decided and reported
        // under the session), no jail. `jailed_shell` / `jailed_shell_session`: the same plus
        // the kernel jail when the configuration enables it. Without a session, `shell` gets
        // a plain environment and `jailed_shell` acts for a principal named after the
        // extension (`ext:<name>`, configuration of the gateway's default root).
        let is_jailed = door != "shell";
        let principal = match session {
            Some(s) => Some((
                s.id.clone(),
                s.project_root.clone().unwrap_or_else(|| root.clone()),
            )),
            // A fresh principal (and proxy token) per spawn, revoked when the child ends.
            None if is_jailed => Some((
                format!("ext:{extension}:{}", uuid::Uuid::new_v4()),
                gw.default_root.clone(),
            )),
            None => None,
        };
        let mut jail: Vec<String> = Vec::new();
        let spawn_token = principal
            .as_ref()
            .filter(|_| session.is_none())
            .map(|(pid, _)| pid.clone());
        let mut env = match principal {
            Some((pid, project)) => {
                // Re-read at each spawn; an invalid configuration refuses (fail closed).
                let cfg = gw.configuration.project(&project).await.map_err(|e| {
                    DoorError::typed(
                        "PermissionError",
                        format!("{door} refused: the configuration is invalid: {e}"),
                    )
                })?;
                let sandbox = self.sandbox.get().cloned().ok_or_else(|| {
                    DoorError::new(format!("{door}: the session sandbox is not running"))
                })?;
                if is_jailed {
                    let (sb, r, c) = (sandbox.clone(), root.clone(), cfg.clone());
                    let prefix = tokio::task::spawn_blocking(move || sb.jail_prefix(&r, &c))
                        .await
                        .map_err(|e| DoorError::new(format!("{door}: {e}")))?
                        .map_err(|e| {
                            DoorError::typed("PermissionError", format!("{door} refused: {e}"))
                        })?;
                    jail = prefix.unwrap_or_default();
                }
                sandbox.child_env(&pid, &root, &cfg)
            }
            None => plain_env(),
        };
        if let Some(extra) = opts.get("env").and_then(Value::as_object) {
            for (k, v) in extra {
                if let Some(v) = v.as_str() {
                    env.insert(k.clone(), v.to_string());
                }
            }
        }
        let timeout_secs = opts.get("timeout_secs").and_then(Value::as_u64);
        let stdin = opts
            .get("stdin")
            .and_then(Value::as_str)
            .map(str::to_string);
        tracing::debug!(target: "vis::extension", extension, door, session = %key, "{command}");
        // `run` waits (bounded by `timeout_secs`, default 120 s); `background` returns at once.
        let timeout_secs = match op {
            "run" => Some(timeout_secs.unwrap_or(SHELL_DEFAULT_TIMEOUT_SECS)),
            _ => timeout_secs,
        };
        let spawned = spawn_proc(&command, &cwd, &env, &jail, timeout_secs, stdin.as_deref());
        if let (Some(pid), Some(sandbox)) = (spawn_token, self.sandbox.get().cloned()) {
            let done = spawned.as_ref().ok().map(|p| p.done.clone());
            tokio::spawn(async move {
                if let Some(mut done) = done {
                    let _ = done.wait_for(|d| *d).await;
                }
                sandbox.tokens.revoke(&pid);
            });
        }
        let p = spawned
            .map_err(|e| DoorError::typed("OSError", format!("cannot start the command: {e}")))?;
        if op == "run" {
            let _hold = worker.hold();
            let mut done = p.done.clone();
            let _ = done.wait_for(|d| *d).await;
            return Ok(p.record(None));
        }
        self.with(&key, |s| s.procs.insert(p.id.clone(), p.clone()));
        Ok(p.record(None))
    }
}

pub(super) fn spawn_proc(
    command: &str,
    cwd: &Path,
    env: &BTreeMap<String, String>,
    jail: &[String],
    timeout_secs: Option<u64>,
    stdin_text: Option<&str>,
) -> std::io::Result<Arc<Proc>> {
    use std::process::Stdio;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut child =
        crate::sandbox::run::sh_command(command, cwd, env, jail, Stdio::piped()).spawn()?;
    let pid = child.id();
    let (done_tx, done_rx) = watch::channel(false);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let mut stdin = child.stdin.take();
    // Given `stdin` text is written then the input is closed (EOF); otherwise the input stays
    // open for `send`.
    if let Some(text) = stdin_text {
        if let Some(mut w) = stdin.take() {
            let text = text.to_string();
            tokio::spawn(async move {
                let _ = w.write_all(text.as_bytes()).await;
            });
        }
    }
    let p = Arc::new(Proc {
        id: uuid::Uuid::new_v4().to_string(),
        command: command.to_string(),
        cwd: cwd.to_path_buf(),
        pid,
        started_at: now_ms(),
        started: Instant::now(),
        timeout_secs,
        out: Mutex::new((String::new(), 0)),
        status: Mutex::new(("running".into(), None, None, None)),
        done: done_rx,
        stdin: tokio::sync::Mutex::new(stdin),
        stop: Mutex::new(Some(stop_tx)),
    });
    let mut readers = Vec::new();
    let streams: Vec<(bool, Box<dyn tokio::io::AsyncRead + Unpin + Send>)> = [
        child.stdout.take().map(|s| {
            (
                false,
                Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            )
        }),
        child.stderr.take().map(|s| {
            (
                true,
                Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            )
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    for (is_stderr, mut r) in streams {
        let p = p.clone();
        // A jailed child's stderr starts with pasta's start-up lines: not the child's output.
        let mut noise =
            (is_stderr && !jail.is_empty()).then(crate::sandbox::jail::NoiseFilter::new);
        readers.push(tokio::spawn(async move {
            let mut chunk = [0u8; 8192];
            loop {
                let n = match r.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let kept = match noise.as_mut() {
                    Some(f) => f.feed(&chunk[..n]),
                    None => chunk[..n].to_vec(),
                };
                if !kept.is_empty() {
                    append_capped(&p.out, &String::from_utf8_lossy(&kept));
                }
            }
            if let Some(rest) = noise.as_mut().map(|f| f.finish()).filter(|r| !r.is_empty()) {
                append_capped(&p.out, &String::from_utf8_lossy(&rest));
            }
        }));
    }
    let waiter = p.clone();
    tokio::spawn(async move {
        let kill = |pid: Option<u32>| {
            if let Some(pid) = pid {
                // SAFETY: signalling the process group created for this child.
                unsafe {
                    libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
                }
            }
        };
        let limit = timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(Duration::MAX);
        let sleep = tokio::time::sleep(limit.min(Duration::from_secs(86_400 * 365)));
        let (state, code) = tokio::select! {
            s = child.wait() => ("exited", s.ok().and_then(|s| s.code())),
            _ = sleep => { kill(pid); let _ = child.wait().await; ("timed_out", None) }
            _ = stop_rx => { kill(pid); let _ = child.wait().await; ("stopped", None) }
        };
        for r in readers {
            let _ = tokio::time::timeout(Duration::from_secs(2), r).await;
        }
        *waiter.status.lock() = (
            state.to_string(),
            code,
            Some(now_ms()),
            Some(waiter.started.elapsed().as_millis() as u64),
        );
        let _ = done_tx.send(true);
    });
    Ok(p)
}
