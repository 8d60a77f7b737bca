//! `apropos(text)` and `doc(name)` inside the sandbox: a ranked full-text search over every
//! function of the block's namespace (built-ins, extension Symbols, MCP tools).
//!
//! Ranking is BM25 over the words of each entry's name (weighted), summary and document.
//! A query word the index does not know is replaced by the known words within a small edit
//! distance, so a mistyped name (`grpe`, `todo.ad`) still finds its target. The corpus is a
//! few hundred short documents per session, held in memory and rebuilt with the turn's
//! function table; SQLite FTS5 would add a blocking store round trip per call and has no
//! typo tolerance, so this small index is written here.

use std::collections::{BTreeSet, HashMap};

/// One searchable function.
#[derive(Debug, Clone, PartialEq)]
pub struct DocEntry {
    pub name: String,
    /// The first line shown in a hit.
    pub summary: String,
    /// The whole `doc(name)` text.
    pub doc: String,
    /// Callable but not listed.
    pub is_hidden: bool,
    /// `builtin`, `symbol`, `mcp` or `extension` (an extension's own description).
    pub kind: String,
}

/// The index of one turn's functions.
#[derive(Debug, Default)]
pub struct Index {
    entries: Vec<DocEntry>,
    /// Term frequencies per entry (name words counted three times).
    terms: Vec<HashMap<String, f64>>,
    lengths: Vec<f64>,
    /// Entries per term.
    df: HashMap<String, usize>,
}

const K1: f64 = 1.2;
const B: f64 = 0.75;
const NAME_WEIGHT: f64 = 3.0;

/// The namespace an entry is listed under.
fn namespace(e: &DocEntry) -> String {
    match e.name.split_once('.') {
        _ if e.kind == "extension" => e.name.clone(),
        Some((head, _)) => head.to_string(),
        None => "sandbox built-ins".to_string(),
    }
}

/// Lower-case words of letters and digits; dotted and snake names split into their parts
/// and also kept whole.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for raw in text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')) {
        let whole = raw.trim_matches(|c| c == '.' || c == '_').to_lowercase();
        if whole.is_empty() {
            continue;
        }
        let parts: Vec<&str> = whole.split(['.', '_']).filter(|p| !p.is_empty()).collect();
        if parts.len() > 1 {
            out.push(whole.clone());
        }
        out.extend(parts.into_iter().map(str::to_string));
    }
    out
}

/// Edit distance counting an insertion, a deletion, a substitution or a swap of two
/// neighbouring letters as one edit (`grpe` is one edit from `grep`).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

impl Index {
    pub fn new(entries: Vec<DocEntry>) -> Index {
        let mut ix = Index::default();
        for e in &entries {
            let mut tf: HashMap<String, f64> = HashMap::new();
            for w in words(&e.name) {
                *tf.entry(w).or_default() += NAME_WEIGHT;
            }
            for w in words(&e.summary).into_iter().chain(words(&e.doc)) {
                *tf.entry(w).or_default() += 1.0;
            }
            for t in tf.keys() {
                *ix.df.entry(t.clone()).or_default() += 1;
            }
            ix.lengths.push(tf.values().sum());
            ix.terms.push(tf);
        }
        ix.entries = entries;
        ix
    }

    /// The entry named `name` (hidden ones included: they are callable).
    pub fn get(&self, name: &str) -> Option<&DocEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// Every listed entry, by namespace (the name before its first dot; built-ins first).
    pub fn listed(&self) -> Vec<&DocEntry> {
        let mut all: Vec<&DocEntry> = self.entries.iter().filter(|e| !e.is_hidden).collect();
        all.sort_by_key(|e| (namespace(e), e.kind != "extension", e.name.clone()));
        all
    }

