//! `grep`: ripgrep's engine (parallel walk honouring ignore files, fast line search) with
//! deterministic pages of anchored hit lines.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::overrides::OverrideBuilder;
use ignore::{WalkBuilder, WalkState};

use crate::anchor::anchored;
use crate::text::thousands;
use crate::{FileError, Workspace};

/// Hit lines per page when the query says 0.
pub const GREP_DEFAULT_PAGE: usize = 100;
/// Hit lines whose text is kept during the walk; beyond it hits are only counted (and a page
/// that needs them re-reads its files).
pub const GREP_MAX_STORED_HITS: usize = 20_000;
/// Hit lines longer than this many chars are cut with `…`.
pub const GREP_MAX_LINE_CHARS: usize = 300;

/// A search. `paths` empty means the whole first root; `include`/`exclude` are globs as in
/// `rg -g` (`*.rs` matches at any depth, `src/**` is anchored at the first root).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrepQuery {
    pub query: String,
    pub paths: Vec<String>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// false: `query` is literal text (case-sensitive); true: Rust regex syntax.
    pub is_regex: bool,
    /// Hit lines per page ([`GREP_DEFAULT_PAGE`] when 0).
    pub page_size: usize,
    /// Hits to skip (0 = the first page).
    pub cursor: usize,
}

/// One page of hits, sorted by path then line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepPage {
    /// Per file: its display path, then its anchored hit lines indented by two spaces; a last
    /// line says how to get the next page when there is one.
    pub text: String,
    /// Total hit lines (all pages).
    pub hits: usize,
    /// Files with hits (all pages).
    pub files: usize,
    /// The cursor of the next page; `None` on the last page.
    pub next: Option<usize>,
}

/// Hits of one file: how many, and their anchored lines when kept.
struct FileHits {
    path: PathBuf,
    count: usize,
    lines: Option<Vec<String>>,
}

/// Searches files like `rg` does (ignore files honoured even outside git, hidden files and
/// binary files skipped, symlinks not followed) and returns the page `cursor..cursor+page_size`.
pub fn grep(ws: &Workspace, q: &GrepQuery) -> Result<GrepPage, FileError> {
    let page_size = if q.page_size == 0 {
        GREP_DEFAULT_PAGE
    } else {
        q.page_size
    };
    let matcher = build_matcher(q)?;
    let targets = targets(ws, &q.paths)?;
    let mut walk = WalkBuilder::new(&targets[0]);
    for t in &targets[1..] {
        walk.add(t);
    }
    walk.require_git(false).overrides(overrides(ws, q)?);

    let stored = AtomicUsize::new(0);
    let found: Mutex<Vec<FileHits>> = Mutex::new(Vec::new());
    walk.build_parallel().run(|| {
        let matcher = matcher.clone();
        let mut searcher = searcher();
        let (stored, found) = (&stored, &found);
        Box::new(move |entry| {
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let mut sink = Collect::kept(stored);
            if searcher
                .search_path(&matcher, entry.path(), &mut sink)
                .is_ok()
                && sink.count > 0
            {
                let hits = FileHits {
                    path: entry.into_path(),
                    count: sink.count,
                    lines: sink.lines,
                };
                if let Ok(mut found) = found.lock() {
                    found.push(hits);
                }
            }
            WalkState::Continue
        })
    });
    let mut found = found.into_inner().unwrap_or_else(|e| e.into_inner());
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(page(ws, q, &matcher, &found, page_size))
}

fn build_matcher(q: &GrepQuery) -> Result<RegexMatcher, FileError> {
    if q.query.is_empty() {
        return Err(FileError::BadPattern(
            "the query is empty; give the text (or regex) to look for".into(),
        ));
    }
    if q.query.contains('\n') {
        return Err(FileError::BadPattern(
            "the query contains a newline, but grep matches one line at a time; search for one line of it".into(),
        ));
    }
    RegexMatcherBuilder::new()
        .fixed_strings(!q.is_regex)
        .line_terminator(Some(b'\n'))
        .ban_byte(Some(0))
        .build(&q.query)
        .map_err(|e| FileError::BadPattern(format!("{:?} is not a valid regex: {e}", q.query)))
}

fn searcher() -> Searcher {
    SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build()
}

fn targets(ws: &Workspace, paths: &[String]) -> Result<Vec<PathBuf>, FileError> {
    if paths.is_empty() {
        return Ok(vec![ws.roots()[0].clone()]);
    }
    paths
        .iter()
        .map(|p| {
            let resolved = ws.resolve(p)?;
            if resolved.exists() {
                Ok(resolved)
            } else {
                Err(FileError::NotFound { path: p.clone() })
            }
        })
        .collect()
}

