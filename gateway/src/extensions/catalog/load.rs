//! Loading extension files: build a scope's new state, then swap it in (and rebuild the
//! network filter lists).

use super::Catalog;
use crate::extensions::client::{self, CallCtx};
use crate::extensions::filter_workers::PyNetworkFilter;
use crate::extensions::protocol::WireError;
use crate::extensions::registry::{Entry, FilterLists, Manifest, Registry, Scope, ScopeState};
use crate::extensions::types::file_str;
use crate::extensions::{discovery, freeze, FilterInfo, LoadFailure, ReloadReport};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl Catalog {
    pub(super) async fn load_scope(&self, scope: Scope, only_if_missing: bool) -> ReloadReport {
        let _one = self.reload_lock.lock().await;
        if only_if_missing && self.registry.read().has_scope(&scope) {
            return ReloadReport::default();
        }
        let dir = match &scope {
            Scope::Global => discovery::global_dir(&self.cfg.home),
            Scope::Project(p) => discovery::project_dir(p),
        };
        let files = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || discovery::entries(&dir))
                .await
                .unwrap_or_default()
        };
        let previous = self
            .registry
            .read()
            .scope(&scope)
            .cloned()
            .unwrap_or_default();
        let home = self.cfg.home.clone();
        let first = !self
            .frozen_cleared
            .swap(true, std::sync::atomic::Ordering::SeqCst);
        let to_freeze = files.clone();
        // Freeze every import root (blocking IO off the runtime threads).
        let sources: Vec<(PathBuf, Result<freeze::Frozen, String>)> =
            tokio::task::spawn_blocking(move || {
                if first {
                    freeze::clear(&home);
                }
                to_freeze
                    .into_iter()
                    .map(|f| {
                        let frozen = freeze::freeze(&home, &f).map_err(|e| format!("{e:#}"));
                        (f, frozen)
                    })
                    .collect()
            })
            .await
            .unwrap_or_default();
        let ctx = CallCtx {
            project_root: scope.project_root().map(Path::to_path_buf),
            ..CallCtx::default()
        };
        let timeout = self.cfg.load_timeout;
        let scope_root = scope.project_root().map(Path::to_path_buf);
        // One call per file: a file that hangs or kills the worker at import fails alone
        // (the next call starts a fresh registration worker).
        let mut results = Vec::new();
        for (file, bytes) in sources {
            let outcome = match bytes {
                Err(e) => Err(WireError::host("OSError", e)),
                Ok(frozen) => {
                    let payload =
                        client::load_payload(&file, &frozen.source, Some(&frozen.import_root));
                    match self
                        .workers
                        .registration()
                        .call(ctx.clone(), "load", payload, timeout)
                        .await
                    {
                        Ok(v) if v.get("loaded").and_then(Value::as_bool) == Some(true) => {
                            Ok((v.get("catalog").cloned().unwrap_or(Value::Null), frozen))
                        }
                        Ok(v) => Err(v
                            .get("error")
                            .cloned()
                            .and_then(|e| serde_json::from_value(e).ok())
                            .unwrap_or_else(|| {
                                WireError::host("LoadError", "the file did not load")
                            })),
                        Err(e) => Err(WireError {
                            kind: e.kind().to_string(),
                            message: e.message(),
                            traceback: e.traceback(),
                        }),
                    }
                }
            };
            results.push((file, outcome));
        }

        let mut next = ScopeState::default();
        let mut report = ReloadReport::default();
        for (file, outcome) in results {
            let old = previous.entries.iter().find(|e| e.file == file).cloned();
            match outcome {
                Ok((raw, frozen)) => {
                    let catalog: Manifest = serde_json::from_value(raw.clone()).unwrap_or_default();
                    if let Some(dup) = next.entries.iter().find(|e| e.catalog.name == catalog.name)
                    {
                        next.failures.push(LoadFailure {
                            file: file.clone(),
                            project_root: scope_root.clone(),
                            extension: Some(catalog.name.clone()),
                            error: WireError::host(
                                "DuplicateExtension",
                                format!(
                                    "extension '{}' is already registered by {}",
                                    catalog.name,
                                    dup.file.display()
                                ),
                            ),
                            is_stale: false,
                        });
                        continue;
                    }
                    report.loaded.push(catalog.name.clone());
                    next.entries.push(Arc::new(Entry {
                        file,
                        scope: scope.clone(),
                        catalog,
                        raw,
                        source: Arc::new(frozen.source),
                        import_root: Some(frozen.import_root),
                        is_stale: false,
                    }));
                }
                Err(error) => {
                    let failure = LoadFailure {
                        file: file.clone(),
                        project_root: scope_root.clone(),
                        extension: old.as_ref().map(|o| o.catalog.name.clone()),
                        error,
                        is_stale: old.is_some(),
                    };
                    tracing::warn!(
                        target: "vis::extension",
                        file = %file.display(),
                        "extension failed to load: {}",
                        failure.error.message
                    );
                    next.failures.push(failure);
                    if let Some(old) = old {
                        next.entries.push(Arc::new(Entry {
                            file: old.file.clone(),
                            scope: old.scope.clone(),
                            catalog: old.catalog.clone(),
                            raw: old.raw.clone(),
                            source: old.source.clone(),
                            import_root: old.import_root.clone(),
                            is_stale: true,
                        }));
                    }
                }
            }
        }
        for old in &previous.entries {
            if !files.contains(&old.file) {
                report.removed.push(old.catalog.name.clone());
                let payload = json!({"file": file_str(&old.file)});
                let _ = self
                    .workers
                    .registration()
                    .call(CallCtx::default(), "unload", payload, timeout)
                    .await;
            }
        }
        report.failures = next.failures.clone();
        type Print = (PathBuf, Option<PathBuf>, bool);
        let fingerprint = |s: &ScopeState| -> Vec<Print> {
            s.entries
                .iter()
                .map(|e| (e.file.clone(), e.import_root.clone(), e.is_stale))
                .collect()
        };
        {
            let mut reg = self.registry.write();
            let known = reg.has_scope(&scope);
            let changed = !known || fingerprint(&previous) != fingerprint(&next);
            // Session workers load the new versions before their next call.
            reg.swap(scope.clone(), next, changed);
            self.rebuild_filters(&mut reg);
        }
        report
    }

    /// Rebuilds the registry's network filter lists: one `vis_proxy` filter per
    /// `NetworkFilter`, each calling its extension file's own filter worker
    /// (`filter_workers.rs`); workers of files no scope uses any more are let go.
    fn rebuild_filters(&self, reg: &mut Registry) {
        let mut keep = Vec::new();
        let lists: FilterLists = reg
            .scope_keys()
            .into_iter()
            .map(|scope| {
                let mut list: Vec<Arc<dyn vis_proxy::NetworkFilter>> = Vec::new();
                for e in reg.resolve(scope.project_root()) {
                    if e.catalog.network_filters.is_empty() {
                        continue;
                    }
                    let client = self.workers.filter_worker(&self.cfg, &e);
                    keep.push(crate::extensions::filter_workers::key_of(&e));
                    for index in 0..e.catalog.network_filters.len() {
                        let info = FilterInfo {
                            extension: e.catalog.name.clone(),
                            file: e.file.clone(),
                            index,
                        };
                        list.push(Arc::new(PyNetworkFilter::new(
                            client.clone(),
                            self.cfg.filter_timeout,
                            info,
                        )));
                    }
                }
                (scope, list)
            })
            .collect();
        reg.set_filters(lists);
        self.workers.retain_filter_workers(&keep);
    }
}
