//! Event writes sent together on PostgreSQL. Inside the store thread's batch transaction an
//! event job that writes nothing else does not go out on its own: the batch's events wait on
//! the connection and go out as one statement (each session's seq high-water raised once,
//! the journal rows inserted from arrays) before the batch's `COMMIT`, or before a statement
//! of another job that could read them. The writes of a turn's hot path (its record, its
//! session's row, an event written with a row: `Db::beside_events`) let them wait,
//! so a batch of turns costs one such statement instead of one per event job.
//!
//! A job whose only write is the engine's save of a turn record or a session row waits the
//! same way ([`PgConn::write_alone`]), until the batch's next statement of any kind: the
//! waiting writes go out in order, then the events, all in one round trip.
//!
//! Every job still learns the fate of its own event ([`Written`], read by its after-commit
//! action): on a cluster node an event of a session homed elsewhere is refused alone (the
//! fence), and when the statement fails as a whole the events are written again one by one,
//! so only the event at fault is lost.

use super::super::db::Written;
use super::super::sql::{borrowed, pg_args, OwnedParam, Param};
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

/// A job's only write waiting for the batch's next statement (see [`PgConn::write_alone`]).
pub(super) struct DeferredWrite {
    what: &'static str,
    statement: Statement,
    args: Vec<Box<dyn OwnedParam>>,
}

impl PgConn {
    /// The job's only write: inside a batch transaction, when the job has sent nothing yet
    /// and the statement is prepared, it waits on the connection and goes out in one round
    /// trip with the batch's other waiting writes and events, before the batch's next
    /// statement of any other kind; a failure is recorded then (it loses that write alone).
    /// Otherwise it runs now.
    pub fn write_alone(
        &mut self,
        what: &'static str,
        sql: &'static str,
        args: Vec<Box<dyn OwnedParam>>,
    ) -> StoreResult<()> {
        if self.in_tx && self.fresh && self.savepoint_pending {
            if let Some(statement) = self.prepared.get(sql) {
                self.deferred_writes.push(DeferredWrite {
                    what,
                    statement: statement.clone(),
                    args,
                });
                return Ok(());
            }
        }
        let args = borrowed(&args);
        self.beside_events(|p| p.execute(sql, &pg_args(&args)).map(|_| ()))
    }

    /// Runs `f`, whose statements the waiting events may wait past (`Db::beside_events`).
    pub fn beside_events<T>(&mut self, f: impl FnOnce(&mut PgConn) -> T) -> T {
        let was = std::mem::replace(&mut self.beside_events, true);
        let out = f(self);
        self.beside_events = was;
        out
    }

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

