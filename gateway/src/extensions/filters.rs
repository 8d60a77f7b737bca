//! Network filters (docs/decisions.md, P6): each `vis.NetworkFilter` as a `vis_proxy` filter that
//! runs in its extension file's own filter worker over the filter lane
//! (`filter_workers.rs`); a raise or a timeout denies. The lists are built when a scope
//! is (re)loaded (`catalog/load.rs`); this job hands them to the proxy.

use super::catalog::Catalog;
#[cfg(test)]
use super::filter_workers::FilterAnswer;
#[cfg(test)]
use super::{lane, FilterInfo};
use async_trait::async_trait;
#[cfg(test)]
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vis_proxy::FilterError;
#[cfg(test)]
use vis_proxy::FilterVerdict;

/// The extensions' network filters, by scope.
pub struct Filters {
    catalog: Arc<Catalog>,
}

impl Filters {
    pub(super) fn new(catalog: Arc<Catalog>) -> Filters {
        Filters { catalog }
    }

    /// The global scope's network filters, in registration order.
    #[cfg(test)]
    pub fn infos(&self) -> Vec<FilterInfo> {
        self.catalog.filter_infos()
    }

    /// Runs the global filters on a ctx given as JSON (`phase, method, host, port, path,
    /// headers, body?, status?`) in order, as the proxy would; the first answer that is not
    /// an allow wins. The gateway hands the proxy [`Self::network`] instead.
    #[cfg(test)]
    pub async fn run(&self, ctx: &Value) -> FilterAnswer {
        let Some(ctx) = filter_ctx_of(ctx) else {
            return Err(FilterError {
                message: format!("not a filter ctx: {ctx}"),
                trace: None,
            });
        };
        for f in self.global() {
            let answer = f.check(&ctx).await;
            if answer != Ok(FilterVerdict::Allow) {
                return answer;
            }
        }
        Ok(FilterVerdict::Allow)
    }

    /// The global scope's filters as `vis_proxy` network filters (registration order).
    #[cfg(test)]
    pub fn global(&self) -> Vec<Arc<dyn vis_proxy::NetworkFilter>> {
        self.network(None).unwrap_or_default()
    }

    /// The filters that decide a session's traffic: the global ones its project does not
    /// override, then its project's own (`None`: the global scope alone). `None` when that
    /// scope has not been loaded yet. Cheap: the lists are built when a scope is (re)loaded.
    pub fn network(
        &self,
        project: Option<&Path>,
    ) -> Option<Vec<Arc<dyn vis_proxy::NetworkFilter>>> {
        self.catalog.network_filters(project)
    }

    /// For a scope [`Self::network`] has no list for yet: one filter that loads the scope
    /// on its first check, then runs the scope's filters.
    pub fn loading(&self, project: Option<&Path>) -> Arc<dyn vis_proxy::NetworkFilter> {
        Arc::new(LoadingScope {
            catalog: self.catalog.clone(),
            project: project.map(Path::to_path_buf),
        })
    }
}

/// The filters of a scope that was not loaded when a request needed them: loads the scope,
/// then runs its filters in order (first deny wins). A filter is policy, so a session's
/// project filters apply from its first request whichever path started the child.
struct LoadingScope {
    catalog: Arc<Catalog>,
    project: Option<PathBuf>,
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
        self.catalog.ensure_project(project).await;
        let Some(list) = self.catalog.network_filters(project) else {
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
                Err(e) => {
                    // This filter stands for the whole list, so the failure names the
                    // member that failed, the way the proxy names a filter it runs itself.
                    return Err(FilterError {
                        message: vis_proxy::filters::error_reason(f.name(), &e.message),
                        trace: e.trace,
                    });
                }
            }
        }
        Ok(vis_proxy::FilterVerdict::Allow)
    }
}

/// A filter ctx given as JSON, as the proxy's struct (`None`: an unknown phase).
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
