//! The worker process: `vis-gateway worker --home H` (hidden sub-command).
//!
//! It embeds CPython (the interpreter linked at build time), writes the embedded SDK to
//! `<home>/python/<hash>/`, installs the host bridge and serves gateway requests read from
//! stdin, answering on stdout (one JSON object per line, see [`super::protocol`]).
//!
//! File descriptors: the protocol uses private CLOEXEC duplicates of the original stdin and
//! stdout; fd 1 is then pointed at stderr (so `print()` in extension code goes to the log, not
//! into the protocol) and fd 0 at `/dev/null` (so a child process started by an extension
//! cannot read protocol messages). stderr is forwarded by the gateway to its tracing log.
//!
//! Threads: a reader thread parses incoming lines; requests go to the main thread, which
//! runs Python. A host door called on the main thread waits on the same queue, so the
//! gateway may send a nested request (an `fs_access` gate) while a door call is pending.
//! Door calls from other Python threads wait on their own channel. When stdin closes (the
//! gateway is gone) the worker exits at once.
//!
//! A filter worker also gets filter lanes (`--lane-fd N`, see [`super::lane`]):
//! a dedicated thread runs network filters directly, without JSON and without waiting for
//! the main thread. Calls into one extension stay serialized: the main thread and the lane
//! thread take the extension file's lock around its code (re-entrant on the main thread,
//! so a nested request for the same file does not wait for itself); the lane thread waits
//! for it at most until the call's deadline and then answers "busy".

mod lanes;

use super::protocol::{Msg, WireError};
use anyhow::{anyhow, Context, Result};
use pyo3::prelude::*;
use pyo3::types::PyModule;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::io::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

/// Arguments of the hidden `worker` sub-command (the home comes from the global `--home`).
#[derive(clap::Args, Debug, Clone)]
pub struct WorkerArgs {
    /// A label for log lines (`registration`, or the session id).
    #[arg(long, default_value = "worker")]
    pub label: String,
    /// An inherited socket serving network-filter calls (a filter lane); repeated, one
    /// serving thread each.
    #[arg(long, hide = true)]
    pub lane_fd: Vec<i32>,
    /// After answering, poll the filter lane this long before sleeping (microseconds).
    #[arg(long, hide = true, default_value_t = 0)]
    pub lane_spin_us: u64,
    /// The SDK import root the gateway wrote (without it the worker writes the SDK under the
    /// home itself: a worker started by hand).
    #[arg(long, hide = true)]
    pub sdk: Option<PathBuf>,
}

struct Io {
    out: Mutex<File>,
    inbox: Mutex<Receiver<Msg>>,
    inbox_tx: Sender<Msg>,
    pending: Mutex<HashMap<u64, Sender<Msg>>>,
    early: Mutex<HashMap<u64, Msg>>,
    serving: Mutex<Vec<u64>>,
    next_door: AtomicU64,
    main: ThreadId,
    glue: OnceLock<Py<PyModule>>,
}

static IO: OnceLock<Io> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn io() -> &'static Io {
    match IO.get() {
        Some(io) => io,
        None => hard_exit(3),
    }
}

fn hard_exit(code: i32) -> ! {
    let _ = std::io::stderr().flush();
    // Python is never finalized: background threads of extension code must not keep the
    // process alive and interpreter teardown can run arbitrary code.
    unsafe { libc::_exit(code) }
}

fn send(msg: &Msg) {
    let io = io();
    let mut out = lock(&io.out);
    let line = msg.to_line();
    let written = out
        .write_all(line.as_bytes())
        .and_then(|_| out.write_all(b"\n"))
        .and_then(|_| out.flush());
    if written.is_err() {
        // The gateway is gone.
        hard_exit(0);
    }
}

/// Moves the protocol onto private descriptors; see the module docs.
fn take_stdio() -> Result<(File, File)> {
    unsafe {
        let input = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3);
        let output = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if input < 0 || output < 0 {
            return Err(anyhow!("cannot duplicate the protocol descriptors"));
        }
        if libc::dup2(2, 1) < 0 {
            return Err(anyhow!("cannot point stdout at stderr"));
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::close(null);
        }
        Ok((File::from_raw_fd(input), File::from_raw_fd(output)))
    }
}

