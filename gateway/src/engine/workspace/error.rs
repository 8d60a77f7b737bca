//! What went wrong in the workspace job's own work (the draft routes' guards, `@file`
//! suggestions, the folder browser), in its own terms; the workspace area maps it to the wire
//! (`area.rs`). The draft steps themselves answer [`DraftError`].

use crate::drafts::DraftError;
use crate::records::SessionError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// A turn runs or waits: its tools would change folders under a switch.
    #[error("the session has a running or queued turn: change its workspace when it is idle")]
    Busy,
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Draft(#[from] DraftError),
    /// A folder that could not be listed.
    #[error("cannot list {path}: {reason}")]
    Unlistable { path: String, reason: String },
    /// A new folder's path is not absolute, or has `.`/`..` segments (`0` says which).
    #[error("{0}")]
    BadPath(String),
    /// A new folder's name is not one plain folder name.
    #[error("name must be one folder name (no /, no .., at most 255 bytes): {name:?}")]
    BadName { name: String },
    #[error("{} is not a folder", .path.display())]
    NotADirectory { path: PathBuf },
    #[error("{} already exists", .path.display())]
    AlreadyExists { path: PathBuf },
    /// The system refused to make the folder.
    #[error("cannot create {}: {reason}", .path.display())]
    MkdirRefused { path: PathBuf, reason: String },
    /// Work that did not finish for a reason of the gateway's own (a blocking task that
    /// stopped, a file index that could not be built).
    #[error("{0}")]
    Internal(String),
}

pub type WorkspaceResult<T> = Result<T, WorkspaceError>;
