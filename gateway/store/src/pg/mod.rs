//! The PostgreSQL engine: a `deadpool-postgres` pool of `tokio-postgres` connections for
//! reads and leases, and ONE writer task that drains pending appends into one transaction
//! per batch (docs/decisions.md, C1).

pub(crate) mod migrations;
pub(crate) mod ops;
mod writer;

use crate::pending::Pending;
use crate::types::CommitSink;
use crate::{Engine, StoreError, StoreResult};
use deadpool_postgres::{Client, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::mpsc;

/// Where the PostgreSQL store lives.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// `postgres://user@host:port/database` (libpq-style key=value strings work too).
    pub url: String,
    /// A schema of its own (created if absent) instead of `public`: lowercase letters,
    /// digits and `_`, starting with a letter.
    pub schema: Option<String>,
    /// Pooled connections (the writer takes one per batch).
    pub pool_size: usize,
}

impl PgOptions {
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            schema: None,
            pool_size: 8,
        }
    }

    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The connection settings: the URL's, with the schema (checked to be a plain
    /// identifier) first on the search path.
    pub fn config(&self) -> StoreResult<tokio_postgres::Config> {
        let mut cfg: tokio_postgres::Config = self
            .url
            .parse()
            .map_err(|e: tokio_postgres::Error| config_error(format!("bad database URL: {e}")))?;
        if let Some(schema) = &self.schema {
            if !plain_identifier(schema) {
                return Err(config_error(format!("bad schema name {schema:?}")));
            }
            cfg.options(format!("-c search_path={schema}"));
        }
        Ok(cfg)
    }
}

fn config_error(message: String) -> StoreError {
    StoreError::Database {
        engine: Engine::Postgres,
        message,
    }
}

fn plain_identifier(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

#[derive(Clone)]
pub(crate) struct Pg {
    pool: Pool,
    writer: mpsc::UnboundedSender<Pending>,
}

impl Pg {
    /// Connects, applies the migrations and starts the writer task (on the caller's runtime).
    pub async fn open(opts: &PgOptions, retain: i64, sink: Option<CommitSink>) -> StoreResult<Pg> {
        let cfg = opts.config()?;
        let manager = Manager::from_config(
            cfg,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(opts.pool_size.max(2))
            .build()
            .map_err(|e| config_error(e.to_string()))?;
        let mut client = pool.get().await?;
        migrations::apply(&mut client, opts.schema.as_deref()).await?;
        drop(client);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer::run(pool.clone(), rx, retain.max(1), sink));
        Ok(Pg { pool, writer: tx })
    }

    pub fn append(&self, p: Pending) {
        if let Err(mpsc::error::SendError(p)) = self.writer.send(p) {
            p.refuse(StoreError::Gone);
        }
    }

    pub async fn client(&self) -> StoreResult<Client> {
        Ok(self.pool.get().await?)
    }
}
