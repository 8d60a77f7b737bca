//! The embedded engine: one SQLite database (WAL) owned by ONE dedicated thread. Async
//! callers send it jobs; pending appends are applied in one transaction per batch and each
//! is answered once that transaction has committed (durable before anyone acts on it).

pub(crate) mod sql;

use crate::pending::{Pending, Stamped};
use crate::types::CommitSink;
use crate::{StoreError, StoreResult};
use rusqlite::Connection;
use std::path::Path;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// Most jobs applied in one transaction.
const MAX_BATCH: usize = 1024;

enum Job {
    Append(Pending),
    /// Runs alone, outside any batch transaction (it opens its own when it writes).
    Call(Box<dyn FnOnce(&Connection) + Send>),
}

/// Handle to the SQLite thread. Cheap to clone; the thread ends when the last handle goes.
#[derive(Clone)]
pub(crate) struct Sqlite {
    tx: mpsc::Sender<Job>,
}

impl Sqlite {
    /// Starts the thread, which opens (creating if needed) the database and applies the
    /// migrations before it takes jobs; answers once that is done.
    pub async fn open(path: &Path, retain: i64, sink: Option<CommitSink>) -> StoreResult<Sqlite> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("vis-store-sqlite".into())
            .spawn(move || match connect(&path) {
                Ok(conn) => {
                    let _ = ready_tx.send(Ok(()));
                    run(conn, rx, retain.max(1), sink);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| StoreError::Database {
                engine: crate::Engine::Sqlite,
                message: format!("cannot start the store thread: {e}"),
            })?;
        ready_rx.await.map_err(|_| StoreError::Gone)??;
        Ok(Sqlite { tx })
    }

    pub fn append(&self, p: Pending) {
        if let Err(mpsc::SendError(Job::Append(p))) = self.tx.send(Job::Append(p)) {
            p.refuse(StoreError::Gone);
        }
    }

    /// Runs `f` on the store thread, after every job queued before it.
    pub async fn call<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let (otx, orx) = oneshot::channel();
        self.tx
            .send(Job::Call(Box::new(move |c| {
                let _ = otx.send(f(c));
            })))
            .map_err(|_| StoreError::Gone)?;
        orx.await.map_err(|_| StoreError::Gone)?
    }
}

fn connect(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    sql::migrate(&conn)?;
    Ok(conn)
}

fn exec(c: &Connection, sql: &str) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute([])
}

/// The appends of the open transaction, answered when it ends.
struct Open<'a> {
    conn: &'a Connection,
    sink: Option<&'a CommitSink>,
    stamped: Vec<Stamped>,
    in_tx: bool,
}

impl Open<'_> {
    fn begin(&mut self) {
        if !self.in_tx {
            self.in_tx = exec(self.conn, "BEGIN IMMEDIATE").is_ok();
        }
    }

    /// Commits the open transaction and answers its appends with its fate.
    fn commit(&mut self) {
        if !self.in_tx {
            // Appended in autocommit mode (no batch transaction could begin): each one's
            // savepoint release was its commit.
            self.settle(Ok(()));
            return;
        }
        self.in_tx = false;
        let outcome = exec(self.conn, "COMMIT").map(|_| ()).map_err(|e| {
            tracing::error!(error = %e, "journal commit failed");
            let _ = exec(self.conn, "ROLLBACK");
            StoreError::from(e)
        });
        self.settle(outcome);
    }

    fn settle(&mut self, outcome: Result<(), StoreError>) {
        for s in self.stamped.drain(..) {
            s.settle(outcome.clone(), self.sink);
        }
    }
}

/// SQLite rolls a whole transaction back by itself on some errors (`SQLITE_FULL`, some
/// `SQLITE_IOERR`): such a rollback is noticed after the append that caused it, the appends
/// of the transaction so far are answered as lost, and the batch goes on in a new one.
fn run(conn: Connection, rx: mpsc::Receiver<Job>, retain: i64, sink: Option<CommitSink>) {
    while let Ok(first) = rx.recv() {
        let mut open = Open {
            conn: &conn,
            sink: sink.as_ref(),
            stamped: Vec::new(),
            in_tx: false,
        };
        let mut next = Some(first);
        let mut n = 0;
        while let Some(job) = next.take() {
            n += 1;
            match job {
                Job::Append(p) => {
                    open.begin();
                    let stamped = sql::append(&conn, p, retain);
                    if open.in_tx && conn.is_autocommit() {
                        tracing::error!("the database rolled back a batch of appends");
                        open.in_tx = false;
                        let lost = StoreError::Database {
                            engine: crate::Engine::Sqlite,
                            message: "the database rolled the transaction back".into(),
                        };
                        open.settle(Err(lost.clone()));
                        if let Some(s) = stamped {
                            s.settle(Err(lost), None);
                        }
                    } else if let Some(s) = stamped {
                        open.stamped.push(s);
                    }
                }
                Job::Call(f) => {
                    open.commit();
                    f(&conn);
                }
            }
            if n < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        open.commit();
    }
}