/// The prefix of the CPython the binary was built against (`PYO3_PYTHON` at build time),
/// so that a different `python3` on PATH (pyenv) is never used for the standard library.
fn python_home() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("VIS_WORKER_PYTHONHOME") {
        return Some(PathBuf::from(h));
    }
    let exe = option_env!("PYO3_PYTHON").unwrap_or("/usr/bin/python3");
    let real = std::fs::canonicalize(exe).unwrap_or_else(|_| PathBuf::from(exe));
    let prefix = real.parent()?.parent()?.to_path_buf();
    // `/usr/bin/python3` resolves to `/usr/bin/python3.11`: its stdlib is `lib/python3.11`.
    let version = real.file_name()?.to_string_lossy().into_owned();
    let has_stdlib = |v: &str| prefix.join("lib").join(v).join("os.py").exists();
    if has_stdlib(&version) {
        return Some(prefix);
    }
    let entries = std::fs::read_dir(prefix.join("lib")).ok()?;
    let found = entries.flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.starts_with("python3.") && has_stdlib(&name)
    });
    found.then_some(prefix)
}

fn prepare_environment() {
    // Before any other thread exists.
    for var in [
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONEXECUTABLE",
    ] {
        std::env::remove_var(var);
    }
    if let Some(home) = python_home() {
        std::env::set_var("PYTHONHOME", home);
    }
    std::env::set_var("PYTHONUNBUFFERED", "1");
}

/// Entry point of `vis-gateway worker`.
pub fn run(home: Option<PathBuf>, args: WorkerArgs) -> Result<ExitCode> {
    let home = match home.or_else(|| std::env::var_os("VIS_HOME").map(PathBuf::from)) {
        Some(h) => h,
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".vis"),
    };
    let (input, output) = take_stdio()?;
    let sdk = match args.sdk.clone() {
        Some(sdk) => sdk,
        None => super::embed::materialize(&home)?,
    };
    prepare_environment();
    pyo3::prepare_freethreaded_python();

    let (inbox_tx, inbox_rx) = channel();
    let state = Io {
        out: Mutex::new(output),
        inbox: Mutex::new(inbox_rx),
        inbox_tx,
        pending: Mutex::new(HashMap::new()),
        early: Mutex::new(HashMap::new()),
        serving: Mutex::new(Vec::new()),
        next_door: AtomicU64::new(1),
        main: std::thread::current().id(),
        glue: OnceLock::new(),
    };
    if IO.set(state).is_err() {
        return Err(anyhow!("the worker was started twice"));
    }
    Python::with_gil(|py| init_python(py, &sdk, &args.label))
        .map_err(|e| anyhow!("cannot initialize the worker's Python: {e}"))?;

    lanes::start(
        &args.lane_fd,
        Duration::from_micros(args.lane_spin_us.min(10_000)),
    )?;

    let label = args.label.clone();
    std::thread::Builder::new()
        .name("vis-worker-reader".into())
        .spawn(move || reader(input, &label))
        .context("cannot start the reader thread")?;

    loop {
        let msg = lock(&io().inbox).recv();
        match msg {
            Ok(Msg::Request { id, op, payload }) => serve(id, &op, payload),
            Ok(Msg::DoorReply { id, .. }) => {
                eprintln!("vis worker: dropped a door reply {id} nobody waits for");
            }
            Ok(_) => {}
            Err(_) => hard_exit(0),
        }
    }
}

fn init_python(py: Python<'_>, sdk: &Path, label: &str) -> PyResult<()> {
    let sys = py.import("sys")?;
    sys.getattr("path")?
        .call_method1("insert", (0, sdk.to_string_lossy().into_owned()))?;
    sys.setattr("argv", vec![format!("vis-gateway-worker:{label}")])?;
    let code = CString::new(super::embed::GLUE)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    let glue = PyModule::from_code(py, &code, c"<vis-worker>", c"_vis_worker")?;
    let door_fn = wrap_pyfunction!(door, py)?;
    glue.getattr("install")?.call1((door_fn,))?;
    let _ = io().glue.set(glue.unbind());
    Ok(())
}

