//! The configuration and the provider router: the layered configuration last read (home
//! layers plus the default project's), the router built from it and the providers saved
//! from the phone, and the egress proxy's provider routes, which follow every router change.
//! A reload re-reads the layers and swaps configuration and router together; on any failure
//! the last good pair stays active.

use crate::config::Config;
use crate::provider_admin::Admin;
use crate::providers::Router;
use crate::sandbox::credentials::ProviderRoutes;
use parking_lot::{RwLock, RwLockReadGuard};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use vis_providers::Client;

/// The configuration job (shared by handle with the Companion settings).
pub struct Configuration {
    home: PathBuf,
    config: RwLock<Config>,
    router: RwLock<Router>,
    /// Providers saved from the phone and their sign-in flows.
    admin: Admin,
    /// The egress proxy's provider routes, once the sandbox runs.
    sandbox_routes: OnceLock<Arc<ProviderRoutes>>,
}

impl Configuration {
    /// The configuration read at start and the router built from it and the home's saved
    /// providers.
    pub fn new(home: PathBuf, config: Config) -> anyhow::Result<Configuration> {
        let admin = Admin::new(home.clone());
        let router = Router::from_config(&config, &admin.saved())?;
        Ok(Configuration {
            home,
            config: RwLock::new(config),
            router: RwLock::new(router),
            admin,
            sandbox_routes: OnceLock::new(),
        })
    }

    /// The Vis home the layers and the saved providers are read from.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The active configuration (a copy).
    pub fn current(&self) -> Config {
        self.config.read().clone()
    }

    /// The active provider router (clients, default, models, sources); do not hold the guard
    /// across an await.
    pub fn router(&self) -> RwLockReadGuard<'_, Router> {
        self.router.read()
    }

    /// Whether the router has a client for the provider `id`.
    pub fn has_provider(&self, id: &str) -> bool {
        self.router.read().clients.contains_key(id)
    }

    /// The router's provider ids, in order.
    pub fn provider_ids(&self) -> Vec<String> {
        self.router.read().clients.keys().cloned().collect()
    }

    /// The client of the provider `id`.
    pub fn client(&self, id: &str) -> Option<Arc<Client>> {
        self.router.read().clients.get(id).cloned()
    }

    /// The router's default provider.
    pub fn default_provider(&self) -> Option<String> {
        self.router.read().default.clone()
    }

    /// The client and model for `model` (`provider/model`, a model name, or `None` for the
    /// default), as the router picks them.
    pub fn pick(&self, model: Option<&str>) -> Option<(Arc<Client>, String)> {
        self.router.read().pick(model)
    }

    /// The providers saved from the phone and their sign-in flows.
    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    /// The configuration of a project (home layers + the project's own), read off-thread.
    pub async fn project(&self, root: &Path) -> Result<Config, String> {
        crate::config::load_async(&self.home, root).await
    }

    /// Re-reads the configuration layers and rebuilds the provider router; last good wins.
    /// Returns the keys that changed.
    pub async fn reload(&self, root: &Path) -> Result<Vec<String>, String> {
        let stay = "the previous configuration stays active";
        let cfg = self
            .project(root)
            .await
            .map_err(|e| format!("{e}; {stay}"))?;
        let router =
            Router::from_config(&cfg, &self.admin.saved()).map_err(|e| format!("{e}; {stay}"))?;
        self.refresh_sandbox_routes(&router);
        let changed = crate::config::changed_keys(&self.config.read(), &cfg);
        *self.router.write() = router;
        *self.config.write() = cfg;
        Ok(changed)
    }

    /// Rebuilds the router from the active configuration and the saved providers (the next
    /// turn uses it); the egress proxy's provider routes follow.
    pub fn rebuild_router(&self) -> Result<(), String> {
        let cfg = self.current();
        let router = Router::from_config(&cfg, &self.admin.saved()).map_err(|e| e.to_string())?;
        self.refresh_sandbox_routes(&router);
        *self.router.write() = router;
        Ok(())
    }

    /// Hands the running sandbox's provider routes to this job: they are filled from the
    /// active router now and follow every later rebuild and reload.
    pub fn attach_sandbox_routes(&self, routes: Arc<ProviderRoutes>) {
        routes.refresh(&self.router.read().clients);
        let _ = self.sandbox_routes.set(routes);
    }

    fn refresh_sandbox_routes(&self, router: &Router) {
        if let Some(routes) = self.sandbox_routes.get() {
            routes.refresh(&router.clients);
        }
    }
}
