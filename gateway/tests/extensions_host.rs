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

fn temp() -> PathBuf {
    let d = std::env::temp_dir().join(format!("vis-worker-it-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

#[test]
fn the_worker_embeds_the_build_time_cpython_and_serves_a_tool_with_host_doors() {
    let home = temp().join("a");
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
    let home = temp().join("b");
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
    let home = temp().join("c");
    std::fs::create_dir_all(&home).expect("mkdir");
    let mut w = Worker::start(&home);
    assert_eq!(w.request(1, "ping", json!({}))["ok"], true);
    let Worker {
        mut child, stdin, ..
    } = w;
    drop(stdin);
    assert!(child.wait().expect("wait").success());
}
