//! `bench-sandbox`: the model sandbox of a real `vis-gateway` process, driven by the fixture
//! LLM (OpenAI dialect) that answers with `python_execution` calls.
//!
//! - cold start: the first block (`print(1)`) of each of N new sessions: the gateway's own
//!   `duration_ms` of the call (spawning the runtime included);
//! - warm round trip: N `print(1)` blocks in one session (same measure);
//! - a Symbol call from a block (an extension method returning a small dataclass), timed
//!   inside the block with `time.perf_counter` around each `await`;
//! - `grep` of a word over a tree from a block (first page, timed inside the block), and
//!   `rg WORD TREE` run directly by this process on the same tree, side by side;
//! - `patch` of a 10,000-line file with 50 edits, timed inside the block;
//! - an MCP tool call from a block to the fixture MCP server over stdio (`fixture-mcp`, next
//!   to the gateway binary), which answers at once: the call's whole cost is ours;
//! - a background job's start-to-handle time (`shell(cmd, background=True)`, timed inside
//!   the block);
//! - `grep(word, context=2)` from a block beside `rg -C2 WORD TREE`;
//! - a namespace of 200 model definitions: a warm block in that session beside a warm block
//!   of an empty one, and the first block after a runtime crash (which restores the 200
//!   from their source) beside the first block of a new session.
//!
//! Usage: bench-sandbox <path-to-vis-gateway> <tree-to-grep> [word]
//! Everything listens on 127.0.0.1 and every loop is bounded; the work folder is removed.

#[path = "gwproc.rs"]
mod gwproc;

use anyhow::{bail, Context, Result};
use gwproc::{start, Gw, Work};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vis_tests::{FixtureLlm, Script};

const EXTENSION: &str = r#"
from dataclasses import dataclass
import blockether.vis.extension as vis

@dataclass
class Small:
    n: int
    label: str

class Bench:
    def small(self, n: int) -> Small:
        """Return a small record."""
        return Small(n=n, label="x")

vis.register(vis.Extension(name="bench", alias="bench", description="Benchmark symbols.",
    symbols=[vis.Symbol(Bench(), name="bench")]))
"#;

impl Gw {
    async fn session(&self, root: &Path) -> Result<String> {
        self.create_session(json!({"root": root, "channel": "api"}))
            .await
    }

