//! The turns area's mapping of the errors of the Companion jobs it calls: uploads checked at
//! submit and the stored files of a turn (`companion/errors.rs`). The turn engine's own
//! refusals are mapped in `turns.rs`.

use crate::companion::errors::{ArtifactError, AttachmentError};
use axum::http::StatusCode;
use vis_companion_api::ApiError;

/// A refused upload on the wire.
impl From<AttachmentError> for ApiError {
    fn from(e: AttachmentError) -> ApiError {
        ApiError::bad_request("invalid-attachment", e.reason)
    }
}

/// A missing stored file on the wire.
impl From<ArtifactError> for ApiError {
    fn from(e: ArtifactError) -> ApiError {
        let message = e.to_string();
        match e {
            ArtifactError::NoAttachment { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "attachment-not-found", message)
            }
            ArtifactError::NoIteration { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "attachment-not-stored", message)
            }
            ArtifactError::RevisionNotStored => ApiError::engine(message),
            ArtifactError::Session(e) => e.into(),
            ArtifactError::Store(e) => e.into(),
        }
    }
}
