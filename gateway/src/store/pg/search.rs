//! Turn texts indexed for search off the write path (PostgreSQL migration 5). A turn write
//! only queues the turn (`search_pending`); the indexer here, a task on its own connection,
//! indexes the queue a batch at a time, so building a turn's `tsvector` and GIN entries
//! costs the store thread's connection nothing and a turn written several times while it
//! runs is indexed once per pass, not once per write. A search first indexes what is still
//! queued ([`PgConn::index_search`]), so it answers from an index in step with every
//! committed turn, as the triggers of SQLite's FTS5 do.

use super::PgConn;
use crate::store::error::StoreResult;
use std::time::Duration;

/// Indexes the whole queue, waiting for another indexer of the database to finish first.
const CATCH_UP: &str = "SELECT search_index_pending(NULL, true)";
/// Indexes up to `$1` queued writes, or nothing when another indexer is at work; answers how
/// many left the queue (a full pass means more may wait; turns whose delete is in progress
/// stay queued and do not count, so they cannot keep the indexer from sleeping).
const PASS: &str = "SELECT search_index_pending($1, false)";
/// Queued writes one pass takes: a pass is one transaction, and a turn being deleted waits
/// for it, so it stays short (tens of milliseconds).
const PASS_SIZE: i32 = 256;
/// How often the indexer looks at the queue when the last pass emptied it.
const INTERVAL: Duration = Duration::from_millis(200);
/// How long it waits before connecting again after losing its connection.
const RECONNECT: Duration = Duration::from_secs(2);

impl PgConn {
    /// Indexes the turns still queued, inside the store thread's transaction (a search's
    /// first step).
    pub fn index_search(&mut self) -> StoreResult<()> {
        self.query(CATCH_UP, &[])?;
        Ok(())
    }
}

/// The background indexer of one store; it stops when dropped.
pub(crate) struct Indexer(tokio::task::AbortHandle);

impl Drop for Indexer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Indexer {
    /// Starts the indexer on the caller's runtime (its IO is async: it never holds a
    /// worker while the database works).
    pub(crate) fn spawn(cfg: tokio_postgres::Config) -> Indexer {
        Indexer(tokio::spawn(run(cfg)).abort_handle())
    }
}

