//! Full-text search over session titles and turn texts (SQLite FTS5, table `search_text`,
//! kept in step with every write by the triggers of migration 2).
//!
//! One ranked FTS query answers; hits are grouped per session, each session ranked by its
//! best band (title, request, reply, thinking) and then by bm25.

use super::store_err;
use crate::engine::Gateway;
use rusqlite::{params, Connection};
use std::collections::HashMap;
use vis_companion_api::records::{HitSide, SearchHit, SearchResults, SessionMatch};
use vis_companion_api::ApiResult;

/// FTS rows read per query (best first).
const MAX_ROWS: i64 = 600;
/// Sessions answered per query.
const MAX_SESSIONS: usize = 50;
/// Preview hits kept per session.
const MAX_HITS: usize = 5;

/// The user's words as an FTS5 query: each word a quoted prefix term, all required.
/// `None` when nothing searchable is left.
pub fn fts_query(q: &str) -> Option<String> {
    let words: Vec<String> = q
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(12)
        .map(|w| format!("\"{}\"*", w.to_lowercase()))
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
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
    sid: String,
    tid: Option<String>,
    side: HitSide,
    at: Option<i64>,
    snippet: String,
    score: f64,
}

/// Runs the query on the store thread.
pub fn run(c: &Connection, query: &str) -> rusqlite::Result<SearchResults> {
    let mut st = c.prepare_cached(
        "SELECT sid, tid, side, at, snippet(search_text, 0, '', '', '…', 14), bm25(search_text) \
         FROM search_text WHERE search_text MATCH ?1 ORDER BY rank LIMIT ?2",
    )?;
    let rows = st.query_map(params![query, MAX_ROWS], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, Option<String>>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Option<i64>>(3)?,
            r.get::<_, String>(4)?,
            r.get::<_, f64>(5)?,
        ))
    })?;
    let mut by_session: HashMap<String, Vec<Row>> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for row in rows {
        let (sid, tid, side, at, snippet, score) = row?;
        let Some(side) = side_of(&side) else { continue };
        let list = by_session.entry(sid.clone()).or_insert_with(|| {
            order.push(sid.clone());
            Vec::new()
        });
        list.push(Row {
            sid,
            tid,
            side,
            at,
            snippet: snippet.split_whitespace().collect::<Vec<_>>().join(" "),
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
    let mut position = c.prepare_cached(
        "SELECT COUNT(*) FROM turns WHERE sid = ?1 AND ord <= (SELECT ord FROM turns WHERE tid = ?2)",
    )?;
    let mut out = SearchResults::default();
    for (band, _, sid) in sessions {
        let Some(mut hits) = by_session.remove(&sid) else {
            continue;
        };
        hits.sort_by(|a, b| {
            a.side
                .band()
                .cmp(&b.side.band())
                .then(a.score.partial_cmp(&b.score).unwrap_or(std::cmp::Ordering::Equal))
        });
        let has = |s: HitSide| hits.iter().any(|h| h.side == s);
        let first = |s: HitSide| {
            hits.iter()
                .find(|h| h.side == s)
                .map(|h| h.snippet.clone())
        };
        let mut shown = Vec::new();
        for h in hits.iter().take(MAX_HITS) {
            let turn = match &h.tid {
                Some(tid) => Some(position.query_row(params![h.sid, tid], |r| r.get(0))?),
                None => None,
            };
            shown.push(SearchHit {
                side: h.side,
                snippet: h.snippet.clone(),
                at: h.at,
                turn_id: h.tid.clone(),
                turn,
            });
        }
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

impl Gateway {
    pub async fn search_sessions(&self, q: &str) -> ApiResult<SearchResults> {
        let Some(query) = fts_query(q) else {
            return Ok(SearchResults::default());
        };
        self.store
            .call(move |c| Ok(run(c, &query)?))
            .await
            .map_err(store_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_keeps_words_only_and_makes_each_a_prefix_term() {
        assert_eq!(
            fts_query("Fix the \"parser\" OR NOT*").as_deref(),
            Some("\"fix\"* \"the\"* \"parser\"* \"or\"* \"not\"*")
        );
        assert_eq!(fts_query("  -- ** "), None);
        assert_eq!(fts_query("Größe").as_deref(), Some("\"größe\"*"));
    }

    #[test]
    fn every_write_of_a_turn_or_a_title_keeps_the_index_in_step() {
        use crate::store::rows::{self, SessionRow};
        use serde_json::json;
        let (store, _dir) = crate::store::test_support::temp_store("search");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let find = |q: &str| {
            let (q, st) = (fts_query(q).unwrap(), store.clone());
            rt.block_on(async move { st.call(move |c| Ok(run(c, &q)?)).await.unwrap() })
        };
        let write = |f: Box<dyn FnOnce(&Connection) -> crate::store::StoreResult<()> + Send>| {
            let st = store.clone();
            rt.block_on(async move { st.call(f).await.unwrap() })
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
        write(Box::new(move |c| {
            rows::put_session(c, &r1)?;
            rows::put_turn(c, "t1", "s1", 1, "completed", None, &rec)
        }));
        let side = |q: &str| find(q).matches.first().map(|m| m.hits[0].side);
        assert_eq!(side("garden"), Some(HitSide::Title));
        assert_eq!(side("tomato"), Some(HitSide::Request));
        assert_eq!(side("drip"), Some(HitSide::Reply));
        assert_eq!(side("irrigation"), Some(HitSide::Thinking));
        assert_eq!(find("tomato").matches[0].hits[0].turn, Some(1));
        let rec = record("Use a watering can");
        write(Box::new(move |c| {
            rows::put_turn(c, "t1", "s1", 1, "completed", None, &rec)
        }));
        assert_eq!(side("drip"), None, "an updated reply replaces the old one");
        assert_eq!(side("watering"), Some(HitSide::Reply));
        row.title = Some("Orchard".into());
        let r2 = row.clone();
        write(Box::new(move |c| rows::put_session(c, &r2)));
        assert_eq!(side("garden"), None);
        assert_eq!(side("orchard"), Some(HitSide::Title));
        write(Box::new(|c| rows::delete_session(c, "s1")));
        assert!(find("tomato").matches.is_empty());
        assert!(find("orchard").matches.is_empty());
    }
}
