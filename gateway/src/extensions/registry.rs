//! The catalog as the worker reports it, and the registry of loaded extension files.

use super::{file_str, filter_workers, filters, FilterInfo, Inner, LoadFailure};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct Catalog {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) version: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) alias: Option<String>,
    pub(super) env: Vec<String>,
    pub(super) prompt: Option<String>,
    pub(super) has_prompt_fn: bool,
    pub(super) has_activation: bool,
    pub(super) has_ctx: bool,
    pub(super) symbols: Vec<SymbolCat>,
    pub(super) slash_commands: Vec<SlashCat>,
    pub(super) op_hooks: Vec<HookCat>,
    pub(super) network_filters: Vec<Value>,
    pub(super) providers: Vec<ProviderCat>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct SymbolCat {
    pub(super) name: String,
    pub(super) is_namespace: bool,
    pub(super) members: Vec<MemberCat>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct MemberCat {
    pub(super) name: String,
    pub(super) tag: String,
    pub(super) is_hidden: bool,
    pub(super) doc: String,
    pub(super) contract: Value,
    pub(super) tool: ToolCat,
    pub(super) activity: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct ToolCat {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) parameters: Value,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct SlashCat {
    pub(super) name: String,
    pub(super) doc: Option<String>,
    pub(super) usage: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct HookCat {
    pub(super) ops: Vec<String>,
    pub(super) phase: String,
    pub(super) is_gate: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct ProviderCat {
    pub(super) id: String,
    pub(super) label: String,
    pub(super) preset: Value,
    pub(super) is_managed: bool,
    pub(super) slots: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Scope {
    Global,
    Project(PathBuf),
}

impl Scope {
    pub(super) fn project_root(&self) -> Option<&Path> {
        match self {
            Scope::Global => None,
            Scope::Project(p) => Some(p),
        }
    }
}

/// One loaded (or last-good) extension file.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) file: PathBuf,
    pub(super) scope: Scope,
    pub(super) catalog: Catalog,
    pub(super) raw: Value,
    pub(super) source: Arc<Vec<u8>>,
    pub(super) import_root: Option<PathBuf>,
    pub(super) is_stale: bool,
}

#[derive(Debug, Default, Clone)]
pub(super) struct ScopeState {
    pub(super) entries: Vec<Arc<Entry>>,
    pub(super) failures: Vec<LoadFailure>,
}

#[derive(Default)]
pub(super) struct Registry {
    pub(super) generation: u64,
    pub(super) scopes: BTreeMap<Scope, ScopeState>,
    /// [`ExtensionHost::network_filters_for`] per loaded scope, rebuilt whenever a scope is
    /// swapped (the proxy asks for them on every request): the global scope's own filters, and
    /// for a project the filters of the extensions that project resolves to (global ones it
    /// does not override, then its own). A project's filters never appear in another scope.
    ///
    /// [`ExtensionHost::network_filters_for`]: super::ExtensionHost::network_filters_for
    pub(super) filters: BTreeMap<Scope, Vec<Arc<dyn vis_proxy::NetworkFilter>>>,
}

impl Registry {
    /// The extensions a project sees: global ones not overridden by name, then the project's.
    pub(super) fn resolve(&self, project: Option<&Path>) -> Vec<Arc<Entry>> {
        let global = self
            .scopes
            .get(&Scope::Global)
            .map(|s| s.entries.clone())
            .unwrap_or_default();
        let local = project
            .and_then(|p| self.scopes.get(&Scope::Project(p.to_path_buf())))
            .map(|s| s.entries.clone())
            .unwrap_or_default();
        let mut out: Vec<Arc<Entry>> = global
            .into_iter()
            .filter(|g| !local.iter().any(|l| l.catalog.name == g.catalog.name))
            .collect();
        out.extend(local);
        out
    }

    pub(super) fn all(&self) -> Vec<Arc<Entry>> {
        self.scopes
            .values()
            .flat_map(|s| s.entries.iter().cloned())
            .collect()
    }

    /// The network filters a project sees (`None`: the global scope alone), in registration
    /// order (global ones it does not override, then its own).
    #[cfg(test)]
    pub(super) fn filter_infos(&self, project: Option<&Path>) -> Vec<FilterInfo> {
        let mut out = Vec::new();
        for e in self.resolve(project).iter() {
            for i in 0..e.catalog.network_filters.len() {
                out.push(FilterInfo {
                    extension: e.catalog.name.clone(),
                    file: e.file.clone(),
                    index: i,
                });
            }
        }
        out
    }

    /// Rebuilds [`Registry::filters`]: one `vis_proxy` filter per `NetworkFilter`, each
    /// calling its extension file's own filter worker ([`super::filter_workers`]); workers
    /// of files no scope uses any more are let go.
    pub(super) fn rebuild_filters(&mut self, host: &Weak<Inner>) {
        let Some(inner) = host.upgrade() else {
            return;
        };
        let scopes: Vec<Scope> = self.scopes.keys().cloned().collect();
        let mut keep = Vec::new();
        self.filters = scopes
            .into_iter()
            .map(|scope| {
                let mut list: Vec<Arc<dyn vis_proxy::NetworkFilter>> = Vec::new();
                for e in self.resolve(scope.project_root()) {
                    if e.catalog.network_filters.is_empty() {
                        continue;
                    }
                    let client = inner.workers.filter_worker(&inner.cfg, &e);
                    keep.push(filter_workers::key_of(&e));
                    for index in 0..e.catalog.network_filters.len() {
                        list.push(Arc::new(filters::PyNetworkFilter {
                            client: client.clone(),
                            limit: inner.cfg.filter_timeout,
                            file: file_str(&e.file),
                            info: FilterInfo {
                                extension: e.catalog.name.clone(),
                                file: e.file.clone(),
                                index,
                            },
                        }));
                    }
                }
                (scope, list)
            })
            .collect();
        inner.workers.retain_filter_workers(&keep);
    }
}