async fn run(cfg: tokio_postgres::Config) {
    let mut warned = false;
    loop {
        match cfg.connect(tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                warned = false;
                let conn = tokio::spawn(connection);
                passes(&client).await;
                conn.abort();
            }
            Err(e) if !warned => {
                tracing::warn!(error = %e, "the search indexer cannot connect to PostgreSQL");
                warned = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Index passes until the connection fails.
async fn passes(client: &tokio_postgres::Client) {
    let pass = match client.prepare(PASS).await {
        Ok(st) => st,
        Err(e) => {
            tracing::warn!(error = %e, "the search indexer cannot prepare its pass");
            return;
        }
    };
    loop {
        match client.query_one(&pass, &[&PASS_SIZE]).await {
            Ok(row) if row.get::<_, Option<i32>>(0) == Some(PASS_SIZE) => continue,
            Ok(_) => {}
            Err(e) if client.is_closed() => {
                tracing::warn!(error = %e, "the search indexer lost its connection");
                return;
            }
            Err(e) => tracing::warn!(error = %e, "a search index pass failed"),
        }
        tokio::time::sleep(INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use crate::store::rows::{self, SessionRow};
    use crate::store::test_support::temp_pg_store;
    use crate::store::{Store, StoreResult};
    use serde_json::json;
    use std::time::{Duration, Instant};

    fn record(reply: &str) -> String {
        json!({"request": "plant the beans", "created_at": 7,
            "content": [{"type": "prose", "markdown": reply}]})
        .to_string()
    }

    async fn session(store: &Store) {
        let row = SessionRow::bare("s1");
        store
            .with(move |db| rows::put_session(db, &row))
            .await
            .expect("session");
    }

    type Indexed = Vec<(String, String, String)>;

    /// Every indexed turn text as (tid, side, body), and how many writes are still queued.
    async fn index(store: &Store) -> (Indexed, i64) {
        store
            .with(|db| {
                let rows = db.rows(
                    "SELECT tid, side, body FROM search_text WHERE side <> 'title' \
                     ORDER BY tid, side, body",
                    &[],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )?;
                let queued = db.value("SELECT count(*) FROM search_pending", &[])?;
                Ok((rows, queued.unwrap_or(0)))
            })
            .await
            .expect("index")
    }

    fn texts(tid: &str, reply: &str) -> Indexed {
        vec![
            (tid.into(), "reply".into(), reply.into()),
            (tid.into(), "request".into(), "plant the beans".into()),
        ]
    }

    #[tokio::test]
    async fn a_turn_write_only_queues_the_turn_and_the_background_indexer_indexes_it() {
        let Some((store, _schema)) = temp_pg_store("search").await else {
            return;
        };
        session(&store).await;
        let rec = record("Sow them an inch deep");
        let (indexed, queued) = store
            .with(move |db| {
                rows::put_turn(db, "t1", "s1", 1, "completed", None, &rec)?;
                let indexed: Option<i64> =
                    db.value("SELECT count(*) FROM search_text WHERE tid = 't1'", &[])?;
                let queued: Option<i64> = db.value("SELECT count(*) FROM search_pending", &[])?;
                StoreResult::Ok((indexed, queued))
            })
            .await
            .expect("write");
        assert_eq!((indexed, queued), (Some(0), Some(1)), "queued, not indexed");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = index(&store).await;
            if got == (texts("t1", "Sow them an inch deep"), 0) {
                break;
            }
            assert!(Instant::now() < deadline, "never indexed: {got:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn a_record_the_index_cannot_read_is_stored_and_holds_up_no_other_turn() {
        let Some((store, _schema)) = temp_pg_store("search").await else {
            return;
        };
        session(&store).await;
        // serde_json writes a NUL character as `\u0000`, which jsonb refuses.
        let (bad, good) = (record("a NUL \u{0} inside"), record("Water at dawn"));
        store
            .with(move |db| {
                rows::put_turn(db, "t1", "s1", 1, "completed", None, &bad)?;
                rows::put_turn(db, "t2", "s1", 2, "completed", None, &good)
            })
            .await
            .expect("both turns are stored");
        store
            .with(|db| db.index_search())
            .await
            .expect("the catch-up goes past the unreadable record");
        assert_eq!(index(&store).await, (texts("t2", "Water at dawn"), 0));
    }

    #[tokio::test]
    async fn indexing_beside_rewrites_and_deletes_ends_with_exactly_the_live_turns_texts() {
        let Some((store, schema)) = temp_pg_store("search").await else {
            return;
        };
        session(&store).await;
        // A second indexer on its own connection, taking three queued writes per pass as
        // fast as it can, races the store thread's writes (and the store's own indexer).
        let opts =
            vis_store::PgOptions::new(vis_store::testing::pg_url()).with_schema(schema.name());
        let (client, conn) = opts
            .config()
            .expect("config")
            .connect(tokio_postgres::NoTls)
            .await
            .expect("connect");
        let conn = tokio::spawn(conn);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let racing = stop.clone();
        let racer = tokio::spawn(async move {
            let mut passes = 0u32;
            while !racing.load(std::sync::atomic::Ordering::Relaxed) {
                client
                    .query_one("SELECT search_index_pending(3, false)", &[])
                    .await?;
                passes += 1;
                tokio::task::yield_now().await;
            }
            Ok::<_, tokio_postgres::Error>(passes)
        });
        for version in 0..3 {
            for i in 0..60 {
                let rec = record(&format!("reply {i} {version}"));
                store.queue("turn", move |db| {
                    let tid = format!("t{i:02}");
                    rows::put_turn(db, &tid, "s1", i, "completed", None, &rec)
                });
            }
            store.flush().await;
        }
        for i in (0..60).step_by(3) {
            store.queue("delete", move |db| {
                rows::delete_turn(db, &format!("t{i:02}"))
            });
        }
        store.flush().await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let passes = racer
            .await
            .expect("racer")
            .expect("every racing pass succeeds");
        assert!(passes > 0);
        conn.abort();
        store.with(|db| db.index_search()).await.expect("catch up");
        let mut want = Indexed::new();
        for i in (0..60).filter(|i| i % 3 != 0) {
            want.extend(texts(&format!("t{i:02}"), &format!("reply {i} 2")));
        }
        assert_eq!(index(&store).await, (want, 0));
    }
}
