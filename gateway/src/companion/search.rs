//! Full-text search over session titles and turn texts: SQLite FTS5 (table `search_text`,
//! migration 2) kept in step with every write of `sessions` and `turns` by triggers, or on
//! PostgreSQL a `tsvector` column with a GIN index (its migration 3), whose turn texts are
//! indexed off the write path and brought up to date before each search (migration 5).
//!
//! One ranked full-text query answers; hits are grouped per session, each session ranked by
//! its best band (title, request, reply, thinking) and then by its text score (bm25 on
//! SQLite, `ts_rank` on PostgreSQL; lower is better in both, as stored here).

use crate::store::{Db, Store, StoreResult};
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

/// The full-text query: every word required; the last one, still being typed, also as a
/// prefix unless `last_is_word` (it is already a whole word of the index). FTS5 reads exact
/// terms lazily and merges a prefix term in full first, which is what makes it the costly
/// kind. `tsquery` says the same in PostgreSQL's syntax (`'a' & 'b':*`).
pub fn fts_query(words: &[String], last_is_word: bool, tsquery: bool) -> String {
    let n = words.len();
    let (quote, star, and) = if tsquery {
        ('\'', ":*", " & ")
    } else {
        ('"', "*", " ")
    };
    words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let star = if i + 1 == n && !last_is_word {
                star
            } else {
                ""
            };
            format!("{quote}{w}{quote}{star}")
        })
        .collect::<Vec<_>>()
        .join(and)
}