fn reader(input: File, label: &str) {
    let io = io();
    let mut lines = BufReader::new(input);
    let mut line = String::new();
    loop {
        line.clear();
        match lines.read_line(&mut line) {
            Ok(0) | Err(_) => hard_exit(0),
            Ok(_) => {}
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        match Msg::parse(text) {
            Ok(msg @ Msg::Request { .. }) => {
                let _ = io.inbox_tx.send(msg);
            }
            Ok(msg @ Msg::DoorReply { .. }) => {
                let id = match &msg {
                    Msg::DoorReply { id, .. } => *id,
                    _ => 0,
                };
                let target = lock(&io.pending).remove(&id);
                match target {
                    Some(tx) => {
                        let _ = tx.send(msg);
                    }
                    None => eprintln!("vis worker {label}: a door reply {id} nobody waits for"),
                }
            }
            Ok(_) => eprintln!("vis worker {label}: ignored an unexpected message"),
            Err(e) => eprintln!("vis worker {label}: unreadable message: {e}"),
        }
    }
}

/// Runs one gateway request on the main thread and answers it.
fn serve(id: u64, op: &str, payload: Value) {
    if op == "shutdown" {
        send(&Msg::Response {
            id,
            ok: true,
            value: Value::Null,
            error: None,
            restart: false,
        });
        Python::with_gil(|py| {
            if let Ok(sys) = py.import("sys") {
                for s in ["stdout", "stderr"] {
                    if let Ok(stream) = sys.getattr(s) {
                        let _ = stream.call_method0("flush");
                    }
                }
            }
        });
        hard_exit(0);
    }
    // Calls into one extension are serialized with the filter lane (no GIL held here).
    let turn = if LANE_ON.load(Ordering::Relaxed) {
        payload
            .get("file")
            .and_then(Value::as_str)
            .and_then(main_turn)
    } else {
        None
    };
    lock(&io().serving).push(id);
    let answer = Python::with_gil(|py| call_glue(py, op, &payload));
    lock(&io().serving).pop();
    drop(turn);
    let msg = match answer {
        Ok(v) => Msg::Response {
            id,
            ok: v.get("ok").and_then(Value::as_bool).unwrap_or(false),
            value: v.get("value").cloned().unwrap_or(Value::Null),
            error: v
                .get("error")
                .filter(|e| !e.is_null())
                .map(|e| serde_json::from_value(e.clone()).unwrap_or_default()),
            restart: v.get("restart").and_then(Value::as_bool).unwrap_or(false),
        },
        Err(error) => Msg::Response {
            id,
            ok: false,
            value: Value::Null,
            error: Some(error),
            restart: false,
        },
    };
    send(&msg);
}

/// A Python exception as the protocol's error: class name, message, formatted traceback.
fn wire_error(py: Python<'_>, e: &PyErr) -> WireError {
    WireError {
        kind: e
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "Exception".into()),
        message: e.to_string(),
        traceback: e.traceback(py).and_then(|tb| tb.format().ok()),
    }
}

fn call_glue(py: Python<'_>, op: &str, payload: &Value) -> Result<Value, WireError> {
    let glue = io()
        .glue
        .get()
        .ok_or_else(|| WireError::host("WorkerError", "the worker glue is not installed"))?;
    let text = payload.to_string();
    let out = glue
        .bind(py)
        .getattr("handle")
        .and_then(|h| h.call1((op, text)))
        .and_then(|r| r.extract::<String>())
        .map_err(|e| wire_error(py, &e))?;
    serde_json::from_str(&out).map_err(|e| WireError::host("WorkerError", e.to_string()))
}

