//! Network filters (decision P6): each `vis.NetworkFilter` as a `vis_proxy` filter that
//! runs in its extension file's own filter worker over the filter lane
//! (`filter_workers.rs`); a raise or a timeout denies.

#[cfg(test)]
use super::client::CallCtx;
use super::client::{CallError, WorkerClient};
use super::*;
use async_trait::async_trait;
#[cfg(test)]
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

impl ExtensionHost {
    /// The global scope's network filters, in registration order.
    #[cfg(test)]
    pub fn filters(&self) -> Vec<FilterInfo> {
        self.inner.registry.read().filter_infos(None)
    }

    /// Runs one filter in its filter worker. A raise or a timeout DENIES.
    #[cfg(test)]
    pub async fn run_one_filter(&self, filter: &FilterInfo, ctx: &Value) -> Verdict {
        let entry = self
            .inner
            .registry
            .read()
            .all()
            .into_iter()
            .find(|e| e.file == filter.file);
        let client = entry.and_then(|e| {
            self.inner
                .filter_workers
                .client_for(&Arc::downgrade(&self.inner), &e)
        });
        match (filter_ctx_of(ctx), client) {
            (Some(c), Some(client)) => {
                let limit = self.inner.cfg.filter_timeout;
                filter_verdict(&client, limit, filter, &file_str(&filter.file), &c).await
            }
            _ => self.run_one_filter_json(filter, ctx).await,
        }
    }

    /// Process id of the running filter worker of an extension (tests).
    #[cfg(test)]
    pub fn filter_worker_pid(&self, extension: &str) -> Option<u32> {
        self.inner.filter_workers.pid_of(extension)
    }

    /// How many filter workers the host keeps (tests).
    #[cfg(test)]
    pub fn filter_worker_count(&self) -> usize {
        self.inner.filter_workers.len()
    }

    /// [`Self::run_one_filter`] over the request protocol, for a ctx the filter lane cannot
    /// carry (an unknown phase).
    #[cfg(test)]
    async fn run_one_filter_json(&self, filter: &FilterInfo, ctx: &Value) -> Verdict {
        let payload = json!({"file": file_str(&filter.file), "index": filter.index, "ctx": ctx});
        let limit = self.inner.cfg.filter_timeout;
        // The limit also bounds waiting for the registration worker (a slow provider
        // callback must not stall egress); only a filter that is itself running when the
        // time is up gets its worker killed.
        let outcome = self
            .inner
            .registration
            .call_waiting_at_most(CallCtx::default(), "run_filter", payload, limit, limit)
            .await;
        match outcome {
            Ok(v) if v.get("blocked").and_then(Value::as_bool) == Some(true) => Verdict::Deny {
                extension: filter.extension.clone(),
                reason: v
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                kind: "blocked-by-filter",
                traceback: None,
            },
            Ok(_) => Verdict::Allow,
            Err(e) => filter_error(filter, &e),
        }
    }

    /// Runs every filter on a P6 ctx (`phase, method, host, port, path, headers, body?,
    /// status?`) in order; the first deny wins. The gateway hands the proxy
    /// [`Self::network_filters`] instead; the tests drive the filters through this.
    #[cfg(test)]
    pub async fn run_filter(&self, ctx: &Value) -> Verdict {
        for f in self.filters() {
            let v = self.run_one_filter(&f, ctx).await;
            if v != Verdict::Allow {
                return v;
            }
        }
        Verdict::Allow
    }

    /// The global scope's filters as `vis_proxy` network filters (registration order).
    #[cfg(test)]
    pub fn network_filters(&self) -> Vec<Arc<dyn vis_proxy::NetworkFilter>> {
        self.network_filters_for(None).unwrap_or_default()
    }

    /// The filters that decide a session's traffic: the global ones its project does not
    /// override, then its project's own (`None`: the global scope alone). `None` when that
    /// scope has not been loaded yet. Cheap: the lists are built when a scope is (re)loaded.
    pub fn network_filters_for(
        &self,
        project: Option<&Path>,
    ) -> Option<Vec<Arc<dyn vis_proxy::NetworkFilter>>> {
        let scope = match project {
            Some(p) => Scope::Project(p.to_path_buf()),
            None => Scope::Global,
        };
        self.inner.registry.read().filters.get(&scope).cloned()
    }
}

/// The filters of a scope that was not loaded when a request needed them: loads the scope,
/// then runs its filters in order (first deny wins). A filter is policy, so a session's
/// project filters apply from its first request whichever path started the child.
pub(crate) struct LoadingScope {
    pub(crate) host: ExtensionHost,
    pub(crate) project: Option<PathBuf>,
}

