//! The configuration reload of `/reload` and the reload route: re-read the configuration
//! layers, rebuild the provider router, refresh the sandbox's routes; last good wins.

use super::slash::ConfigReload;
use super::Gateway;
use std::future::Future;
use std::path::Path;

impl Gateway {
    /// Re-reads the configuration layers and rebuilds the provider router; last good wins.
    /// Returns the keys that changed.
    pub async fn reload_config(&self, root: &Path) -> Result<Vec<String>, String> {
        let stay = "the previous configuration stays active";
        let cfg = self
            .project_config(root)
            .await
            .map_err(|e| format!("{e}; {stay}"))?;
        let router = crate::providers::Router::from_config(&cfg, &self.provider_admin.saved())
            .map_err(|e| format!("{e}; {stay}"))?;
        if let Some(sb) = self.sandbox.get() {
            sb.routes.refresh(&router.clients);
        }
        let changed = crate::config::changed_keys(&self.config.read(), &cfg);
        *self.providers.write() = router;
        *self.config.write() = cfg;
        Ok(changed)
    }
}

impl ConfigReload for Gateway {
    fn reload_config(
        &self,
        root: &Path,
    ) -> impl Future<Output = Result<Vec<String>, String>> + Send {
        Gateway::reload_config(self, root)
    }
}
