//! The turn engine's records as the jobs beside it read them: a turn as stored ([`Turn`],
//! [`Status`]), what a session lookup can fail with ([`SessionError`]), and the read-only view
//! of sessions ([`SessionReader`]) the Companion jobs are given instead of the engine itself.

pub mod turn;

use crate::store::rows::SessionRow;
use crate::store::StoreError;
use async_trait::async_trait;
use turn::Turn;

/// What went wrong looking up a session or one of its turns.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no session {sid}")]
    NotFound { sid: String },
    #[error("no turn {tid}")]
    TurnNotFound { tid: String },
    /// The store failed reading the session's rows.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SessionError {
    pub fn not_found(sid: &str) -> SessionError {
        SessionError::NotFound {
            sid: sid.to_string(),
        }
    }
}

pub type SessionResult<T> = Result<T, SessionError>;

/// A session's row and turns, read (loaded from the store on first use) with the running and
/// queued turns overlaid. The turn engine's sessions implement it.
#[async_trait]
pub trait SessionReader: Send + Sync {
    /// The session's row; [`SessionError::NotFound`] when there is no such session.
    async fn row(&self, sid: &str) -> SessionResult<SessionRow>;
    /// Every turn of the session in order, queued ones included.
    async fn turns(&self, sid: &str) -> SessionResult<Vec<Turn>>;
    /// One turn of the session.
    async fn turn(&self, sid: &str, tid: &str) -> SessionResult<Turn>;
}