fn overrides(ws: &Workspace, q: &GrepQuery) -> Result<ignore::overrides::Override, FileError> {
    let mut b = OverrideBuilder::new(&ws.roots()[0]);
    let globs = q.include.iter().map(|g| (g, g.to_string()));
    let globs = globs.chain(q.exclude.iter().map(|g| (g, format!("!{g}"))));
    for (given, glob) in globs {
        b.add(&glob)
            .map_err(|e| FileError::BadPattern(format!("glob {given:?}: {e}")))?;
    }
    b.build()
        .map_err(|e| FileError::BadPattern(format!("globs: {e}")))
}

/// Lays out the page `cursor..cursor+page_size` of the sorted hits.
fn page(
    ws: &Workspace,
    q: &GrepQuery,
    m: &RegexMatcher,
    found: &[FileHits],
    size: usize,
) -> GrepPage {
    let hits: usize = found.iter().map(|f| f.count).sum();
    let (lo, hi) = (q.cursor.min(hits), q.cursor.saturating_add(size).min(hits));
    let mut text = String::new();
    let mut offset = 0;
    for f in found {
        let (start, end) = (offset, offset + f.count);
        offset = end;
        if end <= lo || start >= hi {
            continue;
        }
        let (skip, take) = (lo.saturating_sub(start), hi.min(end) - lo.max(start));
        let reread;
        let lines: &[String] = match &f.lines {
            Some(lines) => lines
                .get(skip..skip + take)
                .unwrap_or(&lines[skip.min(lines.len())..]),
            None => {
                reread = reread_window(m, &f.path, skip, take);
                &reread
            }
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&ws.display(&f.path));
        for line in lines {
            text.push_str("\n  ");
            text.push_str(line);
        }
    }
    let next = (hi < hits).then_some(hi);
    let plural =
        |n: usize, what: &str| format!("{} {what}{}", thousands(n), if n == 1 { "" } else { "s" });
    if hits == 0 {
        let scope = if q.paths.is_empty() {
            ".".to_string()
        } else {
            q.paths.join(", ")
        };
        text = format!("(no matches for {:?} in {scope})", q.query);
    } else if lo >= hi {
        text = format!(
            "(no more hits: {} in {}, cursor {} is past the end)",
            plural(hits, "hit"),
            plural(found.len(), "file"),
            q.cursor
        );
    } else if let Some(next) = next {
        text.push_str(&format!(
            "\n… hits {}–{} of {} in {}; next page: cursor={next}",
            thousands(lo + 1),
            thousands(hi),
            thousands(hits),
            plural(found.len(), "file")
        ));
    }
    GrepPage {
        text,
        hits,
        files: found.len(),
        next,
    }
}

/// Searches one file again for the hits `skip..skip+take` (their text was not kept).
fn reread_window(m: &RegexMatcher, path: &Path, skip: usize, take: usize) -> Vec<String> {
    let unlimited = AtomicUsize::new(0);
    let mut sink = Collect::kept(&unlimited);
    sink.window = (skip, skip + take);
    sink.cap = usize::MAX;
    let _ = searcher().search_path(m, path, &mut sink);
    sink.lines.unwrap_or_default()
}

/// A sink that counts hit lines and keeps the anchored text of those in `window` while the shared
/// `stored` counter stays under `cap`; past it the file's text is dropped (only counted).
struct Collect<'a> {
    count: usize,
    lines: Option<Vec<String>>,
    stored: &'a AtomicUsize,
    cap: usize,
    window: (usize, usize),
}

impl<'a> Collect<'a> {
    fn kept(stored: &'a AtomicUsize) -> Collect<'a> {
        Collect {
            count: 0,
            lines: Some(Vec::new()),
            stored,
            cap: GREP_MAX_STORED_HITS,
            window: (0, usize::MAX),
        }
    }
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        let first = m.line_number().unwrap_or(0) as usize;
        for (i, line) in m.lines().enumerate() {
            let index = self.count;
            self.count += 1;
            if index < self.window.0 || index >= self.window.1 {
                continue;
            }
            if let Some(lines) = &mut self.lines {
                if self.stored.fetch_add(1, Ordering::Relaxed) >= self.cap {
                    self.lines = None;
                    continue;
                }
                let line = line.strip_suffix(b"\n").unwrap_or(line);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                lines.push(anchored(first + i, line, Some(GREP_MAX_LINE_CHARS)));
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
#[path = "grep_tests.rs"]
mod tests;
