//! `bench-replay`: memory of SSE replays to clients that do not read.
//!
//! Builds one session with a large stored history (model turns from the fixture LLM, with
//! `VIS_GATEWAY_EVENT_RING_MAX` high enough to keep all of it), then for each gateway binary
//! given — side by side, each on its own copy of that home, started fresh — opens N
//! connections `GET /v1/sessions/:sid/events?cursor=0` that never read (4 KiB receive
//! buffers), and samples the gateway's RSS: before, while the clients are connected (after
//! it settled), and after they left.
//!
//! Usage: bench-replay <vis-gateway> [<baseline vis-gateway>] [clients] [history MiB]
//! (defaults: 50 clients, 18 MiB of history).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use vis_tests::{FixtureLlm, Script};

mod procfs;
use procfs::rss_kib;

const PROTO: &str = "X-Vis-Protocol: 2\r\nX-Vis-Min-Gateway-Protocol: 2\r\n";

struct Gw {
    child: Child,
    port: u16,
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

fn json_body(resp: &str) -> serde_json::Value {
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body).unwrap_or_default()
}

async fn start(bin: &Path, home: &Path, llm: Option<&str>) -> Result<Gw> {
    let reg = home.join("gateway.json");
    let _ = std::fs::remove_file(&reg);
    let mut cmd = Command::new(bin);
    cmd.arg("--home")
        .arg(home)
        .args(["start", "--port", "0", "--root"])
        .arg(home)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env("VIS_MODEL_TOOLS", "functions")
        .env("VIS_GATEWAY_EVENT_RING_MAX", "1000000")
        .env("VIS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(url) = llm {
        cmd.env("OPENAI_API_KEY", "bench")
            .env("OPENAI_BASE_URL", url);
    }
    let child = cmd.spawn().context("spawn vis-gateway")?;
    let mut gw = Gw { child, port: 0 };
    let t0 = Instant::now();
    loop {
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("gateway did not start");
        }
        if let Ok(v) = std::fs::read_to_string(&reg)
            .map_err(anyhow::Error::from)
            .and_then(|t| Ok(serde_json::from_str::<serde_json::Value>(&t)?))
        {
            gw.port = v["port"].as_u64().unwrap_or(0) as u16;
            if let Ok(r) = http(gw.port, "GET", "/healthz", "").await {
                if r.starts_with("HTTP/1.1 200") {
                    return Ok(gw);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Stored bytes of the session's journal (`events-since` from 0).
async fn history_bytes(port: u16, sid: &str) -> Result<(usize, usize)> {
    let r = http(
        port,
        "GET",
        &format!("/v1/sessions/{sid}/events-since?cursor=0"),
        "",
    )
    .await?;
    let v = json_body(&r);
    let evs = v["events"].as_array().cloned().unwrap_or_default();
    Ok((evs.len(), evs.iter().map(|e| e.to_string().len()).sum()))
}

/// One session holding about `mib` MiB of stored events.
async fn build_history(bin: &Path, home: &Path, mib: usize) -> Result<String> {
    let llm = FixtureLlm::start().await;
    let gw = start(bin, home, Some(&llm.openai_base_url())).await?;
    let r = http(gw.port, "POST", "/v1/sessions", r#"{"channel":"web"}"#).await?;
    let sid = json_body(&r)["id"]
        .as_str()
        .context("session id")?
        .to_string();
    // Each sentence closes a coalesced delta carrying the cumulative text (≤ 16000 chars).
    let sentence = format!("{}. ", "lorem ipsum dolor sit amet ".repeat(6).trim_end());
    for turn in 0..200 {
        let (_, bytes) = history_bytes(gw.port, &sid).await?;
        if bytes >= mib << 20 {
            break;
        }
        llm.push(Script::Text(vec![sentence.clone(); 300]));
        let body = format!(r#"{{"request":"turn {turn}","idempotency_key":"bench-{turn}"}}"#);
        http(gw.port, "POST", &format!("/v1/sessions/{sid}/turns"), &body).await?;
        let t0 = Instant::now();
        loop {
            let r = http(gw.port, "GET", &format!("/v1/sessions/{sid}"), "").await?;
            if json_body(&r)["live"] == serde_json::json!(false) {
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("turn {turn} did not end");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // A clean stop: the WAL is checkpointed and every copy starts from the same file.
    drop(gw);
    Ok(sid)
}

/// A connection that asks for the whole replay and never reads a byte.
async fn idle_client(port: u16, sid: &str) -> Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    sock.set_recv_buffer_size(4096)?;
    let mut s = sock.connect(([127, 0, 0, 1], port).into()).await?;
    let req = format!(
        "GET /v1/sessions/{sid}/events?cursor=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n{PROTO}Accept: text/event-stream\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    Ok(s)
}

/// RSS settles: sampled every 250 ms until two samples 1 s apart differ by < 1 %, or 15 s.
async fn settled_rss(pid: u32) -> u64 {
    let t0 = Instant::now();
    let mut prev = rss_kib(pid);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = rss_kib(pid);
        if (now as f64 - prev as f64).abs() < prev as f64 * 0.01 || t0.elapsed().as_secs() > 15 {
            return now;
        }
        prev = now;
    }
}

struct Row {
    idle: u64,
    held: u64,
    peak: u64,
    after: u64,
}

async fn measure(bin: &Path, home: &Path, sid: &str, clients: usize) -> Result<Row> {
    let gw = start(bin, home, None).await?;
    let pid = gw.child.id();
    let idle = settled_rss(pid).await;
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(idle_client(gw.port, sid).await?);
    }
    let mut peak = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = settled_rss(pid).await;
    peak = peak.max(held);
    drop(conns);
    let after = settled_rss(pid).await;
    Ok(Row {
        idle,
        held,
        peak,
        after,
    })
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else if e.file_type()?.is_file() {
            std::fs::copy(e.path(), dest)?;
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    vis_tests::init_crypto();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(bin) = args.first().map(PathBuf::from) else {
        bail!("usage: bench-replay <vis-gateway> [<baseline vis-gateway>] [clients] [history MiB]");
    };
    let baseline = args.get(1).map(PathBuf::from).filter(|p| p.exists());
    let nums: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let clients = nums.first().copied().unwrap_or(50);
    let mib = nums.get(1).copied().unwrap_or(18);
    let base = std::env::temp_dir().join(format!("vis-bench-replay-{}", std::process::id()));
    let seed = base.join("seed");
    std::fs::create_dir_all(&seed)?;
    let out = async {
        let sid = build_history(&bin, &seed, mib).await?;
        let g = start(&bin, &seed, None).await?;
        let (events, bytes) = history_bytes(g.port, &sid).await?;
        drop(g);
        println!(
            "history: {events} stored events, {:.1} MiB of event JSON; {clients} clients at cursor 0 that never read",
            bytes as f64 / (1 << 20) as f64
        );
        println!("| gateway | idle RSS | RSS with the clients (peak) | RSS after they left |");
        println!("|---|---|---|---|");
        let mut subjects = vec![("this build", bin.clone())];
        if let Some(b) = &baseline {
            subjects.push(("baseline", b.clone()));
        }
        let mib = |k: u64| k as f64 / 1024.0;
        let mut rows = Vec::new();
        for (i, (name, b)) in subjects.iter().enumerate() {
            let home = base.join(format!("run-{i}"));
            copy_dir(&seed, &home)?;
            let r = measure(b, &home, &sid, clients).await?;
            println!(
                "| {name} | {:.1} MiB | {:.1} MiB ({:.1}) | {:.1} MiB |",
                mib(r.idle),
                mib(r.held),
                mib(r.peak),
                mib(r.after)
            );
            rows.push(r);
        }
        if let [new, old] = &rows[..] {
            let grow = |r: &Row| r.peak.saturating_sub(r.idle).max(1) as f64;
            println!(
                "growth with the clients (peak − idle): {:.1} MiB vs {:.1} MiB baseline = {:.3}×; per client {:.0} KiB vs {:.0} KiB",
                grow(new) / 1024.0,
                grow(old) / 1024.0,
                grow(new) / grow(old),
                grow(new) / clients as f64,
                grow(old) / clients as f64
            );
        }
        anyhow::Ok(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&base);
    out
}
