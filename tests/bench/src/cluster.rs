//! `bench-cluster`: SSE fan-out across gateway nodes against one node (issue 25), side by
//! side in one run.
//!
//! - one node: a release `vis-gateway` on SQLite (the default), N subscribers on one session;
//! - three nodes on one PostgreSQL schema and one NATS stream, the session homed on the
//!   first, the N subscribers spread evenly over the three (two thirds of them follow the
//!   session from a node it does not run on: the journal, then NATS live).
//!
//! Each case carries the same load as `bench-gateway`'s steady window: one streamed answer
//! whose sentences arrive every 100 ms (10 events/s for 10 s). Latency is publish → receive:
//! the envelope's `ts` (stamped on the session's home node when the event is published) to
//! the subscriber's clock, 1 ms resolution, same machine. Rounds alternate the order.
//!
//! Usage: bench-cluster <vis-gateway> [subscribers=1000] [rounds=3]

#[path = "gwproc.rs"]
mod gwproc;
#[path = "subscribers.rs"]
mod subscribers;

use anyhow::{Context, Result};
use gwproc::{start, Gw, Work};
use reqwest::Method;
use serde_json::json;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vis_tests::{FixtureLlm, Script};

const EVENTS: u64 = 100;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn port_of(gw: &Gw) -> u16 {
    gw.url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Window {
    held: usize,
    delivered: u64,
    all: Vec<i64>,
    remote: Vec<i64>,
}

/// Opens `n` subscribers spread over `nodes` (the session's home first), runs the steady
/// load through the home, and collects every delivery's latency.
async fn window(nodes: &[Gw], sid: &str, n: usize, llm: &FixtureLlm) -> Result<Window> {
    let mut groups = Vec::new();
    for (i, gw) in nodes.iter().enumerate() {
        let share = n / nodes.len() + usize::from(i < n % nodes.len());
        let (port, sid) = (port_of(gw), sid.to_string());
        let subs =
            tokio::task::spawn_blocking(move || subscribers::Subscribers::open(port, &sid, share))
                .await??;
        groups.push((subs, share));
    }
    let t0 = Instant::now();
    while groups
        .iter()
        .any(|(s, want)| (s.stats.ready.load(Ordering::Relaxed) as usize) < *want)
        && t0.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held: usize = groups
        .iter()
        .map(|(s, _)| s.stats.ready.load(Ordering::Relaxed) as usize)
        .sum();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (s, _) in &groups {
        s.stats.lat.lock().map(|mut v| v.clear()).ok();
    }
    let chunks: Vec<String> = (0..EVENTS)
        .map(|i| format!("Sentence number {i}. "))
        .collect();
    llm.push(Script::Slow {
        chunks,
        delay_ms: 100,
    });
    let before: u64 = groups
        .iter()
        .map(|(s, _)| s.stats.frames.load(Ordering::Relaxed))
        .sum();
    let r = nodes[0]
        .req(Method::POST, &format!("/v1/sessions/{sid}/turns"))
        .json(&json!({"request": "stream please"}))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "submit answered {}", r.status());
    let want = before + EVENTS * held as u64;
    let t1 = Instant::now();
    loop {
        let got: u64 = groups
            .iter()
            .map(|(s, _)| s.stats.frames.load(Ordering::Relaxed))
            .sum();
        if got >= want || t1.elapsed() > Duration::from_secs(40) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mut all = Vec::new();
    let mut remote = Vec::new();
    let mut delivered = 0;
    for (i, (s, _)) in groups.iter().enumerate() {
        delivered += s.stats.frames.load(Ordering::Relaxed);
        let l = s.stats.lat.lock().map(|v| v.clone()).unwrap_or_default();
        if i > 0 {
            remote.extend_from_slice(&l);
        }
        all.extend(l);
    }
    all.sort_unstable();
    remote.sort_unstable();
    Ok(Window {
        held,
        delivered: delivered - before,
        all,
        remote,
    })
}

async fn session(gw: &Gw) -> Result<String> {
    gw.create_session(json!({"channel": "bench"})).await
}

async fn one_node(bin: &Path, n: usize, llm: &FixtureLlm) -> Result<Window> {
    let work =
        Work(std::env::temp_dir().join(format!("vis-bench-cl1-{}", uuid::Uuid::new_v4().simple())));
    let (home, root) = (work.0.join("home"), work.0.join("root"));
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&root)?;
    let gw = start(bin, &home, &root, llm, &[])?;
    wait_healthy(&gw).await?;
    let sid = session(&gw).await?;
    window(std::slice::from_ref(&gw), &sid, n, llm).await
}

