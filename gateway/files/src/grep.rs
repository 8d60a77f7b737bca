//! `grep`: ripgrep's engine (parallel walk honouring ignore files, fast line search) with
//! deterministic pages of anchored hit lines: any of several terms, smart case, context lines,
//! and file names matched too (an empty query lists the files).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
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
    /// The term (empty, with no `more`: list the files).
    pub query: String,
    /// Further terms: a line matching any term is a hit.
    pub more: Vec<String>,
    pub paths: Vec<String>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// false: the terms are literal text; true: Rust regex syntax.
    pub is_regex: bool,
    /// Some(true): case-sensitive; Some(false): not; None: only when a term has a capital.
    pub case: Option<bool>,
    /// Lines shown before and after each hit.
    pub context: usize,
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
    /// Files whose path matched (each one hit of the pages, listed before the line hits).
    pub names: usize,
    /// The cursor of the next page; `None` on the last page.
    pub next: Option<usize>,
}

/// Hits of one file: how many, and their rows when kept.
struct FileHits {
    path: PathBuf,
    count: usize,
    rows: Option<Vec<Row>>,
}

/// A line of a file's answer: a hit (its index among the file's hits), a context line, or
/// the gap between two groups of context.
#[derive(Debug, Clone)]
enum Row {
    Hit(usize, String),
    Context(String),
    Break,
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
    let named: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let root = ws.roots()[0].clone();
    walk.build_parallel().run(|| {
        let matcher = matcher.clone();
        let mut searcher = searcher(q.context);
        let (stored, found, named, root) = (&stored, &found, &named, &root);
        Box::new(move |entry| {
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let Some(m) = &matcher else {
                if let Ok(mut named) = named.lock() {
                    named.push(entry.into_path());
                }
                return WalkState::Continue;
            };
            let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
            if m.is_match(rel.as_os_str().as_encoded_bytes())
                .unwrap_or(false)
            {
                if let Ok(mut named) = named.lock() {
                    named.push(entry.path().to_path_buf());
                }
            }
            let mut sink = Collect::kept(stored);
            if searcher.search_path(m, entry.path(), &mut sink).is_ok() && sink.count > 0 {
                let hits = FileHits {
                    path: entry.into_path(),
                    count: sink.count,
                    rows: sink.rows,
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
    let mut named = named.into_inner().unwrap_or_else(|e| e.into_inner());
    named.sort();
    Ok(page(ws, q, matcher.as_ref(), &named, &found, page_size))
}

/// The terms of the query, in order (empty: list files).
fn terms(q: &GrepQuery) -> Vec<&str> {
    std::iter::once(q.query.as_str())
        .chain(q.more.iter().map(String::as_str))
        .filter(|t| !t.is_empty())
        .collect()
}

/// The query as the model wrote it, for messages.
fn shown(q: &GrepQuery) -> String {
    let t = terms(q);
    match t.as_slice() {
        [one] => format!("{one:?}"),
        many => format!("{many:?}"),
    }
}

/// The matcher of the terms; `None` when there are none (the files are listed).
fn build_matcher(q: &GrepQuery) -> Result<Option<RegexMatcher>, FileError> {
    let terms = terms(q);
    if terms.is_empty() {
        return Ok(None);
    }
    if let Some(t) = terms.iter().find(|t| t.contains('\n')) {
        return Err(FileError::BadPattern(format!(
            "the term {t:?} contains a newline, but grep matches one line at a time; search for one line of it"
        )));
    }
    let mut b = RegexMatcherBuilder::new();
    b.fixed_strings(!q.is_regex)
        .line_terminator(Some(b'\n'))
        .ban_byte(Some(0));
    match q.case {
        Some(sensitive) => b.case_insensitive(!sensitive),
        None => b.case_smart(true),
    };
    b.build_many(&terms)
        .map(Some)
        .map_err(|e| FileError::BadPattern(format!("{} is not a valid regex: {e}", shown(q))))
}

fn searcher(context: usize) -> Searcher {
    SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .before_context(context)
        .after_context(context)
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

/// Lays out the page `cursor..cursor+page_size` of the sorted hits: the files whose path
/// matched first (one hit each), then the line hits file by file.
fn page(
    ws: &Workspace,
    q: &GrepQuery,
    m: Option<&RegexMatcher>,
    named: &[PathBuf],
    found: &[FileHits],
    size: usize,
) -> GrepPage {
    let lines: usize = found.iter().map(|f| f.count).sum();
    let hits = named.len() + lines;
    let (lo, hi) = (q.cursor.min(hits), q.cursor.saturating_add(size).min(hits));
    let mut text = String::new();
    let listing = m.is_none();
    let names = &named[lo.min(named.len())..hi.min(named.len())];
    if !names.is_empty() {
        text.push_str(if listing {
            "files:"
        } else {
            "files whose path matches:"
        });
        for p in names {
            text.push_str("\n  ");
            text.push_str(&ws.display(p));
        }
    }
    let mut offset = named.len();
    for f in found {
        let (start, end) = (offset, offset + f.count);
        offset = end;
        if end <= lo || start >= hi {
            continue;
        }
        let (skip, take) = (lo.saturating_sub(start), hi.min(end) - lo.max(start));
        let reread;
        let rows: &[Row] = match (&f.rows, m) {
            (Some(rows), _) => rows,
            (None, Some(m)) => {
                reread = reread_file(m, q.context, &f.path);
                &reread
            }
            (None, None) => &[],
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&ws.display(&f.path));
        for row in window(rows, skip, skip + take) {
            match row {
                Row::Hit(_, line) => {
                    text.push_str("\n  ");
                    text.push_str(line);
                }
                Row::Context(line) => {
                    text.push_str("\n  ");
                    text.push_str(&line.replacen('│', "┆", 1));
                }
                Row::Break => text.push_str("\n  --"),
            }
        }
    }
    let next = (hi < hits).then_some(hi);
    let plural =
        |n: usize, what: &str| format!("{} {what}{}", thousands(n), if n == 1 { "" } else { "s" });
    let scope = if q.paths.is_empty() {
        ".".to_string()
    } else {
        q.paths.join(", ")
    };
    if hits == 0 {
        text = if listing {
            format!("(no files in {scope})")
        } else {
            format!("(no matches for {} in {scope})", shown(q))
        };
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
            plural(found.len().max(named.len()), "file")
        ));
    }
    GrepPage {
        text,
        hits: lines,
        files: found.len(),
        names: named.len(),
        next,
    }
}

/// The rows of the hits `lo..hi` of one file, with the context around them.
fn window(rows: &[Row], lo: usize, hi: usize) -> &[Row] {
    let hit_at = |want: usize| {
        rows.iter()
            .position(|r| matches!(r, Row::Hit(i, _) if *i == want))
    };
    let (Some(first), Some(last)) = (hit_at(lo), hit_at(hi.saturating_sub(1).max(lo))) else {
        return &[];
    };
    let mut start = first;
    while start > 0 && matches!(rows[start - 1], Row::Context(_)) {
        start -= 1;
    }
    let mut end = last + 1;
    while end < rows.len() && matches!(rows[end], Row::Context(_)) {
        end += 1;
    }
    &rows[start..end]
}

/// Searches one file again for all its rows (their text was not kept during the walk).
fn reread_file(m: &RegexMatcher, context: usize, path: &Path) -> Vec<Row> {
    let unlimited = AtomicUsize::new(0);
    let mut sink = Collect::kept(&unlimited);
    sink.cap = usize::MAX;
    let _ = searcher(context).search_path(m, path, &mut sink);
    sink.rows.unwrap_or_default()
}

/// A sink that counts hit lines and keeps the anchored rows (hits and context) while the
/// shared `stored` counter stays under `cap`; past it the file's text is dropped (only counted).
struct Collect<'a> {
    count: usize,
    rows: Option<Vec<Row>>,
    stored: &'a AtomicUsize,
    cap: usize,
}

impl<'a> Collect<'a> {
    fn kept(stored: &'a AtomicUsize) -> Collect<'a> {
        Collect {
            count: 0,
            rows: Some(Vec::new()),
            stored,
            cap: GREP_MAX_STORED_HITS,
        }
    }

    fn line(number: usize, line: &[u8]) -> String {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        anchored(number, line, Some(GREP_MAX_LINE_CHARS))
    }
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        let first = m.line_number().unwrap_or(0) as usize;
        for (i, line) in m.lines().enumerate() {
            let index = self.count;
            self.count += 1;
            if let Some(rows) = &mut self.rows {
                if self.stored.fetch_add(1, Ordering::Relaxed) >= self.cap {
                    self.rows = None;
                    continue;
                }
                rows.push(Row::Hit(index, Self::line(first + i, line)));
            }
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        if let (Some(rows), SinkContextKind::Before | SinkContextKind::After) =
            (&mut self.rows, c.kind())
        {
            let n = c.line_number().unwrap_or(0) as usize;
            rows.push(Row::Context(Self::line(n, c.bytes())));
        }
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, std::io::Error> {
        if let Some(rows) = &mut self.rows {
            if !rows.is_empty() {
                rows.push(Row::Break);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
#[path = "grep_tests.rs"]
mod tests;
