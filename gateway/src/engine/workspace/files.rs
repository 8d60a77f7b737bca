//! `@file` suggestions: a per-project index of the workspace's files (walked with the
//! `ignore` crate, so `.gitignore` and hidden files are honoured as by ripgrep) and a fuzzy
//! ranker over it.
//!
//! The index is built once and then refreshed in the background when a query finds it older
//! than [`FRESH`]; queries never wait for a refresh. Ranking is a subsequence match scored
//! for word starts, consecutive runs and the file name, after a 64-bit character-set filter
//! that rejects most paths without looking at them.

use super::error::{WorkspaceError, WorkspaceResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use vis_companion_api::records::FileSuggestion;

/// An index younger than this is used as is.
const FRESH: Duration = Duration::from_secs(10);
/// Files indexed per project at most.
const MAX_FILES: usize = 300_000;
/// Answers per query.
const MAX_ANSWERS: usize = 20;

struct Entry {
    /// Relative path, `/`-separated.
    path: String,
    /// Lower-cased path bytes (ASCII folded).
    lower: Vec<u8>,
    /// Byte offset of the file name in `path`.
    name_at: usize,
    /// Which characters occur (see [`mask`]).
    mask: u64,
    size: u64,
    modified: Option<SystemTime>,
}

pub struct Index {
    entries: Vec<Entry>,
    built: Instant,
    git_status: HashMap<String, String>,
}

/// One bit per character class: a–z, 0–9, and a shared bit for everything else.
fn bit(b: u8) -> u64 {
    match b {
        b'a'..=b'z' => 1 << (b - b'a'),
        b'0'..=b'9' => 1 << (26 + b - b'0'),
        _ => 1 << 36,
    }
}

fn mask(lower: &[u8]) -> u64 {
    lower.iter().fold(0, |m, b| m | bit(*b))
}

/// `git status --porcelain` of the workspace: relative path → status letter.
fn git_status(root: &Path) -> HashMap<String, String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["status", "--porcelain", "-z", "--untracked-files=all"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        return HashMap::new();
    };
    let prefix = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "--show-prefix"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut map = HashMap::new();
    let mut fields = out.stdout.split(|b| *b == 0);
    while let Some(f) = fields.next() {
        if f.len() < 4 {
            continue;
        }
        let code = String::from_utf8_lossy(&f[..2]).to_string();
        let path = String::from_utf8_lossy(&f[3..]).to_string();
        if code.starts_with('R') || code.starts_with('C') {
            fields.next(); // the rename's source
        }
        let letter = code
            .trim()
            .chars()
            .next()
            .map(|c| if c == '?' { "?".into() } else { c.to_string() })
            .unwrap_or_default();
        if let Some(rel) = path.strip_prefix(&prefix) {
            map.insert(rel.to_string(), letter);
        }
    }
    map
}

/// Walks `root` (blocking).
pub fn build(root: &Path) -> Index {
    let mut entries = Vec::new();
    let walker = ignore::WalkBuilder::new(root)
        .hidden(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .build();
    for dent in walker.flatten() {
        if entries.len() >= MAX_FILES {
            break;
        }
        if !dent.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let Ok(rel) = dent.path().strip_prefix(root) else {
            continue;
        };
        let path = rel.to_string_lossy().to_string();
        let meta = dent.metadata().ok();
        let lower = path.to_ascii_lowercase().into_bytes();
        entries.push(Entry {
            name_at: path.rfind('/').map_or(0, |i| i + 1),
            mask: mask(&lower),
            lower,
            size: meta.as_ref().map_or(0, |m| m.len()),
            modified: meta.and_then(|m| m.modified().ok()),
            path,
        });
    }
    Index {
        entries,
        built: Instant::now(),
        git_status: git_status(root),
    }
}

/// Scores `path` for the lower-cased query `q`; `None` when `q` is not a subsequence.
fn score(e: &Entry, q: &[u8]) -> Option<i64> {
    let p = &e.lower;
    let mut score = 0i64;
    let mut qi = 0;
    let mut prev: Option<usize> = None;
    for (i, &b) in p.iter().enumerate() {
        if qi == q.len() {
            break;
        }
        if b != q[qi] {
            continue;
        }
        let start = i == 0 || matches!(p[i - 1], b'/' | b'_' | b'-' | b'.' | b' ');
        score += 1;
        if start {
            score += 8;
        }
        if prev == Some(i.wrapping_sub(1)) {
            score += 6;
        }
        if i >= e.name_at {
            score += 3;
        }
        prev = Some(i);
        qi += 1;
    }
    if qi < q.len() {
        return None;
    }
    // Whole-name and substring bonuses, shorter paths first on ties.
    let name = &p[e.name_at..];
    if name == q {
        score += 100;
    } else if name.starts_with(q) {
        score += 40;
    } else if name.windows(q.len()).any(|w| w == q) {
        score += 20;
    }
    Some(score * 1024 - p.len() as i64)
}

fn human_size(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

fn human_age(t: Option<SystemTime>) -> String {
    let Some(secs) = t
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map(|d| d.as_secs())
    else {
        return String::new();
    };
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s if s < 86_400 * 30 => format!("{}d", s / 86_400),
        s if s < 86_400 * 365 => format!("{}mo", s / (86_400 * 30)),
        s => format!("{}y", s / (86_400 * 365)),
    }
}

impl Index {
    /// The best [`MAX_ANSWERS`] files for `query` (an empty query lists recent files).
    pub fn query(&self, query: &str) -> Vec<FileSuggestion> {
        let q: Vec<u8> = query
            .trim()
            .to_ascii_lowercase()
            .bytes()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        let mut best: Vec<(i64, usize)> = Vec::new();
        if q.is_empty() {
            best = self
                .entries
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let age = e
                        .modified
                        .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_secs() as i64);
                    (age, i)
                })
                .collect();
        } else {
            let need = mask(&q);
            for (i, e) in self.entries.iter().enumerate() {
                if e.mask & need != need {
                    continue;
                }
                if let Some(s) = score(e, &q) {
                    best.push((s, i));
                }
            }
        }
        let k = MAX_ANSWERS.min(best.len());
        if k == 0 {
            return Vec::new();
        }
        best.select_nth_unstable_by(k - 1, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        best.truncate(k);
        best.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        best.into_iter()
            .map(|(_, i)| {
                let e = &self.entries[i];
                FileSuggestion {
                    name: e.path.clone(),
                    size: human_size(e.size),
                    age: human_age(e.modified),
                    status: self.git_status.get(&e.path).cloned().unwrap_or_default(),
                }
            })
            .collect()
    }
}

