//! Fixtures: a fresh database per test on either engine (a SQLite file in a private folder,
//! or a PostgreSQL schema of its own, dropped afterwards) and a JetStream stream of its own.
//!
//! PostgreSQL and NATS are the machine's servers (127.0.0.1:5432, 127.0.0.1:4222; other
//! loopback addresses with `VIS_TEST_PG_ADDR` / `VIS_TEST_NATS_ADDR`). When one is
//! unreachable a test that needs it fails if `CI` is set, and otherwise prints why it is
//! skipped and returns.

#![allow(dead_code)]

use rand::Rng;
use std::path::PathBuf;
use std::time::Duration;
use vis_store::{Journal, JournalOptions, Lease, NodeId, PgOptions};

#[allow(unused_imports)]
pub use vis_store::testing::{nats_addr, nats_url, pg_addr, pg_url, reachable};

/// A short random lowercase suffix for schema, stream and subject names.
pub fn suffix() -> String {
    let mut rng = rand::thread_rng();
    (0..10)
        .map(|_| (b'a' + rng.gen_range(0..26)) as char)
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// One test's database. Every [`Db::journal`] is another handle (another connection, its
/// own writer) on the same database, like another node.
pub struct Db {
    pub kind: Kind,
    path: Option<PathBuf>,
    dir: Option<tempfile::TempDir>,
    schema: Option<String>,
}

impl Db {
    /// `None` (after a skip note) when the engine's server is unreachable outside CI.
    pub fn new(kind: Kind) -> Option<Db> {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::Builder::new()
                    .prefix("vis-store-")
                    .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
                    .expect("a temporary folder under target/");
                Some(Db {
                    kind,
                    path: Some(dir.path().join("store.sqlite")),
                    dir: Some(dir),
                    schema: None,
                })
            }
            Kind::Postgres => reachable("PostgreSQL", &pg_addr()).then(|| Db {
                kind,
                path: None,
                dir: None,
                schema: Some(format!("vis_test_{}", suffix())),
            }),
        }
    }

    pub fn pg_options(&self) -> Option<PgOptions> {
        self.schema
            .as_ref()
            .map(|s| PgOptions::new(pg_url()).with_schema(s.clone()))
    }

    pub async fn journal_with(&self, opts: JournalOptions) -> Journal {
        match (&self.path, self.pg_options()) {
            (Some(path), _) => Journal::open_sqlite(path, opts).await.expect("open SQLite"),
            (None, Some(pg)) => Journal::open_postgres(&pg, opts)
                .await
                .expect("open PostgreSQL"),
            (None, None) => unreachable!("a database is a file or a schema"),
        }
    }

    pub async fn journal(&self) -> Journal {
        self.journal_with(JournalOptions::default()).await
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let Some(schema) = self.schema.take() else {
            return;
        };
        vis_store::testing::drop_schema(schema);
    }
}

/// A node's lease for `ttl`.
pub async fn node(journal: &Journal, id: &str, ttl: Duration) -> Lease {
    journal
        .leases()
        .acquire(
            &NodeId::new(id),
            &format!("127.0.0.1:{}", 7000 + id.len()),
            ttl,
        )
        .await
        .expect("acquire a lease")
}

/// Waits (up to 5 s) until `id`'s lease shows as expired.
pub async fn until_expired(journal: &Journal, id: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let expired = journal.leases().expired().await.expect("expired leases");
        if expired.iter().any(|l| l.node.as_str() == id) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease of {id} never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs a check against a fresh database of each engine: `mod name { on_sqlite, on_postgres }`.
#[macro_export]
macro_rules! on_both_engines {
    ($($name:ident => $check:ident;)*) => {$(
        mod $name {
            use super::support::{Db, Kind};

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_sqlite() {
                if let Some(db) = Db::new(Kind::Sqlite) {
                    super::$check(&db).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_postgres() {
                if let Some(db) = Db::new(Kind::Postgres) {
                    super::$check(&db).await;
                }
            }
        }
    )*};
}
