//! One statement for both engines: where SQLite and PostgreSQL accept the same text
//! (upserts with `ON CONFLICT … DO UPDATE`, `RETURNING`, plain selects), an operation is
//! written once with `?1`, `?2`, … placeholders and runs on either engine through
//! [`Db::exec`], [`Db::rows`] and [`Db::row`]. What only one engine says (`MAX(a, b)` against
//! `GREATEST`, `rowid`, jsonb operators, FTS5) has both texts side by side, chosen by
//! [`Db::pick`].

use super::db::Db;
use super::error::StoreResult;

/// A value both engines can bind.
pub trait Param: rusqlite::ToSql + tokio_postgres::types::ToSql + Sync {}
impl<T: rusqlite::ToSql + tokio_postgres::types::ToSql + Sync + ?Sized> Param for T {}

/// A value both engines can bind, owned, so a write can wait to go out (see
/// [`Db::write_alone`]).
pub trait OwnedParam: Param + Send {}
impl<T: Param + Send> OwnedParam for T {}

/// Owned arguments as the borrowed ones a statement takes.
pub fn borrowed(args: &[Box<dyn OwnedParam>]) -> Vec<&dyn Param> {
    args.iter().map(|a| a.as_ref() as &dyn Param).collect()
}

/// A value both engines can read from a column.
pub trait Column: rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a> {}
impl<T: rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a>> Column for T {}

