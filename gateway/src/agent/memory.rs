//! The stored memory of a session: each settled turn's model-visible exchange and the
//! summaries compactions wrote (docs/decisions.md, T1, T2). Plain functions over a
//! connection; callers run them on the store thread.

use super::context::Ending;
use crate::store::{Db, StoreResult};
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
    db: &mut Db,
    sid: &str,
    tid: &str,
    record: &TranscriptRecord,
) -> StoreResult<()> {
    let json = serde_json::to_string(record)
        .map_err(|e| crate::store::StoreError::Other(e.to_string()))?;
    db.exec(
        "INSERT INTO transcripts (sid, tid, record) VALUES (?1, ?2, ?3) \
         ON CONFLICT (sid, tid) DO UPDATE SET record = excluded.record",
        &[&sid, &tid, &json],
    )?;
    Ok(())
}

/// Keeps a compaction as the session's newest.
pub fn save_compaction(db: &mut Db, sid: &str, comp: &Compaction) -> StoreResult<()> {
    let json =
        serde_json::to_string(comp).map_err(|e| crate::store::StoreError::Other(e.to_string()))?;
    db.exec(
        "INSERT INTO compactions (sid, n, record) VALUES (?1, \
         (SELECT COALESCE(MAX(n), 0) + 1 FROM compactions WHERE sid = ?1), ?2)",
        &[&sid, &json],
    )?;
    Ok(())
}

/// The session's newest compaction.
pub fn latest_compaction(db: &mut Db, sid: &str) -> StoreResult<Option<Compaction>> {
    let row: Option<String> = db.value(
        "SELECT record FROM compactions WHERE sid = ?1 ORDER BY n DESC LIMIT 1",
        &[&sid],
    )?;
    Ok(row.and_then(|r| serde_json::from_str(&r).ok()))
}

/// The session's turn records after `ord`, oldest first, each with its exchange when one
/// was kept.
pub fn turns_after(
    db: &mut Db,
    sid: &str,
    ord: i64,
) -> StoreResult<Vec<(String, Option<TranscriptRecord>)>> {
    let rows = db.rows(
        "SELECT t.record, x.record FROM turns t \
         LEFT JOIN transcripts x ON x.sid = t.sid AND x.tid = t.tid \
         WHERE t.sid = ?1 AND t.ord > ?2 ORDER BY t.ord",
        &[&sid, &ord],
        |r| Ok((r.get::<String>(0)?, r.get::<Option<String>>(1)?)),
    )?;
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
pub fn copy_for_fork(db: &mut Db, from: &str, to: &str, turns: &[CopiedTurn]) -> StoreResult<()> {
    for t in turns {
        db.exec(
            "INSERT INTO transcripts (sid, tid, record) \
             SELECT ?2, ?3, record FROM transcripts WHERE sid = ?1 AND tid = ?4 \
             ON CONFLICT (sid, tid) DO UPDATE SET record = excluded.record",
            &[&from, &to, &t.new_tid, &t.old_tid],
        )?;
    }
    let Some(cut) = turns.iter().map(|t| t.old_ord).max() else {
        return Ok(());
    };
    let rows: Vec<String> = db.column(
        "SELECT record FROM compactions WHERE sid = ?1 ORDER BY n DESC",
        &[&from],
    )?;
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
        save_compaction(db, to, &k)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::rows::{put_session, put_turn, SessionRow};
    use crate::store::test_support::each_engine;

    /// A session `s` with two settled turns.
    fn seed(db: &mut Db) -> StoreResult<()> {
        put_session(db, &SessionRow::bare("s"))?;
        for (tid, ord) in [("t1", 1), ("t2", 2)] {
            let rec = format!("{{\"tid\":\"{tid}\"}}");
            put_turn(db, tid, "s", ord, "completed", None, &rec)?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_kept_exchange_comes_back_with_its_turn_and_turns_without_one_come_back_bare() {
        let rec = TranscriptRecord {
            steps: vec![ChatMessage::Assistant {
                text: "hi".into(),
                tool_calls: vec![],
            }],
            ending: Ending::Cancelled,
        };
        for (store, _keep) in each_engine("memory").await {
            let r = rec.clone();
            let (all, later) = store
                .with(move |db| {
                    seed(db)?;
                    save_transcript(db, "s", "t2", &r)?;
                    save_transcript(db, "s", "t2", &r)?;
                    Ok((turns_after(db, "s", 0)?, turns_after(db, "s", 1)?))
                })
                .await
                .expect("store");
            assert_eq!(all.len(), 2);
            assert_eq!(all[0].1, None);
            assert_eq!(all[1].1.as_ref(), Some(&rec));
            assert_eq!(later.len(), 1);
        }
    }

    #[tokio::test]
    async fn the_newest_compaction_wins_and_a_fork_inherits_it_renumbered() {
        for (store, _keep) in each_engine("memory").await {
            let (none, newest, inherited) = store
                .with(|db| {
                    seed(db)?;
                    let none = latest_compaction(db, "s")?;
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
                    save_compaction(db, "s", &comp)?;
                    comp.summary = "second".into();
                    save_compaction(db, "s", &comp)?;
                    let newest = latest_compaction(db, "s")?;
                    put_session(db, &SessionRow::bare("f"))?;
                    let copied =
                        [("t1", "f1", 1, 5), ("t2", "f2", 2, 6)].map(|(o, n, oo, no)| CopiedTurn {
                            old_tid: o.into(),
                            new_tid: n.into(),
                            old_ord: oo,
                            new_ord: no,
                        });
                    copy_for_fork(db, "s", "f", &copied)?;
                    Ok((none, newest, latest_compaction(db, "f")?))
                })
                .await
                .expect("store");
            assert_eq!(none, None);
            assert_eq!(newest.map(|c| c.summary).as_deref(), Some("second"));
            let inherited = inherited.expect("the fork has the summary");
            assert_eq!(
                (inherited.summary.as_str(), inherited.through_ord),
                ("second", 5)
            );
        }
    }
}