#[async_trait]
impl vis_proxy::NetworkFilter for LoadingScope {
    fn name(&self) -> &str {
        "project extensions"
    }

    async fn check(
        &self,
        ctx: &vis_proxy::FilterCtx,
    ) -> Result<vis_proxy::FilterVerdict, vis_proxy::FilterError> {
        let project = self.project.as_deref();
        self.host.ensure_project(project).await;
        let Some(list) = self.host.network_filters_for(project) else {
            return Err(vis_proxy::FilterError {
                message: "the project's extensions could not be loaded".into(),
                trace: None,
            });
        };
        for f in list {
            match f.check(ctx).await {
                Ok(vis_proxy::FilterVerdict::Allow) => {}
                Ok(vis_proxy::FilterVerdict::Block(reason)) => {
                    return Ok(vis_proxy::FilterVerdict::Block(reason))
                }
                Err(mut e) => {
                    let prefix = format!("network filter error in '{}': ", f.name());
                    if !e.message.starts_with(&prefix) {
                        e.message = format!("{prefix}{}", e.message);
                    }
                    return Err(e);
                }
            }
        }
        Ok(vis_proxy::FilterVerdict::Allow)
    }
}

/// A Python network filter as a `vis_proxy` filter, served by its file's filter worker. The
/// registry keeps the list ([`Registry::filters`]).
pub(super) struct PyNetworkFilter {
    pub(super) client: Arc<WorkerClient>,
    /// One call's deadline (`HostConfig::filter_timeout`).
    pub(super) limit: Duration,
    pub(super) info: FilterInfo,
    /// `info.file` as a string, once.
    pub(super) file: String,
}

#[async_trait]
impl vis_proxy::NetworkFilter for PyNetworkFilter {
    fn name(&self) -> &str {
        &self.info.extension
    }

    async fn check(
        &self,
        ctx: &vis_proxy::FilterCtx,
    ) -> Result<vis_proxy::FilterVerdict, vis_proxy::FilterError> {
        match filter_verdict(&self.client, self.limit, &self.info, &self.file, ctx).await {
            Verdict::Allow => Ok(vis_proxy::FilterVerdict::Allow),
            Verdict::Deny {
                reason,
                kind: "blocked-by-filter",
                ..
            } => Ok(vis_proxy::FilterVerdict::Block(reason)),
            Verdict::Deny {
                reason, traceback, ..
            } => Err(vis_proxy::FilterError {
                message: reason,
                trace: traceback,
            }),
        }
    }
}

/// One filter over its filter worker's lane. A raise, a timeout, a crash or an extension
/// that stays busy DENIES (`filter-error`).
async fn filter_verdict(
    client: &WorkerClient,
    limit: Duration,
    filter: &FilterInfo,
    file: &str,
    ctx: &vis_proxy::FilterCtx,
) -> Verdict {
    let index = u32::try_from(filter.index).unwrap_or(u32::MAX);
    match client.filter(file, index, ctx, limit).await {
        Ok(lane::Reply::Allow) => Verdict::Allow,
        Ok(lane::Reply::Block(reason)) => Verdict::Deny {
            extension: filter.extension.clone(),
            reason,
            kind: "blocked-by-filter",
            traceback: None,
        },
        Ok(lane::Reply::Busy) => filter_error(filter, &CallError::Busy(limit)),
        Ok(lane::Reply::Error { error, .. }) => filter_error(filter, &CallError::Python(error)),
        Err(e) => filter_error(filter, &e),
    }
}

fn filter_error(filter: &FilterInfo, e: &CallError) -> Verdict {
    Verdict::Deny {
        extension: filter.extension.clone(),
        reason: format!(
            "network filter error in '{}': {}",
            filter.extension,
            e.message()
        ),
        kind: "filter-error",
        traceback: e.traceback(),
    }
}

/// A P6 ctx given as JSON, as the proxy's struct (`None`: an unknown phase).
#[cfg(test)]
fn filter_ctx_of(v: &Value) -> Option<vis_proxy::FilterCtx> {
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let phase = lane::phase_from_name(v.get("phase").and_then(Value::as_str)?)?;
    let headers = v
        .get("headers")
        .and_then(Value::as_object)
        .map(|h| {
            h.iter()
                .map(|(k, x)| {
                    let x = x.as_str().map_or_else(|| x.to_string(), str::to_string);
                    (k.clone(), x)
                })
                .collect()
        })
        .unwrap_or_default();
    Some(vis_proxy::FilterCtx {
        phase,
        method: text("method"),
        host: text("host").unwrap_or_default(),
        port: v
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(0),
        path: text("path"),
        headers,
        body: text("body"),
        status: v
            .get("status")
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok()),
    })
}
