//! `bench-gateway`: measures a real `vis-gateway` process.
//!
//! - start-up: time from spawn to the first 200 on `/healthz`, and idle RSS after start;
//! - SSE fan-out: N subscribers on one session, RSS per idle subscriber, then events
//!   published at a fixed rate (slash turns, 4 events each) and a burst, reporting events/s
//!   delivered and publish→receive latency p50/p99 (envelope `ts` vs receive clock, 1 ms
//!   resolution; same machine, same clock).
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

mod subscribers;

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

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
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
    let subs = {
        let sid = sid.clone();
        let port = gw.port;
        tokio::task::spawn_blocking(move || subscribers::Subscribers::open(port, &sid, n)).await??
    };
    let (frames, ready, lat) = (&subs.stats.frames, &subs.stats.ready, &subs.stats.lat);
    let t0 = Instant::now();
    while (ready.load(Ordering::Relaxed) as usize) < n && t0.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = ready.load(Ordering::Relaxed) as usize;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss1 = rss_kib(pid);
    let per_sub = (rss1.saturating_sub(rss0)) as f64 / held.max(1) as f64;
    // Steady rate: one streamed answer whose sentences arrive every 100 ms, so the gateway
    // publishes one coalesced `content.block.delta` per 100 ms (10 events/s) for 10 s.
    lat.lock().map(|mut v| v.clear()).ok();
    let chunks: Vec<String> = (0..100).map(|i| format!("Sentence number {i}. ")).collect();
    llm.push(vis_tests::Script::Slow {
        chunks,
        delay_ms: 100,
    });
    let f0 = frames.load(Ordering::Relaxed);
    let (gw_cpu0, me_cpu0) = (cpu_us(&pid.to_string()), cpu_us("self"));
    let t1 = Instant::now();
    http(
        gw.port,
        "POST",
        &format!("/v1/sessions/{sid}/turns"),
        "{\"request\":\"stream please\"}",
    )
    .await?;
    let want = f0 + (100 * held) as u64;
    while frames.load(Ordering::Relaxed) < want && t1.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let steady_frames = frames.load(Ordering::Relaxed) - f0;
    let steady_secs = t1.elapsed().as_secs_f64();
    let per = |cpu: u64| cpu as f64 / steady_frames.max(1) as f64;
    let gw_per = per(cpu_us(&pid.to_string()) - gw_cpu0);
    let me_per = per(cpu_us("self") - me_cpu0);
    let mut l = lat.lock().map(|v| v.clone()).unwrap_or_default();
    let (p50, p99) = (pct(&mut l, 0.50), pct(&mut l, 0.99));
    // Burst: 50 turns back to back (200 events), measure delivery rate.
    let f1 = frames.load(Ordering::Relaxed);
    let t2 = Instant::now();
    for _ in 0..50 {
        http(
            gw.port,
            "POST",
            &format!("/v1/sessions/{sid}/turns"),
            "{\"request\":\"/help\"}",
        )
        .await?;
    }
    let want = f1 + (200 * held) as u64;
    while frames.load(Ordering::Relaxed) < want && t2.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let burst_rate = (frames.load(Ordering::Relaxed) - f1) as f64 / t2.elapsed().as_secs_f64();
    println!(
        "| {n} | {held} | {:.1} | {:.0} | {p50} | {p99} | {gw_per:.1} | {me_per:.1} | {:.0} | {:.1} |",
        per_sub,
        steady_frames as f64 / steady_secs,
        burst_rate,
        rss1 as f64 / 1024.0
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    raise_nofile();
    let mut args = std::env::args().skip(1);
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
