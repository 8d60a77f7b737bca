//! The SQLite store (docs/decisions.md, A3): one database file in WAL mode under the Vis home.
//!
//! All database work runs on ONE dedicated thread that owns the connection; async code sends
//! it closures. Jobs run in submission order, so a read queued after a write sees it — the
//! event bus relies on this for atomic replay. Pending jobs are applied in one transaction per
//! batch, which keeps the per-event write cost low.

pub(crate) mod db;
mod error;
pub(crate) mod migrations;
pub mod pg;
pub mod rows;
pub mod sql;
pub mod transfer;

pub use db::{Db, Written};
pub use error::{StoreError, StoreResult};

use db::exec;
use pg::PgConn;
use rusqlite::Connection;
use std::path::Path;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// The connection the store thread owns.
enum Conn {
    Sqlite(Connection),
    Postgres(Box<PgConn>),
}

type Job = Box<dyn FnOnce(&mut Conn) + Send>;

/// Handle to the store thread. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    tx: mpsc::Sender<Job>,
    /// Where the data lives, for people: the SQLite file, or the PostgreSQL URL without its
    /// password.
    location: String,
    /// PostgreSQL's search indexer, stopped with the last handle.
    _indexer: Option<std::sync::Arc<pg::search::Indexer>>,
}

const MAX_BATCH: usize = 512;

impl Store {
    /// Opens (creating if needed) the database and applies migrations.
    pub fn open(path: &Path) -> StoreResult<Store> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrations::apply(&conn)?;
        restrict(path);
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("vis-store".into())
            .spawn(move || run(Conn::Sqlite(conn), rx))
            .map_err(|e| StoreError::Other(format!("cannot start the store thread: {e}")))?;
        Ok(Store {
            tx,
            location: path.display().to_string(),
            _indexer: None,
        })
    }

    /// The store on PostgreSQL (docs/decisions.md, C3): the thread connects, brings the
    /// schema up to date and answers; the caller's worker never waits on the database.
    /// `location` is how the database is shown (without a password). With `fence` (a node
    /// of a cluster), every event write is checked against the session's home (C4).
    pub async fn open_postgres(
        opts: &vis_store::PgOptions,
        location: String,
        fence: Option<vis_store::Writer>,
    ) -> StoreResult<Store> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let indexer_cfg = opts.config().map_err(StoreError::Journal)?;
        let opts = opts.clone();
        std::thread::Builder::new()
            .name("vis-store".into())
            .spawn(move || match PgConn::open(&opts, fence) {
                Ok(conn) => {
                    let _ = ready_tx.send(Ok(()));
                    run(Conn::Postgres(Box::new(conn)), rx)
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| StoreError::Other(format!("cannot start the store thread: {e}")))?;
        ready_rx.await.map_err(|_| StoreError::Gone)??;
        // The schema is up to date (the thread migrated it): turn texts queued for search
        // can be indexed.
        let indexer = pg::search::Indexer::spawn(indexer_cfg);
        Ok(Store {
            tx,
            location,
            _indexer: Some(std::sync::Arc::new(indexer)),
        })
    }

    /// Where the data lives: the SQLite file, or the PostgreSQL URL without its password.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// [`Store::with`] for a job written against the embedded engine's connection (tests
    /// of SQLite's own behaviour); on PostgreSQL it fails.
    #[cfg(test)]
    pub async fn call<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        self.with(move |db| match db {
            Db::Sqlite(c) => f(c),
            Db::Postgres(_) => Err(not_on_postgres()),
        })
        .await
    }

    /// Runs `f` on the store thread, on either engine, and returns its result once its
    /// writes are committed: a caller never acts on (or answers a client with) a write that
    /// a crash could still take back. When the batch's commit fails, the caller gets that
    /// error instead. A statement that fails on PostgreSQL is
    /// undone back to the job's start, so it does not abort the batch the job shares a
    /// transaction with.
    pub async fn with<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Db) -> StoreResult<T> + Send + 'static,
    {
        let (otx, orx) = oneshot::channel();
        self.tx
            .send(Box::new(move |conn| {
                let out = conn.job(f);
                after_commit(move || {
                    let out = match out {
                        Ok(_) if !committed() => Err(StoreError::Other(
                            "the database could not commit this write".into(),
                        )),
                        out => out,
                    };
                    let _ = otx.send(out);
                });
            }))
            .map_err(|_| StoreError::Gone)?;
        orx.await.map_err(|_| StoreError::Gone)?
    }

    /// Queues `f` without waiting, on either engine; failures are logged. Ordered with
    /// every other job.
    pub fn queue<F>(&self, what: &'static str, f: F)
    where
        F: FnOnce(&mut Db) -> StoreResult<()> + Send + 'static,
    {
        let job: Job = Box::new(move |conn| {
            if let Err(e) = conn.job(f) {
                tracing::error!(error = %e, job = what, "store write failed");
                crate::metrics::store_write_failed();
            }
        });
        if self.tx.send(job).is_err() {
            tracing::error!(job = what, "store thread gone; write dropped");
        }
    }

    /// Waits until every job queued before this call has run, been committed, and had its
    /// [`after_commit`] actions run (events queued before are on their live streams).
    pub async fn flush(&self) {
        // A call answers from its own after-commit action, which runs after those of every
        // job queued before it.
        let _ = self.with(|_| Ok(())).await;
    }
}

