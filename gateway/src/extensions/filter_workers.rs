//! Filter workers: every extension file that declares network filters gets a worker process
//! of its own, with its filter lanes (`lane.rs`), loaded with exactly that file.
//!
//! Why not the registration worker: a filter that hangs holds its worker until the deadline
//! kills it, and calls into one extension are serialized. With all filters in one process,
//! an unrelated request whose filter belongs to another extension (or another project)
//! waited behind the hang and was then failed by the kill. Here a stalled extension delays
//! only requests that its own filters must decide; the calls that merely waited behind the
//! killed one run again on the fresh worker (`WorkerClient::filter`).
//!
//! A worker is keyed by (entry file, frozen import root): the import root's name is the hash
//! of the admitted code, so a reload that changes the file gets a new worker and one that
//! keeps the last good version keeps the old one. Workers of files no scope uses any more are
//! dropped with the last filter list that holds them (dropping a `WorkerClient` kills its
//! process). Workers start on their first call.
//!
//! [`PyNetworkFilter`] is one Python network filter as the proxy sees it: a call over its
//! file's filter worker; a raise or a timeout denies.

use super::client::{self, CallCtx, Preload, WorkerClient, WorkerOwner, WorkerSpec};
use super::doors::Doors;
use super::logfile::LogFile;
use super::registry::Entry;
use super::{FilterInfo, HostConfig};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use vis_proxy::{FilterCtx, FilterError, FilterVerdict};

/// What one network filter answers: the proxy's own verdict, from the Python call to the
/// egress decision. A failure carries the filter's message as it is; the proxy names the
/// filter in the deny reason.
pub type FilterAnswer = Result<FilterVerdict, FilterError>;

pub(super) type Key = (PathBuf, Option<PathBuf>);

/// The filter workers of a host, by (file, import root).
#[derive(Default)]
pub(super) struct FilterWorkers {
    map: parking_lot::Mutex<HashMap<Key, (String, Arc<WorkerClient>)>>,
}

impl FilterWorkers {
    /// The worker for `entry` (created, not started, when new).
    pub(super) fn client_for(
        &self,
        doors: &Weak<Doors>,
        cfg: &HostConfig,
        log: Option<&LogFile>,
        entry: &Entry,
    ) -> Arc<WorkerClient> {
        let key = (entry.file.clone(), entry.import_root.clone());
        let mut map = self.map.lock();
        if let Some((_, c)) = map.get(&key) {
            return c.clone();
        }
        let project = entry.scope.project_root().map(Path::to_path_buf);
        let spec = WorkerSpec {
            exe: cfg.worker_exe.clone(),
            home: cfg.home.clone(),
            label: format!("filter:{}", entry.catalog.name),
            cwd: Some(project.clone().unwrap_or_else(|| cfg.home.clone())),
            load_timeout: cfg.load_timeout,
            filter_lane: true,
            log: log.cloned(),
        };
        let ctx = CallCtx {
            project_root: project,
            ..CallCtx::default()
        };
        let owner = Arc::new(FilterOwner {
            doors: doors.clone(),
            preload: entry.preload(ctx.clone()),
        });
        let client = Arc::new(WorkerClient::new(spec, ctx, owner));
        map.insert(key, (entry.catalog.name.clone(), client.clone()));
        client
    }

    /// Forgets the workers of files not in `keep` (they end when their last user drops them).
    pub(super) fn retain(&self, keep: &[Key]) {
        self.map.lock().retain(|k, _| keep.contains(k));
    }

    /// Every filter worker client (shutdown).
    pub(super) fn all(&self) -> Vec<Arc<WorkerClient>> {
        self.map.lock().values().map(|(_, c)| c.clone()).collect()
    }

    /// The running filter worker of an extension, by name (tests).
    #[cfg(test)]
    pub(super) fn pid_of(&self, extension: &str) -> Option<u32> {
        let map = self.map.lock();
        map.values()
            .filter(|(name, _)| name == extension)
            .find_map(|(_, c)| c.running().and_then(|r| r.pid()))
    }

    /// How many filter workers are known (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.lock().len()
    }
}

pub(super) fn key_of(entry: &Entry) -> Key {
    (entry.file.clone(), entry.import_root.clone())
}

/// A filter worker loads its one file, as admitted by the load that built the filter list.
struct FilterOwner {
    doors: Weak<Doors>,
    preload: Preload,
}

#[async_trait]
impl WorkerOwner for FilterOwner {
    fn preload(&self) -> (u64, Vec<Preload>) {
        (0, vec![self.preload.clone()])
    }
    fn generation(&self) -> Option<u64> {
        None
    }
    async fn door(
        &self,
        worker: Arc<client::Running>,
        ctx: CallCtx,
        op: String,
        payload: Value,
    ) -> Result<Value, client::DoorError> {
        super::doors::answer_weak(&self.doors, worker, ctx, op, payload).await
    }
}

/// A Python network filter as a `vis_proxy` filter, served by its file's filter worker. The
/// registry keeps the lists.
pub(super) struct PyNetworkFilter {
    client: Arc<WorkerClient>,
    /// One call's deadline (`HostConfig::filter_timeout`).
    limit: Duration,
    info: FilterInfo,
    /// `info.file` as a string, once.
    file: String,
}

impl PyNetworkFilter {
    pub(super) fn new(client: Arc<WorkerClient>, limit: Duration, info: FilterInfo) -> Self {
        let file = super::types::file_str(&info.file);
        PyNetworkFilter {
            client,
            limit,
            info,
            file,
        }
    }
}

#[async_trait]
impl vis_proxy::NetworkFilter for PyNetworkFilter {
    fn name(&self) -> &str {
        &self.info.extension
    }

    async fn check(&self, ctx: &FilterCtx) -> FilterAnswer {
        let index = u32::try_from(self.info.index).unwrap_or(u32::MAX);
        self.client
            .filter(&self.file, index, ctx, self.limit)
            .await
            .map_err(|e| FilterError {
                message: e.message(),
                trace: e.traceback(),
            })
    }
}
