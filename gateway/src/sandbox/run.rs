//! Running one command as a sandbox child: `sh -c` in the workspace root, the sandbox
//! environment only, its own session and process group (a timeout, a cancel or a dropped
//! caller kills everything it started), the head and the tail of its output kept and the
//! whole of a long output written to a file.
//!
//! When `sh` exits while something it started in the background still holds its output
//! pipes (`server &`), the call returns after a short grace instead of waiting for end of
//! file; the leftover processes are handed to the caller as a [`Group`] that kills them when
//! dropped (the model's sandbox keeps it until the block ends).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Bytes kept from the start of each stream.
pub const HEAD: usize = 8 * 1024;
/// Bytes kept from the end of each stream (where a build's errors are).
pub const TAIL: usize = 24 * 1024;
/// How long the output pipes may stay open after `sh` exited before the call returns.
const PIPE_GRACE: Duration = Duration::from_millis(150);

#[derive(Debug, Default)]
pub struct RunOutput {
    pub exit_code: Option<i32>,
    /// The stream's text: all of it, or its head and tail around a line saying what was cut.
    pub stdout: String,
    pub stderr: String,
    /// Bytes written to each stream.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Where the whole output (both streams as they came) was written, when it was cut.
    pub full_output: Option<PathBuf>,
    pub timed_out: bool,
    pub cancelled: bool,
    /// Processes the command left running in the background (killed when dropped).
    pub leftover: Option<Group>,
}

/// A process group (and the session of the same id) that is killed when dropped.
#[derive(Debug)]
pub struct Group(Option<u32>);

impl Group {
    pub fn new(pid: Option<u32>) -> Group {
        Group(pid)
    }

