//! The extension host: the cheap-clone handle the gateway keeps, and the composition root
//! that builds the jobs and hands them out: the catalog, the tools, the network filters,
//! the providers, the sessions (and, for the tests, the worker pool).

use super::catalog::Catalog;
use super::doors::Doors;
use super::filters::Filters;
use super::logfile::LogFile;
use super::pool::WorkerPool;
use super::providers::Providers;
use super::registry::SharedRegistry;
use super::sessions::Sessions;
use super::tools::Tools;
use super::{HostConfig, HostEvents, HumanDoors, StateStore};
use std::sync::Arc;

/// The jobs of one host.
struct Inner {
    catalog: Arc<Catalog>,
    tools: Tools,
    filters: Filters,
    providers: Providers,
    sessions: Sessions,
    /// Every worker process (`pool.rs`).
    workers: Arc<WorkerPool>,
}

/// The extension host. Cheap to clone.
#[derive(Clone)]
pub struct ExtensionHost {
    inner: Arc<Inner>,
}

impl ExtensionHost {
    /// Creates the host. No process starts until the first load or call. `human` serves
    /// the ask / live / secret / shell doors.
    pub fn new(
        cfg: HostConfig,
        state: Arc<dyn StateStore>,
        events: Arc<dyn HostEvents>,
        human: Arc<dyn HumanDoors>,
    ) -> ExtensionHost {
        let log = LogFile::start(&cfg.home);
        let registry = SharedRegistry::default();
        let doors = Arc::new(Doors::new(
            cfg.clone(),
            state,
            events,
            human,
            registry.clone(),
            log.clone(),
        ));
        // The workers reach the doors weakly: a worker outliving the host is told the
        // gateway is shutting down.
        let workers = WorkerPool::new(&cfg, log, Arc::downgrade(&doors), registry.clone());
        let catalog = Arc::new(Catalog::new(cfg.clone(), registry, workers.clone()));
        let inner = Inner {
            tools: Tools::new(&cfg, catalog.clone(), workers.clone(), doors.clone()),
            filters: Filters::new(catalog.clone()),
            providers: Providers::new(&cfg, catalog.clone(), workers.clone(), doors.clone()),
            sessions: Sessions::new(&cfg, catalog.clone(), workers.clone(), doors),
            catalog,
            workers,
        };
        ExtensionHost {
            inner: Arc::new(inner),
        }
    }

    /// The loaded extensions: reload, listing, slash command names.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The extensions' tools and op hooks.
    pub fn tools(&self) -> &Tools {
        &self.inner.tools
    }

    /// The extensions' network filters.
    pub fn filters(&self) -> &Filters {
        &self.inner.filters
    }

    /// The extensions' `vis.Provider`s.
    pub fn providers(&self) -> &Providers {
        &self.inner.providers
    }

    /// Turns, slash commands and the end of sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    /// Every worker process (tests ask it for process ids).
    #[cfg(test)]
    pub(super) fn workers(&self) -> &WorkerPool {
        &self.inner.workers
    }

    /// Stops every worker.
    pub async fn shutdown(&self) {
        self.inner.workers.shutdown().await;
    }
}
