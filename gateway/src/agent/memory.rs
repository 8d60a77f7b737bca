//! The stored memory of a session: each settled turn's model-visible exchange and the
//! summaries compactions wrote (docs/decisions.md, T1, T2). Plain functions over a
//! connection; callers run them on the store thread.

use super::context::Ending;
use crate::store::StoreResult;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use vis_providers::ChatMessage;

/// What a settled turn left for later requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptRecord {
    /// Assistant messages and tool results after the user's message, as the model saw them.
    pub steps: Vec<ChatMessage>,
    pub ending: Ending,
}

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The request would have passed the threshold.
    Auto,
    /// `/compact`.
    Manual,
    /// The provider refused a request as too long.
    Overflow,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Auto => "auto",
            Trigger::Manual => "manual",
            Trigger::Overflow => "overflow",
        }
    }
}

/// One compaction: the summary that replaces the session's older part from then on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub summary: String,
    /// Every turn with `ord` up to this is folded into the summary.
    pub through_ord: i64,
    /// A turn whose first `folded_steps` step messages are folded too (a compaction in
    /// the middle of a long turn).
    pub partial: Option<(String, usize)>,
    pub trigger: Trigger,
    /// The turn it ran in.
    pub turn_id: String,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub created_at: i64,
}

/// Keeps a settled turn's exchange.
pub fn save_transcript(
    c: &Connection,
    sid: &str,
    tid: &str,
    record: &TranscriptRecord,
) -> StoreResult<()> {
    let json = serde_json::to_string(record)
        .map_err(|e| crate::store::StoreError::Other(e.to_string()))?;
    c.execute(
        "INSERT OR REPLACE INTO transcripts (sid, tid, record) VALUES (?1, ?2, ?3)",
        params![sid, tid, json],
    )?;
    Ok(())
}

/// Keeps a compaction as the session's newest.
pub fn save_compaction(c: &Connection, sid: &str, comp: &Compaction) -> StoreResult<()> {
    let json =
        serde_json::to_string(comp).map_err(|e| crate::store::StoreError::Other(e.to_string()))?;
    c.execute(
        "INSERT INTO compactions (sid, n, record) VALUES (?1, \
         (SELECT COALESCE(MAX(n), 0) + 1 FROM compactions WHERE sid = ?1), ?2)",
        params![sid, json],
    )?;
    Ok(())
}

/// The session's newest compaction.
pub fn latest_compaction(c: &Connection, sid: &str) -> StoreResult<Option<Compaction>> {
    let row: Option<String> = c
        .query_row(
            "SELECT record FROM compactions WHERE sid = ?1 ORDER BY n DESC LIMIT 1",
            [sid],
            |r| r.get(0),
        )
        .optional()?;
    Ok(row.and_then(|r| serde_json::from_str(&r).ok()))
}

/// The session's turn records after `ord`, oldest first, each with its exchange when one
/// was kept.
pub fn turns_after(
    c: &Connection,
    sid: &str,
    ord: i64,
) -> StoreResult<Vec<(String, Option<TranscriptRecord>)>> {
    let mut st = c.prepare_cached(
        "SELECT t.record, x.record FROM turns t \
         LEFT JOIN transcripts x ON x.sid = t.sid AND x.tid = t.tid \
         WHERE t.sid = ?1 AND t.ord > ?2 ORDER BY t.ord",
    )?;
    let rows = st
        .query_map(params![sid, ord], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows
        .into_iter()
        .map(|(t, x)| (t, x.and_then(|x| serde_json::from_str(&x).ok())))
        .collect())
}

/// A turn copied into a fork: its ids and order in the parent and in the fork.
pub struct CopiedTurn {
    pub old_tid: String,
    pub new_tid: String,
    pub old_ord: i64,
    pub new_ord: i64,
}

/// Copies what a fork inherits (docs/decisions.md, W2): the kept exchanges of the copied
/// turns, and the parent's newest summary that covers only turns the fork has.
pub fn copy_for_fork(
    c: &Connection,
    from: &str,
    to: &str,
    turns: &[CopiedTurn],
) -> StoreResult<()> {
    for t in turns {
        c.execute(
            "INSERT OR REPLACE INTO transcripts (sid, tid, record) \
             SELECT ?2, ?3, record FROM transcripts WHERE sid = ?1 AND tid = ?4",
            params![from, to, t.new_tid, t.old_tid],
        )?;
    }
    let Some(cut) = turns.iter().map(|t| t.old_ord).max() else {
        return Ok(());
    };
    let mut st = c.prepare("SELECT record FROM compactions WHERE sid = ?1 ORDER BY n DESC")?;
    let rows = st
        .query_map([from], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    let inherited = rows
        .iter()
        .filter_map(|r| serde_json::from_str::<Compaction>(r).ok())
        .find(|k| {
            k.through_ord <= cut
                && k.partial
                    .as_ref()
                    .is_none_or(|(tid, _)| turns.iter().any(|t| &t.old_tid == tid))
        });
    if let Some(mut k) = inherited {
        k.through_ord = turns
            .iter()
            .filter(|t| t.old_ord <= k.through_ord)
            .map(|t| t.new_ord)
            .max()
            .unwrap_or(0);
        if let Some((tid, n)) = k.partial.take() {
            k.partial = turns
                .iter()
                .find(|t| t.old_tid == tid)
                .map(|t| (t.new_tid.clone(), n));
        }
        save_compaction(c, to, &k)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        crate::store::migrations::apply(&c).unwrap();
        c.execute(
            "INSERT INTO sessions (id, channel, root, created_at, last_active_at) VALUES ('s', 'web', '/', 0, 0)",
            [],
        )
        .unwrap();
        for (tid, ord) in [("t1", 1), ("t2", 2)] {
            c.execute(
                "INSERT INTO turns (tid, sid, ord, status, record) VALUES (?1, 's', ?2, 'completed', ?3)",
                params![tid, ord, format!("{{\"tid\":\"{tid}\"}}")],
            )
            .unwrap();
        }
        c
    }

    #[test]
    fn a_kept_exchange_comes_back_with_its_turn_and_turns_without_one_come_back_bare() {
        let c = db();
        let rec = TranscriptRecord {
            steps: vec![ChatMessage::Assistant {
                text: "hi".into(),
                tool_calls: vec![],
            }],
            ending: Ending::Cancelled,
        };
        save_transcript(&c, "s", "t2", &rec).unwrap();
        let rows = turns_after(&c, "s", 0).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].1, None);
        assert_eq!(rows[1].1.as_ref(), Some(&rec));
        assert_eq!(turns_after(&c, "s", 1).unwrap().len(), 1);
    }

    #[test]
    fn the_newest_compaction_wins_and_survives_in_the_database() {
        let c = db();
        assert_eq!(latest_compaction(&c, "s").unwrap(), None);
        let mut comp = Compaction {
            summary: "first".into(),
            through_ord: 1,
            partial: None,
            trigger: Trigger::Auto,
            turn_id: "t2".into(),
            tokens_before: 10,
            tokens_after: 2,
            created_at: 0,
        };
        save_compaction(&c, "s", &comp).unwrap();
        comp.summary = "second".into();
        save_compaction(&c, "s", &comp).unwrap();
        assert_eq!(
            latest_compaction(&c, "s").unwrap().unwrap().summary,
            "second"
        );
    }
}