#[cfg(test)]
fn not_on_postgres() -> StoreError {
    StoreError::Other("this job is written for the embedded SQLite engine only".into())
}

impl Conn {
    /// Runs one job's `f` on this connection.
    fn job<T>(&mut self, f: impl FnOnce(&mut Db) -> StoreResult<T>) -> StoreResult<T> {
        match self {
            Conn::Sqlite(c) => f(&mut Db::Sqlite(c)),
            Conn::Postgres(p) => p.job(|p| f(&mut Db::Postgres(p))),
        }
    }

    /// Begins a batch transaction; `false` if it could not.
    fn begin(&mut self) -> bool {
        match self {
            Conn::Sqlite(c) => exec(c, "BEGIN IMMEDIATE").is_ok(),
            Conn::Postgres(p) => {
                if let Err(e) = p.reconnect_if_closed() {
                    tracing::error!(error = %e, "cannot reconnect to PostgreSQL");
                    return false;
                }
                p.begin().is_ok()
            }
        }
    }

    /// Whether the batch transaction is still open (SQLite rolls one back by itself on
    /// some errors; a PostgreSQL connection can be lost).
    fn in_transaction(&self) -> bool {
        match self {
            Conn::Sqlite(c) => !c.is_autocommit(),
            Conn::Postgres(p) => p.in_transaction(),
        }
    }

    fn commit(&mut self) -> StoreResult<()> {
        match self {
            Conn::Sqlite(c) => exec(c, "COMMIT").map(|_| ()).map_err(Into::into),
            Conn::Postgres(p) => p.commit(),
        }
    }

    fn rollback(&mut self) {
        let _ = match self {
            Conn::Sqlite(c) => exec(c, "ROLLBACK").map(|_| ()).map_err(Into::into),
            Conn::Postgres(p) => p.rollback(),
        };
    }
}

/// The database and its WAL files are readable by the owner only.
fn restrict(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600));
    }
}

