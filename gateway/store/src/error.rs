//! The store's one error type.

use crate::types::Home;

/// Which engine an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Engine::Sqlite => "SQLite",
            Engine::Postgres => "PostgreSQL",
        })
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The session is homed elsewhere (or at another lease epoch) than the writer: the write
    /// was refused inside its transaction and nothing was stored.
    #[error("session {sid} is not this writer's (its home is {home:?})")]
    Fenced { sid: String, home: Home },
    #[error("no session {0}")]
    UnknownSession(String),
    /// The lease is gone: expired, or taken over (its epoch moved on).
    #[error("the lease of node {node} at epoch {epoch} is lost")]
    LeaseLost { node: String, epoch: i64 },
    /// A session id that cannot be a subject token (`.`, `*`, `>`, spaces).
    #[error("session id {0:?} cannot name a subject")]
    BadSessionId(String),
    #[error("{engine} error: {message}")]
    Database { engine: Engine, message: String },
    #[error("NATS error: {0}")]
    Nats(String),
    /// The engine's writer (SQLite thread, PostgreSQL writer task) has stopped.
    #[error("the store has stopped")]
    Gone,
}

pub type StoreResult<T> = Result<T, StoreError>;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Database {
            engine: Engine::Sqlite,
            message: e.to_string(),
        }
    }
}

impl StoreError {
    pub(crate) fn from_pg(e: &tokio_postgres::Error) -> Self {
        // The server's own message (with its code) says more than the client's summary.
        let message = match e.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => e.to_string(),
        };
        StoreError::Database {
            engine: Engine::Postgres,
            message,
        }
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        StoreError::from_pg(&e)
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => StoreError::Database {
                engine: Engine::Postgres,
                message: other.to_string(),
            },
        }
    }
}
