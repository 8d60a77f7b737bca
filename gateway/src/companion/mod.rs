//! The Companion app's areas beyond the core flow: settings and router defaults (with the
//! model a turn runs on), search, usage and the Markdown export, produced files (artifacts)
//! and push devices. Each is one job object with private fields and a small typed API, built
//! once by [`Companion::new`] and reached through the gateway's `companion` field; the
//! Companion boundary's area traits call them (`engine/areas/`). Turn attachments (checked at
//! submit, turned into the model's user message) are plain functions in `attachments.rs`.
//! Rename/star, the model pin, project deletion and forks are sessions-and-turns work on the
//! gateway (`engine/meta.rs`).

pub mod artifacts;
pub mod attachments;
pub mod devices;
pub mod errors;
pub mod search;
pub mod settings;
pub mod usage;

use crate::configuration::Configuration;
use crate::records::SessionReader;
use crate::store::Store;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// The Companion areas, one object each (the store holds their durable part).
pub struct Companion {
    settings: settings::Settings,
    devices: devices::Devices,
    search: search::Search,
    artifacts: artifacts::Artifacts,
    usage: usage::Usage,
}

impl Companion {
    /// The areas over the store, a reader of the turn engine's sessions and the gateway's
    /// configuration (with its provider router).
    pub fn new(
        store: Store,
        sessions: Arc<dyn SessionReader>,
        configuration: Arc<Configuration>,
    ) -> Self {
        Companion {
            settings: settings::Settings::new(store.clone(), configuration),
            devices: devices::Devices::new(store.clone()),
            search: search::Search::new(store.clone()),
            artifacts: artifacts::Artifacts::new(store, sessions.clone()),
            usage: usage::Usage::new(sessions),
        }
    }

    /// Settings, router defaults and the model a turn runs on.
    pub fn settings(&self) -> &settings::Settings {
        &self.settings
    }

    /// Push devices.
    pub fn devices(&self) -> &devices::Devices {
        &self.devices
    }

    /// Full-text search over sessions.
    pub fn search(&self) -> &search::Search {
        &self.search
    }

    /// Files the agent produced and people's revisions of them.
    pub fn artifacts(&self) -> &artifacts::Artifacts {
        &self.artifacts
    }

    /// Token usage and the Markdown export.
    pub fn usage(&self) -> &usage::Usage {
        &self.usage
    }
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