thread_local! {
    /// Actions the current job asked to run once its writes are committed.
    static AFTER_COMMIT: std::cell::RefCell<Vec<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// Whether the writes of the job whose [`after_commit`] action is running were lost: its
    /// transaction failed to commit or was rolled back by SQLite.
    static COMMIT_FAILED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// From inside a store job: runs `f` on the store thread once the job's writes are
/// committed (after the batch's `COMMIT`), in the order the jobs asked. Used to hand
/// events to live streams only when they are durable; `f` calls [`committed`] to learn
/// whether they are.
pub fn after_commit(f: impl FnOnce() + 'static) {
    AFTER_COMMIT.with(|a| a.borrow_mut().push(Box::new(f)));
}

/// From inside an [`after_commit`] action: whether the transaction that held its job's
/// writes committed. `false` when SQLite refused the commit or rolled the transaction back
/// (a full disk, an I/O error): the job's writes are gone even if every statement of the job
/// itself succeeded.
pub fn committed() -> bool {
    !COMMIT_FAILED.get()
}

/// The after-commit actions of a batch, each with whether its transaction committed.
#[derive(Default)]
struct Settled(Vec<(Box<dyn FnOnce()>, bool)>);

impl Settled {
    /// Settles the actions the jobs since the last call asked for.
    fn take(&mut self, committed: bool) {
        let actions = AFTER_COMMIT.with(|a| std::mem::take(&mut *a.borrow_mut()));
        self.0.extend(actions.into_iter().map(|f| (f, committed)));
    }

    fn run(self) {
        for (f, ok) in self.0 {
            COMMIT_FAILED.set(!ok);
            f();
        }
        COMMIT_FAILED.set(false);
    }
}

/// Runs jobs in batches: one transaction per batch, then each job's after-commit actions
/// with the fate of the transaction that held its writes.
///
/// SQLite rolls a whole transaction back by itself on some errors (`SQLITE_FULL` and
/// `SQLITE_IOERR` from a single-row write, for instance), after which later statements
/// would run in autocommit mode. Such a rollback is noticed after the job that caused it:
/// the jobs of the batch so far are settled as lost, and the rest of the batch gets a new
/// transaction, so no job is reported lost whose writes were committed, and none reported
/// committed whose writes were rolled back.
fn run(mut conn: Conn, rx: mpsc::Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        let mut in_tx = batch.len() > 1 && conn.begin();
        let mut settled = Settled::default();
        for job in batch {
            job(&mut conn);
            if in_tx && !conn.in_transaction() {
                tracing::error!("the database rolled back a batch of writes");
                crate::metrics::store_write_failed();
                settled.take(false);
                in_tx = conn.begin();
            } else if !in_tx {
                // Outside a batch transaction a job commits its own writes; it tells its
                // actions itself whether they failed.
                settled.take(true);
            }
        }
        let mut ok = true;
        if in_tx {
            if let Err(e) = conn.commit() {
                tracing::error!(error = %e, "store commit failed");
                crate::metrics::store_write_failed();
                conn.rollback();
                ok = false;
            }
        }
        settled.take(ok);
        settled.run();
    }
}

/// Fixtures for the tests of every module that needs a real store.
#[cfg(test)]
pub mod test_support {
    use super::Store;
    use tempfile::TempDir;

    /// A store on a fresh database file in a private temporary folder, removed when the
    /// returned folder is dropped.
    pub fn temp_store(label: &str) -> (Store, TempDir) {
        let dir = tempfile::Builder::new()
            .prefix(&format!("vis-{label}-"))
            .tempdir()
            .expect("mkdir");
        let store = Store::open(&dir.path().join("db.sqlite")).expect("store");
        (store, dir)
    }

    /// A PostgreSQL schema of a test's own, dropped with this guard.
    pub struct PgSchema(String);

    impl PgSchema {
        pub fn new(schema: String) -> PgSchema {
            PgSchema(schema)
        }

        pub fn name(&self) -> &str {
            &self.0
        }
    }

    impl Drop for PgSchema {
        fn drop(&mut self) {
            vis_store::testing::drop_schema(std::mem::take(&mut self.0));
        }
    }

    /// A store on the machine's PostgreSQL in a fresh schema; `None` (after a note) when
    /// the server does not answer and `CI` is not set.
    pub async fn temp_pg_store(label: &str) -> Option<(Store, PgSchema)> {
        temp_pg_node(label, None).await
    }