    /// Sends the deferred writes and events, if any: all in one round trip (the writes in
    /// order, then the events in one statement), else (when one of them fails) each write
    /// alone, then the events together, then one by one. `Err` only when the transaction
    /// itself could not be kept.
    pub(super) fn send_deferred(&mut self) -> StoreResult<()> {
        if self.deferred.is_empty() && self.deferred_writes.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.deferred);
        let writes = std::mem::take(&mut self.deferred_writes);
        let Err(mut e) = self.send_together(&writes, &events) else {
            return Ok(());
        };
        self.undo_events()?;
        if !writes.is_empty() {
            for write in &writes {
                if let Err(e) = self.send_together(std::slice::from_ref(write), &[]) {
                    self.undo_events()?;
                    tracing::error!(error = %e, job = write.what, "store write failed");
                    crate::metrics::store_write_failed();
                }
            }
            if events.is_empty() {
                return Ok(());
            }
            match self.send_together(&[], &events) {
                Ok(()) => return Ok(()),
                Err(again) => {
                    self.undo_events()?;
                    e = again;
                }
            }
        }
        if let [event] = events.as_slice() {
            failed(event, &e);
            return Ok(());
        }
        for event in &events {
            if let Err(e) = self.send_together(&[], std::slice::from_ref(event)) {
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

    /// Leaves the deferred writes and events unwritten (the batch is rolled back).
    pub(super) fn drop_deferred(&mut self) {
        self.deferred.clear();
        self.deferred_writes.clear();
    }

    /// Rolls back a failed [`PgConn::send_together`] (its events stay unwritten).
    fn undo_events(&mut self) -> StoreResult<()> {
        self.batch_now("ROLLBACK TO SAVEPOINT events; RELEASE SAVEPOINT events")
    }

    /// The waiting `writes`, then one statement for `events` (none without events), inside
    /// a savepoint of their own, all sent in one round trip; the savepoint's `RELEASE` goes
    /// out with the next request.
    fn send_together(&mut self, writes: &[DeferredWrite], events: &[Deferred]) -> StoreResult<()> {
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
        let client = &self.client;
        let args: Vec<Vec<&dyn Param>> = writes.iter().map(|w| borrowed(&w.args)).collect();
        let args: Vec<_> = args.iter().map(|a| pg_args(a)).collect();
        let all = async {
            let written = futures::future::join_all(
                writes
                    .iter()
                    .zip(&args)
                    .map(|(w, a)| client.execute(&w.statement, a)),
            );
            let stored = async {
                match events.is_empty() {
                    true => Ok(Vec::new()),
                    false => client.query(statement, &params).await,
                }
            };
            let (written, stored) = futures::future::join(written, stored).await;
            written.into_iter().try_for_each(|w| w.map(|_| ()))?;
            stored
        };
        let rows = pipelined(&self.rt, client, Some(&prefix), all)?;
        self.release_pending = Some("events");
        if events.is_empty() {
            return Ok(());
        }
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
    use crate::store::test_support::{hold, temp_pg_node, PgSchema};
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
    fn events_wait_past_the_turn_writes_of_other_jobs_and_go_out_before_a_read_of_the_journal() {
        rt().block_on(async {
            let Some((store, _schema)) = temp_pg_node("events", None).await else {
                return;
            };
            session(&store, "a", None).await;
            session(&store, "b", None).await;
            turn_now(&store, "t0", "b", "done").await;
            let before = statements_sent(&store).await;
            let (tx, rx) = mpsc::channel();
            let held = hold(&store);
            event(&store, "a", 1, Some("{}"), &tx);
            store.queue("turn", |db| {
                rows::put_turn(db, "t1", "b", 1, "streaming", None, "{}")
            });
            event(&store, "b", 1, Some("{}"), &tx);
            store.queue("turn", |db| {
                rows::put_turn(db, "t1", "b", 1, "done", None, "{}")
            });
            event(&store, "a", 2, Some("{}"), &tx);
            // A read of the journal sees every event queued before it.
            let (seen_tx, seen_rx) = mpsc::channel();
            store.queue("read", move |db| {
                let n: Option<i64> = db.value("SELECT count(*) FROM events", &[])?;
                let _ = seen_tx.send(n.unwrap_or(-1));
                Ok(())
            });
            event(&store, "b", 2, Some("{}"), &tx);
            drop(held);
            store.flush().await;
            assert_eq!(seen_rx.try_recv().ok(), Some(3));
            assert_eq!(
                statements_sent(&store).await - before,
                2,
                "one statement before the read, one at the commit"
            );
            assert!(fates(&rx).iter().all(|f| f.2), "every event written");
            let status: Option<String> = store
                .with(|db| db.value("SELECT status FROM turns WHERE tid = 't1'", &[]))
                .await
                .expect("turn");
            assert_eq!(status.as_deref(), Some("done"));
            assert_eq!(last_seq(&store, "a").await, 2);
            assert_eq!(last_seq(&store, "b").await, 2);
        });
    }

    /// A store with session `a` and its turn `t0` written, which prepares the turn upsert on
    /// the store's connection (a job's only write waits only for a prepared statement).
    async fn store_with_a_turn() -> Option<(Store, PgSchema)> {
        let (store, schema) = temp_pg_node("events", None).await?;
        session(&store, "a", None).await;
        turn_now(&store, "t0", "a", "done").await;
        Some((store, schema))
    }

    async fn turn_now(store: &Store, tid: &'static str, sid: &'static str, status: &'static str) {
        store
            .with(move |db| rows::put_turn(db, tid, sid, 1, status, None, "{}"))
            .await
            .expect("turn");
    }

    async fn statuses(store: &Store) -> Vec<(String, String)> {
        store
            .with(|db| {
                db.rows("SELECT tid, status FROM turns ORDER BY tid", &[], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
            })
            .await
            .expect("turns")
    }

    fn turn_alone(store: &Store, tid: &'static str, sid: &'static str, status: &'static str) {
        store.queue("turn", move |db| {
            rows::put_turn_alone(db, tid, sid, 1, status, None, "{}".to_string())
        });
    }

    #[test]
    fn turn_writes_wait_in_order_and_a_later_statement_of_the_batch_sees_them() {
        rt().block_on(async {
            let Some((store, _schema)) = store_with_a_turn().await else {
                return;
            };
            store
                .with(|db| rows::put_session(db, &rows::SessionRow::bare("b")))
                .await
                .expect("session");
            let before = statements_sent(&store).await;
            let (tx, rx) = mpsc::channel();
            let held = hold(&store);
            turn_alone(&store, "t1", "a", "queued");
            event(&store, "a", 1, Some("{}"), &tx);
            turn_alone(&store, "t1", "a", "streaming");
            turn_alone(&store, "t1", "a", "done");
            // A later job's statement of another kind runs after every waiting write.
            let (seen_tx, seen_rx) = mpsc::channel();
            store.queue("read", move |db| {
                let s: Option<String> =
                    db.value("SELECT status FROM turns WHERE tid = 't1'", &[])?;
                let _ = seen_tx.send(s);
                Ok(())
            });
            turn_alone(&store, "t2", "a", "queued");
            // A new session's row waits; the next job's turn upsert (a statement events may
            // wait past) still finds it.
            store.queue("session", |db| {
                rows::put_session_alone(db, &rows::SessionRow::bare("c"))
            });
            store.queue("turn", |db| {
                rows::put_turn(db, "t3", "c", 1, "queued", None, "{}")
            });
            drop(held);
            store.flush().await;
            assert_eq!(seen_rx.try_recv().ok().flatten().as_deref(), Some("done"));
            assert_eq!(statements_sent(&store).await - before, 1);
            assert_eq!(fates(&rx), vec![("a", 1, true)]);
            assert_eq!(
                statuses(&store).await,
                vec![
                    ("t0".to_string(), "done".to_string()),
                    ("t1".to_string(), "done".to_string()),
                    ("t2".to_string(), "queued".to_string()),
                    ("t3".to_string(), "queued".to_string())
                ]
            );
        });
    }

    #[test]
    fn events_waiting_past_a_turn_write_that_fails_are_still_written() {
        rt().block_on(async {
            let Some((store, _schema)) = store_with_a_turn().await else {
                return;
            };
            let (tx, rx) = mpsc::channel();
            let held = hold(&store);
            event(&store, "a", 1, Some("{}"), &tx);
            // Undone back to its job's start, which must not take the waiting event along.
            store.queue("turn", |db| {
                rows::put_turn(db, "t1", "nowhere", 1, "queued", None, "{}")
            });
            event(&store, "a", 2, Some("{}"), &tx);
            // The same inside an atomic unit.
            store.queue("unit", |db| {
                db.atomically(|db| rows::put_turn(db, "t2", "nowhere", 1, "queued", None, "{}"))
            });
            drop(held);
            store.flush().await;
            assert_eq!(fates(&rx), vec![("a", 1, true), ("a", 2, true)]);
            assert_eq!(
                stored(&store).await,
                vec![("a".to_string(), 1), ("a".to_string(), 2)]
            );
            let tids: Vec<String> = statuses(&store).await.into_iter().map(|t| t.0).collect();
            assert_eq!(tids, vec!["t0"]);
        });
    }

    #[test]
    fn a_waiting_write_postgres_refuses_is_lost_alone_and_the_rest_of_its_batch_is_written() {
        rt().block_on(async {
            let Some((store, _schema)) = store_with_a_turn().await else {
                return;
            };
            let (tx, rx) = mpsc::channel();
            let held = hold(&store);
            turn_alone(&store, "t1", "a", "queued");
            // No such session: the turn's foreign key refuses it.
            turn_alone(&store, "t2", "nowhere", "queued");
            event(&store, "a", 1, Some("{}"), &tx);
            turn_alone(&store, "t3", "a", "queued");
            event(&store, "a", 2, Some("{}"), &tx);
            drop(held);
            store.flush().await;
            assert_eq!(fates(&rx), vec![("a", 1, true), ("a", 2, true)]);
            let tids: Vec<String> = statuses(&store).await.into_iter().map(|t| t.0).collect();
            assert_eq!(tids, vec!["t0", "t1", "t3"]);
            assert_eq!(
                stored(&store).await,
                vec![("a".to_string(), 1), ("a".to_string(), 2)]
            );
            assert_eq!(last_seq(&store, "a").await, 2);
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
