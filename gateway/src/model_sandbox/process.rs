//! One sandbox runtime process: `python3 -I -S -c <runtime.py> 0`, its control channel on
//! stdin/stdout (one end of a Unix socket pair on both), its own process group, behind the
//! jail's argv prefix when the session's project asks for the jail.
//!
//! Why a plain `python3` and not the embedded CPython of the extension workers: the sandbox
//! must hold nothing of the gateway (no SDK, no pyo3 bridge, no secrets in its address
//! space), start fast, and pass through `pasta` and `bwrap` unchanged; `-I -S` keeps it
//! hermetic (no site-packages, no `PYTHON*` variables). The channel rides on stdio because
//! `pasta` closes every other inherited descriptor.

use super::protocol::{self, Answer, CallError, FnEntry, FromRuntime, ToRuntime};
use futures::stream::{FuturesUnordered, StreamExt};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// The runtime's source, handed to `python3 -c`: the process and its channel, then the
/// session's namespace, jobs and the functions whose answers are objects.
pub const RUNTIME_SOURCE: &str = concat!(
    include_str!("runtime.py"),
    include_str!("runtime_session.py")
);

/// How long a new runtime may take to say `ready`.
const READY_LIMIT: Duration = Duration::from_secs(15);
/// Longest control line accepted from a runtime (a block's output is capped far below).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Everything needed to start a runtime for a session.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub python: PathBuf,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    /// The jail's argv prefix (empty: no jail).
    pub jail: Vec<String>,
}

/// Which interpreter runs sandboxes: `VIS_SANDBOX_PYTHON`, else Debian's `/usr/bin/python3`,
/// else `python3` on the gateway's `PATH`.
pub fn default_python() -> PathBuf {
    if let Some(p) = crate::start_env::var("VIS_SANDBOX_PYTHON") {
        return PathBuf::from(p);
    }
    let debian = Path::new("/usr/bin/python3");
    if debian.exists() {
        return debian.to_path_buf();
    }
    PathBuf::from("python3")
}

/// The oldest CPython the runtime supports.
pub const MIN_PYTHON: (u32, u32) = (3, 9);

/// Checks the sandbox's interpreter at start: `Err` (refuse to start) when it runs but is
/// older than [`MIN_PYTHON`] or cannot run the runtime's flags; a missing interpreter only
/// warns (blocks then fail with a message naming it).
pub async fn check_python(python: PathBuf) -> Result<(), String> {
    let run = tokio::process::Command::new(&python)
        .args([
            "-I",
            "-S",
            "-c",
            "import sys; print('%d.%d.%d' % sys.version_info[:3])",
        ])
        .env_clear()
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(Duration::from_secs(10), run).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            tracing::warn!(python = %python.display(), error = %e,
                "the model's sandbox interpreter cannot be started; python_execution blocks will fail");
            return Ok(());
        }
        Err(_) => return Ok(()),
    };
    let need = format!("{}.{}", MIN_PYTHON.0, MIN_PYTHON.1);
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let version: Vec<u32> = text.split('.').filter_map(|p| p.parse().ok()).collect();
    match version.as_slice() {
        [major, minor, ..] if out.status.success() && (*major, *minor) >= MIN_PYTHON => Ok(()),
        [_, _, ..] if out.status.success() => Err(format!(
            "the model's sandbox needs CPython {need} or newer, but {} is {text}; install a newer \
             python3 or point VIS_SANDBOX_PYTHON at one",
            python.display()
        )),
        _ => Err(format!(
            "the model's sandbox needs CPython {need} or newer, but {} did not run ({}): {}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// Why a block could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot start the Python sandbox ({python}): {why}")]
    Spawn { python: String, why: String },
    #[error("the Python sandbox exited{}", detail(.0))]
    Exited(String),
    #[error("the Python sandbox broke the protocol: {0}")]
    Protocol(String),
}

fn detail(s: &str) -> String {
    if s.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", s.trim())
    }
}

/// The end of a block, as the runtime reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    pub output: String,
    pub output_bytes: u64,
    pub error: Option<String>,
    /// The model's definitions, when the block changed them.
    pub defs: Option<Vec<protocol::Def>>,
    /// A line to put before the output (the sandbox restarted; a definition did not come back).
    pub note: Option<String>,
}

/// Answers the host calls of a running block.
#[async_trait::async_trait]
pub trait HostCalls: Send + Sync {
    async fn call(
        &self,
        func: &str,
        args: serde_json::Map<String, serde_json::Value>,
    ) -> Result<serde_json::Value, CallError>;
}

/// A live runtime. Dropping it kills its whole process group.
pub struct Runtime {
    child: tokio::process::Child,
    pgid: Option<u32>,
    lines: tokio::io::Lines<BufReader<OwnedReadHalf>>,
    writer: OwnedWriteHalf,
    stderr: Option<tokio::process::ChildStderr>,
    next_run: u64,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(pid) = self.pgid.take() {
            // SAFETY: signalling the process group this runtime was started in.
            unsafe {
                libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
            }
        }
    }
}

