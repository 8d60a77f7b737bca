//! Python extension benchmarks (driven by `scripts/bench-extensions`).
//!
//! ```text
//! bench-ext origin --listen 127.0.0.1:PORT
//!     Minimal HTTP/1.1 keep-alive origin: every request (no body) gets `200 ok`.
//! bench-ext load --proxy 127.0.0.1:PORT --token TOKEN --url http://127.0.0.1:O/ \
//!                --conns N [--secs 8] [--warmup 2]
//!     N keep-alive connections through the egress proxy (plain HTTP, absolute-form
//!     request target, `Proxy-Authorization: Basic base64(TOKEN:)`), each sending one
//!     request after the other for warm-up + secs seconds. Prints one JSON line:
//!     {"conns", "requests", "errors", "rps", "mean_us", "p50_us", "p99_us", "failures"}
//!     over the measured window only (`failures`: count per `<status> <X-Vis-Egress-Error>
//!     <first body line>`, at most 20 kinds). With `--failed-latency 1` a request that got an
//!     error answer counts in the latency samples too (a denial after seconds of waiting is
//!     latency the client sees) and every request started in the window is timed, also when
//!     it ends after it; by default only successful requests that end in the window are timed.
//! bench-ext worker --bin vis-gateway --home H --ext FILE --tool NAME [--n 5000] [--warmup 500]
//!     Spawns `vis-gateway --home H worker --label bench`, loads FILE, then sends `call_tool`
//!     requests one at a time over the worker's line protocol and times each request →
//!     response (the worker round trip of a Symbol call, without the gateway's own
//!     scheduling). Also times `ping` (protocol + JSON, no extension code) as a baseline.
//!     Prints one JSON line per op: {"op", "n", "mean_us", "p50_us", "p99_us", "min_us"}.
//! ```
//!
//! Every address must be on 127.0.0.1; every loop is bounded by a count or a deadline.

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn args() -> (String, HashMap<String, String>) {
    let mut it = std::env::args().skip(1);
    let cmd = it.next().unwrap_or_default();
    let mut opts = HashMap::new();
    let rest: Vec<String> = it.collect();
    let mut i = 0;
    while i < rest.len() {
        let key = rest[i].trim_start_matches("--").to_string();
        let val = rest.get(i + 1).cloned().unwrap_or_default();
        opts.insert(key, val);
        i += 2;
    }
    (cmd, opts)
}

fn opt<'a>(o: &'a HashMap<String, String>, k: &str) -> Result<&'a str> {
    o.get(k)
        .map(String::as_str)
        .ok_or_else(|| anyhow!("missing --{k}"))
}

fn num(o: &HashMap<String, String>, k: &str, default: u64) -> Result<u64> {
    match o.get(k) {
        None => Ok(default),
        Some(v) => v.parse().with_context(|| format!("--{k} {v}")),
    }
}

fn loopback(addr: &str) -> Result<SocketAddr> {
    let a: SocketAddr = addr.parse().with_context(|| format!("address {addr}"))?;
    if !a.ip().is_loopback() {
        bail!("{addr}: only loopback addresses are allowed");
    }
    Ok(a)
}

/// (mean, p50, p99, min) in microseconds of nanosecond samples.
fn stats(samples: &mut [u64]) -> (f64, f64, f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0, 0.0, 0.0);
    }
    samples.sort_unstable();
    let n = samples.len();
    let pick = |q: f64| samples[((q * n as f64).ceil() as usize).clamp(1, n) - 1] as f64 / 1e3;
    let mean = samples.iter().sum::<u64>() as f64 / n as f64 / 1e3;
    (mean, pick(0.50), pick(0.99), samples[0] as f64 / 1e3)
}

fn main() -> Result<()> {
    let (cmd, o) = args();
    match cmd.as_str() {
        "origin" => runtime(1)?.block_on(origin(loopback(opt(&o, "listen")?)?)),
        "load" => {
            let threads = num(&o, "threads", 1)? as usize;
            runtime(threads)?.block_on(load(&o))
        }
        "worker" => worker(&o),
        _ => bail!("usage: bench-ext origin|load|worker … (see the source header)"),
    }
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?)
}

// -- origin --------------------------------------------------------------------------

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok";

