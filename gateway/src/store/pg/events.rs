//! Event writes sent together on PostgreSQL. Inside the store thread's batch transaction an
//! event job that writes nothing else does not go out on its own: the batch's events wait on
//! the connection and go out as one statement (each session's seq high-water raised once,
//! the journal rows inserted from arrays) before the next statement of another job, or before
//! the batch's `COMMIT`. A batch of events costs one round trip instead of one per event.
//!
//! Every job still learns the fate of its own event ([`Written`], read by its after-commit
//! action): on a cluster node an event of a session homed elsewhere is refused alone (the
//! fence), and when the statement fails as a whole the events are written again one by one,
//! so only the event at fault is lost.

use super::super::db::Written;
use super::{pipelined, PgConn};
use crate::store::error::{StoreError, StoreResult};
use std::collections::HashSet;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

/// The events of a batch, one row per element of the arrays `$1` (sid), `$2` (seq),
/// `$3` (type) and `$4` (data; NULL for an event that is only live).
const EVENTS: &str = "ev AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], \
     $4::text[]) AS e(sid, seq, type, data)), \
     top AS (SELECT sid, max(seq) AS seq FROM ev GROUP BY sid)";

/// One node alone on the database: every event is written (as [`super::super::rows`]'s
/// single-event statements do).
const PLAIN: &str = "WITH {EVENTS}, \
     bumped AS (UPDATE sessions s SET last_seq = GREATEST(s.last_seq, top.seq) \
         FROM top WHERE s.id = top.sid RETURNING s.id), \
     stored AS (INSERT INTO events (sid, seq, type, data) \
         SELECT sid, seq, type, data FROM ev WHERE data IS NOT NULL \
         ON CONFLICT (sid, seq) DO UPDATE SET type = excluded.type, data = excluded.data) \
     SELECT id FROM bumped";

/// A node of a cluster (`$5` node, `$6` lease epoch): only the events of sessions homed
/// here at this epoch (or homed nowhere yet, which this write claims) are written; the
/// sessions answered are the ones whose events went in.
const FENCED: &str = "WITH {EVENTS}, \
     bumped AS (UPDATE sessions s SET last_seq = GREATEST(s.last_seq, top.seq), \
         home_node = COALESCE(s.home_node, $5), \
         home_epoch = CASE WHEN s.home_node IS NULL THEN $6 ELSE s.home_epoch END \
         FROM top WHERE s.id = top.sid \
         AND (s.home_node IS NULL OR (s.home_node = $5 AND s.home_epoch = $6)) \
         RETURNING s.id), \
     stored AS (INSERT INTO events (sid, seq, type, data) \
         SELECT sid, seq, type, data FROM ev \
         WHERE data IS NOT NULL AND sid IN (SELECT id FROM bumped) \
         ON CONFLICT (sid, seq) DO UPDATE SET type = excluded.type, data = excluded.data) \
     SELECT id FROM bumped";

/// The two statements, prepared when the connection opens (outside any transaction, so a
/// failure to prepare cannot abort a batch).
pub(super) struct EventStatements {
    plain: Statement,
    fenced: Statement,
    /// How many times one of them went out.
    #[cfg(test)]
    sent: u64,
}

impl EventStatements {
    pub(super) async fn prepare(client: &Client) -> Result<EventStatements, tokio_postgres::Error> {
        Ok(EventStatements {
            plain: client.prepare(&PLAIN.replace("{EVENTS}", EVENTS)).await?,
            fenced: client.prepare(&FENCED.replace("{EVENTS}", EVENTS)).await?,
            #[cfg(test)]
            sent: 0,
        })
    }
}

/// An event waiting for its batch's statement.
pub(super) struct Deferred {
    sid: String,
    seq: i64,
    kind: String,
    data: Option<String>,
    written: Written,
}

impl PgConn {
    /// Defers the write of an event when the running job is inside a batch transaction and
    /// has sent nothing yet (so the event is the job's only write); `None` otherwise, and the
    /// caller writes it now.
    pub fn defer_event(
        &mut self,
        sid: &str,
        seq: i64,
        kind: &str,
        data: Option<&str>,
    ) -> Option<Written> {
        if !(self.in_tx && self.fresh && self.savepoint_pending) {
            return None;
        }
        let written = Written::new(false);
        self.deferred.push(Deferred {
            sid: sid.to_string(),
            seq,
            kind: kind.to_string(),
            data: data.map(str::to_string),
            written: written.clone(),
        });
        Some(written)
    }