/// Builds the query for `q` (checking the last word against the index's vocabulary) and
/// runs it.
pub fn search(db: &mut Db, q: &str) -> StoreResult<SearchResults> {
    let Some(words) = words(q) else {
        return Ok(SearchResults::default());
    };
    db.index_search()?;
    let last = words.last().cloned().unwrap_or_default();
    let sql = db.pick(
        "SELECT 1 FROM search_terms WHERE term = ?1",
        "SELECT 1 FROM search_text WHERE doc @@ to_tsquery('simple', quote_literal(?1::TEXT)) LIMIT 1",
    );
    let is_word = db.value::<i32>(sql, &[&last])?.is_some();
    let postgres = matches!(db, Db::Postgres(_));
    run(db, &fts_query(&words, is_word, postgres))
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

type Found = (i64, String, Option<String>, String, Option<i64>, f64);

fn found(r: &crate::store::sql::AnyRow) -> StoreResult<Found> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

/// Runs the query on the store thread. Titles and turn texts are read in two passes, turn
/// texts newest first: FTS5 walks its row-id ordered lists and stops at the limit, so a word
/// found in every turn costs what a rare one does. The text score and the snippets are
/// computed only for the rows read and the hits answered.
pub fn run(db: &mut Db, query: &str) -> StoreResult<SearchResults> {
    let titles = db.pick(
        "SELECT rowid, sid, tid, side, at, bm25(search_text) FROM search_text \
         WHERE search_text MATCH ?1 AND rowid < 0 LIMIT ?2",
        "SELECT id, sid, tid, side, at, -ts_rank(doc, to_tsquery('simple', ?1::TEXT))::FLOAT8 \
         FROM search_text WHERE doc @@ to_tsquery('simple', ?1::TEXT) AND side = 'title' LIMIT ?2",
    );
    let turns = db.pick(
        "SELECT rowid, sid, tid, side, at, bm25(search_text) FROM search_text \
         WHERE search_text MATCH ?1 AND rowid > 0 ORDER BY rowid DESC LIMIT ?2",
        "SELECT id, sid, tid, side, at, -ts_rank(doc, to_tsquery('simple', ?1::TEXT))::FLOAT8 \
         FROM search_text WHERE doc @@ to_tsquery('simple', ?1::TEXT) AND side <> 'title' \
         ORDER BY ord DESC, id DESC LIMIT ?2",
    );
    let mut rows = db.rows(titles, &[&query, &(MAX_SESSIONS as i64)], found)?;
    rows.extend(db.rows(turns, &[&query, &MAX_ROWS], found)?);
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
    let snippet = db.pick(
        "SELECT snippet(search_text, 0, '', '', '…', 14) FROM search_text \
         WHERE search_text MATCH ?1 AND rowid = ?2",
        "SELECT ts_headline('simple', body, to_tsquery('simple', ?1::TEXT), \
         'StartSel=\"\", StopSel=\"\", MaxWords=14, MinWords=6, MaxFragments=1, \
         FragmentDelimiter=\"…\"') FROM search_text WHERE id = ?2",
    );
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
                Some(tid) => db.value::<i64>(
                    "SELECT COUNT(*) FROM turns WHERE sid = ?1 \
                     AND ord <= (SELECT ord FROM turns WHERE tid = ?2)",
                    &[&h.sid, tid],
                )?,
                None => None,
            };
            let text: String = db.value(snippet, &[&query, &h.rowid])?.unwrap_or_default();
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
        self.store.with(move |db| search(db, &q)).await
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
            fts_query(&w, false, false),
            "\"fix\" \"the\" \"parser\" \"or\" \"not\"*"
        );
        assert_eq!(fts_query(&w[..1], true, false), "\"fix\"");
        assert_eq!(
            fts_query(&w[..2], false, true),
            "'fix' & 'the':*",
            "PostgreSQL's tsquery"
        );
        assert_eq!(words("  -- ** "), None);
        assert_eq!(words("Größe").unwrap(), ["größe"]);
    }

    #[tokio::test]
    async fn every_write_of_a_turn_or_a_title_keeps_the_index_in_step_on_either_engine() {
        for (store, _keep) in crate::store::test_support::each_engine("search").await {
            keeps_in_step(&store).await;
        }
    }

    #[tokio::test]
    async fn a_word_inside_a_slash_command_a_path_or_a_host_is_found_on_either_engine() {
        use crate::store::rows::{self, SessionRow};
        let engines = crate::store::test_support::each_engine("search_words").await;
        for ((store, _keep), engine) in engines.into_iter().zip(["SQLite", "PostgreSQL"]) {
            let row = SessionRow::bare("s1");
            let rec = serde_json::json!({"request": "/help", "created_at": 5,
                "content": [{"type": "prose",
                    "markdown": "Edit src/parser.rs, then ask docs.example.org"}]})
            .to_string();
            store
                .with(move |db| {
                    rows::put_session(db, &row)?;
                    rows::put_turn(db, "t1", "s1", 1, "completed", None, &rec)
                })
                .await
                .expect("write");
            for q in [
                "help",
                "/help",
                "parser",
                "parser.rs",
                "example",
                "docs.example.org",
            ] {
                let q2 = q.to_string();
                let found = store.with(move |db| search(db, &q2)).await.expect("search");
                assert_eq!(found.matches.len(), 1, "{q} on {engine}");
            }
        }
    }

    async fn keeps_in_step(store: &Store) {
        use crate::store::rows::{self, SessionRow};
        use serde_json::json;
        let find = |q: &str| {
            let q = q.to_string();
            store.with(move |db| search(db, &q))
        };
        let side = |q: &'static str| async move {
            find(q)
                .await
                .expect("search")
                .matches
                .first()
                .map(|m| m.hits[0].side)
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
        store
            .with(move |db| {
                rows::put_session(db, &r1)?;
                rows::put_turn(db, "t1", "s1", 1, "completed", None, &rec)
            })
            .await
            .expect("write");
        assert_eq!(side("garden").await, Some(HitSide::Title));
        assert_eq!(side("tomato").await, Some(HitSide::Request));
        assert_eq!(side("drip").await, Some(HitSide::Reply));
        assert_eq!(side("irrigation").await, Some(HitSide::Thinking));
        let hit = find("tomato").await.expect("search").matches[0].hits[0].clone();
        assert_eq!(hit.turn, Some(1));
        assert_eq!(hit.at, Some(5));
        assert!(hit.snippet.contains("tomatoes"), "{}", hit.snippet);
        assert!(
            find("water hose").await.expect("search").matches.is_empty(),
            "every word must be in one text"
        );
        let rec = record("Use a watering can");
        store
            .with(move |db| rows::put_turn(db, "t1", "s1", 1, "completed", None, &rec))
            .await
            .expect("write");
        assert_eq!(
            side("drip").await,
            None,
            "an updated reply replaces the old one"
        );
        assert_eq!(side("watering").await, Some(HitSide::Reply));
        let tomato = find("tomato").await.expect("search").matches;
        assert_eq!(
            (tomato.len(), tomato[0].hits.len()),
            (1, 1),
            "the unchanged request is indexed once"
        );
        assert_eq!(side("irrigation").await, Some(HitSide::Thinking));
        let rec = json!({"request": "water the tomatoes", "created_at": 5}).to_string();
        store
            .with(move |db| rows::put_turn(db, "t1", "s1", 1, "completed", None, &rec))
            .await
            .expect("write");
        assert_eq!(side("watering").await, None, "a reply taken away leaves");
        assert_eq!(side("irrigation").await, None);
        assert_eq!(side("tomato").await, Some(HitSide::Request));
        let r1 = row.clone();
        store
            .with(move |db| rows::put_session(db, &r1))
            .await
            .expect("write");
        let garden = find("garden").await.expect("search").matches;
        assert_eq!(
            (garden.len(), garden[0].hits.len()),
            (1, 1),
            "a session row written again with its title keeps one title entry"
        );
        row.title = Some("Orchard".into());
        let r2 = row.clone();
        store
            .with(move |db| rows::put_session(db, &r2))
            .await
            .expect("write");
        assert_eq!(side("garden").await, None);
        assert_eq!(side("orchard").await, Some(HitSide::Title));
        store
            .with(|db| rows::delete_session(db, "s1"))
            .await
            .expect("write");
        assert!(find("tomato").await.expect("search").matches.is_empty());
        assert!(find("orchard").await.expect("search").matches.is_empty());
    }
}
