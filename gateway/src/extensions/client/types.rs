//! The data of a worker call: its context, its errors, the answer of a host door, what a
//! worker is started with and who owns it.

use crate::extensions::protocol::WireError;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Who a request acts for; door calls made while serving it are answered in this context.
#[derive(Debug, Clone, Default)]
pub struct CallCtx {
    pub session_id: Option<String>,
    pub project_root: Option<PathBuf>,
    pub workspace_root: Option<PathBuf>,
    /// The request runs an `fs_access` gate: file doors it calls are not gated again.
    pub is_gate: bool,
}

/// Why a call into a worker failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Extension code raised (type, `Class: message`, traceback).
    Python(WireError),
    /// The call did not answer in time; the worker was killed.
    Timeout(Duration),
    /// The worker stayed busy with other calls for longer than the caller would wait.
    Busy(Duration),
    /// The worker process died during the call (crash, `os._exit`).
    Exited(String),
    /// The worker could not be started.
    Start(String),
    /// Nothing to call (unknown extension, tool, or a file that failed to load here).
    Unavailable(String),
}

impl CallError {
    /// One-line message for users and the model.
    pub fn message(&self) -> String {
        match self {
            CallError::Python(e) => e.message.clone(),
            CallError::Timeout(d) => format!(
                "the extension call timed out after {:.1} s; its worker was stopped and \
                 the next call starts a fresh one",
                d.as_secs_f64()
            ),
            CallError::Busy(d) => format!(
                "the extension worker stayed busy with other calls for more than {:.1} s",
                d.as_secs_f64()
            ),
            CallError::Exited(why) => format!(
                "the extension worker exited during the call ({why}); the next call starts \
                 a fresh one"
            ),
            CallError::Start(why) => format!("cannot start an extension worker: {why}"),
            CallError::Unavailable(why) => why.clone(),
        }
    }

    pub fn traceback(&self) -> Option<String> {
        match self {
            CallError::Python(e) => e.traceback.clone().filter(|t| !t.is_empty()),
            _ => None,
        }
    }

    pub fn kind(&self) -> &str {
        match self {
            CallError::Python(e) => &e.kind,
            CallError::Timeout(_) => "Timeout",
            CallError::Busy(_) => "Busy",
            CallError::Exited(_) => "WorkerExited",
            CallError::Start(_) => "WorkerStart",
            CallError::Unavailable(_) => "Unavailable",
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

/// A failed door: raised in Python as `python_type` (default `RuntimeError`).
#[derive(Debug, Clone)]
pub struct DoorError {
    pub message: String,
    pub python_type: Option<&'static str>,
}

impl DoorError {
    pub fn new(message: impl Into<String>) -> DoorError {
        DoorError {
            message: message.into(),
            python_type: None,
        }
    }
    pub fn typed(python_type: &'static str, message: impl Into<String>) -> DoorError {
        DoorError {
            message: message.into(),
            python_type: Some(python_type),
        }
    }
}

/// An extension file a fresh worker loads before its first call.
#[derive(Debug, Clone)]
pub struct Preload {
    pub ctx: CallCtx,
    pub file: PathBuf,
    pub source: Arc<Vec<u8>>,
    /// The frozen copy of the file's import root (first on `sys.path`).
    pub import_root: Option<PathBuf>,
}

/// The `load` request payload.
pub fn load_payload(
    file: &std::path::Path,
    source: &[u8],
    import_root: Option<&std::path::Path>,
) -> Value {
    json!({
        "file": file.to_string_lossy(),
        "source": base64_encode(source),
        "import_root": import_root.map(|p| p.to_string_lossy().into_owned()),
    })
}

/// How to start a worker process.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub exe: PathBuf,
    pub home: PathBuf,
    pub label: String,
    pub cwd: Option<PathBuf>,
    pub load_timeout: Duration,
    /// Serve network filters over a filter lane (a filter worker).
    pub filter_lane: bool,
    /// The extensions' log file: what extension code prints (stderr) is written there too.
    pub log: Option<crate::extensions::logfile::LogFile>,
}

/// What a request answers.
pub(crate) type Outcome = Result<Value, CallError>;

pub fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
