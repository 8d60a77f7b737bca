//! `bench-gateway`: measures a real `vis-gateway` process.
//!
//! - start-up: time from spawn to the first 200 on `/healthz`, and idle RSS after start;
//! - SSE fan-out: N subscribers on one session, RSS per idle subscriber, then events
//!   published at a fixed rate (slash turns, 4 events each) and a burst, reporting events/s
//!   delivered and publish→receive latency p50/p99 (envelope `ts` vs receive clock, 1 ms
//!   resolution; same machine, same clock).
//!
//! - the fan-out floor (`floor.rs`): the same client and load against a server that does
//!   nothing but one `write` per delivery, so the gateway's numbers read against the machine's.
//!
//! Usage: bench-gateway <path-to-vis-gateway> [subscribers…]   (default 1000 10000)

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROTO: &str = "X-Vis-Protocol: 2\r\nX-Vis-Min-Gateway-Protocol: 2\r\n";

mod floor;
mod procfs;
mod subscribers;

use procfs::rss_kib;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn raise_nofile() {
    // SAFETY: plain getrlimit/setrlimit on this process.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

struct Gw {
    child: Child,
    port: u16,
    home: PathBuf,
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

async fn http(port: u16, method: &str, path: &str, body: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{PROTO}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

async fn start(bin: &Path) -> Result<(Gw, Duration)> {
    start_with(bin, None).await
}

async fn start_with(bin: &Path, llm: Option<&str>) -> Result<(Gw, Duration)> {
    let home = std::env::temp_dir().join(format!("vis-bench-{}-{}", std::process::id(), now_ms()));
    std::fs::create_dir_all(&home)?;
    let t0 = Instant::now();
    let mut cmd = Command::new(bin);
    cmd.args([
        "--home",
        home.to_str().unwrap_or("/tmp"),
        "start",
        "--port",
        "0",
        "--root",
        home.to_str().unwrap_or("/tmp"),
    ])
    .env_remove("OPENAI_API_KEY")
    .env_remove("ANTHROPIC_API_KEY")
    .env("VIS_LOG", "warn")
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if let Some(url) = llm {
        cmd.env("OPENAI_API_KEY", "bench")
            .env("OPENAI_BASE_URL", url);
    }
    let child = cmd.spawn().context("spawn vis-gateway")?;
    let reg = home.join("gateway.json");
    let mut gw = Gw {
        child,
        port: 0,
        home,
    };
    loop {
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("gateway did not start");
        }
        if let Ok(text) = std::fs::read_to_string(&reg) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                gw.port = v["port"].as_u64().unwrap_or(0) as u16;
                if let Ok(r) = http(gw.port, "GET", "/healthz", "").await {
                    if r.starts_with("HTTP/1.1 200") {
                        return Ok((gw, t0.elapsed()));
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn pct(v: &mut [i64], p: f64) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// CPU time (user + system) of a process so far, in microseconds.
fn cpu_us(pid: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`: state is field 3; utime and stime are fields 14 and 15.
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    // SAFETY: sysconf is a plain query.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    f.iter().sum::<u64>() * 1_000_000 / hz
}

/// What one steady window measured: deliveries, latencies and CPU of both processes.
struct Steady {
    rate: f64,
    p50: i64,
    p99: i64,
    server_cpu: f64,
    client_cpu: f64,
    frame_bytes: f64,
}

/// Measures `events` events delivered to `held` subscribers: `publish` starts them (and
/// returns at once); the window ends when every delivery arrived (or after 30 s).
async fn steady<F: std::future::Future<Output = Result<()>>>(
    subs: &subscribers::Subscribers,
    server_pid: u32,
    held: usize,
    events: u64,
    publish: F,
) -> Result<Steady> {
    let stats = &subs.stats;
    stats.lat.lock().map(|mut v| v.clear()).ok();
    let (f0, b0) = (
        stats.frames.load(Ordering::Relaxed),
        stats.bytes.load(Ordering::Relaxed),
    );
    let (srv0, me0) = (cpu_us(&server_pid.to_string()), cpu_us("self"));
    let t1 = Instant::now();
    publish.await?;
    let want = f0 + events * held as u64;
    while stats.frames.load(Ordering::Relaxed) < want && t1.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let frames = stats.frames.load(Ordering::Relaxed) - f0;
    let bytes = stats.bytes.load(Ordering::Relaxed) - b0;
    let secs = t1.elapsed().as_secs_f64();
    let per = |cpu: u64| cpu as f64 / frames.max(1) as f64;
    let mut l = stats.lat.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(Steady {
        rate: frames as f64 / secs,
        p50: pct(&mut l, 0.50),
        p99: pct(&mut l, 0.99),
        server_cpu: per(cpu_us(&server_pid.to_string()) - srv0),
        client_cpu: per(cpu_us("self") - me0),
        frame_bytes: bytes as f64 / frames.max(1) as f64,
    })
}

/// Opens `n` subscribers and waits (up to 60 s) until they hold; returns how many do.
async fn subscribe(port: u16, sid: &str, n: usize) -> Result<(subscribers::Subscribers, usize)> {
    let subs = {
        let sid = sid.to_string();
        tokio::task::spawn_blocking(move || subscribers::Subscribers::open(port, &sid, n)).await??
    };
    let t0 = Instant::now();
    while (subs.stats.ready.load(Ordering::Relaxed) as usize) < n
        && t0.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = subs.stats.ready.load(Ordering::Relaxed) as usize;
    Ok((subs, held))
}

async fn fanout(bin: &Path, n: usize) -> Result<()> {
    let llm = vis_tests::FixtureLlm::start().await;
    let (gw, _) = start_with(bin, Some(&llm.openai_base_url())).await?;
    let pid = gw.child.id();
    let created = http(gw.port, "POST", "/v1/sessions", "{\"channel\":\"bench\"}").await?;
    let body = created.split("\r\n\r\n").nth(1).unwrap_or("");
    let sid = serde_json::from_str::<serde_json::Value>(body)?["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss0 = rss_kib(pid);
    let (subs, held) = subscribe(gw.port, &sid, n).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss1 = rss_kib(pid);
    let per_sub = (rss1.saturating_sub(rss0)) as f64 / held.max(1) as f64;
    // Steady rate: one streamed answer whose sentences arrive every 100 ms, so the gateway
    // publishes one coalesced `content.block.delta` per 100 ms (10 events/s) for 10 s.
    let chunks: Vec<String> = (0..100).map(|i| format!("Sentence number {i}. ")).collect();
    llm.push(vis_tests::Script::Slow {
        chunks,
        delay_ms: 100,
    });
    let turn = format!("/v1/sessions/{sid}/turns");
    let s = steady(&subs, pid, held, 100, async {
        http(gw.port, "POST", &turn, "{\"request\":\"stream please\"}").await?;
        Ok(())
    })
    .await?;
    // Burst: 50 turns back to back (200 events), measure delivery rate.
    let frames = &subs.stats.frames;
    let f1 = frames.load(Ordering::Relaxed);
    let t2 = Instant::now();
    for _ in 0..50 {
        http(gw.port, "POST", &turn, "{\"request\":\"/help\"}").await?;
    }
    let want = f1 + (200 * held) as u64;
    while frames.load(Ordering::Relaxed) < want && t2.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let burst_rate = (frames.load(Ordering::Relaxed) - f1) as f64 / t2.elapsed().as_secs_f64();
    println!(
        "| {n} | {held} | {:.1} | {:.0} | {} | {} | {:.1} | {:.1} | {:.0} | {:.1} |",
        per_sub,
        s.rate,
        s.p50,
        s.p99,
        s.server_cpu,
        s.client_cpu,
        burst_rate,
        rss1 as f64 / 1024.0
    );
    drop(subs);
    drop(gw);
    let f = floor(n, s.frame_bytes.round() as usize).await?;
    println!(
        "| {n}, floor ({:.0}-byte frames) | {} | | {:.0} | {} | {} | {:.1} | {:.1} | | |",
        s.frame_bytes, f.1, f.0.rate, f.0.p50, f.0.p99, f.0.server_cpu, f.0.client_cpu
    );
    Ok(())
}

/// The same steady load from the floor server (`floor.rs`), same client, `frame_bytes` per
/// delivery. Returns the window and how many subscribers it held.
async fn floor(n: usize, frame_bytes: usize) -> Result<(Steady, usize)> {
    let exe = std::env::current_exe().context("own path")?;
    let mut child = Command::new(exe)
        .args(["--floor-server", &n.to_string(), &frame_bytes.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .context("spawn the floor server")?;
    let pid = child.id();
    let mut port = String::new();
    if let Some(out) = child.stdout.as_mut() {
        use std::io::BufRead;
        std::io::BufReader::new(out).read_line(&mut port)?;
    }
    let port: u16 = port.trim().parse().context("the floor server's port")?;
    let result = async {
        let (subs, held) = subscribe(port, "floor", n).await?;
        // The server starts publishing on its own once every subscriber holds.
        let s = steady(&subs, pid, held, floor::TICKS, async { Ok(()) }).await?;
        Ok((s, held))
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

#[tokio::main]
async fn main() -> Result<()> {
    raise_nofile();
    let mut args = std::env::args().skip(1).peekable();
    if args.next_if(|a| a == "--floor-server").is_some() {
        let mut num = || args.next().and_then(|a| a.parse().ok());
        let (n, bytes) = (num().unwrap_or(1000), num().unwrap_or(300));
        return tokio::task::spawn_blocking(move || floor::serve(n, bytes)).await?;
    }
    let bin = PathBuf::from(
        args.next()
            .context("usage: bench-gateway <vis-gateway> [subscribers…]")?,
    );
    let sizes: Vec<usize> = args.filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() {
        vec![1000, 10_000]
    } else {
        sizes
    };

    let mut starts = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..5 {
        let (gw, took) = start(&bin).await?;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        rss.push(rss_kib(gw.child.id()) as i64);
        starts.push(took.as_micros() as i64);
    }
    println!(
        "start-up to first /healthz 200: median {:.1} ms (5 runs)",
        pct(&mut starts, 0.5) as f64 / 1000.0
    );
    println!(
        "idle gateway RSS: median {:.1} MiB",
        pct(&mut rss, 0.5) as f64 / 1024.0
    );
    println!();
    println!("| subscribers | held | KiB per idle subscriber | events/s delivered at 10 ev/s | p50 ms | p99 ms | gateway CPU µs per delivery | client CPU µs per delivery | burst events/s delivered | gateway RSS MiB |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for n in sizes {
        fanout(&bin, n).await?;
    }
    Ok(())
}
