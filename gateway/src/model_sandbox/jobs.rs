//! Background jobs of the model's sandbox: `shell(cmd, background=True)` starts one and
//! returns its handle at once. A job is a sandbox child like any other (the session's child
//! environment and proxy token, the jail when the project asks), in a session and process
//! group of its own, writing stdout and stderr straight into a log file of the session's
//! scratch folder (no pipe the gateway must drain, so nothing can hang on it). Jobs belong to
//! the gateway, not to the Python runtime: they live across blocks, turns and runtime
//! restarts, and end when stopped, when the session is deleted or when the gateway stops.

use crate::sandbox::run::{kill_tree, Group};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Running jobs a session may have when `vis.yml` says nothing
/// (`python_execution.max_background_jobs`).
pub const DEFAULT_MAX_JOBS: usize = 8;
/// Finished jobs kept listed per session (their logs stay on disk until the session goes).
const FINISHED_KEPT: usize = 32;
/// Most bytes one `logs()` call hands back.
const LOGS_MAX: u64 = 64 * 1024;
/// How long a stopped job gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// How a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Exited,
    Stopped,
}

/// What the sandbox sees of a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobInfo {
    pub id: u32,
    pub cmd: String,
    pub pid: Option<u32>,
    pub state: JobState,
    pub alive: bool,
    pub exit_code: Option<i32>,
    /// Seconds since it started (until it ended, for a finished job).
    pub seconds: f64,
    /// The log file (stdout and stderr as they came).
    pub log: String,
    pub log_bytes: u64,
}

/// A window of a job's log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobLogs {
    pub text: String,
    /// Where the window starts and ends (byte offsets; pass `end` as `since` next time).
    pub start: u64,
    pub end: u64,
    /// The log's size now.
    pub size: u64,
}

/// One background job.
pub struct Job {
    pub id: u32,
    pub cmd: String,
    pid: Option<u32>,
    log: PathBuf,
    started: Instant,
    state: Mutex<(JobState, Option<i32>, Option<Duration>)>,
    done: watch::Receiver<bool>,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Job {
    pub fn info(&self) -> JobInfo {
        let (state, exit_code, took) = *self.state.lock();
        JobInfo {
            id: self.id,
            cmd: self.cmd.clone(),
            pid: self.pid,
            state,
            alive: state == JobState::Running,
            exit_code,
            seconds: took.unwrap_or_else(|| self.started.elapsed()).as_secs_f64(),
            log: self.log.display().to_string(),
            log_bytes: std::fs::metadata(&self.log).map_or(0, |m| m.len()),
        }
    }

    pub fn is_running(&self) -> bool {
        self.state.lock().0 == JobState::Running
    }

    /// Asks the job to stop (SIGTERM to its tree, SIGKILL after a grace).
    pub fn stop(&self) {
        if let Some(tx) = self.stop.lock().take() {
            let _ = tx.send(());
        }
    }

    /// Kills the tree at once (session deleted, gateway stopping).
    fn kill_now(&self) {
        if self.is_running() {
            if let Some(pid) = self.pid {
                kill_tree(pid, libc::SIGKILL);
            }
        }
        self.stop();
    }

    /// Waits until the job ends or `limit` passes; whether it ended.
    pub async fn wait(&self, limit: Duration) -> bool {
        let mut done = self.done.clone();
        let ended = tokio::time::timeout(limit, done.wait_for(|d| *d))
            .await
            .is_ok();
        ended
    }

    /// The last `tail` lines, or what follows byte `since`, at most [`LOGS_MAX`] bytes.
    pub async fn logs(&self, tail: Option<usize>, since: Option<u64>) -> std::io::Result<JobLogs> {
        let path = self.log.clone();
        tokio::task::spawn_blocking(move || read_log(&path, tail, since))
            .await
            .map_err(std::io::Error::other)?
    }
}

fn read_log(path: &Path, tail: Option<usize>, since: Option<u64>) -> std::io::Result<JobLogs> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let size = f.metadata()?.len();
    let start = match (since, tail) {
        (Some(s), _) => s.min(size),
        (None, _) => size.saturating_sub(LOGS_MAX),
    };
    let end = (start + LOGS_MAX).min(size);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = vec![0u8; (end - start) as usize];
    f.read_exact(&mut buf)?;
    let mut text = String::from_utf8_lossy(&buf).to_string();
    let mut start = start;
    if since.is_none() {
        let n = tail.unwrap_or(100);
        let body = text.strip_suffix('\n').unwrap_or(&text);
        let cut = body
            .rmatch_indices('\n')
            .nth(n.saturating_sub(1))
            .map(|(i, _)| i + 1);
        if let Some(cut) = cut {
            start += cut as u64;
            text = text[cut..].to_string();
        } else if n == 0 {
            text.clear();
            start = end;
        }
    }
    Ok(JobLogs {
        text,
        start,
        end,
        size,
    })
}

/// Why a job did not start.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(
        "{0} background jobs are running in this session, the limit \
         (python_execution.max_background_jobs in vis.yml); stop one first (jobs()[i].stop())"
    )]
    Limit(usize),
    #[error("cannot start the job: {0}")]
    Start(String),
}