    /// Sends the deferred events, if any: all in one statement, else (when that statement
    /// fails) one by one. `Err` only when the transaction itself could not be kept.
    pub(super) fn send_deferred(&mut self) -> StoreResult<()> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.deferred);
        let Err(e) = self.write_events(&events) else {
            return Ok(());
        };
        self.undo_events()?;
        if let [event] = events.as_slice() {
            failed(event, &e);
            return Ok(());
        }
        for event in &events {
            if let Err(e) = self.write_events(std::slice::from_ref(event)) {
                self.undo_events()?;
                failed(event, &e);
            }
        }
        Ok(())
    }

    /// How many statements wrote deferred events on this connection.
    #[cfg(test)]
    pub fn event_statements_sent(&self) -> u64 {
        self.event_statements.sent
    }

    /// Leaves the deferred events unwritten (the batch is rolled back).
    pub(super) fn drop_deferred(&mut self) {
        self.deferred.clear();
    }

    /// Rolls back a failed [`PgConn::write_events`] (its events stay unwritten).
    fn undo_events(&mut self) -> StoreResult<()> {
        self.batch_now("ROLLBACK TO SAVEPOINT events; RELEASE SAVEPOINT events")
    }

    /// One statement for `events`, inside a savepoint of its own (sent in the same round
    /// trip), whose `RELEASE` goes out with the next request.
    fn write_events(&mut self, events: &[Deferred]) -> StoreResult<()> {
        let prefix = match self.control(false) {
            Some(control) => format!("{control}; SAVEPOINT events"),
            None => "SAVEPOINT events".to_string(),
        };
        let sids: Vec<&str> = events.iter().map(|e| e.sid.as_str()).collect();
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        let data: Vec<Option<&str>> = events.iter().map(|e| e.data.as_deref()).collect();
        let fence = self.fence.as_ref().map(|w| (w.node.as_str(), w.epoch));
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&sids, &seqs, &kinds, &data];
        let statement = match &fence {
            Some((node, epoch)) => {
                params.extend([node as &(dyn ToSql + Sync), epoch]);
                &self.event_statements.fenced
            }
            None => &self.event_statements.plain,
        };
        let rows = pipelined(
            &self.rt,
            &self.client,
            Some(&prefix),
            self.client.query(statement, &params),
        )?;
        self.release_pending = Some("events");
        #[cfg(test)]
        {
            self.event_statements.sent += 1;
        }
        let homed_here: HashSet<String> = rows.iter().filter_map(|r| r.try_get(0).ok()).collect();
        for event in events {
            let ok = fence.is_none() || homed_here.contains(&event.sid);
            if !ok {
                let e = StoreError::Fenced {
                    sid: event.sid.clone(),
                };
                tracing::error!(error = %e, job = "event", "store write failed");
                crate::metrics::store_write_failed();
            }
            event.written.set(ok);
        }
        Ok(())
    }
}

