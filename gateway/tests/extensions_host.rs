//! The real `vis-gateway worker` process driven over its line protocol (no gateway code):
//! embedded CPython, SDK on `sys.path`, door round-trips, errors with tracebacks, and a
//! worker that dies in extension code.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start(home: &PathBuf) -> Worker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vis-gateway"))
            .arg("--home")
            .arg(home)
            .arg("worker")
            .arg("--label")
            .arg("it")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn worker");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Worker {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").expect("write");
        self.stdin.flush().expect("flush");
    }

    fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("json line")),
        }
    }

    fn request(&mut self, id: u64, op: &str, payload: Value) -> Value {
        self.send(json!({"t": "request", "id": id, "op": op, "payload": payload}));
        loop {
            let msg = self.recv().expect("an answer");
            match msg["t"].as_str() {
                Some("response") if msg["id"] == id => return msg,
                Some("door") => {
                    let answer = match msg["op"].as_str() {
                        Some("state_get") => json!(41),
                        // `register` always asks the gateway for the environment.
                        Some("declare_env") => json!({}),
                        _ => Value::Null,
                    };
                    self.send(
                        json!({"t": "door_reply", "id": msg["id"], "ok": true, "value": answer}),
                    );
                }
                _ => panic!("unexpected {msg}"),
            }
        }
    }
}

/// A private folder, removed when dropped (declare it before the worker that uses it).
fn temp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("vis-worker-it-")
        .tempdir()
        .expect("mkdir")
}

#[test]
fn the_worker_embeds_the_build_time_cpython_and_serves_a_tool_with_host_doors() {
    let tmp = temp();
    let home = tmp.path().join("a");
    let ext = home.join("ext.py");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(
        &ext,
        "import blockether.vis.extension as vis\n\ndef inc(n: int, /) -> int:\n    \"\"\"Increment stored state.\"\"\"\n    print('stdout is not the protocol')\n    return vis.state.get('n', 0) + n\n\nvis.register(vis.Extension(name='inc', alias='inc', description='d', symbols=[vis.Symbol(inc)]))\n",
    )
    .expect("write");
    let mut w = Worker::start(&home);
    let ping = w.request(1, "ping", json!({}));
    assert_eq!(ping["ok"], true);
    let version = ping["value"]["python"].as_str().unwrap_or("");
    assert!(version.starts_with("3.11"), "{version}");
    let exe = ping["value"]["executable"].as_str().unwrap_or("");
    assert!(
        !exe.contains("pyenv") && !exe.ends_with("vis-gateway"),
        "{exe}"
    );
    let load = w.request(2, "load", json!({"file": ext}));
    assert_eq!(load["value"]["loaded"], true, "{load}");
    assert_eq!(load["value"]["catalog"]["name"], "inc");
    let call = w.request(
        3,
        "call_tool",
        json!({"file": ext, "name": "inc", "arguments": {"n": 1}}),
    );
    assert_eq!(call["value"]["value"], 42, "{call}");
    let missing = w.request(4, "call_tool", json!({"file": "/nope.py", "name": "x"}));
    assert_eq!(missing["ok"], false);
    assert_eq!(missing["error"]["type"], "LookupError");
    assert!(home.join("python").is_dir());
    w.send(json!({"t": "request", "id": 5, "op": "shutdown"}));
    assert_eq!(w.recv().expect("ack")["ok"], true);
    assert!(w.child.wait().expect("wait").success());
}

#[test]
fn a_worker_whose_extension_calls_os_exit_ends_and_closes_its_output() {
    let tmp = temp();
    let home = tmp.path().join("b");
    std::fs::create_dir_all(&home).expect("mkdir");
    let ext = home.join("die.py");
    std::fs::write(
        &ext,
        "import os\nimport blockether.vis.extension as vis\n\ndef die() -> None:\n    \"\"\"Die.\"\"\"\n    os._exit(7)\n\nvis.register(vis.Extension(name='die', alias='die', description='d', symbols=[vis.Symbol(die)]))\n",
    )
    .expect("write");
    let mut w = Worker::start(&home);
    assert_eq!(w.request(1, "load", json!({"file": ext}))["ok"], true);
    w.send(json!({"t": "request", "id": 2, "op": "call_tool", "payload": {"file": ext, "name": "die"}}));
    assert!(w.recv().is_none(), "output closes");
    assert_eq!(w.child.wait().expect("wait").code(), Some(7));
}