    /// [`temp_pg_store`] for a node of a cluster: event writes fenced with `fence`.
    pub async fn temp_pg_node(
        label: &str,
        fence: Option<vis_store::Writer>,
    ) -> Option<(Store, PgSchema)> {
        use vis_store::testing::{pg_addr, pg_url, reachable};
        if !reachable("PostgreSQL", &pg_addr()) {
            return None;
        }
        let schema = format!("vis_gw_{label}_{}", uuid::Uuid::new_v4().simple());
        let opts = vis_store::PgOptions::new(pg_url()).with_schema(schema.clone());
        let guard = PgSchema::new(schema);
        let store = Store::open_postgres(&opts, String::new(), fence)
            .await
            .expect("store on PostgreSQL");
        Some((store, guard))
    }

    /// What keeps a test's database alive (held for its `Drop`): a folder or a schema.
    #[allow(dead_code)]
    pub enum Keep {
        Dir(TempDir),
        Schema(PgSchema),
    }

    /// A fresh store on each engine (SQLite always; PostgreSQL when it answers, see
    /// [`temp_pg_store`]), each with what keeps its database.
    pub async fn each_engine(label: &str) -> Vec<(Store, Keep)> {
        let (sqlite, dir) = temp_store(label);
        let mut out = vec![(sqlite, Keep::Dir(dir))];
        if let Some((pg, schema)) = temp_pg_store(label).await {
            out.push((pg, Keep::Schema(schema)));
        }
        out
    }