async fn origin(addr: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(addr).await?;
    eprintln!("origin listening on {addr}");
    loop {
        let (mut sock, _) = listener.accept().await?;
        let _ = sock.set_nodelay(true);
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(8192);
            let mut chunk = [0u8; 8192];
            loop {
                // Answer every complete request head in the buffer (requests carry no body).
                while let Some(end) = find(&buf, b"\r\n\r\n") {
                    buf.drain(..end + 4);
                    if sock.write_all(RESPONSE).await.is_err() {
                        return;
                    }
                }
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                if buf.len() > 1 << 20 {
                    return;
                }
            }
        });
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

// -- load ------------------------------------------------------------------------------

fn basic(user: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let data = format!("{user}:").into_bytes();
    let mut out = String::new();
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for (i, shift) in [18, 12, 6, 0].iter().enumerate() {
            if i <= c.len() {
                out.push(T[(n >> shift & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

async fn load(o: &HashMap<String, String>) -> Result<()> {
    let proxy = loopback(opt(o, "proxy")?)?;
    let url = opt(o, "url")?.to_string();
    let authority = url
        .strip_prefix("http://")
        .and_then(|r| r.split('/').next())
        .ok_or_else(|| anyhow!("--url must be http://127.0.0.1:PORT/…"))?
        .to_string();
    loopback(&authority)?;
    let auth = basic(opt(o, "token")?);
    let conns = num(o, "conns", 1)? as usize;
    let secs = num(o, "secs", 8)?;
    let warm = num(o, "warmup", 2)?;
    let failed_latency = num(o, "failed-latency", 0)? == 1;
    let start = Instant::now();
    let measure_from = start + Duration::from_secs(warm);
    let deadline = measure_from + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (url, authority, auth) = (url.clone(), authority.clone(), auth.clone());
        tasks.push(tokio::spawn(async move {
            let window = Window {
                measure_from,
                deadline,
                failed_latency,
            };
            connection(proxy, url, authority, auth, window).await
        }));
    }
    let mut samples = Vec::new();
    let mut errors = 0u64;
    let mut failures: HashMap<String, u64> = HashMap::new();
    for t in tasks {
        let (s, e, f) = t.await?;
        samples.extend(s);
        errors += e;
        for (k, n) in f {
            if failures.len() < 20 || failures.contains_key(&k) {
                *failures.entry(k).or_default() += n;
            }
        }
    }
    let n = samples.len();
    let (mean, p50, p99, _) = stats(&mut samples);
    println!(
        "{}",
        json!({"conns": conns, "requests": n, "errors": errors, "rps": n as f64 / secs as f64,
               "mean_us": mean, "p50_us": p50, "p99_us": p99, "failures": failures})
    );
    Ok(())
}

/// The measured window of a load run.
#[derive(Clone, Copy)]
struct Window {
    measure_from: Instant,
    deadline: Instant,
    /// Time requests answered with an error too.
    failed_latency: bool,
}

/// One keep-alive connection sending requests back to back until `deadline`; reconnects
/// after an error (counted). Returns the latencies (ns) of requests started in the window,
/// the error count and the error answers by kind.
async fn connection(
    proxy: SocketAddr,
    url: String,
    authority: String,
    auth: String,
    window: Window,
) -> (Vec<u64>, u64, HashMap<String, u64>) {
    let Window {
        measure_from,
        deadline,
        failed_latency,
    } = window;
    let mut samples = Vec::with_capacity(1 << 16);
    let mut errors = 0u64;
    let mut failures: HashMap<String, u64> = HashMap::new();
    'outer: while Instant::now() < deadline {
        let Ok(stream) = TcpStream::connect(proxy).await else {
            errors += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let Ok((mut send, conn)) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
        else {
            errors += 1;
            continue;
        };
        tokio::spawn(conn);
        loop {
            let now = Instant::now();
            if now >= deadline {
                break 'outer;
            }
            let req = hyper::Request::get(url.as_str())
                .header("host", authority.as_str())
                .header("proxy-authorization", auth.as_str())
                .body(Empty::<Bytes>::new())
                .expect("request");
            if send.ready().await.is_err() {
                errors += 1;
                continue 'outer;
            }
            let (ok, why) = match send.send_request(req).await {
                Ok(resp) => {
                    let status = resp.status();
                    let kind = resp
                        .headers()
                        .get("x-vis-egress-error")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                        .to_string();
                    let body = resp.into_body().collect().await.map(|c| c.to_bytes());
                    let first: String = body
                        .as_ref()
                        .map(|b| {
                            let text = String::from_utf8_lossy(b);
                            text.lines()
                                .next()
                                .unwrap_or("")
                                .chars()
                                .take(160)
                                .collect()
                        })
                        .unwrap_or_default();
                    let ok = status.is_success() && body.is_ok();
                    (ok, format!("{} {kind} {first}", status.as_u16()))
                }
                Err(e) => (false, format!("transport {e}")),
            };
            let done = Instant::now();
            // With --failed-latency every request started in the window counts, however
            // it ended and even when it ended after the window (a stalled request).
            let counted = now >= measure_from && (done <= deadline || failed_latency);
            if !ok {
                errors += 1;
                if counted {
                    *failures.entry(why).or_default() += 1;
                    if failed_latency {
                        samples.push((done - now).as_nanos() as u64);
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue 'outer;
            }
            if counted {
                samples.push((done - now).as_nanos() as u64);
            }
        }
    }
    (samples, errors, failures)
}

// -- worker round trips ---------------------------------------------------------------

struct Worker {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    line: String,
}

impl Worker {
    fn request(&mut self, id: u64, op: &str, payload: &Value) -> Result<Value> {
        let msg = json!({"t": "request", "id": id, "op": op, "payload": payload});
        writeln!(self.stdin, "{msg}")?;
        self.stdin.flush()?;
        // Bounded: a trivial tool makes no host-door calls; answer at most 16 doors.
        for _ in 0..16 {
            self.line.clear();
            if self.stdout.read_line(&mut self.line)? == 0 {
                bail!("the worker closed its output");
            }
            let v: Value = serde_json::from_str(&self.line)?;
            match v["t"].as_str() {
                Some("response") if v["id"] == id => return Ok(v),
                Some("door") => {
                    // `register` always asks for the environment: nothing resolves.
                    let value = if v["op"] == "declare_env" {
                        json!({})
                    } else {
                        Value::Null
                    };
                    let reply =
                        json!({"t": "door_reply", "id": v["id"], "ok": true, "value": value});
                    writeln!(self.stdin, "{reply}")?;
                    self.stdin.flush()?;
                }
                _ => bail!("unexpected worker message {v}"),
            }
        }
        bail!("too many door calls for one request")
    }
}

fn worker(o: &HashMap<String, String>) -> Result<()> {
    let bin = opt(o, "bin")?;
    let home = opt(o, "home")?;
    let ext = opt(o, "ext")?;
    let tool = opt(o, "tool")?;
    let n = num(o, "n", 5000)?;
    let warm = num(o, "warmup", 500)?;
    let mut child = Command::new(bin)
        .args(["--home", home, "worker", "--label", "bench"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawn {bin} worker"))?;
    let stdin = child.stdin.take().expect("stdin");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut w = Worker {
        child,
        stdin,
        stdout,
        line: String::new(),
    };
    let mut id = 0u64;
    let mut next = || {
        id += 1;
        id
    };
    let loaded = w.request(next(), "load", &json!({"file": ext}))?;
    if loaded["value"]["loaded"] != true {
        bail!("load failed: {loaded}");
    }
    let call = json!({"file": ext, "name": tool, "arguments": {"x": 1}});
    for (op, payload) in [("ping", json!({})), ("call_tool", call)] {
        for _ in 0..warm {
            w.request(next(), op, &payload)?;
        }
        let mut samples = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let t = Instant::now();
            let r = w.request(next(), op, &payload)?;
            samples.push(t.elapsed().as_nanos() as u64);
            if r["ok"] != true {
                bail!("{op} failed: {r}");
            }
        }
        let (mean, p50, p99, min) = stats(&mut samples);
        println!(
            "{}",
            json!({"op": op, "n": n, "mean_us": mean, "p50_us": p50, "p99_us": p99, "min_us": min})
        );
    }
    let bye = json!({"t": "request", "id": next(), "op": "shutdown"});
    writeln!(w.stdin, "{bye}")?;
    w.stdin.flush()?;
    drop(w.stdin);
    let _ = w.child.wait();
    Ok(())
}
