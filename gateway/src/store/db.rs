//! [`Db`]: what a store job works on, on either engine (docs/decisions.md, C3). The typed
//! operations of each area (`rows.rs` and its neighbours) take a `&mut Db`; `sql.rs` runs
//! their statements on either connection.

use super::error::StoreResult;
use super::pg::PgConn;
use rusqlite::Connection;

/// A store job's view of the database: the embedded SQLite connection or the PostgreSQL
/// one, both owned by the store thread.
pub enum Db<'a> {
    Sqlite(&'a Connection),
    Postgres(&'a mut PgConn),
}

impl Db<'_> {
    /// The statement text of this engine, where the two dialects differ.
    pub fn pick(&self, sqlite: &'static str, postgres: &'static str) -> &'static str {
        match self {
            Db::Sqlite(_) => sqlite,
            Db::Postgres(_) => postgres,
        }
    }

    /// The node identity event writes are fenced with (a cluster node on PostgreSQL).
    pub fn fence(&self) -> Option<&vis_store::Writer> {
        match self {
            Db::Sqlite(_) => None,
            Db::Postgres(p) => p.fence(),
        }
    }

    /// Brings the search index up to date with every committed turn: on PostgreSQL turn
    /// texts are indexed off the write path (`pg/search.rs`); SQLite's triggers index them
    /// as they are written.
    pub fn index_search(&mut self) -> StoreResult<()> {
        match self {
            Db::Sqlite(_) => Ok(()),
            Db::Postgres(p) => p.index_search(),
        }
    }

    /// Runs `f` as one unit: its statements commit together or not at all. Inside the store
    /// thread's batch transaction it is a savepoint, so a failing job leaves the batch's
    /// other jobs (and, on PostgreSQL, the transaction itself) intact.
    pub fn atomically<T>(&mut self, f: impl FnOnce(&mut Db) -> StoreResult<T>) -> StoreResult<T> {
        match self {
            Db::Sqlite(c) => atomically(c, |c| f(&mut Db::Sqlite(c))),
            Db::Postgres(p) => p.atomically(|p| f(&mut Db::Postgres(p))),
        }
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
pub(super) fn exec(c: &Connection, sql: &str) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute([])
}

/// Whether an event's write went in. Known when its job ran, or, for an event whose write
/// PostgreSQL batches with others (`pg/events.rs`), once the batch's events are sent, which
/// is before the batch commits: an after-commit action always reads the final answer. Lives
/// on the store thread only.
#[derive(Clone)]
pub struct Written(std::rc::Rc<std::cell::Cell<bool>>);

impl Written {
    pub fn new(written: bool) -> Written {
        Written(std::rc::Rc::new(std::cell::Cell::new(written)))
    }

    pub fn set(&self, written: bool) {
        self.0.set(written);
    }

    pub fn get(&self) -> bool {
        self.0.get()
    }
}
