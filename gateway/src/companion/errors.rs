//! What went wrong in the Companion jobs, each in its own terms. The areas that call them map
//! these to statuses and bodies (`engine/areas/`); nothing here knows HTTP.

use crate::records::SessionError;
use crate::store::StoreError;

/// A settings or router-defaults change that was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("no setting {id}")]
    NotFound { id: String },
    /// The action does not fit the toggle (`message` says why).
    #[error("{message}")]
    InvalidValue { id: String, message: String },
    #[error("role must be primary or fallback, not {role:?}")]
    UnknownRole { role: String },
    #[error("provider is required for the primary role")]
    PrimaryWithoutProvider,
    #[error("no provider {provider:?} is configured")]
    UnknownProvider { provider: String },
    #[error("the fallback must be a different provider than the default one")]
    FallbackIsPrimary,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A push device that could not be registered or listed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("token or grant is required")]
    NoToken,
    #[error("the token is longer than {max} characters")]
    TokenTooLong { max: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A stored file (artifact or revision) that is not there, or a store failure.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("no attachment {index} in iteration {iid}")]
    NoAttachment { iid: String, index: i64 },
    /// A revision names an iteration the session does not have (`message` says which part
    /// of `<turn id>:<n>` is missing).
    #[error("{message}")]
    NoIteration { message: String },
    #[error("the revision was not stored")]
    RevisionNotStored,
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An upload refused at submit (`reason` names the attachment and what is wrong with it).
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct AttachmentError {
    pub reason: String,
}