#[test]
fn closing_the_workers_input_ends_it() {
    let tmp = temp();
    let home = tmp.path().join("c");
    std::fs::create_dir_all(&home).expect("mkdir");
    let mut w = Worker::start(&home);
    assert_eq!(w.request(1, "ping", json!({}))["ok"], true);
    let Worker {
        mut child, stdin, ..
    } = w;
    drop(stdin);
    assert!(child.wait().expect("wait").success());
}

/// One filter-lane request frame (see `gateway/src/extensions/lane.rs`).
fn lane_frame(id: u64, file: &str, host: &str, phase: u8, status: Option<u32>) -> Vec<u8> {
    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    let mut body = Vec::new();
    body.extend_from_slice(&id.to_le_bytes());
    body.extend_from_slice(&u64::MAX.to_le_bytes()); // no deadline
    body.extend_from_slice(&0u32.to_le_bytes()); // filter index
    bytes(&mut body, file.as_bytes());
    body.push(phase);
    bytes(&mut body, b"GET");
    bytes(&mut body, host.as_bytes());
    body.extend_from_slice(&443u16.to_le_bytes());
    bytes(&mut body, b"/x");
    body.extend_from_slice(&1u32.to_le_bytes());
    bytes(&mut body, b"user-agent");
    bytes(&mut body, b"it");
    body.extend_from_slice(&u32::MAX.to_le_bytes()); // no body
    body.extend_from_slice(&status.unwrap_or(u32::MAX).to_le_bytes());
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// `(id, kind, first text of the reply)`.
fn lane_replies(stream: &mut std::os::unix::net::UnixStream, n: usize) -> Vec<(u64, u8, String)> {
    use std::io::Read;
    let mut out = Vec::new();
    for _ in 0..n {
        let mut len = [0u8; 4];
        stream.read_exact(&mut len).expect("reply length");
        let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
        stream.read_exact(&mut body).expect("reply body");
        let id = u64::from_le_bytes(body[0..8].try_into().expect("id"));
        let kind = body[8];
        let text = if body.len() > 14 {
            let n = u32::from_le_bytes(body[10..14].try_into().expect("len")) as usize;
            String::from_utf8_lossy(&body[14..14 + n]).into_owned()
        } else {
            String::new()
        };
        out.push((id, kind, text));
    }
    out
}

#[test]
fn the_filter_lane_answers_a_batch_written_at_once_in_order() {
    use std::os::unix::io::AsRawFd;
    use std::os::unix::process::CommandExt;
    let tmp = temp();
    let home = tmp.path().join("lane");
    std::fs::create_dir_all(&home).expect("mkdir");
    let ext = home.join("f.py");
    std::fs::write(
        &ext,
        "import blockether.vis.extension as vis\n\ndef f(ctx):\n    if ctx['host'] == 'raise.test':\n        raise KeyError('k')\n    if ctx['status'] == 418 or ctx['host'] == 'block.test':\n        return vis.block(ctx['phase'] + ' ' + ctx['headers']['user-agent'])\n\nvis.register(vis.Extension(name='f', description='d', network_filters=[vis.NetworkFilter(f)]))\n",
    )
    .expect("write");
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vis-gateway"));
    cmd.arg("--home")
        .arg(&home)
        .arg("worker")
        .arg("--label")
        .arg("lane")
        .arg("--lane-fd")
        .arg(fd.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // SAFETY: only fcntl between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn worker");
    drop(theirs);
    let mut w = Worker {
        stdin: child.stdin.take().expect("stdin"),
        stdout: BufReader::new(child.stdout.take().expect("stdout")),
        child,
    };
    let file = ext.to_string_lossy().into_owned();
    assert_eq!(
        w.request(1, "load", json!({"file": file}))["value"]["loaded"],
        true
    );
    let mut batch = Vec::new();
    for (id, host, phase, status) in [
        (10, "ok.test", 1, None),
        (11, "block.test", 1, None),
        (12, "raise.test", 0, None),
        (13, "ok.test", 4, Some(418)),
        (14, "ok.test", 4, Some(200)),
    ] {
        batch.extend(lane_frame(id, &file, host, phase, status));
    }
    ours.write_all(&batch).expect("write the batch");
    let replies = lane_replies(&mut ours, 5);
    assert_eq!(
        replies,
        vec![
            (10, 0, String::new()),
            (11, 1, "https it".to_string()),
            (12, 2, "KeyError".to_string()),
            (13, 1, "https-response it".to_string()),
            (14, 0, String::new()),
        ]
    );
    // Closing the lane ends the worker.
    drop(ours);
    assert!(w.child.wait().expect("wait").success());
}
