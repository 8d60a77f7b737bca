//! `bench-store`: the gateway on its two store engines, side by side in one run (issue 25).
//!
//! Each round starts one release `vis-gateway` on a fresh SQLite home and one with
//! `--database-url` on a fresh PostgreSQL schema (alternating which goes first), and on each:
//!
//! - turn start: `/help` turns (a slash turn: no model, four events) submitted one at a
//!   time on an idle gateway, each after the previous one finished; the time from sending
//!   `POST /v1/sessions/:sid/turns` to its `202`, which the gateway answers only once the
//!   turn's record is committed;
//! - events stored per second: the same turns submitted all at once over 10 sessions, from
//!   the first request until every session's journal holds its last event (the stored seqs
//!   of the sessions ÷ the elapsed time);
//! - and until searchable: the same events over the time until a search answered after the
//!   burst (on PostgreSQL turn texts are indexed off the write path and a search first
//!   indexes what is still queued, so the indexing left over is counted here).
//!
//! Usage: bench-store <vis-gateway> [turns=2000] [rounds=3] [postgres URL]
//! (2,000 turns: a burst of 200 lasted a tenth of a second on SQLite and its rounds varied by
//! a third)
//! (the URL defaults to `VIS_TEST_PG_URL`, else `postgres://postgres@127.0.0.1:5432/test`;
//! each round's schema is dropped after it).

#[path = "gwproc.rs"]
mod gwproc;

use anyhow::{bail, Result};
use gwproc::{start, Gw, Work};
use reqwest::Method;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use vis_tests::FixtureLlm;

const SESSIONS: usize = 10;

#[derive(Clone, Copy, PartialEq)]
enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "SQLite",
            Engine::Postgres => "PostgreSQL",
        }
    }
}

struct Round {
    start_p50_ms: f64,
    start_p99_ms: f64,
    events_per_s: f64,
    searchable_per_s: f64,
    search_ms: f64,
}

async fn session(gw: &Gw) -> Result<String> {
    gw.create_session(json!({"channel": "bench"})).await
}

async fn submit(gw: &Gw, sid: &str) -> Result<()> {
    let r = gw
        .req(Method::POST, &format!("/v1/sessions/{sid}/turns"))
        .json(&json!({"request": "/help"}))
        .send()
        .await?;
    if r.status().as_u16() != 202 {
        bail!("submit answered {}", r.status());
    }
    Ok(())
}