    /// Queues a job that holds the store thread; returns once it is running, with the sender
    /// that releases it (send to it, or drop it).
    pub fn hold(store: &Store) -> std::sync::mpsc::Sender<()> {
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        store.queue("hold", move |_| {
            let _ = started_tx.send(());
            let _ = rx.recv();
            Ok(())
        });
        started_rx.recv().expect("the hold job runs");
        tx
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{hold, temp_store};
    use super::*;
    use db::atomically;

    fn table() -> Connection {
        let c = Connection::open_in_memory().expect("open");
        c.execute_batch("CREATE TABLE t (x INTEGER PRIMARY KEY)")
            .expect("create");
        c
    }

    fn count(c: &Connection) -> i64 {
        c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .expect("count")
    }

    fn two_inserts(c: &Connection, second: i64) -> StoreResult<()> {
        c.execute("INSERT INTO t (x) VALUES (1)", [])?;
        c.execute("INSERT INTO t (x) VALUES (?1)", [second])?;
        Ok(())
    }

    #[test]
    fn an_atomic_job_commits_all_its_statements_alone_and_inside_a_batch() {
        let c = table();
        atomically(&c, |c| two_inserts(c, 2)).expect("alone");
        assert!(c.is_autocommit(), "the savepoint is released");
        assert_eq!(count(&c), 2);
        c.execute_batch("BEGIN IMMEDIATE").expect("begin");
        atomically(&c, |c| {
            c.execute("INSERT INTO t (x) VALUES (3)", [])?;
            Ok(())
        })
        .expect("nested");
        assert!(!c.is_autocommit(), "the batch transaction stays open");
        c.execute_batch("COMMIT").expect("commit");
        assert_eq!(count(&c), 3);
    }

    #[test]
    fn a_failing_atomic_job_leaves_none_of_its_writes_and_keeps_the_batch_going() {
        let c = table();
        c.execute_batch("BEGIN IMMEDIATE").expect("begin");
        c.execute("INSERT INTO t (x) VALUES (10)", [])
            .expect("earlier job");
        // The second insert repeats the key of the first: the job fails half way.
        assert!(atomically(&c, |c| two_inserts(c, 1)).is_err());
        c.execute_batch("COMMIT").expect("commit");
        let xs: Vec<i64> = c
            .prepare("SELECT x FROM t ORDER BY x")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(
            xs,
            vec![10],
            "the earlier job's write stays, the failed job's is gone"
        );
        assert!(atomically(&c, |c| two_inserts(c, 1)).is_err());
        assert!(
            c.is_autocommit(),
            "no transaction is left open after a failure"
        );
        assert_eq!(count(&c), 1);
    }

    #[test]
    fn an_atomic_job_whose_commit_fails_leaves_no_transaction_open() {
        let c = Connection::open_in_memory().expect("open");
        c.execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TABLE p (id INTEGER PRIMARY KEY);
             CREATE TABLE k (p INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .expect("schema");
        // The deferred foreign key is checked at commit, which is this savepoint's RELEASE.
        let out = atomically(&c, |c| {
            c.execute("INSERT INTO k (p) VALUES (7)", [])?;
            Ok(())
        });
        assert!(out.is_err(), "the commit fails");
        assert!(c.is_autocommit(), "no transaction is left open");
        let n: i64 = c
            .query_row("SELECT COUNT(*) FROM k", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 0);
        atomically(&c, |c| {
            c.execute("INSERT INTO p (id) VALUES (7)", [])?;
            c.execute("INSERT INTO k (p) VALUES (7)", [])?;
            Ok(())
        })
        .expect("a later job commits");
    }

    /// Queues a job for the embedded engine without waiting.
    fn submit(
        store: &Store,
        what: &'static str,
        f: impl FnOnce(&Connection) -> StoreResult<()> + Send + 'static,
    ) {
        store.queue(what, move |db| match db {
            Db::Sqlite(c) => f(c),
            Db::Postgres(_) => Err(not_on_postgres()),
        })
    }

    /// Runs statements without parameters on PostgreSQL.
    async fn pg_batch(store: &Store, sql: &'static str) -> StoreResult<()> {
        store
            .with(move |db| match db {
                Db::Postgres(p) => p.batch(sql),
                Db::Sqlite(_) => Err(StoreError::Other("a PostgreSQL store".into())),
            })
            .await
    }

    #[test]
    fn on_postgres_a_failing_job_in_a_batch_loses_only_its_own_writes() {
        rt().block_on(async {
            let Some((store, _schema)) = super::test_support::temp_pg_store("batch").await else {
                return;
            };
            pg_batch(&store, "CREATE TABLE t (x BIGINT PRIMARY KEY)")
                .await
                .expect("schema");
            let insert = |x: i64| {
                move |db: &mut Db| -> StoreResult<()> {
                    match db {
                        Db::Postgres(p) => p.execute("INSERT INTO t (x) VALUES ($1)", &[&x])?,
                        Db::Sqlite(_) => unreachable!("a PostgreSQL store"),
                    };
                    Ok(())
                }
            };
            let held = hold(&store);
            // Three jobs in one batch transaction: the middle one writes, then repeats the
            // key of the first job (PostgreSQL would abort the whole transaction here).
            let mut before = Box::pin(store.with(insert(1)));
            queue(&mut before).await;
            let mut failing = Box::pin(store.with(move |db| {
                insert(2)(db)?;
                insert(1)(db)
            }));
            queue(&mut failing).await;
            let mut after = Box::pin(store.with(insert(3)));
            queue(&mut after).await;
            let _ = held.send(());
            assert!(before.await.is_ok());
            assert!(
                matches!(failing.await, Err(StoreError::Postgres { ref code, .. }) if code.as_deref() == Some("23505")),
                "the duplicate key is reported with its SQLSTATE"
            );
            assert!(after.await.is_ok(), "a later job of the batch commits");
            let xs: Vec<i64> = store
                .with(|db| db.column("SELECT x FROM t ORDER BY x", &[]))
                .await
                .expect("rows");
            assert_eq!(xs, vec![1, 3], "the failed job's first write is gone too");
        });
    }

    #[test]
    fn on_postgres_a_job_goes_on_after_its_failed_atomic_unit_and_keeps_only_its_later_write() {
        rt().block_on(async {
            let Some((store, _schema)) = super::test_support::temp_pg_store("unit").await else {
                return;
            };
            pg_batch(&store, "CREATE TABLE t (x BIGINT PRIMARY KEY)")
                .await
                .expect("schema");
            let insert = |db: &mut Db, x: i64| -> StoreResult<()> {
                db.exec("INSERT INTO t (x) VALUES (?1)", &[&x])?;
                Ok(())
            };
            let held = hold(&store);
            let mut first = Box::pin(store.with(move |db| insert(db, 1)));
            queue(&mut first).await;
            // As the bus does: the event's unit fails, the job then records what it can.
            let mut job = Box::pin(store.with(move |db| {
                let unit = db.atomically(|db| {
                    insert(db, 5)?;
                    insert(db, 5)
                });
                insert(db, 6)?;
                Ok(unit.is_err())
            }));
            queue(&mut job).await;
            let _ = held.send(());
            first.await.expect("the earlier job");
            assert_eq!(
                job.await.ok(),
                Some(true),
                "the unit failed, the job did not"
            );
            let xs: Vec<i64> = store
                .with(|db| db.column("SELECT x FROM t ORDER BY x", &[]))
                .await
                .expect("rows");
            assert_eq!(xs, vec![1, 6], "the failed unit left nothing");
        });
    }

    #[test]
    fn on_postgres_a_second_node_opening_the_same_schema_applies_no_migration_twice() {
        use vis_store::testing::{pg_addr, pg_url, reachable};
        if !reachable("PostgreSQL", &pg_addr()) {
            return;
        }
        rt().block_on(async {
            let schema = format!("vis_gw_reopen_{}", uuid::Uuid::new_v4().simple());
            let _guard = test_support::PgSchema::new(schema.clone());
            let opts = vis_store::PgOptions::new(pg_url()).with_schema(schema);
            // Two nodes start together on an empty schema.
            let (a, b) = tokio::join!(
                Store::open_postgres(&opts, String::new(), None),
                Store::open_postgres(&opts, String::new(), None)
            );
            let (a, b) = (a.expect("first node"), b.expect("second node"));
            async fn versions(store: &Store) -> StoreResult<Vec<i32>> {
                store
                    .with(|db| {
                        db.column(
                            "SELECT version FROM vis_gateway_migrations ORDER BY version",
                            &[],
                        )
                    })
                    .await
            }
            let want: Vec<i32> = (1..=pg::MIGRATIONS.len() as i32).collect();
            assert_eq!(versions(&a).await.expect("versions"), want);
            assert_eq!(versions(&b).await.expect("versions"), want);
        });
    }

    /// Polls a `call` once, which queues its job (a call sends its job when first polled).
    async fn queue<F: std::future::Future + Unpin>(fut: &mut F) {
        std::future::poll_fn(|cx| {
            let _ = std::pin::Pin::new(&mut *fut).poll(cx);
            std::task::Poll::Ready(())
        })
        .await
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    }

    #[test]
    fn a_call_is_answered_only_once_its_batch_is_committed() {
        let (store, _dir) = temp_store("store");
        rt().block_on(async {
            store
                .call(|c| Ok(c.execute_batch("CREATE TABLE t (x INTEGER)")?))
                .await
                .expect("schema");
            let first = hold(&store);
            // Queued while the thread is held, so both land in the next batch: the write,
            // then a job that holds the batch open before its COMMIT.
            let mut write = Box::pin(store.call(|c| {
                c.execute("INSERT INTO t (x) VALUES (1)", [])?;
                Ok(())
            }));
            queue(&mut write).await;
            let (second_tx, second_rx) = std::sync::mpsc::channel::<()>();
            submit(&store, "hold the batch", move |_| {
                let _ = second_rx.recv();
                Ok(())
            });
            let _ = first.send(());
            let early = tokio::time::timeout(std::time::Duration::from_millis(200), &mut write);
            assert!(
                early.await.is_err(),
                "no answer while the batch holding the write is not committed"
            );
            let _ = second_tx.send(());
            write.await.expect("answered after the commit");
            let n: i64 = store
                .call(|c| Ok(c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))?))
                .await
                .expect("count");
            assert_eq!(n, 1);
        });
    }

