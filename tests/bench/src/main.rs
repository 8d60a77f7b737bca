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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROTO: &str = "X-Vis-Protocol: 2\r\nX-Vis-Min-Gateway-Protocol: 2\r\n";

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

/// One SSE subscriber: counts frames and records latencies of `turn.*` events.
async fn subscriber(
    port: u16,
    sid: String,
    frames: Arc<AtomicU64>,
    lat: Arc<std::sync::Mutex<Vec<i64>>>,
    ready: Arc<AtomicU64>,
) -> Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
    let req = format!("GET /v1/sessions/{sid}/events?cursor=-1 HTTP/1.1\r\nHost: 127.0.0.1\r\n{PROTO}Accept: text/event-stream\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = vec![0u8; 4096];
    let mut pending = Vec::new();
    let mut counted_ready = false;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(pos) = pending.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = pending.drain(..pos + 2).collect();
            let text = String::from_utf8_lossy(&frame);
            if text.contains("event: subscription.ready") {
                if !counted_ready {
                    counted_ready = true;
                    ready.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            if let Some(data) = text.lines().find_map(|l| l.strip_prefix("data: ")) {
                frames.fetch_add(1, Ordering::Relaxed);
                if let Some(ts) = data
                    .find("\"ts\":")
                    .and_then(|i| data[i + 5..].split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|t| t.parse::<i64>().ok())
                {
                    let l = now_ms() - ts;
                    if let Ok(mut v) = lat.try_lock() {
                        v.push(l);
                    }
                }
            }
        }
    }
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
    let frames = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicU64::new(0));
    let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..n {
        tokio::spawn(subscriber(
            gw.port,
            sid.clone(),
            frames.clone(),
            lat.clone(),
            ready.clone(),
        ));
        if i % 200 == 199 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
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
        "| {n} | {held} | {:.1} | {:.0} | {p50} | {p99} | {:.0} | {:.1} |",
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
    println!("| subscribers | held | KiB per idle subscriber | events/s delivered at 10 ev/s | p50 ms | p99 ms | burst events/s delivered | gateway RSS MiB |");
    println!("|---|---|---|---|---|---|---|---|");
    for n in sizes {
        fanout(&bin, n).await?;
    }
    Ok(())
}