async fn three_nodes(bin: &Path, n: usize, llm: &FixtureLlm) -> Result<Window> {
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (schema, stream) = (format!("vis_bench_cl_{tag}"), format!("VIS_BENCH_{tag}"));
    let work = Work(std::env::temp_dir().join(format!("vis-bench-cl3-{tag}")));
    let shared: Vec<String> = vec![
        "--database-url".into(),
        vis_store::testing::pg_url(),
        "--database-schema".into(),
        schema.clone(),
        "--nats-url".into(),
        vis_store::testing::nats_url(),
        "--nats-stream".into(),
        stream.clone(),
        "--nats-subject-prefix".into(),
        format!("bench{tag}.events"),
    ];
    let result = async {
        let mut nodes = Vec::new();
        for name in ["a", "b", "c"] {
            let (home, root) = (work.0.join(name), work.0.join("root"));
            std::fs::create_dir_all(&home)?;
            std::fs::create_dir_all(&root)?;
            let mut args = shared.clone();
            args.extend(["--node-id".to_string(), name.to_string()]);
            let gw = start(bin, &home, &root, llm, &args)?;
            wait_healthy(&gw).await?;
            nodes.push(gw);
        }
        let sid = session(&nodes[0]).await?;
        window(&nodes, &sid, n, llm).await
    }
    .await;
    vis_store::testing::drop_schema_at(&vis_store::testing::pg_url(), &schema).await;
    if let Ok(n) =
        vis_store::nats::Nats::connect(&vis_store::testing::nats_url(), &stream, "vis.cleanup")
            .await
    {
        let _ = n.delete_stream().await;
    }
    result
}

async fn wait_healthy(gw: &Gw) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = gw.req(Method::GET, "/healthz").send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "/healthz never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn row(name: &str, w: &Window) -> String {
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} |",
        w.held,
        w.delivered,
        pct(&w.all, 0.5),
        pct(&w.all, 0.99),
        if w.remote.is_empty() {
            "–".to_string()
        } else {
            pct(&w.remote, 0.5).to_string()
        },
        if w.remote.is_empty() {
            "–".to_string()
        } else {
            pct(&w.remote, 0.99).to_string()
        },
    )
}

#[tokio::main]
async fn main() -> Result<()> {
    // reqwest is built without a default TLS provider in this workspace.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args = std::env::args().skip(1);
    let bin = std::path::PathBuf::from(
        args.next()
            .context("usage: bench-cluster <vis-gateway> [subscribers] [rounds]")?,
    );
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let llm = FixtureLlm::start().await;
    println!("| case | held | deliveries | p50 ms | p99 ms | p50 ms on other nodes | p99 ms on other nodes |");
    println!("|---|---|---|---|---|---|---|");
    let (mut one_p99, mut three_p99) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let order = if r % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for cluster in order {
            if cluster {
                let w = three_nodes(&bin, n, &llm).await?;
                println!("{}", row("3 nodes, PostgreSQL + NATS", &w));
                three_p99.push(pct(&w.all, 0.99));
            } else {
                let w = one_node(&bin, n, &llm).await?;
                println!("{}", row("1 node, SQLite", &w));
                one_p99.push(pct(&w.all, 0.99));
            }
        }
    }
    one_p99.sort_unstable();
    three_p99.sort_unstable();
    let (a, b) = (pct(&one_p99, 0.5), pct(&three_p99, 0.5));
    println!(
        "\nmedian p99 over {rounds} rounds: one node {a} ms, three nodes {b} ms ({:.2}× ; target ≤ 2×)",
        b as f64 / a.max(1) as f64
    );
    Ok(())
}
