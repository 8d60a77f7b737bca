//! The Companion app's routes beyond the core flow, over the gateway: rename/star, search,
//! usage and the Markdown export, `@file` suggestions, the model pin, router defaults and
//! settings, turn attachments (images reach the model), produced files (artifacts), push
//! devices, project deletion and forks. Each area is its own file with a small typed API;
//! `api.rs` only delegates.

pub mod artifacts;
pub mod attachments;
pub mod devices;
pub mod files;
pub mod meta;
#[cfg(test)]
mod oneshot_tests;
pub mod search;
pub mod settings;
pub mod usage;

use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use vis_companion_api::ApiError;

/// In-memory state of these areas (the store holds the durable part).
#[derive(Default)]
pub struct State {
    /// The gateway settings, read from the store on first use.
    pub settings: RwLock<Option<settings::Settings>>,
    /// Workspace file indexes for `@file` suggestions, one per project root.
    pub files: std::sync::Arc<files::Indexes>,
}

/// A project's id: a UUID derived from its root path, stable across restarts.
pub fn project_id(root: &str) -> String {
    let digest = Sha256::digest(root.trim_end_matches('/').as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

pub fn store_err(e: crate::store::StoreError) -> ApiError {
    ApiError::engine(e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_project_id_is_a_stable_uuid_of_the_root() {
        let a = super::project_id("/work/app");
        assert_eq!(a, super::project_id("/work/app/"));
        assert_ne!(a, super::project_id("/work/other"));
        assert!(uuid::Uuid::parse_str(&a).is_ok());
    }
}