    /// Kills it now.
    pub fn kill(&mut self) {
        if let Some(pid) = self.0.take() {
            kill_tree(pid, libc::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Signals the process group `pid` and every process of the session `pid` (a child that
/// moved to a group of its own, as a shell's job control does, stays in the session).
pub fn kill_tree(pid: u32, signal: libc::c_int) {
    // SAFETY: signalling the process group this runner created for its child.
    unsafe {
        libc::kill(-(pid as libc::pid_t), signal);
    }
    for other in session_members(pid) {
        // SAFETY: a process of the session this runner created.
        unsafe {
            libc::kill(other as libc::pid_t, signal);
        }
    }
}

/// The processes whose session id is `sid` (read from `/proc`; empty where there is none).
fn session_members(sid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp session …`: comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if rest.split_whitespace().nth(3).and_then(|s| s.parse().ok()) == Some(sid) {
            out.push(pid);
        }
    }
    out
}

/// The start and the end of one stream.
#[derive(Debug, Default)]
struct Kept {
    head: Vec<u8>,
    tail: Vec<u8>,
    total: u64,
}

impl Kept {
    fn keep(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = HEAD.saturating_sub(self.head.len());
        if room > 0 {
            let n = room.min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        self.tail.extend_from_slice(data);
        if self.tail.len() > 4 * TAIL {
            let cut = self.tail.len() - TAIL;
            self.tail.drain(..cut);
        }
    }

    fn is_cut(&self) -> bool {
        self.total > (HEAD + TAIL) as u64
    }

    fn text(&self, file: Option<&Path>) -> String {
        if !self.is_cut() {
            let mut all = self.head.clone();
            all.extend_from_slice(&self.tail);
            return String::from_utf8_lossy(&all).to_string();
        }
        let tail = &self.tail[self.tail.len().saturating_sub(TAIL)..];
        let head = String::from_utf8_lossy(&self.head);
        let head = head.trim_end_matches('\u{FFFD}');
        let tail = String::from_utf8_lossy(tail);
        let tail = tail.trim_start_matches('\u{FFFD}');
        let whole = match file {
            Some(f) => format!("; all of it is in {}", f.display()),
            None => String::new(),
        };
        format!(
            "{head}{}… [{} bytes cut from the middle of {} bytes{whole}]\n{tail}",
            if head.ends_with('\n') { "" } else { "\n" },
            self.total as usize - head.len() - tail.len(),
            self.total,
        )
    }
}

/// Writes the whole output to `path` once it outgrows what is kept; nothing otherwise.
struct Spill {
    path: PathBuf,
    pending: Vec<u8>,
    file: Option<tokio::fs::File>,
    failed: bool,
}

impl Spill {
    async fn push(&mut self, chunk: &[u8]) {
        if self.failed {
            return;
        }
        if self.file.is_none() {
            self.pending.extend_from_slice(chunk);
            if self.pending.len() <= 2 * (HEAD + TAIL) {
                return;
            }
            if let Some(dir) = self.path.parent().map(Path::to_path_buf) {
                let _ =
                    tokio::task::spawn_blocking(move || super::shell::ensure_scratch(&dir)).await;
            }
            match tokio::fs::File::create(&self.path).await {
                Ok(f) => self.file = Some(f),
                Err(_) => {
                    self.failed = true;
                    return;
                }
            }
            let pending = std::mem::take(&mut self.pending);
            self.write(&pending).await;
        } else {
            self.write(chunk).await;
        }
    }

    async fn write(&mut self, data: &[u8]) {
        if let Some(f) = &mut self.file {
            if f.write_all(data).await.is_err() {
                self.failed = true;
            }
        }
    }

    /// The file, when the output was written to it.
    async fn finish(mut self) -> Option<PathBuf> {
        let f = self.file.as_mut()?;
        let _ = f.flush().await;
        (!self.failed).then_some(self.path)
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
/// exactly `env`, in `cwd`, in a session and process group of its own, stdout/stderr piped,
/// killed on drop.
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
        .kill_on_drop(true);
    // SAFETY: setsid is async-signal-safe; it makes the child the leader of a new session
    // and process group (ids = its pid), which is what the kill paths signal.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
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
    run_full(command, root, env, jail, timeout, cancel, None).await
}

/// [`run_with`], writing the whole output to `spill` when it is longer than what is kept.
pub async fn run_full(
    command: &str,
    root: &Path,
    env: &BTreeMap<String, String>,
    jail: Option<&[String]>,
    timeout: Duration,
    cancel: &CancellationToken,
    spill: Option<PathBuf>,
) -> std::io::Result<RunOutput> {
    let started = std::time::Instant::now();
    let mut child =
        sh_command(command, root, env, jail.unwrap_or_default(), Stdio::null()).spawn()?;
    // From here on, a dropped call (the block's limit, a cancelled turn) kills the tree.
    let mut group = Group::new(child.id());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let kept = Arc::new(parking_lot::Mutex::new((Kept::default(), Kept::default())));
    let mut readers = Vec::new();
    let streams: [(bool, Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>); 2] = [
        (false, child.stdout.take().map(|s| Box::new(s) as _)),
        (true, child.stderr.take().map(|s| Box::new(s) as _)),
    ];
    for (is_err, stream) in streams {
        let Some(mut r) = stream else {
            return Err(std::io::Error::other("no output pipe"));
        };
        let (kept, tx) = (kept.clone(), tx.clone());
        let mut noise = (is_err && jail.is_some()).then(crate::sandbox::jail::NoiseFilter::new);
        readers.push(tokio::spawn(async move {
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let n = match r.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let data = match noise.as_mut() {
                    Some(f) => f.feed(&chunk[..n]),
                    None => chunk[..n].to_vec(),
                };
                {
                    let mut k = kept.lock();
                    if is_err { &mut k.1 } else { &mut k.0 }.keep(&data);
                }
                let _ = tx.send(data);
            }
            if let Some(rest) = noise.as_mut().map(|f| f.finish()).filter(|r| !r.is_empty()) {
                kept.lock().1.keep(&rest);
                let _ = tx.send(rest);
            }
        }));
    }
    drop(tx);
    let writer = tokio::spawn(async move {
        let mut spill = spill.map(|path| Spill {
            path,
            pending: Vec::new(),
            file: None,
            failed: false,
        });
        while let Some(chunk) = rx.recv().await {
            if let Some(s) = &mut spill {
                s.push(&chunk).await;
            }
        }
        match spill {
            Some(s) => s.finish().await,
            None => None,
        }
    });
    let mut result = RunOutput::default();
    tokio::select! {
        status = child.wait() => result.exit_code = status?.code(),
        _ = tokio::time::sleep(timeout) => {
            result.timed_out = true;
            group.kill();
            let _ = child.wait().await;
        }
        _ = cancel.cancelled() => {
            result.cancelled = true;
            group.kill();
            let _ = child.wait().await;
        }
    }
    // `sh` is gone; its pipes close unless something it started in the background holds
    // them. Wait briefly, then return without them.
    let all_read = tokio::time::timeout(PIPE_GRACE, async {
        for r in &mut readers {
            let _ = r.await;
        }
    })
    .await
    .is_ok();
    if all_read {
        group.kill(); // anything left that closed its output (a daemon) goes too
        result.full_output = writer.await.ok().flatten();
    } else {
        result.leftover = Some(group);
    }
    {
        let k = kept.lock();
        let file = result.full_output.as_deref();
        result.stdout = k.0.text(file);
        result.stderr = k.1.text(file);
        result.stdout_bytes = k.0.total;
        result.stderr_bytes = k.1.total;
    }
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
#[path = "run_tests.rs"]
mod tests;
