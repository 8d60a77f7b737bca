//! Loading extension files: build a scope's new state, then swap it in.

use super::client::{self, CallCtx};
use super::protocol::WireError;
use super::{
    discovery, file_str, freeze, Catalog, Entry, ExtensionHost, LoadFailure, ReloadReport, Scope,
    ScopeState,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl ExtensionHost {
    /// Loads (again) the global extensions and, with `project`, that project's: build then
    /// swap, file by file. A file that fails keeps its last good version (`is_stale`);
    /// vanished files are removed. Session workers pick the new versions up at their next
    /// call (none is interrupted).
    pub async fn reload(&self, project: Option<&Path>) -> ReloadReport {
        let mut report = self.reload_scope(Scope::Global).await;
        if let Some(p) = project {
            let r = self.reload_scope(Scope::Project(p.to_path_buf())).await;
            report.loaded.extend(r.loaded);
            report.failures.extend(r.failures);
            report.removed.extend(r.removed);
        }
        report
    }

    /// Loads a project's extensions the first time a session of that project needs them.
    pub async fn ensure_project(&self, project: Option<&Path>) {
        let missing_global = !self
            .inner
            .registry
            .read()
            .scopes
            .contains_key(&Scope::Global);
        if missing_global {
            self.load_scope(Scope::Global, true).await;
        }
        if let Some(p) = project {
            let scope = Scope::Project(p.to_path_buf());
            let missing = !self.inner.registry.read().scopes.contains_key(&scope);
            if missing {
                self.load_scope(scope, true).await;
            }
        }
    }

    async fn reload_scope(&self, scope: Scope) -> ReloadReport {
        self.load_scope(scope, false).await
    }

    async fn load_scope(&self, scope: Scope, only_if_missing: bool) -> ReloadReport {
        let _one = self.inner.reload_lock.lock().await;
        if only_if_missing && self.inner.registry.read().scopes.contains_key(&scope) {
            return ReloadReport::default();
        }
        let dir = match &scope {
            Scope::Global => discovery::global_dir(&self.inner.cfg.home),
            Scope::Project(p) => discovery::project_dir(p),
        };
        let files = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || discovery::entries(&dir))
                .await
                .unwrap_or_default()
        };
        let previous = self
            .inner
            .registry
            .read()
            .scopes
            .get(&scope)
            .cloned()
            .unwrap_or_default();
        let home = self.inner.cfg.home.clone();
        let first = !self
            .inner
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
        let timeout = self.inner.cfg.load_timeout;
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
                        .inner
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
                    let catalog: Catalog = serde_json::from_value(raw.clone()).unwrap_or_default();
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
                    .inner
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
            let mut reg = self.inner.registry.write();
            let known = reg.scopes.contains_key(&scope);
            let changed = !known || fingerprint(&previous) != fingerprint(&next);
            if changed {
                // Session workers load the new versions before their next call.
                reg.generation += 1;
            }
            reg.scopes.insert(scope.clone(), next);
            reg.rebuild_filters(&Arc::downgrade(&self.inner));
        }
        report
    }
}
