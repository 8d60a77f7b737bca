//! The store's one error type, on either engine.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The server's message, with its SQLSTATE code.
    #[error("PostgreSQL error: {message}")]
    Postgres {
        code: Option<String>,
        message: String,
    },
    #[error(transparent)]
    Journal(#[from] vis_store::StoreError),
    /// The session is not homed on this node at its lease epoch: another node owns it now.
    #[error("session {sid} is homed on another node; this node may not write for it")]
    Fenced { sid: String },
    #[error("the store thread has stopped")]
    Gone,
    #[error("{0}")]
    Other(String),
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => StoreError::Postgres {
                code: Some(db.code().code().to_string()),
                message: format!("{} ({})", db.message(), db.code().code()),
            },
            None => StoreError::Postgres {
                code: None,
                message: e.to_string(),
            },
        }
    }
}

impl StoreError {
    /// The write failed for want of room (`SQLITE_FULL`: the disk, or SQLite's own size cap;
    /// PostgreSQL's `disk_full`).
    pub fn is_full(&self) -> bool {
        match self {
            StoreError::Sql(rusqlite::Error::SqliteFailure(e, _)) => {
                e.code == rusqlite::ErrorCode::DiskFull
            }
            StoreError::Postgres { code, .. } => code.as_deref() == Some("53100"),
            _ => false,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