/// Says why `event` could not be written.
fn failed(event: &Deferred, e: &StoreError) {
    tracing::error!(error = %e, session = event.sid, seq = event.seq, "event write failed");
    crate::metrics::store_write_failed();
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::{hold, temp_pg_node};
    use crate::store::{after_commit, committed, rows, Db, Store};
    use std::sync::mpsc;
    use vis_store::{NodeId, Writer};

    async fn session(store: &Store, sid: &'static str, home: Option<(&'static str, i64)>) {
        store
            .with(move |db| {
                db.exec(
                    "INSERT INTO sessions (id, created_at, home_node, home_epoch) \
                     VALUES (?1, 0, ?2, ?3)",
                    &[&sid, &home.map(|h| h.0), &home.map_or(0, |h| h.1)],
                )
                .map(|_| ())
            })
            .await
            .expect("session row");
    }

    /// Queues the bus's write of one event; its fate (written and committed) arrives on
    /// `fate` after the commit.
    fn event(
        store: &Store,
        sid: &'static str,
        seq: i64,
        data: Option<&'static str>,
        fate: &mpsc::Sender<(&'static str, i64, bool)>,
    ) {
        let fate = fate.clone();
        store.queue("event", move |db| {
            let written = rows::store_event(db, sid, seq, "test.event", data, 10_000)?;
            after_commit(move || {
                let _ = fate.send((sid, seq, written.get() && committed()));
            });
            Ok(())
        });
    }

    async fn stored(store: &Store) -> Vec<(String, i64)> {
        store
            .with(|db| {
                db.rows("SELECT sid, seq FROM events ORDER BY sid, seq", &[], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
            })
            .await
            .expect("events")
    }

    async fn last_seq(store: &Store, sid: &'static str) -> i64 {
        store
            .with(move |db| db.value("SELECT last_seq FROM sessions WHERE id = ?1", &[&sid]))
            .await
            .expect("last_seq")
            .unwrap_or(-1)
    }

    async fn statements_sent(store: &Store) -> u64 {
        store
            .with(|db| match db {
                Db::Postgres(p) => Ok(p.event_statements_sent()),
                Db::Sqlite(_) => Ok(0),
            })
            .await
            .expect("count")
    }

    fn fates(rx: &mpsc::Receiver<(&'static str, i64, bool)>) -> Vec<(&'static str, i64, bool)> {
        let mut out: Vec<_> = rx.try_iter().collect();
        out.sort();
        out
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn events_of_one_batch_go_out_in_one_statement_and_raise_each_sessions_high_water() {
        rt().block_on(async {
            let Some((store, _schema)) = temp_pg_node("events", None).await else {
                return;
            };
            session(&store, "a", None).await;
            session(&store, "b", None).await;
            let before = statements_sent(&store).await;
            let (tx, rx) = mpsc::channel();
            let held = hold(&store);
            for seq in 1..=5 {
                event(&store, "a", seq, Some("{}"), &tx);
            }
            for seq in 1..=3 {
                event(&store, "b", seq, Some("{}"), &tx);
            }
            // Only live: raises the high-water, stores no row.
            event(&store, "a", 6, None, &tx);
            drop(held);
            store.flush().await;
            assert_eq!(statements_sent(&store).await - before, 1);
            let fates = fates(&rx);
            assert_eq!(fates.len(), 9);
            assert!(fates.iter().all(|f| f.2), "every event written: {fates:?}");
            let mut want: Vec<(String, i64)> = (1..=5).map(|s| ("a".to_string(), s)).collect();
            want.extend((1..=3).map(|s| ("b".to_string(), s)));
            assert_eq!(stored(&store).await, want);
            assert_eq!(last_seq(&store, "a").await, 6);
            assert_eq!(last_seq(&store, "b").await, 3);
        });
    }

    #[test]
    fn an_event_postgres_refuses_is_lost_alone_and_the_rest_of_its_batch_is_written() {
        rt().block_on(async {
            let Some((store, _schema)) = temp_pg_node("events", None).await else {
                return;
            };
            session(&store, "a", None).await;
            let (tx, rx) = mpsc::channel();
            let held = hold(&store);
            event(&store, "a", 1, Some("{}"), &tx);
            // PostgreSQL text cannot hold a NUL byte: the batch's statement fails.
            event(&store, "a", 2, Some("{\u{0}}"), &tx);
            event(&store, "a", 3, Some("{}"), &tx);
            drop(held);
            store.flush().await;
            assert_eq!(
                fates(&rx),
                vec![("a", 1, true), ("a", 2, false), ("a", 3, true)]
            );
            assert_eq!(
                stored(&store).await,
                vec![("a".to_string(), 1), ("a".to_string(), 3)]
            );
            assert_eq!(last_seq(&store, "a").await, 3);
        });
    }

    #[test]
    fn on_a_cluster_node_a_batch_writes_only_the_events_of_sessions_homed_here() {
        rt().block_on(async {
            let me = Writer {
                node: NodeId::new("node-a"),
                epoch: 4,
            };
            let Some((store, _schema)) = temp_pg_node("events", Some(me)).await else {
                return;
            };
            session(&store, "mine", Some(("node-a", 4))).await;
            session(&store, "theirs", Some(("node-b", 4))).await;
            session(&store, "stale", Some(("node-a", 3))).await;
            session(&store, "unowned", None).await;
            let (tx, rx) = mpsc::channel();
            let held = hold(&store);
            for sid in ["mine", "theirs", "stale", "unowned"] {
                event(&store, sid, 1, Some("{}"), &tx);
            }
            drop(held);
            store.flush().await;
            assert_eq!(
                fates(&rx),
                vec![
                    ("mine", 1, true),
                    ("stale", 1, false),
                    ("theirs", 1, false),
                    ("unowned", 1, true)
                ]
            );
            assert_eq!(
                stored(&store).await,
                vec![("mine".to_string(), 1), ("unowned".to_string(), 1)]
            );
            assert_eq!(last_seq(&store, "theirs").await, 0);
            let home: Option<String> = store
                .with(|db| db.value("SELECT home_node FROM sessions WHERE id = 'unowned'", &[]))
                .await
                .expect("home");
            assert_eq!(
                home.as_deref(),
                Some("node-a"),
                "the write claims an unowned session"
            );
        });
    }
}
