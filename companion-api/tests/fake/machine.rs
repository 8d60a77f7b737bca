//! The fake machine area.

use super::*;

#[async_trait]
impl MachineApi for FakeEngine {
    async fn stats(&self) -> Stats {
        Stats::default()
    }

    async fn extensions(&self, _root: Option<String>) -> ApiResult<ExtensionsListing> {
        Ok(ExtensionsListing::default())
    }

    async fn reload_extensions(&self, root: Option<String>) -> ApiResult<ReloadAnswer> {
        self.calls.push(format!("reload {root:?}"));
        Ok(ReloadAnswer {
            status: ReloadStatus::Ok,
            title: "Reloaded".into(),
            extensions: ExtensionsListing::default(),
        })
    }

    async fn sandbox_env(
        &self,
        session_id: Option<String>,
        _root: Option<String>,
        _title: Option<String>,
        _command: Option<String>,
    ) -> ApiResult<SandboxEnv> {
        Ok(SandboxEnv {
            session_id: session_id.unwrap_or_else(|| SID.into()),
            cwd: "/w".into(),
            proxy_port: 1,
            ..Default::default()
        })
    }

    fn request_stop(&self) {
        self.calls.push("request_stop".into());
    }

    async fn router_status(&self) -> ApiResult<RouterAnswer> {
        Ok(RouterAnswer::default())
    }

    async fn patch_router(&self, patch: RouterPatch) -> ApiResult<RouterDefaults> {
        Ok(RouterDefaults {
            default_provider: patch.provider,
            default_model: patch.model,
            ..Default::default()
        })
    }

    async fn settings(&self) -> ApiResult<SettingsAnswer> {
        Ok(SettingsAnswer::default())
    }

    async fn setting(&self, id: &str) -> ApiResult<Toggle> {
        Ok(toggle(id))
    }

    async fn set_setting(&self, id: &str, _action: SettingAction) -> ApiResult<Toggle> {
        Ok(toggle(id))
    }

    async fn devices(&self) -> ApiResult<DevicesAnswer> {
        Ok(DevicesAnswer {
            devices: vec![],
            push: push_status(),
        })
    }

    async fn register_device(&self, _input: DeviceInput) -> ApiResult<DeviceRegistered> {
        Err(ApiError::bad_request("invalid-request", "no push here"))
    }

    async fn unregister_device(&self, _token: &str) -> ApiResult<bool> {
        Ok(false)
    }

    async fn push_status(&self) -> PushStatus {
        push_status()
    }
}
