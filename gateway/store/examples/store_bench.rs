//! Events/s stored on each engine, side by side in one run, with the same events: N events
//! of about S bytes (the stored envelope) spread round-robin over K sessions, at most W
//! appends in flight (the gateway queues its journal writes without waiting for them).
//!
//! `nice cargo run --release -p vis-store --example store_bench -- [events] [sessions] [bytes] [in-flight] [rounds]`
//! (defaults 200000 50 300 4096 2). PostgreSQL: `VIS_BENCH_PG_ADDR` (loopback, default
//! 127.0.0.1:5432), database `test`, a schema of the run's own, dropped at the end. The
//! SQLite file lives next to this binary under target/ and is removed at the end. With NATS
//! reachable (`VIS_BENCH_NATS_ADDR`, loopback, default 127.0.0.1:4222) each round also runs
//! SQLite with every commit published on JetStream (a stream of the run's own, removed at the
//! end): events/s stored, and events/s until the last one was acknowledged by JetStream.

use serde::Serialize;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use vis_store::{Journal, JournalOptions, Keep, NodeId, PgOptions};

/// The payload, owned: the journal serializes it on its writer, once the seq is known.
#[derive(Serialize)]
struct Delta {
    turn_id: &'static str,
    text: String,
}

struct Setup {
    events: usize,
    sessions: usize,
    bytes: usize,
    in_flight: usize,
}

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// Appends the run's events; answers the seconds from the first append to the last commit
/// and the average stored envelope size.
async fn run(journal: &Journal, setup: &Setup, tag: &str) -> (f64, f64) {
    let lease = journal
        .leases()
        .acquire(
            &NodeId::new(format!("bench-{tag}")),
            "127.0.0.1:0",
            Duration::from_secs(600),
        )
        .await
        .expect("lease");
    let w = lease.writer();
    let sids: Vec<String> = (0..setup.sessions)
        .map(|i| format!("{tag}-s{i:03}"))
        .collect();
    for sid in &sids {
        journal.create_session(&w, sid).await.expect("session");
    }
    // Pad the payload so the stored envelope is about `bytes` long.
    let probe = journal
        .append(
            &w,
            &sids[0],
            "content.block.delta",
            Delta {
                turn_id: "t",
                text: String::new(),
            },
            Keep::LiveOnly,
        )
        .await
        .expect("probe");
    let pad = "x".repeat(setup.bytes.saturating_sub(probe.data.len() + 6));
    let mut flight = VecDeque::with_capacity(setup.in_flight);
    let mut stored_bytes = 0usize;
    let started = Instant::now();
    for i in 0..setup.events {
        if flight.len() == setup.in_flight {
            let done: vis_store::Appending = flight.pop_front().expect("in flight");
            stored_bytes += done.await.expect("append").data.len();
        }
        let sid = &sids[i % sids.len()];
        let payload = Delta {
            turn_id: "t",
            text: pad.clone(),
        };
        flight.push_back(journal.append(&w, sid, "content.block.delta", payload, Keep::Journal));
    }
    for done in flight {
        stored_bytes += done.await.expect("append").data.len();
    }
    let secs = started.elapsed().as_secs_f64();
    (secs, stored_bytes as f64 / setup.events as f64)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let setup = Setup {
        events: arg(1, 200_000),
        sessions: arg(2, 50).max(1),
        bytes: arg(3, 300),
        in_flight: arg(4, 4096).max(1),
    };
    let rounds = arg(5, 2).max(1);
    let addr = std::env::var("VIS_BENCH_PG_ADDR").unwrap_or_else(|_| "127.0.0.1:5432".into());
    let loopback = addr
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback());
    assert!(loopback, "the bench dials loopback only, not {addr}");
    let url = format!("postgres://postgres@{addr}/test");
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| {
            p.parent()
                .map(|p| p.join(format!("store-bench-{}", std::process::id())))
        })
        .expect("a folder beside the binary");
    std::fs::create_dir_all(&dir).expect("mkdir");
    println!(
        "{} events of ~{} bytes over {} sessions, at most {} in flight, {} rounds",
        setup.events, setup.bytes, setup.sessions, setup.in_flight, rounds
    );
    println!("| round | engine | seconds | events/s | stored bytes/event |");
    println!("|---|---|---|---|---|");
    let (mut sqlite_rates, mut pg_rates) = (Vec::new(), Vec::new());
    let nats_addr =
        std::env::var("VIS_BENCH_NATS_ADDR").unwrap_or_else(|_| "127.0.0.1:4222".into());
    let nats_sock: std::net::SocketAddr = nats_addr.parse().expect("a socket address");
    assert!(
        nats_sock.ip().is_loopback(),
        "the bench dials loopback only, not {nats_addr}"
    );
    let stream = format!("VIS_BENCH_{}", std::process::id());
    let nats = match vis_store::nats::Nats::connect(
        &format!("nats://{nats_addr}"),
        &stream,
        &format!("vis-bench-{}.events", std::process::id()),
    )
    .await
    {
        Ok(n) => Some(n),
        Err(e) => {
            println!("(NATS not measured: {e})");
            None
        }
    };
    let mut published_rates = Vec::new();
    for round in 1..=rounds {
        let path = dir.join(format!("round{round}.sqlite"));
        let sqlite = Journal::open_sqlite(&path, JournalOptions::default())
            .await
            .expect("SQLite");
        let (secs, size) = run(&sqlite, &setup, "sqlite").await;
        let rate = setup.events as f64 / secs;
        sqlite_rates.push(rate);
        println!("| {round} | SQLite | {secs:.2} | {rate:.0} | {size:.0} |");
        drop(sqlite);

        if let Some(nats) = &nats {
            let path = dir.join(format!("round{round}-nats.sqlite"));
            let (sink, publisher) = nats.start_publisher();
            let opts = JournalOptions {
                commits: Some(sink),
                ..JournalOptions::default()
            };
            let sqlite = Journal::open_sqlite(&path, opts).await.expect("SQLite");
            let t0 = Instant::now();
            let (secs, size) = run(&sqlite, &setup, &format!("nats{round}")).await;
            drop(sqlite);
            let drained = publisher.drained(Duration::from_secs(600)).await;
            let through = t0.elapsed().as_secs_f64();
            let rate = setup.events as f64 / secs;
            let published = setup.events as f64 / through;
            published_rates.push(published);
            println!("| {round} | SQLite + NATS publishing | {secs:.2} | {rate:.0} | {size:.0} |");
            println!(
                "| {round} | … until JetStream acknowledged the last{} | {through:.2} | {published:.0} | |",
                if drained { "" } else { " (not drained in 600 s)" }
            );
        }

        let schema = format!("vis_bench_{}_{round}", std::process::id());
        let pg = Journal::open_postgres(
            &PgOptions::new(url.clone()).with_schema(schema.clone()),
            JournalOptions::default(),
        )
        .await
        .expect("PostgreSQL");
        let (secs, size) = run(&pg, &setup, "pg").await;
        let rate = setup.events as f64 / secs;
        pg_rates.push(rate);
        println!("| {round} | PostgreSQL | {secs:.2} | {rate:.0} | {size:.0} |");
        drop(pg);
        vis_store::testing::drop_schema_at(&url, &schema).await;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (s, p) = (mean(&sqlite_rates), mean(&pg_rates));
    println!();
    println!(
        "mean events/s: SQLite {s:.0}, PostgreSQL {p:.0}; PostgreSQL / SQLite = {:.2}",
        p / s
    );
    if let Some(nats) = &nats {
        let n = mean(&published_rates);
        println!(
            "mean events/s published on JetStream (SQLite + NATS): {n:.0}; ÷ SQLite alone = {:.2}",
            n / s
        );
        let held = nats.held().await.unwrap_or(0);
        let sent = (setup.events + 1) * rounds; // each round also appends one probe
        println!("the stream held {held} messages of the {sent} events appended");
        let _ = nats.delete_stream().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
