//! Providers managed from the phone: the list (configuration, environment, Provider
//! extensions, saved ones) with live status and limits, presets, adding and removing
//! providers and their keys, and sign-in flows.
//!
//! - [`saved`]: the providers and keys saved from the phone (`<home>/provider-keys.json`,
//!   0600); the router is rebuilt from the configuration and this file after every change,
//!   so a key takes effect with the next turn.
//! - [`presets`]: the built-in catalog and the presets extensions declare.
//! - [`probe`]: the live status check (a models-list call) and the limits report.
//! - [`flows`]: the open sign-in flows.
//!
//! The `ProvidersApi` the HTTP routes call, the router rebuild and the one place that
//! publishes changes to connected clients are in `engine/routes/providers/`, which reaches
//! the gateway's sessions, configuration and router for this module.

pub mod flows;
pub mod presets;
pub mod probe;
pub mod saved;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use vis_companion_api::providers::ProviderStatus;

/// The gateway's provider administration state.
pub struct Admin {
    home: PathBuf,
    saved: Mutex<saved::Saved>,
    /// Serializes changes to the saved list (read, change, write, rebuild).
    edit: tokio::sync::Mutex<()>,
    /// The last live status of each provider (cleared when the provider changes).
    checked: Mutex<HashMap<String, ProviderStatus>>,
    pub flows: flows::Flows,
}

impl Admin {
    /// The state of a home; a broken saved-provider file is reported and treated as empty
    /// (it is not overwritten until the next change from the phone).
    pub fn new(home: PathBuf) -> Admin {
        let list = saved::load(&home).unwrap_or_else(|e| {
            tracing::error!(target: "vis::providers", "{e}");
            saved::Saved::new()
        });
        Admin {
            home,
            saved: Mutex::new(list),
            edit: tokio::sync::Mutex::new(()),
            checked: Mutex::default(),
            flows: flows::Flows::default(),
        }
    }

    /// The providers saved from the phone.
    pub fn saved(&self) -> saved::Saved {
        self.saved.lock().clone()
    }

    /// The file the saved providers live in.
    pub fn file(&self) -> PathBuf {
        saved::path(&self.home)
    }

    /// Changes the saved list and writes it (off the async workers), then runs `then` (the
    /// router rebuild) while changes are still serialized; the list in memory changes only
    /// once the file is written.
    pub async fn edit_saved(
        &self,
        f: impl FnOnce(&mut saved::Saved),
        then: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        let _one = self.edit.lock().await;
        let mut next = self.saved();
        f(&mut next);
        let (home, list) = (self.home.clone(), next.clone());
        tokio::task::spawn_blocking(move || saved::save(&home, &list))
            .await
            .map_err(|e| e.to_string())??;
        *self.saved.lock() = next;
        then()
    }

    /// The last live status of a provider, while it has not changed since.
    pub fn checked(&self, id: &str) -> Option<ProviderStatus> {
        self.checked.lock().get(id).cloned()
    }

    pub fn note_checked(&self, id: &str, status: &ProviderStatus) {
        self.checked.lock().insert(id.to_string(), status.clone());
    }

    pub fn forget_checked(&self, id: &str) {
        self.checked.lock().remove(id);
    }
}
