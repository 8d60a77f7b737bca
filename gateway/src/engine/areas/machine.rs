//! The machine area of the Companion boundary: figures, the stop switch, settings, devices,
//! extensions and a sandbox child's environment.

use super::GatewayAreas;
use crate::companion::errors::{DeviceError, SettingsError};
use crate::engine::views::live_of;
use crate::store::rows;
use async_trait::async_trait;
use axum::http::StatusCode;
use std::sync::atomic::Ordering;
use vis_companion_api::records::*;
use vis_companion_api::wire::*;
use vis_companion_api::{ApiError, ApiResult, MachineApi, Stats};

#[async_trait]
impl MachineApi for GatewayAreas {
    fn metric_families(&self) -> Vec<vis_companion_api::metrics::Family> {
        crate::metrics::families()
    }

    async fn replay_events_retained(&self) -> u64 {
        self.0
            .store
            .with(rows::count_events)
            .await
            .unwrap_or(0)
            .max(0) as u64
    }

    async fn stats(&self) -> Stats {
        let g = &self.0;
        let loaded = g.sessions.all();
        let (mut running, mut queued) = (0, 0);
        for (_, s) in &loaded {
            let l = live_of(&s.lock());
            running += l.running.is_some() as u64;
            queued += l.queued as u64;
        }
        Stats {
            sessions_tracked: loaded.len() as u64,
            turns_running: running,
            turns_executing: g.turns.counters.executing.load(Ordering::Relaxed).max(0) as u64,
            turns_queued: queued,
            turns_total: g.turns.counters.turns_total.load(Ordering::Relaxed),
            turns_failed_total: g.turns.counters.turns_failed.load(Ordering::Relaxed),
            turn_duration_ms_total: g.turns.counters.duration_ms.load(Ordering::Relaxed),
            tokens_input: g.turns.counters.tokens_in.load(Ordering::Relaxed),
            tokens_output: g.turns.counters.tokens_out.load(Ordering::Relaxed),
            concurrency_limit: g.turns.concurrency as u64,
            db: Some(g.store.location().to_string()),
        }
    }

    async fn extensions(&self, root: Option<String>) -> ApiResult<ExtensionsListing> {
        let root = root
            .filter(|r| !r.trim().is_empty())
            .map(std::path::PathBuf::from);
        Ok(self.0.extensions.catalog().list(root.as_deref()).await)
    }

    async fn reload_extensions(&self, root: Option<String>) -> ApiResult<ReloadAnswer> {
        let root = root
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| self.0.default_root.clone());
        if !root.is_dir() {
            return Err(ApiError::bad_request(
                "invalid-request",
                format!("root {} is not a directory", root.display()),
            ));
        }
        let (status, title) = match self.0.turns.slash.reload(&root).await {
            Ok(t) => (ReloadStatus::Ok, t),
            Err(t) => (ReloadStatus::Error, t),
        };
        let extensions = self.0.extensions.catalog().list(Some(&root)).await;
        Ok(ReloadAnswer {
            status,
            title,
            extensions,
        })
    }

    async fn sandbox_env(
        &self,
        session_id: Option<String>,
        root: Option<String>,
        title: Option<String>,
        command: Option<String>,
    ) -> ApiResult<SandboxEnv> {
        Ok(self
            .0
            .turns
            .sandbox_env(session_id, root, title, command)
            .await?)
    }

    async fn router_status(&self) -> ApiResult<RouterAnswer> {
        Ok(self.0.companion.settings().router_status().await?)
    }

    async fn patch_router(&self, patch: RouterPatch) -> ApiResult<RouterDefaults> {
        Ok(self.0.companion.settings().patch_router(patch).await?)
    }

    async fn settings(&self) -> ApiResult<SettingsAnswer> {
        Ok(self.0.companion.settings().answer().await?)
    }

    async fn setting(&self, id: &str) -> ApiResult<Toggle> {
        Ok(self.0.companion.settings().get(id).await?)
    }

    async fn set_setting(&self, id: &str, action: SettingAction) -> ApiResult<Toggle> {
        Ok(self.0.companion.settings().set(id, action).await?)
    }

    async fn devices(&self) -> ApiResult<DevicesAnswer> {
        Ok(self.0.companion.devices().list().await?)
    }

    async fn register_device(&self, input: DeviceInput) -> ApiResult<DeviceRegistered> {
        Ok(self.0.companion.devices().register(input).await?)
    }

    async fn unregister_device(&self, token: &str) -> ApiResult<bool> {
        Ok(self.0.companion.devices().unregister(token).await?)
    }

    async fn push_status(&self) -> PushStatus {
        self.0.companion.devices().status().await
    }

    fn request_stop(&self) {
        // Stop after 25 ms, so the `{stopping:true}` answer is written first.
        let gw = self.0.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            gw.turns.shutdown.request();
        });
    }
}

/// A refused settings or router change on the wire.
impl From<SettingsError> for ApiError {
    fn from(e: SettingsError) -> ApiError {
        let message = e.to_string();
        match e {
            SettingsError::NotFound { id } => {
                ApiError::new(StatusCode::NOT_FOUND, "setting-not-found", message)
                    .with("setting_id", id)
            }
            SettingsError::InvalidValue { id, .. } => {
                ApiError::bad_request("invalid-value", message).with("setting_id", id)
            }
            SettingsError::UnknownRole { .. }
            | SettingsError::PrimaryWithoutProvider
            | SettingsError::FallbackIsPrimary => ApiError::bad_request("invalid-request", message),
            SettingsError::UnknownProvider { provider } => {
                ApiError::bad_request("unknown-provider", message).with("provider_id", provider)
            }
            SettingsError::Store(e) => e.into(),
        }
    }
}

/// A refused device registration on the wire.
impl From<DeviceError> for ApiError {
    fn from(e: DeviceError) -> ApiError {
        match e {
            DeviceError::NoToken | DeviceError::TokenTooLong { .. } => {
                ApiError::bad_request("invalid-request", e.to_string())
            }
            DeviceError::Store(e) => e.into(),
        }
    }
}
