//! The machine: health figures, the stop switch, router and settings, push devices,
//! extensions, and the environment of a sandbox child.

use crate::error::ApiResult;
use crate::records::*;
use crate::wire::*;
use async_trait::async_trait;

/// Figures for `/v1/admin/status`, `/healthz` and `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub sessions_tracked: u64,
    pub turns_running: u64,
    pub turns_executing: u64,
    pub turns_queued: u64,
    pub turns_total: u64,
    pub turns_failed_total: u64,
    pub turn_duration_ms_total: u64,
    pub tokens_input: u64,
    pub tokens_output: u64,
    pub concurrency_limit: u64,
    pub db: Option<String>,
}

#[async_trait]
pub trait MachineApi: Send + Sync + 'static {
    /// Cheap figures (read on every `/healthz`).
    async fn stats(&self) -> Stats;
    /// Stored events across sessions (for `/metrics` only; may read the store).
    async fn replay_events_retained(&self) -> u64 {
        0
    }
    /// More `/metrics` series, owned by the gateway (egress, store health).
    fn metric_families(&self) -> Vec<crate::metrics::Family> {
        Vec::new()
    }
    /// Asks the process to stop (`POST /v1/admin/stop`).
    fn request_stop(&self);
    async fn push_status(&self) -> PushStatus;
    async fn router_status(&self) -> ApiResult<RouterAnswer>;
    async fn patch_router(&self, patch: RouterPatch) -> ApiResult<RouterDefaults>;
    async fn settings(&self) -> ApiResult<SettingsAnswer>;
    async fn setting(&self, id: &str) -> ApiResult<Toggle>;
    async fn set_setting(&self, id: &str, action: SettingAction) -> ApiResult<Toggle>;
    async fn devices(&self) -> ApiResult<DevicesAnswer>;
    async fn register_device(&self, input: DeviceInput) -> ApiResult<DeviceRegistered>;
    /// Whether a device with this raw token was registered (and is now removed).
    async fn unregister_device(&self, token: &str) -> ApiResult<bool>;
    async fn extensions(&self, root: Option<String>) -> ApiResult<ExtensionsListing>;
    /// Reloads configuration and extensions for a project (the `/reload` slash command).
    async fn reload_extensions(&self, root: Option<String>) -> ApiResult<ReloadAnswer>;
    /// The environment and working directory for a sandbox child of a session (used by
    /// `vis-gateway exec`); creates a session for `root` (with `title`, which lists it in
    /// the Companion) when no session id is given. `command` (the program's name) is reported
    /// with every egress decision of the child.
    async fn sandbox_env(
        &self,
        session_id: Option<String>,
        root: Option<String>,
        title: Option<String>,
        command: Option<String>,
    ) -> ApiResult<SandboxEnv>;
}