impl Runtime {
    /// Starts a runtime and waits for its `ready`.
    pub async fn spawn(spec: &SpawnSpec) -> Result<Runtime, RuntimeError> {
        let fail = |why: String| RuntimeError::Spawn {
            python: spec.python.display().to_string(),
            why,
        };
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(|e| fail(e.to_string()))?;
        let theirs_out = theirs.try_clone().map_err(|e| fail(e.to_string()))?;
        ours.set_nonblocking(true)
            .map_err(|e| fail(e.to_string()))?;
        let ours = tokio::net::UnixStream::from_std(ours).map_err(|e| fail(e.to_string()))?;
        let python = spec.python.to_string_lossy().to_string();
        let mut argv: Vec<&str> = spec.jail.iter().map(String::as_str).collect();
        argv.extend([python.as_str(), "-I", "-S", "-c", RUNTIME_SOURCE, "0"]);
        let mut cmd = tokio::process::Command::new(argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(&spec.env)
            .env("PWD", &spec.cwd)
            .current_dir(&spec.cwd)
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs_out)))
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| fail(e.to_string()))?;
        let pgid = child.id();
        let stderr = child.stderr.take();
        let (read, writer) = ours.into_split();
        let mut rt = Runtime {
            child,
            pgid,
            lines: BufReader::new(read).lines(),
            writer,
            stderr,
            next_run: 0,
        };
        match tokio::time::timeout(READY_LIMIT, rt.next()).await {
            Ok(Ok(FromRuntime::Ready { .. })) => Ok(rt),
            Ok(Ok(other)) => Err(fail(format!("expected `ready`, got {other:?}"))),
            Ok(Err(e)) => Err(fail(e.to_string())),
            Err(_) => Err(fail(format!("no answer within {READY_LIMIT:?}"))),
        }
    }

    async fn next(&mut self) -> Result<FromRuntime, RuntimeError> {
        match read_msg(&mut self.lines).await {
            Some(r) => r,
            None => Err(RuntimeError::Exited(self.exit_detail().await)),
        }
    }

    /// The exit status and the first KiB of what the process wrote to stderr before its
    /// runtime took the descriptor over (a crash of the interpreter itself).
    async fn exit_detail(&mut self) -> String {
        let status = tokio::time::timeout(Duration::from_secs(2), self.child.wait())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|s| s.to_string())
            .unwrap_or_default();
        let mut err = String::new();
        if let Some(mut e) = self.stderr.take() {
            let mut buf = vec![0u8; 1024];
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(200), e.read(&mut buf)).await
            {
                err = crate::sandbox::jail::strip_pasta_noise(&String::from_utf8_lossy(&buf[..n]));
            }
        }
        format!("{status} {err}")
    }

    /// Runs one block to its end, answering its host calls (concurrently, in any order).
    /// The caller bounds it in time; dropping the future mid-block leaves the runtime
    /// unusable, so the caller must drop the runtime too.
    pub async fn run(
        &mut self,
        code: &str,
        functions: &[FnEntry],
        restore: &[protocol::Def],
        host: &dyn HostCalls,
    ) -> Result<Done, RuntimeError> {
        self.next_run += 1;
        let run = self.next_run;
        let sent = write_msg(
            &mut self.writer,
            &ToRuntime::Run {
                id: run,
                code,
                functions,
                restore,
            },
        )
        .await;
        let result = match sent {
            Ok(()) => self.exchange(run, host).await,
            Err(()) => Err(None),
        };
        match result {
            Ok(done) => Ok(done),
            Err(Some(e)) => Err(e),
            Err(None) => Err(RuntimeError::Exited(self.exit_detail().await)),
        }
    }

    /// Reads the block's messages until its `done`; `Err(None)`: the channel closed.
    async fn exchange(
        &mut self,
        run: u64,
        host: &dyn HostCalls,
    ) -> Result<Done, Option<RuntimeError>> {
        let (lines, writer) = (&mut self.lines, &mut self.writer);
        let mut pending = FuturesUnordered::new();
        loop {
            tokio::select! {
                msg = read_msg(lines) => match msg {
                    None => return Err(None),
                    Some(Err(e)) => return Err(Some(e)),
                    Some(Ok(FromRuntime::Call { id, func, args, .. })) => {
                        pending.push(async move {
                            let answer = match host.call(&func, args).await {
                                Ok(v) => Answer::Ok(v),
                                Err(e) => Answer::Error(e),
                            };
                            (id, answer)
                        });
                    }
                    Some(Ok(FromRuntime::Done { id, output, output_bytes, error, defs, restore_failed })) if id == run => {
                        let note = (!restore_failed.is_empty()).then(|| format!(
                            "[not restored: {}]", restore_failed.join("; ")));
                        return Ok(Done { output, output_bytes, error, defs, note });
                    }
                    Some(Ok(other)) => {
                        return Err(Some(RuntimeError::Protocol(format!("unexpected {other:?}"))));
                    }
                },
                Some((id, answer)) = pending.next(), if !pending.is_empty() => {
                    write_msg(writer, &ToRuntime::Reply { id, answer }).await.map_err(|()| None)?;
                }
            }
        }
    }
}

/// The next message; `None` when the channel closed.
async fn read_msg(
    lines: &mut tokio::io::Lines<BufReader<OwnedReadHalf>>,
) -> Option<Result<FromRuntime, RuntimeError>> {
    match lines.next_line().await {
        Ok(Some(l)) if l.len() > MAX_LINE => Some(Err(RuntimeError::Protocol(format!(
            "a line of {} bytes",
            l.len()
        )))),
        Ok(Some(l)) => Some(
            serde_json::from_str(&l)
                .map_err(|e| RuntimeError::Protocol(format!("{e} in {:.200}", l))),
        ),
        Ok(None) | Err(_) => None,
    }
}

async fn write_msg(writer: &mut OwnedWriteHalf, msg: &ToRuntime<'_>) -> Result<(), ()> {
    writer.write_all(&protocol::line(msg)).await.map_err(|_| ())
}
