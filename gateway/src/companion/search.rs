//! Full-text search over session titles and turn texts (SQLite FTS5, table `search_text`,
//! kept in step with every write by the triggers of migration 2).
//!
//! One ranked FTS query answers; hits are grouped per session, each session ranked by its
//! best band (title, request, reply, thinking) and then by bm25.

use crate::store::Store;
use crate::store::StoreResult;
use rusqlite::{params, Connection};
use std::collections::HashMap;
use vis_companion_api::records::{HitSide, SearchHit, SearchResults, SessionMatch};

/// FTS rows read per query (best first).
const MAX_ROWS: i64 = 400;
/// Sessions answered per query.
const MAX_SESSIONS: usize = 50;
/// Preview hits kept per session.
const MAX_HITS: usize = 5;

/// The user's words (at most 12), lower-cased; `None` when nothing searchable is left.
pub fn words(q: &str) -> Option<Vec<String>> {
    let words: Vec<String> = q
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(12)
        .map(str::to_lowercase)
        .collect();
    (!words.is_empty()).then_some(words)
}

/// The FTS5 query: every word required; the last one, still being typed, also as a prefix
/// unless `last_is_word` (it is already a whole word of the index). Exact terms are read
/// lazily; a prefix term is merged in full first, which is what makes it the costly kind.
pub fn fts_query(words: &[String], last_is_word: bool) -> String {
    let n = words.len();
    words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            if i + 1 == n && !last_is_word {
                format!("\"{w}\"*")
            } else {
                format!("\"{w}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Builds the query for `q` (checking the last word against the index's vocabulary) and
/// runs it.
pub fn search(c: &Connection, q: &str) -> rusqlite::Result<SearchResults> {
    let Some(words) = words(q) else {
        return Ok(SearchResults::default());
    };
    let last = words.last().cloned().unwrap_or_default();
    let is_word = c
        .prepare_cached("SELECT 1 FROM search_terms WHERE term = ?1")?
        .exists([last])?;
    run(c, &fts_query(&words, is_word))
}

fn side_of(s: &str) -> Option<HitSide> {
    Some(match s {
        "title" => HitSide::Title,
        "request" => HitSide::Request,
        "reply" => HitSide::Reply,
        "thinking" => HitSide::Thinking,
        _ => return None,
    })
}

struct Row {
    rowid: i64,
    sid: String,
    tid: Option<String>,
    side: HitSide,
    at: Option<i64>,
    score: f64,
}

/// Runs the query on the store thread. Titles (negative row ids) and turn texts are read in
/// two passes, turn texts newest first: FTS5 walks its row-id ordered lists and stops at the
/// limit, so a word found in every turn costs what a rare one does. bm25 and the snippets
/// are computed only for the rows read and the hits answered.
pub fn run(c: &Connection, query: &str) -> rusqlite::Result<SearchResults> {
    let mut titles = c.prepare_cached(
        "SELECT rowid, sid, tid, side, at, bm25(search_text) FROM search_text \
         WHERE search_text MATCH ?1 AND rowid < 0 LIMIT ?2",
    )?;
    let mut turns = c.prepare_cached(
        "SELECT rowid, sid, tid, side, at, bm25(search_text) FROM search_text \
         WHERE search_text MATCH ?1 AND rowid > 0 ORDER BY rowid DESC LIMIT ?2",
    )?;
    let read = |r: &rusqlite::Row| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<i64>>(4)?,
            r.get::<_, f64>(5)?,
        ))
    };
    let mut rows = titles
        .query_map(params![query, MAX_SESSIONS as i64], read)?
        .collect::<Result<Vec<_>, _>>()?;
    rows.extend(
        turns
            .query_map(params![query, MAX_ROWS], read)?
            .collect::<Result<Vec<_>, _>>()?,
    );
    let mut by_session: HashMap<String, Vec<Row>> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for (rowid, sid, tid, side, at, score) in rows {
        let Some(side) = side_of(&side) else { continue };
        let list = by_session.entry(sid.clone()).or_insert_with(|| {
            order.push(sid.clone());
            Vec::new()
        });
        list.push(Row {
            rowid,
            sid,
            tid,
            side,
            at,
            score,
        });
    }
    // Best band first, then the best (lowest) bm25 score of that band.
    let mut sessions: Vec<(u8, f64, String)> = order
        .into_iter()
        .filter_map(|sid| {
            let hits = by_session.get(&sid)?;
            let band = hits.iter().map(|h| h.side.band()).min()?;
            let score = hits
                .iter()
                .filter(|h| h.side.band() == band)
                .map(|h| h.score)
                .fold(f64::INFINITY, f64::min);
            Some((band, score, sid))
        })
        .collect();
    sessions.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal))
            .then(a.2.cmp(&b.2))
    });
    sessions.truncate(MAX_SESSIONS);
    let mut snippet = c.prepare_cached(
        "SELECT snippet(search_text, 0, '', '', '…', 14) FROM search_text \
         WHERE search_text MATCH ?1 AND rowid = ?2",
    )?;
    let mut position = c.prepare_cached(
        "SELECT COUNT(*) FROM turns WHERE sid = ?1 AND ord <= (SELECT ord FROM turns WHERE tid = ?2)",
    )?;
    let mut out = SearchResults::default();
    for (band, _, sid) in sessions {
        let Some(mut hits) = by_session.remove(&sid) else {
            continue;
        };
        hits.sort_by(|a, b| {
            a.side.band().cmp(&b.side.band()).then(
                a.score
                    .partial_cmp(&b.score)
                    .unwrap_or(std::cmp::Ordering::Equal),
            )
        });
        let has = |s: HitSide| hits.iter().any(|h| h.side == s);
        let mut shown = Vec::new();
        // The best hit of every side present, then the next best ones, in band order.
        let mut picked: Vec<usize> = Vec::new();
        for side in [
            HitSide::Title,
            HitSide::Request,
            HitSide::Reply,
            HitSide::Thinking,
        ] {
            if let Some(i) = hits.iter().position(|h| h.side == side) {
                picked.push(i);
            }
        }
        for i in 0..hits.len() {
            if picked.len() >= MAX_HITS {
                break;
            }
            if !picked.contains(&i) {
                picked.push(i);
            }
        }
        picked.sort_unstable();
        for h in picked.iter().map(|i| &hits[*i]) {
            let turn = match &h.tid {
                Some(tid) => Some(position.query_row(params![h.sid, tid], |r| r.get(0))?),
                None => None,
            };
            let text: String = snippet.query_row(params![query, h.rowid], |r| r.get(0))?;
            shown.push(SearchHit {
                side: h.side,
                snippet: text.split_whitespace().collect::<Vec<_>>().join(" "),
                at: h.at,
                turn_id: h.tid.clone(),
                turn,
            });
        }
        let first = |s: HitSide| {
            shown
                .iter()
                .find(|h| h.side == s)
                .map(|h| h.snippet.clone())
        };
        out.session_ids.push(sid.clone());
        out.matches.push(SessionMatch {
            rank: band,
            is_in_title: has(HitSide::Title),
            is_in_request: has(HitSide::Request),
            is_in_reply: has(HitSide::Reply),
            is_in_thinking: has(HitSide::Thinking),
            request_snippet: first(HitSide::Request),
            reply_snippet: first(HitSide::Reply),
            hits: shown,
            session_id: sid,
        });
    }
    Ok(out)
}

