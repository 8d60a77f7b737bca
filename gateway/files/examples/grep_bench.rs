//! Times the file tools so they can be compared with `rg`.
//!
//! grep: `cargo run --release -p vis-files --example grep_bench -- ROOT QUERY [RUNS]`
//!       (e.g. `-- /work/main fn 20`; compare with `hyperfine 'rg fn /work/main'`)
//! patch: `cargo run --release -p vis-files --example grep_bench -- --patch [LINES] [EDITS] [RUNS]`
//!       (patches a fresh LINES-line file in a temp dir with EDITS spread edits, RUNS times)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use vis_files::{anchor_hash, grep, patch, Edit, GrepQuery, Workspace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(args
            .get(i)
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or(default))
    };
    if args.first().map(String::as_str) == Some("--patch") {
        return bench_patch(arg(1, 10_000)?, arg(2, 50)?, arg(3, 20)?);
    }
    let (Some(root), Some(query)) = (args.first(), args.get(1)) else {
        eprintln!(
            "usage: grep_bench ROOT QUERY [RUNS] | grep_bench --patch [LINES] [EDITS] [RUNS]"
        );
        std::process::exit(2);
    };
    let runs = arg(2, 20)?;
    let ws = Workspace::new(vec![PathBuf::from(root)])?;
    let q = GrepQuery {
        query: query.clone(),
        ..GrepQuery::default()
    };
    let first = grep(&ws, &q)?;
    println!("{} hits in {} files", first.hits, first.files);
    let times = time(runs, || {
        grep(&ws, &q)?;
        Ok(())
    })?;
    report("grep", &times);
    Ok(())
}

fn bench_patch(lines: usize, edits: usize, runs: usize) -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("vis-files-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ws = Workspace::new(vec![dir.clone()])?;
    let content: Vec<String> = (1..=lines)
        .map(|i| format!("    let value_{i} = compute({i}, \"some text on line {i}\");"))
        .collect();
    let original = content.join("\n") + "\n";
    let step = (lines / edits.max(1)).max(1);
    let batch: Vec<Edit> = (0..edits)
        .map(|k| {
            let n = 1 + k * step;
            let anchor = format!("{n}:{}", anchor_hash(&content[n - 1]));
            Edit::replace(
                &anchor,
                None,
                format!("    // edited {n}\n    let v = {n};\n"),
            )
        })
        .collect::<Result<_, _>>()?;
    let file = dir.join("big.rs");
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        std::fs::write(&file, &original)?;
        let t = Instant::now();
        patch(&ws, "big.rs", &batch)?;
        times.push(t.elapsed());
    }
    std::fs::remove_dir_all(&dir)?;
    println!("patch of a {lines}-line file with {} edits", batch.len());
    report("patch", &times);
    Ok(())
}

fn time(
    runs: usize,
    mut f: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed());
    }
    Ok(times)
}

fn report(what: &str, times: &[Duration]) {
    let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let pick = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    if ms.is_empty() {
        return;
    }
    println!(
        "{what}: {} runs, p50 {:.2} ms, min {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        ms.len(),
        pick(0.5),
        ms[0],
        pick(0.9),
        ms[ms.len() - 1]
    );
}