    /// Runs one turn whose model calls `python_execution` once per block; returns the
    /// blocks' forms (`duration_ms`, `result`) in order.
    async fn turn(&self, llm: &FixtureLlm, sid: &str, blocks: &[String]) -> Result<Vec<Value>> {
        for code in blocks {
            llm.push(Script::tool_call("python_execution", json!({"code": code})));
        }
        llm.push(Script::text(&["done"]));
        let r = self
            .req(reqwest::Method::POST, &format!("/v1/sessions/{sid}/turns"))
            .json(&json!({"request": "bench"}))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("submit: {}", r.text().await?);
        }
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let v: Value = self
                .req(reqwest::Method::GET, &format!("/v1/sessions/{sid}"))
                .send()
                .await?
                .json()
                .await?;
            if v["live"] == json!(false) && v["current_turn_id"].is_null() {
                break;
            }
            if Instant::now() > deadline {
                bail!("the turn did not finish");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let tr: Value = self
            .req(
                reqwest::Method::GET,
                &format!("/v1/sessions/{sid}/transcript"),
            )
            .send()
            .await?
            .json()
            .await?;
        let turn = tr["turns"]
            .as_array()
            .and_then(|t| t.last())
            .context("a turn")?;
        Ok(turn["iterations"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|i| i["forms"].as_array().cloned().unwrap_or_default())
            .collect())
    }
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn durations(forms: &[Value]) -> Vec<f64> {
    forms
        .iter()
        .filter_map(|f| f["duration_ms"].as_f64())
        .collect()
}

/// `NAME p50 p99` lines printed by a block.
fn printed(forms: &[Value], name: &str) -> Result<(f64, f64)> {
    for f in forms {
        let text = f["result"].as_str().unwrap_or_default();
        for l in text.lines() {
            let mut it = l.split_whitespace();
            if it.next() == Some(name) {
                let a: f64 = it.next().context("p50")?.parse()?;
                let b: f64 = it.next().context("p99")?.parse()?;
                return Ok((a, b));
            }
        }
    }
    bail!("no {name} line in {forms:?}")
}

const TIMING: &str = "def _p(ts):\n    ts = sorted(ts)\n    return ts[len(ts) // 2] * 1000, ts[min(len(ts) - 1, int(len(ts) * 0.99))] * 1000\n";

#[tokio::main]
async fn main() -> Result<()> {
    vis_tests::init_crypto();
    let args: Vec<String> = std::env::args().collect();
    let (Some(bin), Some(tree)) = (args.get(1), args.get(2)) else {
        bail!("usage: bench-sandbox <vis-gateway> <tree-to-grep> [word]");
    };
    let word = args.get(3).cloned().unwrap_or_else(|| "Workspace".into());
    let tree = std::fs::canonicalize(tree)?;
    let n: usize = std::env::var("BENCH_BLOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let work = Work(std::env::temp_dir().join(format!("vis-bench-sandbox-{}", std::process::id())));
    let (home, scratch) = (work.0.join("home"), work.0.join("scratch"));
    std::fs::create_dir_all(home.join("extensions"))?;
    std::fs::create_dir_all(&scratch)?;
    std::fs::write(home.join("extensions/bench.py"), EXTENSION)?;
    let llm = FixtureLlm::start().await;
    let gw = start(Path::new(bin), &home, &scratch, &llm, &[])?;

    // Cold: the first block of new sessions.
    let mut cold = Vec::new();
    for _ in 0..10 {
        let sid = gw.session(&scratch).await?;
        cold.extend(durations(&gw.turn(&llm, &sid, &["print(1)".into()]).await?));
    }
    // Warm: many blocks in one session (the first one warms it and is dropped).
    // A turn stops after 24 model iterations, so the blocks go 20 to a turn.
    let sid = gw.session(&scratch).await?;
    gw.turn(&llm, &sid, &["print(1)".into()]).await?;
    let mut warm = Vec::new();
    while warm.len() < n {
        let blocks = vec!["print(1)".to_string(); 20.min(n - warm.len())];
        warm.extend(durations(&gw.turn(&llm, &sid, &blocks).await?));
    }

    // A Symbol call from a block.
    let code = format!(
        "import time\n{TIMING}await bench.small(0)\nts = []\nfor i in range(300):\n    t = time.perf_counter()\n    r = await bench.small(i)\n    ts.append(time.perf_counter() - t)\nassert r.n == 299 and r.label == 'x'\nprint('SYMBOL', *_p(ts))\n"
    );
    let symbol = printed(&gw.turn(&llm, &sid, &[code]).await?, "SYMBOL")?;

    // patch: 10,000 lines, 50 edits.
    let code = format!(
        "import time, pathlib\n{TIMING}ts = []\nfor run in range(10):\n    pathlib.Path('big.txt').write_text(''.join(f'line {{i}} of the file\\n' for i in range(10000)))\n    edits = []\n    for k in range(50):\n        n = 1 + k * 200\n        a = cat('big.txt', n, n).splitlines()[0].split('│')[0]\n        edits.append({{'from': a, 'replace': f'edited {{k}}'}})\n    t = time.perf_counter()\n    patch('big.txt', edits)\n    ts.append(time.perf_counter() - t)\nprint('PATCH', *_p(ts))\n"
    );
    let patch = printed(&gw.turn(&llm, &sid, &[code]).await?, "PATCH")?;

    // An MCP tool call from a block (stdio fixture server beside the gateway binary).
    let fixture = std::fs::canonicalize(Path::new(bin).with_file_name("fixture-mcp"))?;
    let mcp_root = work.0.join("mcp");
    std::fs::create_dir_all(&mcp_root)?;
    std::fs::write(
        mcp_root.join("vis.yml"),
        format!(
            "mcp:\n  servers:\n    fx:\n      transport: stdio\n      command: {}\n      args: [stdio]\n",
            fixture.display()
        ),
    )?;
    let msid = gw.session(&mcp_root).await?;
    let code = format!(
        "import time\n{TIMING}await fx.echo(text='warm')\nts = []\nfor i in range(300):\n    t = time.perf_counter()\n    r = await fx.echo(text='x')\n    ts.append(time.perf_counter() - t)\nassert r == 'x'\nprint('MCP', *_p(ts))\n"
    );
    let mcp = printed(&gw.turn(&llm, &msid, &[code]).await?, "MCP")?;

    // grep from a block over `tree`, and rg on the same tree.
    let gsid = gw.session(&tree).await?;
    let code = format!(
        "import time\n{TIMING}ts = []\nfor i in range(21):\n    t = time.perf_counter()\n    g = grep({word:?})\n    ts.append(time.perf_counter() - t)\nprint('GREP', *_p(ts[1:]))\nprint('HITS', g.hits, g.files)\n"
    );
    let forms = gw.turn(&llm, &gsid, &[code]).await?;
    let grep = printed(&forms, "GREP")?;
    let hits = printed(&forms, "HITS")?;
    let mut rg = Vec::new();
    for i in 0..21 {
        let t = Instant::now();
        let out = Command::new("rg")
            .arg(&word)
            .arg(&tree)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("run rg (apt-get install ripgrep)")?;
        if i > 0 && out.code().is_some_and(|c| c <= 1) {
            rg.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let rg_p50 = pct(rg, 0.5);

    // A background job's start-to-handle time (each stopped before the next: the limit).
    let code = format!(
        "import time\n{TIMING}ts = []\nfor i in range(30):\n    t = time.perf_counter()\n    j = shell('sleep 30', background=True)\n    ts.append(time.perf_counter() - t)\n    j.stop()\nprint('JOB', *_p(ts))\n"
    );
    let job = printed(&gw.turn(&llm, &sid, &[code]).await?, "JOB")?;

    // grep with two lines of context, and rg -C2.
    let code = format!(
        "import time\n{TIMING}ts = []\nfor i in range(21):\n    t = time.perf_counter()\n    g = grep({word:?}, context=2)\n    ts.append(time.perf_counter() - t)\nprint('GREPC', *_p(ts[1:]))\n"
    );
    let grep_c = printed(&gw.turn(&llm, &gsid, &[code]).await?, "GREPC")?;
    let mut rg_c = Vec::new();
    for i in 0..21 {
        let t = Instant::now();
        let out = Command::new("rg")
            .args(["-C2", &word])
            .arg(&tree)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if i > 0 && out.code().is_some_and(|c| c <= 1) {
            rg_c.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let rg_c_p50 = pct(rg_c, 0.5);

    // 200 definitions: warm blocks beside an empty session's, and restores after a crash.
    let dsid = gw.session(&scratch).await?;
    let defs: String = (0..200)
        .map(|i| format!("def f{i}(x, y={i}):\n    return x + y\n\n"))
        .collect();
    gw.turn(&llm, &dsid, &[defs]).await?;
    let mut with_defs = Vec::new();
    for _ in 0..3 {
        with_defs.extend(durations(
            &gw.turn(&llm, &dsid, &vec!["print(1)".to_string(); 20])
                .await?,
        ));
    }
    let mut restored = Vec::new();
    let crash = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)".to_string();
    for _ in 0..10 {
        gw.turn(&llm, &dsid, std::slice::from_ref(&crash)).await?;
        let forms = gw.turn(&llm, &dsid, &["print(f199(1))".into()]).await?;
        let text = forms[0]["result"].as_str().unwrap_or_default();
        if !text.contains("restored") || !text.contains("200") {
            bail!("the definitions were not restored: {text}");
        }
        restored.extend(durations(&forms));
    }

    let (cold_p50, warm_p50) = (pct(cold.clone(), 0.5), pct(warm.clone(), 0.5));
    println!("| measure | p50 | p99 | target |");
    println!("|---|---|---|---|");
    println!(
        "| first block of a new session (`print(1)`, runtime spawn included), {} sessions | {:.0} ms | {:.0} ms | p50 ≤ 300 ms |",
        cold.len(),
        pct(cold.clone(), 0.5),
        pct(cold, 0.99)
    );
    println!(
        "| warm `print(1)` block, {} blocks | {:.0} ms | {:.0} ms | p50 ≤ 30 ms |",
        warm.len(),
        pct(warm.clone(), 0.5),
        pct(warm, 0.99)
    );
    println!(
        "| Symbol call from a block (small dataclass), 300 calls | {:.2} ms | {:.2} ms | p50 ≤ 3 ms |",
        symbol.0, symbol.1
    );
    println!(
        "| `grep({word:?})` from a block over {} ({} hits in {} files), 20 runs | {:.1} ms | {:.1} ms | ≤ 2× rg |",
        tree.display(),
        hits.0,
        hits.1,
        grep.0,
        grep.1
    );
    println!(
        "| `rg {word}` on the same tree, run directly (process spawn included), 20 runs | {:.1} ms | | ratio {:.2}× |",
        rg_p50,
        grep.0 / rg_p50
    );
    println!(
        "| `patch` of a 10,000-line file with 50 edits, 10 runs | {:.1} ms | {:.1} ms | ≤ 50 ms |",
        patch.0, patch.1
    );
    println!(
        "| MCP tool call from a block to a local stdio server that answers at once, 300 calls | {:.2} ms | {:.2} ms | p50 ≤ 5 ms |",
        mcp.0, mcp.1
    );
    println!(
        "| background job start to handle (`shell('sleep 30', background=True)`), 30 jobs | {:.2} ms | {:.2} ms | ≤ 20 ms |",
        job.0, job.1
    );
    println!(
        "| `grep({word:?}, context=2)` from a block, same tree, 20 runs | {:.1} ms | {:.1} ms | ≤ 2× rg -C2 |",
        grep_c.0, grep_c.1
    );
    println!(
        "| `rg -C2 {word}` on the same tree, run directly, 20 runs | {:.1} ms | | ratio {:.2}× |",
        rg_c_p50,
        grep_c.0 / rg_c_p50
    );
    let (wd, wn) = (pct(with_defs.clone(), 0.5), warm_p50);
    println!(
        "| warm `print(1)` block in a session holding 200 definitions, {} blocks | {:.0} ms | {:.0} ms | overhead {:+.0} ms vs empty (≤ 50 ms) |",
        with_defs.len(),
        wd,
        pct(with_defs, 0.99),
        wd - wn
    );
    let (rp, cp) = (pct(restored.clone(), 0.5), cold_p50);
    println!(
        "| first block after a crash, restoring 200 definitions, {} restarts | {:.0} ms | {:.0} ms | overhead {:+.0} ms vs a new session's first block (≤ 50 ms) |",
        restored.len(),
        rp,
        pct(restored, 0.99),
        rp - cp
    );
    Ok(())
}
