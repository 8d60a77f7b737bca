//! [`Journal`]: one typed API over the two engines.

use crate::pending::Pending;
use crate::pg::{ops, Pg, PgOptions};
use crate::sqlite::{sql, Sqlite};
use crate::types::{Appended, CommitSink, EgressRecord, Home, Keep, Range, Writer};
use crate::{Engine, Leases, StoreError, StoreResult};
use serde::Serialize;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// How a journal keeps and hands on its events.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// Journal rows kept per session; older ones are trimmed (a reader after them is told
    /// how far: [`Range::trimmed_through`]).
    pub retain: i64,
    /// Where committed events go (the NATS publisher), in commit order.
    pub commits: Option<CommitSink>,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            retain: 10_000,
            commits: None,
        }
    }
}

#[derive(Clone)]
pub(crate) enum Inner {
    Sqlite(Sqlite),
    Postgres(Pg),
}

/// A session event journal on SQLite or PostgreSQL. Cheap to clone.
#[derive(Clone)]
pub struct Journal {
    pub(crate) inner: Inner,
}

/// An append on its way: resolves once its transaction has committed (or with why not).
/// The append is queued when [`Journal::append`] returns, so appends made one after the
/// other get their seqs in that order whether or not their futures are awaited in between.
pub struct Appending(oneshot::Receiver<StoreResult<Appended>>);

impl Future for Appending {
    type Output = StoreResult<Appended>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(StoreError::Gone)))
    }
}

/// Runs one read or write on whichever engine the journal has.
macro_rules! on_engine {
    ($self:ident, $c:ident => sqlite $sq:expr, postgres $pg:expr) => {
        match &$self.inner {
            Inner::Sqlite(s) => s.call(move |$c| $sq).await,
            Inner::Postgres(p) => {
                #[allow(unused_mut)]
                let mut $c = p.client().await?;
                $pg
            }
        }
    };
}
pub(crate) use on_engine;

impl Journal {
    /// The embedded engine on the database file at `path` (opened and migrated on the
    /// engine's own thread).
    pub async fn open_sqlite(path: &Path, opts: JournalOptions) -> StoreResult<Journal> {
        Ok(Journal {
            inner: Inner::Sqlite(Sqlite::open(path, opts.retain, opts.commits).await?),
        })
    }

    /// The PostgreSQL engine (migrations applied); call from inside a tokio runtime.
    pub async fn open_postgres(pg: &PgOptions, opts: JournalOptions) -> StoreResult<Journal> {
        Ok(Journal {
            inner: Inner::Postgres(Pg::open(pg, opts.retain, opts.commits).await?),
        })
    }

    pub fn engine(&self) -> Engine {
        match self.inner {
            Inner::Sqlite(_) => Engine::Sqlite,
            Inner::Postgres(_) => Engine::Postgres,
        }
    }

    /// Appends one event of type `kind` to session `sid` as `writer`. Its seq is assigned in
    /// the transaction that stores it, which also checks that the session is homed on
    /// `writer` ([`StoreError::Fenced`] otherwise); its envelope (`vis_events::Envelope`
    /// with `payload`'s members) is serialized once, with that seq.
    pub fn append<P: Serialize + Send + 'static>(
        &self,
        writer: &Writer,
        sid: &str,
        kind: &str,
        payload: P,
        keep: Keep,
    ) -> Appending {
        let (pending, rx) = Pending::new(writer, sid, kind, payload, keep);
        match &self.inner {
            Inner::Sqlite(s) => s.append(pending),
            Inner::Postgres(p) => p.append(pending),
        }
        Appending(rx)
    }

    /// Creates a session homed on `writer` unless it exists; answers its home either way.
    pub async fn create_session(&self, writer: &Writer, sid: &str) -> StoreResult<Home> {
        let (w, s) = (writer.clone(), sid.to_string());
        on_engine!(self, c => sqlite sql::create_session(c, &w, &s),
            postgres ops::create_session(&c, &w, &s).await)
    }

    /// The session's home, `None` for an unknown session.
    pub async fn home(&self, sid: &str) -> StoreResult<Option<Home>> {
        let s = sid.to_string();
        on_engine!(self, c => sqlite sql::home(c, &s), postgres ops::home(&c, &s).await)
    }

    /// The last seq handed to an event of the session (committed), `None` if unknown.
    pub async fn high_water(&self, sid: &str) -> StoreResult<Option<i64>> {
        let s = sid.to_string();
        on_engine!(self, c => sqlite sql::high_water(c, &s), postgres ops::high_water(&c, &s).await)
    }

    /// Stored events with seq above `after`, oldest first, at most `limit`.
    pub async fn range(&self, sid: &str, after: i64, limit: usize) -> StoreResult<Range> {
        let s = sid.to_string();
        on_engine!(self, c => sqlite sql::range(c, &s, after, limit),
            postgres ops::range(&c, &s, after, limit).await)
    }

    /// Egress records with seq below `before` (all when `None`), newest first, at most `limit`.
    pub async fn egress_page(
        &self,
        sid: &str,
        before: Option<i64>,
        limit: usize,
    ) -> StoreResult<Vec<(i64, EgressRecord)>> {
        let s = sid.to_string();
        on_engine!(self, c => sqlite sql::egress_page(c, &s, before, limit),
            postgres ops::egress_page(&c, &s, before, limit).await)
    }

    /// The node leases kept in this journal's database.
    pub fn leases(&self) -> Leases {
        Leases::new(self.clone())
    }
}
