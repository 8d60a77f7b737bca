//! The SQLite store (docs/decisions.md, A3): one database file in WAL mode under the Vis home.
//!
//! All database work runs on ONE dedicated thread that owns the connection; async code sends
//! it closures. Jobs run in submission order, so a read queued after a write sees it — the
//! event bus relies on this for atomic replay. Pending jobs are applied in one transaction per
//! batch, which keeps the per-event write cost low.

pub(crate) mod migrations;
pub mod rows;

use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce(&Connection) + Send>;

/// Handle to the store thread. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    tx: mpsc::Sender<Job>,
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("the store thread has stopped")]
    Gone,
    #[error("{0}")]
    Other(String),
}

impl StoreError {
    /// The write failed for want of room (`SQLITE_FULL`: the disk, or SQLite's own size cap).
    pub fn is_full(&self) -> bool {
        matches!(self, StoreError::Sql(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::DiskFull)
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

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
            .spawn(move || run(conn, rx))
            .map_err(|e| StoreError::Other(format!("cannot start the store thread: {e}")))?;
        Ok(Store {
            tx,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the store thread and returns its result once its writes are committed:
    /// a caller never acts on (or answers a client with) a write that a crash could still
    /// take back. When the batch's commit fails, the caller gets that error instead.
    pub async fn call<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let (otx, orx) = oneshot::channel();
        self.tx
            .send(Box::new(move |c| {
                let out = f(c);
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

    /// Queues `f` without waiting; failures are logged. Ordered with every other job.
    pub fn submit<F>(&self, what: &'static str, f: F)
    where
        F: FnOnce(&Connection) -> StoreResult<()> + Send + 'static,
    {
        let job: Job = Box::new(move |c| {
            if let Err(e) = f(c) {
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
        let _ = self.call(|_| Ok(())).await;
    }
}

/// Runs `f` as one unit: its statements commit together (one commit instead of one per
/// statement when the job runs alone) or not at all. Nests inside the batch transaction of
/// [`run`] (a savepoint), so it is correct in both places.
pub fn atomically<T>(
    c: &Connection,
    f: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    let outermost = c.is_autocommit();
    exec(c, "SAVEPOINT job")?;
    let out = f(c).and_then(|v| exec(c, "RELEASE job").map(|_| v).map_err(Into::into));
    if out.is_err() {
        // Undo the job's writes; if the savepoint was the transaction (its RELEASE is the
        // commit, which can fail), make sure no transaction is left open for later jobs.
        let _ = exec(c, "ROLLBACK TO job").and_then(|_| exec(c, "RELEASE job"));
        if outermost && !c.is_autocommit() {
            let _ = exec(c, "ROLLBACK");
        }
    }
    out
}

/// One statement without parameters, prepared once per connection (transaction control runs
/// for every store job; parsing it each time showed in profiles).
fn exec(c: &Connection, sql: &str) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute([])
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

fn begin(conn: &Connection) -> bool {
    exec(conn, "BEGIN IMMEDIATE").is_ok()
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
fn run(conn: Connection, rx: mpsc::Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        let mut in_tx = batch.len() > 1 && begin(&conn);
        let mut settled = Settled::default();
        for job in batch {
            job(&conn);
            if in_tx && conn.is_autocommit() {
                tracing::error!("the database rolled back a batch of writes");
                crate::metrics::store_write_failed();
                settled.take(false);
                in_tx = begin(&conn);
            } else if !in_tx {
                // Outside a batch transaction a job commits its own writes; it tells its
                // actions itself whether they failed.
                settled.take(true);
            }
        }
        let mut ok = true;
        if in_tx {
            if let Err(e) = exec(&conn, "COMMIT") {
                tracing::error!(error = %e, "store commit failed");
                crate::metrics::store_write_failed();
                let _ = exec(&conn, "ROLLBACK");
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

    /// Queues a job that holds the store thread; returns once it is running, with the sender
    /// that releases it (send to it, or drop it).
    pub fn hold(store: &Store) -> std::sync::mpsc::Sender<()> {
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        store.submit("hold", move |_| {
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
            store.submit("hold the batch", move |_| {
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
            store.submit("dangling reference", |c| {
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
            store.submit("too big", |c| {
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
