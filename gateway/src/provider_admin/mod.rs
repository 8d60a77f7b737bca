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
//! - [`routes`]: the `ProvidersApi` the HTTP routes call, the router rebuild, and the one
//!   place that publishes changes to connected clients; `list`, `edit` and `auth` hold its
//!   listing, its changes to the saved file, and its sign-in flows (`api-key`, and an
//!   extension's `auth_fn` run as a device-style flow).

mod auth;
mod edit;
pub mod flows;
mod list;
pub mod presets;
pub mod probe;
pub mod routes;
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

    fn checked(&self, id: &str) -> Option<ProviderStatus> {
        self.checked.lock().get(id).cloned()
    }

    fn note_checked(&self, id: &str, status: &ProviderStatus) {
        self.checked.lock().insert(id.to_string(), status.clone());
    }

    fn forget_checked(&self, id: &str) {
        self.checked.lock().remove(id);
    }
}