/// The search job: queries over the store's index.
pub struct Search {
    store: Store,
}

impl Search {
    pub fn new(store: Store) -> Self {
        Search { store }
    }

    /// Sessions matching `q`, best first (none when `q` has no word).
    pub async fn sessions(&self, q: &str) -> StoreResult<SearchResults> {
        if words(q).is_none() {
            return Ok(SearchResults::default());
        }
        let q = q.to_string();
        self.store.call(move |c| Ok(search(c, &q)?)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_keeps_words_only_and_only_an_unfinished_last_word_is_a_prefix() {
        let w = words("Fix the \"parser\" OR NOT*").unwrap();
        assert_eq!(w, ["fix", "the", "parser", "or", "not"]);
        assert_eq!(
            fts_query(&w, false),
            "\"fix\" \"the\" \"parser\" \"or\" \"not\"*"
        );
        assert_eq!(fts_query(&w[..1], true), "\"fix\"");
        assert_eq!(words("  -- ** "), None);
        assert_eq!(words("Größe").unwrap(), ["größe"]);
    }

    #[test]
    fn every_write_of_a_turn_or_a_title_keeps_the_index_in_step() {
        use crate::store::rows::{self, SessionRow};
        use crate::store::Db;
        use serde_json::json;
        let (store, _dir) = crate::store::test_support::temp_store("search");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let find = |q: &str| {
            let (q, st) = (q.to_string(), store.clone());
            rt.block_on(async move { st.call(move |c| Ok(search(c, &q)?)).await.unwrap() })
        };
        type Job = Box<dyn FnOnce(&mut Db) -> crate::store::StoreResult<()> + Send>;
        let write = |f: Job| {
            let st = store.clone();
            rt.block_on(async move { st.with(f).await.unwrap() })
        };
        let mut row = SessionRow {
            id: "s1".into(),
            channel: "web".into(),
            title: Some("Garden plan".into()),
            root: "/".into(),
            last_status: "idle".into(),
            ..Default::default()
        };
        let record = |reply: &str| {
            json!({"request": "water the tomatoes", "created_at": 5,
                "content": [{"type": "prose", "markdown": reply}],
                "iterations": [{"thinking": "irrigation matters"}]})
            .to_string()
        };
        let (r1, rec) = (row.clone(), record("Use a drip hose"));
        write(Box::new(move |db| {
            rows::put_session(db, &r1)?;
            rows::put_turn(db, "t1", "s1", 1, "completed", None, &rec)
        }));
        let side = |q: &str| find(q).matches.first().map(|m| m.hits[0].side);
        assert_eq!(side("garden"), Some(HitSide::Title));
        assert_eq!(side("tomato"), Some(HitSide::Request));
        assert_eq!(side("drip"), Some(HitSide::Reply));
        assert_eq!(side("irrigation"), Some(HitSide::Thinking));
        assert_eq!(find("tomato").matches[0].hits[0].turn, Some(1));
        let rec = record("Use a watering can");
        write(Box::new(move |db| {
            rows::put_turn(db, "t1", "s1", 1, "completed", None, &rec)
        }));
        assert_eq!(side("drip"), None, "an updated reply replaces the old one");
        assert_eq!(side("watering"), Some(HitSide::Reply));
        row.title = Some("Orchard".into());
        let r2 = row.clone();
        write(Box::new(move |db| rows::put_session(db, &r2)));
        assert_eq!(side("garden"), None);
        assert_eq!(side("orchard"), Some(HitSide::Title));
        write(Box::new(|db| rows::delete_session(db, "s1")));
        assert!(find("tomato").matches.is_empty());
        assert!(find("orchard").matches.is_empty());
    }
}