    /// `doc()` with no name: every namespace and its functions' names, in one text.
    pub fn index(&self) -> String {
        let mut out = String::from(
            "What this sandbox offers, by namespace (doc(name) for one; apropos(words) to search):\n",
        );
        let mut last = None;
        for e in self.listed() {
            let ns = namespace(e);
            if last.as_deref() != Some(ns.as_str()) {
                out.push_str(&format!("\n{ns}:\n"));
                last = Some(ns);
            }
            out.push_str(&format!("  {} — {}\n", e.name, e.summary));
        }
        out
    }

    /// The query's words, each known word as is and each unknown one as the known words
    /// nearest to it (distance ≤ 1 for short words, ≤ 2 from six letters on).
    fn expand(&self, query: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for w in words(query) {
            if self.df.contains_key(&w) {
                out.insert(w);
                continue;
            }
            let limit = if w.chars().count() >= 6 { 2 } else { 1 };
            let near = self
                .df
                .keys()
                .map(|t| (edit_distance(&w, t), t))
                .filter(|(d, _)| *d <= limit)
                .collect::<Vec<_>>();
            let best = near.iter().map(|(d, _)| *d).min();
            out.extend(
                near.into_iter()
                    .filter(|(d, _)| Some(*d) == best)
                    .map(|(_, t)| t.clone()),
            );
            // A prefix of a known word (`tod` → `todo`) counts too.
            if w.chars().count() >= 3 {
                out.extend(self.df.keys().filter(|t| t.starts_with(&w)).cloned());
            }
        }
        out
    }

    /// Listed entries ranked by BM25 (best first), at most `limit`.
    pub fn search(&self, query: &str, limit: usize) -> Vec<&DocEntry> {
        let terms = self.expand(query);
        if terms.is_empty() {
            return Vec::new();
        }
        let n = self.entries.len() as f64;
        let avg = self.lengths.iter().sum::<f64>() / n.max(1.0);
        let mut scored: Vec<(f64, usize)> = Vec::new();
        for (i, tf) in self.terms.iter().enumerate() {
            if self.entries[i].is_hidden {
                continue;
            }
            let mut score = 0.0;
            for t in &terms {
                let Some(f) = tf.get(t) else { continue };
                let df = *self.df.get(t).unwrap_or(&0) as f64;
                let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                score += idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * self.lengths[i] / avg));
            }
            if score > 0.0 {
                scored.push((score, i));
            }
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored
            .into_iter()
            .take(limit)
            .map(|(_, i)| &self.entries[i])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, summary: &str) -> DocEntry {
        DocEntry {
            name: name.into(),
            summary: summary.into(),
            doc: format!("{name}\n{summary}"),
            is_hidden: false,
            kind: "symbol".into(),
        }
    }

    fn index() -> Index {
        let mut secret = entry("todo.purge", "Delete every todo for good.");
        secret.is_hidden = true;
        Index::new(vec![
            entry("cat", "Read a file as anchored lines."),
            entry("grep", "Search files for text; hits as anchored lines."),
            entry("todo.add", "Add one todo item and return the new count."),
            entry("weather.forecast", "The forecast for a city, by day."),
            secret,
        ])
    }

    #[test]
    fn a_word_of_a_docstring_finds_its_symbol_first() {
        let ix = index();
        let hits = ix.search("forecast city", 5);
        assert_eq!(hits[0].name, "weather.forecast");
        let hits = ix.search("count", 5);
        assert_eq!(hits[0].name, "todo.add");
    }

    #[test]
    fn a_mistyped_name_still_finds_its_target() {
        let ix = index();
        assert_eq!(ix.search("grpe", 5)[0].name, "grep");
        assert_eq!(ix.search("forcast", 5)[0].name, "weather.forecast");
        assert_eq!(ix.search("todo.ad", 5)[0].name, "todo.add");
    }

    #[test]
    fn hidden_entries_are_not_listed_but_have_docs() {
        let ix = index();
        assert!(ix
            .search("purge delete", 5)
            .iter()
            .all(|e| e.name != "todo.purge"));
        assert!(ix.get("todo.purge").is_some());
    }

    #[test]
    fn nothing_matches_an_unrelated_query() {
        assert!(index().search("zzzz qqqq", 5).is_empty());
    }
}