    #[test]
    fn a_call_whose_batch_fails_to_commit_gets_an_error_and_its_write_is_gone() {
        let (store, _dir) = temp_store("store");
        rt().block_on(async {
            store
                .call(|c| {
                    Ok(c.execute_batch(
                        "CREATE TABLE p (id INTEGER PRIMARY KEY);
                         CREATE TABLE k (p INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED);",
                    )?)
                })
                .await
                .expect("schema");
            let held = hold(&store);
            let mut write = Box::pin(store.call(|c| {
                c.execute("INSERT INTO p (id) VALUES (1)", [])?;
                Ok(())
            }));
            queue(&mut write).await;
            // A later job of the same batch breaks a deferred foreign key: COMMIT fails.
            submit(&store, "dangling reference", |c| {
                c.execute("INSERT INTO k (p) VALUES (99)", [])?;
                Ok(())
            });
            let _ = held.send(());
            let out = write.await;
            assert!(
                matches!(&out, Err(StoreError::Other(m)) if m.contains("could not commit")),
                "{out:?}"
            );
            let n: i64 = store
                .call(|c| Ok(c.query_row("SELECT COUNT(*) FROM p", [], |r| r.get(0))?))
                .await
                .expect("count");
            assert_eq!(n, 0, "the answered-with-error write was rolled back");
        });
    }

