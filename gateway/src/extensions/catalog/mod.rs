//! The catalog: the extensions loaded for each scope (the global one and each project's),
//! loaded and reloaded build-then-swap (`load.rs`), resolved for a project, and listed
//! (`listing.rs`: `GET /v1/extensions`, `/extensions`). The other jobs ask it which
//! extensions a session sees.

mod listing;
mod load;

use super::pool::WorkerPool;
use super::registry::{Entry, Scope, SharedRegistry};
use super::{HostConfig, ReloadReport};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The loaded extensions of every scope.
pub struct Catalog {
    cfg: HostConfig,
    registry: SharedRegistry,
    /// Loads go through the registration worker; filter lists through filter workers.
    workers: Arc<WorkerPool>,
    /// One load at a time.
    reload_lock: tokio::sync::Mutex<()>,
    /// Whether the frozen sources of an earlier run were cleared (at the first load).
    frozen_cleared: AtomicBool,
}

impl Catalog {
    pub(super) fn new(
        cfg: HostConfig,
        registry: SharedRegistry,
        workers: Arc<WorkerPool>,
    ) -> Catalog {
        Catalog {
            cfg,
            registry,
            workers,
            reload_lock: tokio::sync::Mutex::new(()),
            frozen_cleared: AtomicBool::new(false),
        }
    }

    /// Loads (again) the global extensions and, with `project`, that project's: build then
    /// swap, file by file. A file that fails keeps its last good version (`is_stale`);
    /// vanished files are removed. Session workers pick the new versions up at their next
    /// call (none is interrupted).
    pub async fn reload(&self, project: Option<&Path>) -> ReloadReport {
        let mut report = self.load_scope(Scope::Global, false).await;
        if let Some(p) = project {
            let r = self
                .load_scope(Scope::Project(p.to_path_buf()), false)
                .await;
            report.loaded.extend(r.loaded);
            report.failures.extend(r.failures);
            report.removed.extend(r.removed);
        }
        report
    }

    /// Loads a project's extensions the first time a session of that project needs them.
    pub async fn ensure_project(&self, project: Option<&Path>) {
        let missing_global = !self.registry.read().has_scope(&Scope::Global);
        if missing_global {
            self.load_scope(Scope::Global, true).await;
        }
        if let Some(p) = project {
            let scope = Scope::Project(p.to_path_buf());
            let missing = !self.registry.read().has_scope(&scope);
            if missing {
                self.load_scope(scope, true).await;
            }
        }
    }

    /// The extensions a project sees (loaded or not): global ones it does not override by
    /// name, then its own.
    pub(super) fn resolve(&self, project: Option<&Path>) -> Vec<Arc<Entry>> {
        self.registry.read().resolve(project)
    }

    /// The extensions a project sees, its scope loaded first when it was not.
    pub(super) async fn entries(&self, project: Option<&Path>) -> Vec<Arc<Entry>> {
        self.ensure_project(project).await;
        self.resolve(project)
    }

    /// Every loaded extension file of every scope.
    pub(super) fn all(&self) -> Vec<Arc<Entry>> {
        self.registry.read().all()
    }

    /// The network filters of a loaded scope (`None`: not loaded yet).
    pub(super) fn network_filters(
        &self,
        project: Option<&Path>,
    ) -> Option<Vec<Arc<dyn vis_proxy::NetworkFilter>>> {
        self.registry.read().filters(project)
    }

    /// `(name, doc)` of the slash commands a project sees (doc falls back to usage).
    pub async fn slashes(&self, project: Option<&Path>) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for e in self.entries(project).await {
            for c in &e.catalog.slash_commands {
                let doc = c
                    .doc
                    .clone()
                    .or_else(|| c.usage.clone())
                    .unwrap_or_else(|| e.catalog.description.clone());
                out.push((c.name.clone(), doc));
            }
        }
        out
    }

    /// The registry's generation (tests).
    #[cfg(test)]
    pub(super) fn generation(&self) -> u64 {
        self.registry.read().generation()
    }

    /// The global scope's network filters, in registration order (tests).
    #[cfg(test)]
    pub(super) fn filter_infos(&self) -> Vec<super::FilterInfo> {
        self.registry.read().filter_infos(None)
    }
}