/// The indexes of every project root, with at most one refresh running per root.
#[derive(Default)]
pub struct Indexes {
    map: Mutex<HashMap<PathBuf, Slot>>,
}

#[derive(Default)]
struct Slot {
    index: Option<Arc<Index>>,
    refreshing: bool,
}

impl Indexes {
    /// The index of `root`: built now if there is none, else the held one (a background
    /// refresh starts when it is older than [`FRESH`]).
    pub async fn get(self: &Arc<Self>, root: PathBuf) -> Result<Arc<Index>, String> {
        let (held, refresh) = {
            let mut map = self.map.lock();
            let slot = map.entry(root.clone()).or_default();
            let stale = slot
                .index
                .as_ref()
                .is_some_and(|i| i.built.elapsed() > FRESH);
            let refresh = stale && !slot.refreshing;
            if refresh {
                slot.refreshing = true;
            }
            (slot.index.clone(), refresh)
        };
        if let Some(index) = held {
            if refresh {
                let me = self.clone();
                tokio::task::spawn_blocking(move || {
                    let fresh = Arc::new(build(&root));
                    let mut map = me.map.lock();
                    let slot = map.entry(root).or_default();
                    slot.index = Some(fresh);
                    slot.refreshing = false;
                });
            }
            return Ok(index);
        }
        let r = root.clone();
        let index = Arc::new(
            tokio::task::spawn_blocking(move || build(&r))
                .await
                .map_err(|e| e.to_string())?,
        );
        self.map.lock().entry(root).or_default().index = Some(index.clone());
        Ok(index)
    }
}

/// The `@file` suggestions job: the workspace file indexes, one per project root.
#[derive(Default)]
pub struct FileSuggestions {
    indexes: Arc<Indexes>,
}

impl FileSuggestions {
    /// The best files for `q` in the workspace folder `root` (none when it is not a folder).
    pub async fn suggest(&self, root: PathBuf, q: &str) -> WorkspaceResult<Vec<FileSuggestion>> {
        if !root.is_dir() {
            return Ok(Vec::new());
        }
        let index = self
            .indexes
            .get(root)
            .await
            .map_err(WorkspaceError::Internal)?;
        let q = q.to_string();
        tokio::task::spawn_blocking(move || index.query(&q))
            .await
            .map_err(|e| WorkspaceError::Internal(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let w = |p: &str| {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        };
        w("src/main.rs");
        w("src/engine/search.rs");
        w("docs/searching.md");
        w("target/debug/search.rs");
        w(".hidden/search.rs");
        std::fs::write(d.path().join(".gitignore"), "target/\n").unwrap();
        d
    }

    #[test]
    fn gitignored_and_hidden_files_are_left_out_and_the_best_match_comes_first() {
        let d = tree();
        let idx = build(d.path());
        let names: Vec<String> = idx.query("search").into_iter().map(|s| s.name).collect();
        assert_eq!(
            names.first().map(String::as_str),
            Some("src/engine/search.rs")
        );
        assert!(
            names.contains(&"docs/searching.md".to_string()),
            "{names:?}"
        );
        assert!(!names
            .iter()
            .any(|n| n.starts_with("target/") || n.starts_with(".hidden")));
        assert!(idx.query("zzz").is_empty());
        assert_eq!(
            idx.query("mnrs")[0].name,
            "src/main.rs",
            "a subsequence matches"
        );
    }
}