    #[test]
    fn a_batch_sqlite_rolls_back_mid_way_answers_each_job_as_the_database_ended_up() {
        let (store, _dir) = temp_store("store");
        rt().block_on(async {
            store
                .call(|c| Ok(c.execute_batch("CREATE TABLE t (x INTEGER PRIMARY KEY, b BLOB)")?))
                .await
                .expect("schema");
            // SQLite's own size limit: a write needing a new page fails with SQLITE_FULL.
            store
                .call(|c| {
                    let n: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
                    c.query_row(&format!("PRAGMA max_page_count = {n}"), [], |r| {
                        r.get::<_, i64>(0)
                    })?;
                    Ok(())
                })
                .await
                .expect("cap");
            let held = hold(&store);
            let small = |x: i64| {
                move |c: &Connection| -> StoreResult<()> {
                    c.execute("INSERT INTO t (x) VALUES (?1)", [x])?;
                    Ok(())
                }
            };
            let mut before = Box::pin(store.call(small(1)));
            queue(&mut before).await;
            submit(&store, "too big", |c| {
                c.execute("INSERT INTO t (x, b) VALUES (2, zeroblob(65536))", [])?;
                Ok(())
            });
            let mut after = Box::pin(store.call(small(3)));
            queue(&mut after).await;
            let _ = held.send(());
            let (before, after) = (before.await, after.await);
            let xs: Vec<i64> = store
                .call(|c| {
                    let mut st = c.prepare("SELECT x FROM t ORDER BY x")?;
                    let xs = st
                        .query_map([], |r| r.get(0))?
                        .collect::<Result<Vec<i64>, _>>()?;
                    Ok(xs)
                })
                .await
                .expect("read");
            assert!(!xs.contains(&2), "{xs:?}");
            // Each answer tells the truth about its own write.
            assert_eq!(before.is_ok(), xs.contains(&1), "{before:?} {xs:?}");
            assert_eq!(after.is_ok(), xs.contains(&3), "{after:?} {xs:?}");
            assert!(after.is_ok(), "a job after the failure commits: {after:?}");
        });
    }
}