/// The session's stored high-water seq once it is idle.
async fn idle_seq(gw: &Gw, sid: &str) -> Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v: Value = gw
            .req(Method::GET, &format!("/v1/sessions/{sid}"))
            .send()
            .await?
            .json()
            .await?;
        if v["live"] == json!(false) && v["current_turn_id"].is_null() {
            let e: Value = gw
                .req(
                    Method::GET,
                    &format!("/v1/sessions/{sid}/events-since?cursor=0"),
                )
                .send()
                .await?
                .json()
                .await?;
            let last = e["events"]
                .as_array()
                .and_then(|a| a.last())
                .and_then(|l| l["seq"].as_i64())
                .unwrap_or(0);
            return Ok(last);
        }
        if Instant::now() > deadline {
            bail!("session {sid} never went idle");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn round(
    bin: &Path,
    engine: Engine,
    pg_url: &str,
    turns: usize,
    llm: &FixtureLlm,
) -> Result<Round> {
    let work = Work(
        std::env::temp_dir().join(format!("vis-bench-store-{}", uuid::Uuid::new_v4().simple())),
    );
    let (home, root) = (work.0.join("home"), work.0.join("root"));
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&root)?;
    let schema = format!(
        "vis_bench_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let extra: Vec<String> = match engine {
        Engine::Sqlite => vec![],
        Engine::Postgres => vec![
            "--database-url".into(),
            pg_url.into(),
            "--database-schema".into(),
            schema.clone(),
        ],
    };
    let out = async {
        let gw = start(bin, &home, &root, llm, &extra)?;
        // Turn start, one at a time on an idle gateway.
        let sid = session(&gw).await?;
        submit(&gw, &sid).await?; // warm-up
        idle_seq(&gw, &sid).await?;
        let mut starts = Vec::with_capacity(turns);
        for _ in 0..turns {
            let t = Instant::now();
            submit(&gw, &sid).await?;
            starts.push(t.elapsed().as_secs_f64() * 1000.0);
            idle_seq(&gw, &sid).await?;
        }
        starts.sort_by(f64::total_cmp);
        // Events stored per second: every turn at once over SESSIONS sessions.
        let mut sids = Vec::new();
        for _ in 0..SESSIONS {
            sids.push(session(&gw).await?);
        }
        let mut before = 0;
        for s in &sids {
            before += idle_seq(&gw, s).await?;
        }
        let t = Instant::now();
        let sends = (0..turns).map(|i| submit(&gw, &sids[i % SESSIONS]));
        for r in futures::future::join_all(sends).await {
            r?;
        }
        let mut after = 0;
        for s in &sids {
            after += idle_seq(&gw, s).await?;
        }
        let secs = t.elapsed().as_secs_f64();
        let s = Instant::now();
        let found: Value = gw
            .req(
                Method::GET,
                "/v1/sessions/actions/search?q=slash%20commands",
            )
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let search = s.elapsed().as_secs_f64();
        if found["matches"].as_array().map_or(0, Vec::len) < SESSIONS {
            bail!("the search after the burst did not find every session: {found}");
        }
        let events = (after - before) as f64;
        Ok::<_, anyhow::Error>(Round {
            start_p50_ms: pct(&starts, 0.5),
            start_p99_ms: pct(&starts, 0.99),
            events_per_s: events / secs,
            searchable_per_s: events / (secs + search),
            search_ms: search * 1000.0,
        })
    }
    .await;
    if engine == Engine::Postgres {
        vis_store::testing::drop_schema_at(pg_url, &schema).await;
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    pct(&v, 0.5)
}

#[tokio::main]
async fn main() -> Result<()> {
    vis_tests::init_crypto();
    let args: Vec<String> = std::env::args().collect();
    let Some(bin) = args.get(1) else {
        bail!("usage: bench-store <vis-gateway> [turns] [rounds] [postgres URL]");
    };
    let turns: usize = args.get(2).map_or(Ok(2000), |a| a.parse())?;
    let rounds: usize = args.get(3).map_or(Ok(3), |a| a.parse())?;
    let pg_url = args
        .get(4)
        .cloned()
        .or_else(|| std::env::var("VIS_TEST_PG_URL").ok())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
    let llm = FixtureLlm::start().await;
    let mut results: Vec<(Engine, Round)> = Vec::new();
    for r in 0..rounds {
        let order = if r % 2 == 0 {
            [Engine::Sqlite, Engine::Postgres]
        } else {
            [Engine::Postgres, Engine::Sqlite]
        };
        for engine in order {
            let got = round(Path::new(bin), engine, &pg_url, turns, &llm).await?;
            eprintln!(
                "round {} {}: turn start p50 {:.2} ms, p99 {:.2} ms; {:.0} events/s stored, \
                 {:.0} until searchable (search {:.1} ms)",
                r + 1,
                engine.name(),
                got.start_p50_ms,
                got.start_p99_ms,
                got.events_per_s,
                got.searchable_per_s,
                got.search_ms
            );
            results.push((engine, got));
        }
    }
    let of = |e: Engine, f: fn(&Round) -> f64| -> f64 {
        median(
            results
                .iter()
                .filter(|(x, _)| *x == e)
                .map(|(_, r)| f(r))
                .collect(),
        )
    };
    println!(
        "| engine | turn start p50 | turn start p99 | events/s stored ({turns} slash turns over {SESSIONS} sessions) | events/s until searchable | first search after |"
    );
    println!("|---|---|---|---|---|---|");
    for e in [Engine::Sqlite, Engine::Postgres] {
        println!(
            "| {} | {:.2} ms | {:.2} ms | {:.0} | {:.0} | {:.1} ms |",
            e.name(),
            of(e, |r| r.start_p50_ms),
            of(e, |r| r.start_p99_ms),
            of(e, |r| r.events_per_s),
            of(e, |r| r.searchable_per_s),
            of(e, |r| r.search_ms)
        );
    }
    let ratio = |f: fn(&Round) -> f64| of(Engine::Postgres, f) / of(Engine::Sqlite, f);
    println!(
        "\nPostgreSQL ÷ SQLite (medians of {rounds} rounds): turn start p50 {:.2}×, events/s {:.2}×, \
         events/s until searchable {:.2}×",
        ratio(|r| r.start_p50_ms),
        ratio(|r| r.events_per_s),
        ratio(|r| r.searchable_per_s)
    );
    Ok(())
}