/// The native host door: `door(op, payload_json) -> answer_json`.
#[pyfunction]
fn door(py: Python<'_>, op: String, payload: String) -> PyResult<String> {
    let io = io();
    let payload: Value = serde_json::from_str(&payload)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    let id = io.next_door.fetch_add(1, Ordering::Relaxed);
    let on_main = std::thread::current().id() == io.main;
    let (tx, own_rx) = if on_main {
        (io.inbox_tx.clone(), None)
    } else {
        let (tx, rx) = channel();
        (tx, Some(rx))
    };
    let on = if on_main {
        lock(&io.serving).last().copied()
    } else {
        None
    };
    lock(&io.pending).insert(id, tx);
    send(&Msg::Door {
        id,
        on,
        op: op.clone(),
        payload,
    });
    let reply = py.allow_threads(move || wait_reply(id, own_rx));
    let answer = match reply {
        Msg::DoorReply {
            ok,
            value,
            error,
            error_type,
            ..
        } => json!({"ok": ok, "value": value, "error": error, "error_type": error_type}),
        _ => json!({"ok": false, "error": format!("vis host operation '{op}' got no answer")}),
    };
    Ok(answer.to_string())
}

fn wait_reply(id: u64, own: Option<Receiver<Msg>>) -> Msg {
    let io = io();
    if let Some(rx) = own {
        return rx.recv().unwrap_or_else(|_| hard_exit(0));
    }
    loop {
        if let Some(m) = lock(&io.early).remove(&id) {
            return m;
        }
        let msg = lock(&io.inbox).recv();
        match msg {
            Ok(m @ Msg::DoorReply { .. }) => {
                let rid = match &m {
                    Msg::DoorReply { id, .. } => *id,
                    _ => 0,
                };
                if rid == id {
                    return m;
                }
                lock(&io.early).insert(rid, m);
            }
            // A nested request (e.g. the fs_access gate the gateway runs for this door).
            Ok(Msg::Request {
                id: rid,
                op,
                payload,
            }) => serve(rid, &op, payload),
            Ok(_) => {}
            Err(_) => hard_exit(0),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The filter lane (worker side)
// ---------------------------------------------------------------------------------------

/// A filter lane is being served: main-thread requests take their file's lock.
static LANE_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

type FileLock = std::sync::Arc<parking_lot::Mutex<()>>;

/// One lock per extension file (the registration worker serves one extension per file).
fn file_lock(file: &str) -> FileLock {
    static LOCKS: OnceLock<Mutex<HashMap<String, FileLock>>> = OnceLock::new();
    let mut map = lock(LOCKS.get_or_init(|| Mutex::new(HashMap::new())));
    if let Some(l) = map.get(file) {
        return l.clone();
    }
    let l = FileLock::default();
    map.insert(file.to_string(), l.clone());
    l
}

thread_local! {
    /// Files whose lock this thread holds (the main thread nests requests).
    static HELD: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A held file lock; released on drop.
struct Turn {
    lock: FileLock,
    file: Option<String>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            HELD.with(|h| {
                let mut h = h.borrow_mut();
                if let Some(i) = h.iter().rposition(|f| *f == file) {
                    h.remove(i);
                }
            });
        }
        // SAFETY: the lock was acquired by this thread when this Turn was made and its
        // guard forgotten; nobody else releases it.
        unsafe { self.lock.force_unlock() };
    }
}

/// The main thread's turn on `file` (`None` when it already holds it). Blocks: call it
/// without the GIL.
fn main_turn(file: &str) -> Option<Turn> {
    if HELD.with(|h| h.borrow().iter().any(|f| f == file)) {
        return None;
    }
    let lock = file_lock(file);
    std::mem::forget(lock.lock());
    HELD.with(|h| h.borrow_mut().push(file.to_string()));
    Some(Turn {
        lock,
        file: Some(file.to_string()),
    })
}

/// The lane thread's turn on `file`, waiting (GIL released) until `deadline_ns` at most.
fn lane_turn(py: Python<'_>, file: &str, deadline_ns: u64) -> Option<Turn> {
    let lock = file_lock(file);
    if lock.try_lock().map(std::mem::forget).is_some() {
        return Some(Turn { lock, file: None });
    }
    let wait = Duration::from_nanos(deadline_ns.saturating_sub(super::lane::mono_ns()));
    let got = py.allow_threads(|| match lock.try_lock_for(wait) {
        Some(g) => {
            std::mem::forget(g);
            true
        }
        None => false,
    });
    got.then_some(Turn { lock, file: None })
}
