//! `bench-agent`: what assembling one model request costs as a session grows, on a real
//! `vis-gateway` process driven by the fixture LLM (OpenAI dialect).
//!
//! Two sessions of the same turns, side by side in one run:
//! - `window 1M`: gpt-4.1's window, so nothing is compacted: the request carries every turn;
//! - `window 16k`: an OpenAI-compatible provider with `context_window: 16000`: the older turns
//!   are compacted as the session grows, and the request stays bounded by the window.
//!
//! After 1, 100 and 500 turns (each turn: a request of ~300 bytes, one `python_execution`
//! block printing ~2 KB, an answer), the next turn is submitted N times and measured from the
//! submit's answer to the fixture receiving the model request: loading the session's memory,
//! the system prompt, fitting. Reported: median and p90 of that time, the request's bytes.
//!
//! Usage: bench-agent <path-to-vis-gateway>
//! Everything listens on 127.0.0.1 and every loop is bounded; the work folder is removed.

#[path = "gwproc.rs"]
mod gwproc;

use anyhow::{bail, Context, Result};
use gwproc::{start, Gw, Work};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vis_tests::{is_summary_request, FixtureLlm, Script};

impl Gw {
    async fn session(&self, root: &Path, model: Option<&str>) -> Result<String> {
        let sid = self
            .create_session(json!({"root": root, "channel": "api"}))
            .await?;
        if let Some((provider, model)) = model.and_then(|m| m.split_once('/')) {
            let r = self
                .req(reqwest::Method::PATCH, &format!("/v1/sessions/{sid}/model"))
                .json(&json!({"provider": provider, "model": model}))
                .send()
                .await?;
            if !r.status().is_success() {
                bail!("pinning the model: {}", r.text().await?);
            }
        }
        Ok(sid)
    }

    async fn submit(&self, sid: &str, request: &str) -> Result<()> {
        let r = self
            .req(reqwest::Method::POST, &format!("/v1/sessions/{sid}/turns"))
            .json(&json!({ "request": request }))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("submit: {}", r.text().await?);
        }
        Ok(())
    }

    async fn idle(&self, sid: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let v: Value = self
                .req(reqwest::Method::GET, &format!("/v1/sessions/{sid}"))
                .send()
                .await?
                .json()
                .await?;
            if v["live"] == json!(false) && v["current_turn_id"].is_null() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the turn did not finish");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

/// One ordinary turn: a block printing ~2 KB, then an answer.
async fn fill(gw: &Gw, llm: &FixtureLlm, sid: &str, i: usize) -> Result<()> {
    llm.push(Script::tool_call(
        "python_execution",
        json!({"code": format!("print('row {i} ' + 'data ' * 400)")}),
    ));
    llm.push(Script::text(&[format!(
        "Turn {i} is done; the output had 400 words."
    )]));
    let request = format!(
        "turn {i}: {}",
        "please look at the module and report. ".repeat(7)
    );
    gw.submit(sid, &request).await?;
    gw.idle(sid).await
}

/// Submits `runs` plain turns and measures submit → the model request's arrival (ms) and
/// that request's size (bytes).
async fn measure(gw: &Gw, llm: &FixtureLlm, sid: &str, runs: usize) -> Result<(Vec<f64>, usize)> {
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..runs {
        llm.push(Script::text(&["ok"]));
        let before = llm.request_count();
        let t0 = Instant::now();
        gw.submit(sid, "measure: one more small question").await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        // Poll the count (cheap); copy the recorded requests only when it grew.
        let mut seen = before;
        let (elapsed, arrived) = loop {
            let n = llm.request_count();
            if n > seen {
                let at = t0.elapsed();
                let reqs = llm.requests();
                if let Some(r) = reqs[seen..].iter().find(|r| !is_summary_request(&r.body)) {
                    break (at, r.body.clone());
                }
                seen = n;
            }
            if Instant::now() > deadline {
                bail!("no model request arrived");
            }
            tokio::time::sleep(Duration::from_micros(100)).await;
        };
        times.push(elapsed.as_secs_f64() * 1e3);
        bytes = arrived.to_string().len();
        gw.idle(sid).await?;
    }
    Ok((times, bytes))
}

#[tokio::main]
async fn main() -> Result<()> {
    vis_tests::init_crypto();
    let bin = PathBuf::from(
        std::env::args()
            .nth(1)
            .context("usage: bench-agent <vis-gateway>")?,
    );
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let base = std::env::temp_dir().join(format!("vis-bench-agent-{}", std::process::id()));
    let work = Work(base.clone());
    let (home, root) = (work.0.join("home"), work.0.join("root"));
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&root)?;
    let llm = FixtureLlm::start().await;
    llm.set_summary_reply(Some(
        "## Goal\nThe user asks for module reports, one per turn.\n## Open\nNothing.",
    ));
    std::fs::write(
        root.join("vis.yml"),
        format!(
            "providers:\n  small:\n    api_style: openai-compatible\n    base_url: {}\n    api_key: k\n    model: small-model\n    context_window: 16000\n",
            llm.openai_base_url()
        ),
    )?;
    let gw = start(&bin, &home, &root, &llm, &[])?;
    let big = gw.session(&root, Some("openai/gpt-4.1")).await?;
    let small = gw.session(&root, Some("small/small-model")).await?;
    println!("| turns in the session | window | request bytes | submit → request p50 | p90 |");
    println!("|---|---|---|---|---|");
    let mut done = 0;
    for target in [1usize, 100, 500] {
        while done < target {
            fill(&gw, &llm, &big, done).await?;
            fill(&gw, &llm, &small, done).await?;
            done += 1;
        }
        for (sid, label) in [(&big, "1M (no compaction)"), (&small, "16k (compacted)")] {
            let (t, bytes) = measure(&gw, &llm, sid, runs).await?;
            println!(
                "| {target} | {label} | {bytes} | {:.2} ms | {:.2} ms |",
                pct(t.clone(), 0.5),
                pct(t, 0.9)
            );
        }
    }
    let summaries = llm
        .requests()
        .iter()
        .filter(|r| is_summary_request(&r.body))
        .count();
    println!("\ncompactions (summarising requests) in the 16k session: {summaries}");
    drop(gw);
    drop(work);
    Ok(())
}