/// What starting a job needs.
pub struct JobSpec<'a> {
    pub sid: &'a str,
    pub cmd: &'a str,
    pub cwd: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    /// The jail's argv prefix (empty: none).
    pub jail: &'a [String],
    pub log: PathBuf,
    pub max_running: usize,
}

#[derive(Default)]
struct SessionJobs {
    next: u32,
    list: Vec<Arc<Job>>,
}

/// The jobs of every session.
#[derive(Default)]
pub struct Jobs {
    sessions: Mutex<HashMap<String, SessionJobs>>,
}

impl Jobs {
    /// Starts a job and returns it at once.
    pub async fn start(&self, spec: JobSpec<'_>) -> Result<Arc<Job>, JobError> {
        let id = {
            let mut map = self.sessions.lock();
            let s = map.entry(spec.sid.to_string()).or_default();
            let running = s.list.iter().filter(|j| j.is_running()).count();
            if running >= spec.max_running {
                return Err(JobError::Limit(running));
            }
            s.next += 1;
            s.next
        };
        let log = spec.log.clone();
        let file = tokio::task::spawn_blocking(move || {
            if let Some(dir) = log.parent() {
                crate::sandbox::shell::ensure_scratch(dir)?;
            }
            let out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)?;
            let err = out.try_clone()?;
            Ok::<_, std::io::Error>((out, err))
        })
        .await
        .map_err(|e| JobError::Start(e.to_string()))?
        .map_err(|e| JobError::Start(format!("{}: {e}", spec.log.display())))?;
        let jailed = !spec.jail.is_empty();
        let mut cmd =
            crate::sandbox::run::sh_command(spec.cmd, spec.cwd, spec.env, spec.jail, Stdio::null());
        cmd.stdout(Stdio::from(file.0));
        // A jailed child's stderr starts with pasta's lines: filtered on the way to the log.
        if jailed {
            cmd.stderr(Stdio::piped());
        } else {
            cmd.stderr(Stdio::from(file.1));
        }
        cmd.kill_on_drop(false);
        let mut child = cmd.spawn().map_err(|e| JobError::Start(e.to_string()))?;
        let pid = child.id();
        if let Some(err) = child.stderr.take() {
            let log = spec.log.clone();
            tokio::spawn(filter_into(err, log));
        }
        let (done_tx, done) = watch::channel(false);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let job = Arc::new(Job {
            id,
            cmd: spec.cmd.to_string(),
            pid,
            log: spec.log,
            started: Instant::now(),
            state: Mutex::new((JobState::Running, None, None)),
            done,
            stop: Mutex::new(Some(stop_tx)),
        });
        let waiter = job.clone();
        tokio::spawn(async move {
            let mut group = Group::new(pid);
            let (state, code) = tokio::select! {
                s = child.wait() => (JobState::Exited, s.ok().and_then(|s| s.code())),
                _ = stop_rx => {
                    if let Some(p) = pid {
                        kill_tree(p, libc::SIGTERM);
                    }
                    if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_err() {
                        group.kill();
                        let _ = child.wait().await;
                    }
                    (JobState::Stopped, None)
                }
            };
            group.kill(); // what the job left running ends with it
            *waiter.state.lock() = (state, code, Some(waiter.started.elapsed()));
            let _ = done_tx.send(true);
        });
        let mut map = self.sessions.lock();
        let s = map.entry(spec.sid.to_string()).or_default();
        s.list.push(job.clone());
        let finished: Vec<usize> = (0..s.list.len())
            .filter(|i| !s.list[*i].is_running())
            .collect();
        if finished.len() > FINISHED_KEPT {
            let drop_n = finished.len() - FINISHED_KEPT;
            let gone: Vec<usize> = finished.into_iter().take(drop_n).collect();
            let mut i = 0;
            s.list.retain(|_| {
                i += 1;
                !gone.contains(&(i - 1))
            });
        }
        Ok(job)
    }

    /// The session's jobs, oldest first.
    pub fn list(&self, sid: &str) -> Vec<Arc<Job>> {
        self.sessions
            .lock()
            .get(sid)
            .map(|s| s.list.clone())
            .unwrap_or_default()
    }

    pub fn get(&self, sid: &str, id: u32) -> Option<Arc<Job>> {
        self.list(sid).into_iter().find(|j| j.id == id)
    }

    /// Kills the session's jobs and forgets them (session deleted).
    pub fn end_session(&self, sid: &str) {
        let gone = self.sessions.lock().remove(sid);
        for j in gone.map(|s| s.list).unwrap_or_default() {
            j.kill_now();
        }
    }

    /// Kills every job (gateway stopping).
    pub fn end_all(&self) {
        let all: Vec<SessionJobs> = self.sessions.lock().drain().map(|(_, s)| s).collect();
        for j in all.into_iter().flat_map(|s| s.list) {
            j.kill_now();
        }
    }
}

async fn filter_into(mut err: tokio::process::ChildStderr, log: PathBuf) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut f) = tokio::fs::OpenOptions::new().append(true).open(&log).await else {
        return;
    };
    let mut noise = crate::sandbox::jail::NoiseFilter::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = match err.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let kept = noise.feed(&chunk[..n]);
        if !kept.is_empty() && f.write_all(&kept).await.is_err() {
            return;
        }
    }
    let _ = f.write_all(&noise.finish()).await;
}