/// A result row of either engine.
pub enum AnyRow<'r, 's> {
    Sqlite(&'r rusqlite::Row<'s>),
    Postgres(&'r tokio_postgres::Row),
}

impl AnyRow<'_, '_> {
    /// Column `i`, typed; a type mismatch is an error, not a panic.
    pub fn get<T: Column>(&self, i: usize) -> StoreResult<T> {
        match self {
            AnyRow::Sqlite(r) => Ok(r.get(i)?),
            AnyRow::Postgres(r) => Ok(r.try_get(i)?),
        }
    }
}

pub(super) fn pg_args<'a>(
    args: &'a [&'a dyn Param],
) -> Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)> {
    args.iter()
        .map(|a| *a as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect()
}

fn sqlite_args<'a>(args: &'a [&'a dyn Param]) -> impl rusqlite::Params + 'a {
    rusqlite::params_from_iter(args.iter().map(|a| *a as &dyn rusqlite::ToSql))
}

impl Db<'_> {
    /// Runs one statement; answers how many rows it changed.
    pub fn exec(&mut self, sql: &'static str, args: &[&dyn Param]) -> StoreResult<u64> {
        match self {
            Db::Sqlite(c) => Ok(c.prepare_cached(sql)?.execute(sqlite_args(args))? as u64),
            Db::Postgres(p) => p.execute(sql, &pg_args(args)),
        }
    }

    /// Runs statements in order; answers each one's changed rows. On PostgreSQL they go
    /// out together, in one round trip.
    pub fn exec_all(&mut self, stmts: &[(&'static str, &[&dyn Param])]) -> StoreResult<Vec<u64>> {
        let Db::Postgres(p) = self else {
            return stmts
                .iter()
                .map(|(sql, args)| self.exec(sql, args))
                .collect();
        };
        let args: Vec<_> = stmts.iter().map(|(_, a)| pg_args(a)).collect();
        let with: Vec<(&'static str, &[&(dyn tokio_postgres::types::ToSql + Sync)])> = stmts
            .iter()
            .zip(&args)
            .map(|((sql, _), a)| (*sql, a.as_slice()))
            .collect();
        p.execute_all(&with)
    }

    /// The job's only write. On PostgreSQL, inside a batch, it may wait on the connection
    /// and go out together with the batch's other waiting writes (`pg/events.rs`), in one
    /// round trip; a failure is then recorded there (`what` names the job), not answered.
    /// Elsewhere it runs at once, like [`Db::exec`].
    pub fn write_alone(
        &mut self,
        what: &'static str,
        sql: &'static str,
        args: Vec<Box<dyn OwnedParam>>,
    ) -> StoreResult<()> {
        match self {
            Db::Postgres(p) => p.write_alone(what, sql, args),
            Db::Sqlite(_) => self.exec(sql, &borrowed(&args)).map(|_| ()),
        }
    }

    /// Runs `f`, whose statements neither read the journal nor a session's seq high-water,
    /// and write nothing that depends on the order of the batch's events (the hot path of a
    /// turn: its record, its session's row, an event with its high-water). On PostgreSQL the
    /// events waiting to go out together (`pg/events.rs`) may wait past them.
    pub fn beside_events<T>(&mut self, f: impl FnOnce(&mut Db) -> T) -> T {
        match self {
            Db::Postgres(p) => p.beside_events(|p| f(&mut Db::Postgres(p))),
            Db::Sqlite(_) => f(self),
        }
    }

    /// Every row of a query, each read by `f`.
    pub fn rows<T>(
        &mut self,
        sql: &'static str,
        args: &[&dyn Param],
        mut f: impl FnMut(&AnyRow) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        let mut out = Vec::new();
        self.scan(sql, args, |r| {
            out.push(f(r)?);
            Ok(true)
        })?;
        Ok(out)
    }

    /// Reads a query's rows in order until `f` answers `false`: SQLite steps no further
    /// (a page cut at its byte limit reads no more rows); PostgreSQL's were all received.
    pub fn scan(
        &mut self,
        sql: &'static str,
        args: &[&dyn Param],
        mut f: impl FnMut(&AnyRow) -> StoreResult<bool>,
    ) -> StoreResult<()> {
        match self {
            Db::Sqlite(c) => {
                let mut st = c.prepare_cached(sql)?;
                let mut rows = st.query(sqlite_args(args))?;
                while let Some(r) = rows.next()? {
                    if !f(&AnyRow::Sqlite(r))? {
                        break;
                    }
                }
                Ok(())
            }
            Db::Postgres(p) => {
                for r in p.query(sql, &pg_args(args))? {
                    if !f(&AnyRow::Postgres(&r))? {
                        break;
                    }
                }
                Ok(())
            }
        }
    }

    /// The first row of a query, if any, read by `f` (on both engines the rest are not
    /// read).
    pub fn row<T>(
        &mut self,
        sql: &'static str,
        args: &[&dyn Param],
        f: impl FnOnce(&AnyRow) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        let (mut f, mut out) = (Some(f), None);
        self.scan(sql, args, |r| {
            if let Some(f) = f.take() {
                out = Some(f(r)?);
            }
            Ok(false)
        })?;
        Ok(out)
    }

    /// The first column of every row.
    pub fn column<T: Column>(
        &mut self,
        sql: &'static str,
        args: &[&dyn Param],
    ) -> StoreResult<Vec<T>> {
        self.rows(sql, args, |r| r.get(0))
    }

    /// The first column of the first row, if any.
    pub fn value<T: Column>(
        &mut self,
        sql: &'static str,
        args: &[&dyn Param],
    ) -> StoreResult<Option<T>> {
        self.row(sql, args, |r| r.get(0))
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::each_engine;

    #[tokio::test]
    async fn one_statement_text_writes_and_reads_alike_on_either_engine() {
        for (store, _keep) in each_engine("sql").await {
            let got = store
                .with(|db| {
                    db.exec(
                        "INSERT INTO gateway_settings (key, value) VALUES (?1, ?2) \
                         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        &[&"k", &"one"],
                    )?;
                    db.exec(
                        "INSERT INTO gateway_settings (key, value) VALUES (?1, ?2) \
                         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        &[&"k", &"two"],
                    )?;
                    let all: Vec<String> =
                        db.column("SELECT value FROM gateway_settings WHERE key = ?1", &[&"k"])?;
                    let none: Option<String> =
                        db.value("SELECT value FROM gateway_settings WHERE key = ?1", &[&"x"])?;
                    Ok((all, none))
                })
                .await
                .expect("statements");
            assert_eq!(got, (vec!["two".to_string()], None));
        }
    }
}
