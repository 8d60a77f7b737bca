//! The registry of loaded extension files: what each file declares (its manifest, as the
//! worker reports it), by scope, with the network filter lists built at each swap. Data
//! only: the catalog (`catalog/`) loads and swaps it; the worker pool and the doors read it.

use super::client::{CallCtx, Preload};
#[cfg(test)]
use super::FilterInfo;
use super::LoadFailure;
use parking_lot::RwLock;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The registry, shared by the catalog (writer), the worker pool and the doors (readers).
pub(super) type SharedRegistry = Arc<RwLock<Registry>>;

/// The network filter lists, by scope. Read on every proxied request: hashed (a path's
/// hash is one pass over its bytes, an ordered map compared paths component by component).
pub(super) type FilterLists = foldhash::HashMap<Scope, Vec<Arc<dyn vis_proxy::NetworkFilter>>>;

/// What one extension file declares, as the worker reports it at load.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct Manifest {
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
    pub(super) catalog: Manifest,
    pub(super) raw: Value,
    pub(super) source: Arc<Vec<u8>>,
    pub(super) import_root: Option<PathBuf>,
    pub(super) is_stale: bool,
}

impl Entry {
    /// What a fresh worker loads for this file: the admitted bytes, run under `ctx`.
    pub(super) fn preload(&self, ctx: CallCtx) -> Preload {
        Preload {
            ctx,
            file: self.file.clone(),
            source: self.source.clone(),
            import_root: self.import_root.clone(),
        }
    }
}

#[derive(Debug, Default, Clone)]
pub(super) struct ScopeState {
    pub(super) entries: Vec<Arc<Entry>>,
    pub(super) failures: Vec<LoadFailure>,
}

#[derive(Default)]
pub(super) struct Registry {
    generation: u64,
    scopes: BTreeMap<Scope, ScopeState>,
    /// The network filters per loaded scope, rebuilt whenever a scope is swapped (the proxy
    /// asks for them on every request): the global scope's own filters, and for a project
    /// the filters of the extensions that project resolves to (global ones it does not
    /// override, then its own). A project's filters never appear in another scope.
    filters: FilterIndex,
}

/// [`FilterLists`] as the proxy reads them on every request: a project's list found by its
/// path's bytes in their component form ([`path_key`]), so a lookup of a path already in that
/// form (every one the gateway hands out) builds no key and hashes no path component by
/// component.
#[derive(Default)]
struct FilterIndex {
    global: Option<Vec<Arc<dyn vis_proxy::NetworkFilter>>>,
    projects: foldhash::HashMap<Vec<u8>, Vec<Arc<dyn vis_proxy::NetworkFilter>>>,
}

/// `p`'s bytes as its components spell them (no doubled or trailing separator, no `.`
/// component after the first): two paths equal as `Path`s have the same key, as they find
/// the same scope.
fn path_key(p: &Path) -> std::borrow::Cow<'_, [u8]> {
    let b = p.as_os_str().as_encoded_bytes();
    if in_component_form(b) {
        std::borrow::Cow::Borrowed(b)
    } else {
        let normal: PathBuf = p.components().collect();
        std::borrow::Cow::Owned(normal.into_os_string().into_encoded_bytes())
    }
}

/// No doubled or trailing separator and no `.` component after the first: one pass over
/// the separators (this runs on every proxied request).
fn in_component_form(b: &[u8]) -> bool {
    if b.len() > 1 && b.ends_with(b"/") {
        return false;
    }
    memchr::memchr_iter(b'/', b).all(|i| {
        !matches!(
            b.get(i + 1..),
            Some([b'/', ..]) | Some([b'.']) | Some([b'.', b'/', ..])
        )
    })
}

impl Registry {
    /// Bumped whenever a swap changes what a scope loads: session workers load the new
    /// versions before their next call.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether `scope` has been loaded.
    pub(super) fn has_scope(&self, scope: &Scope) -> bool {
        self.scopes.contains_key(scope)
    }

    /// The loaded state of `scope`.
    pub(super) fn scope(&self, scope: &Scope) -> Option<&ScopeState> {
        self.scopes.get(scope)
    }

    /// Every loaded scope.
    pub(super) fn scope_keys(&self) -> Vec<Scope> {
        self.scopes.keys().cloned().collect()
    }

    /// Puts `next` in place of `scope`'s state; a change of what it loads bumps the
    /// generation.
    pub(super) fn swap(&mut self, scope: Scope, next: ScopeState, changed: bool) {
        if changed {
            self.generation += 1;
        }
        self.scopes.insert(scope, next);
    }

    /// The network filters of a loaded scope: a project's (`None`: the global scope).
    pub(super) fn filters(
        &self,
        project: Option<&Path>,
    ) -> Option<Vec<Arc<dyn vis_proxy::NetworkFilter>>> {
        match project {
            Some(p) => self.filters.projects.get(path_key(p).as_ref()).cloned(),
            None => self.filters.global.clone(),
        }
    }

    /// Replaces every scope's network filter list.
    pub(super) fn set_filters(&mut self, lists: FilterLists) {
        let mut index = FilterIndex::default();
        for (scope, list) in lists {
            match scope {
                Scope::Global => index.global = Some(list),
                Scope::Project(p) => {
                    index.projects.insert(path_key(&p).into_owned(), list);
                }
            }
        }
        self.filters = index;
    }

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
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named;

    #[async_trait::async_trait]
    impl vis_proxy::NetworkFilter for Named {
        fn name(&self) -> &str {
            "named"
        }
        async fn check(
            &self,
            _: &vis_proxy::FilterCtx,
        ) -> Result<vis_proxy::FilterVerdict, vis_proxy::FilterError> {
            Ok(vis_proxy::FilterVerdict::Allow)
        }
    }

    #[test]
    fn a_projects_filters_are_found_by_any_spelling_of_its_path_and_by_no_other_path() {
        let mut reg = Registry::default();
        let mut lists = FilterLists::default();
        let list: Vec<Arc<dyn vis_proxy::NetworkFilter>> = vec![Arc::new(Named)];
        lists.insert(Scope::Project(PathBuf::from("/work/proj/")), list);
        lists.insert(Scope::Global, Vec::new());
        reg.set_filters(lists);
        for same in [
            "/work/proj",
            "/work/proj/",
            "/work//proj",
            "/work/./proj",
            "/work/proj/.",
        ] {
            let found = reg.filters(Some(Path::new(same)));
            assert_eq!(found.map(|l| l.len()), Some(1), "{same}");
        }
        for other in [
            "/work/proj2",
            "/work/pro",
            "/work",
            "work/proj",
            "/work/proj/..",
            "/work/.proj",
        ] {
            assert!(reg.filters(Some(Path::new(other))).is_none(), "{other}");
        }
        assert_eq!(reg.filters(None).map(|l| l.len()), Some(0));
    }

    #[test]
    fn only_a_path_its_components_spell_the_same_way_is_in_component_form() {
        for plain in [
            "/",
            "/work/proj",
            "/work/.proj",
            "/work/proj.",
            "/a/..",
            "./a",
            "a",
        ] {
            assert!(in_component_form(plain.as_bytes()), "{plain}");
            let normal: PathBuf = Path::new(plain).components().collect();
            assert_eq!(normal.as_os_str(), plain, "{plain}");
        }
        for spelled in [
            "//",
            "/work/",
            "/work//proj",
            "/work/./proj",
            "/work/proj/.",
            "/.",
        ] {
            assert!(!in_component_form(spelled.as_bytes()), "{spelled}");
        }
    }
}
