//! [`Drafts`]: the lifecycle of drafts over the store and the two backends.
//!
//! Every mutation runs under one lock (git worktree commands of one repository must not
//! race), writes the record before it answers, and keeps the in-memory pin of each
//! session's current draft in step, so resolving a session's working root is a map lookup.

use super::{check_label, copy, git, guard, rows, Backend, Draft, DraftError, DraftState, Hooks};
use crate::store::Store;
use parking_lot::Mutex;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A draft to resume: by its stable id (the API) or by its label (`/draft resume NAME`).
#[derive(Debug, Clone)]
pub enum Target {
    Id(String),
    Label(String),
}

/// What an apply landed.
#[derive(Debug, Clone)]
pub struct Applied {
    pub draft: Draft,
    pub files: Vec<String>,
    /// git: the commit on the target branch (`None` when nothing was committed).
    pub commit: Option<String>,
}

pub struct Drafts {
    store: Store,
    /// `<home>/drafts`: one folder per repository, one per draft inside it.
    dir: PathBuf,
    /// Folders a copy never takes (the gateway's home, which holds the drafts).
    skip: Vec<PathBuf>,
    pins: Mutex<HashMap<String, Draft>>,
    lock: tokio::sync::Mutex<()>,
}

fn store_err(e: crate::store::StoreError) -> DraftError {
    DraftError::failed(format!("the draft record could not be stored: {e}"))
}

fn now_ms() -> i64 {
    vis_companion_api::sse::now_ms()
}

impl Drafts {
    /// Opens the drafts of a gateway home, loading which session is in which draft.
    pub async fn open(store: Store, home: &Path) -> anyhow::Result<Drafts> {
        let pinned = store.with(rows::pinned).await?;
        let pins = pinned
            .into_iter()
            .filter_map(|d| Some((d.session_id.clone()?, d)))
            .collect();
        Ok(Drafts {
            store,
            dir: home.join("drafts"),
            skip: vec![home.to_path_buf()],
            pins: Mutex::new(pins),
            lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The draft the session is inside, if any.
    pub fn current(&self, sid: &str) -> Option<Draft> {
        self.pins.lock().get(sid).cloned()
    }

    /// Where the session's tools run while it is in a draft.
    pub fn root_of(&self, sid: &str) -> Option<PathBuf> {
        self.pins.lock().get(sid).map(|d| d.root.clone())
    }

    async fn save(&self, d: &Draft) -> Result<(), DraftError> {
        let d2 = d.clone();
        self.store
            .with(move |db| rows::put(db, &d2))
            .await
            .map_err(store_err)?;
        let mut pins = self.pins.lock();
        pins.retain(|_, p| p.workspace_id != d.workspace_id);
        if let (DraftState::Active, Some(sid)) = (d.state, &d.session_id) {
            pins.insert(sid.clone(), d.clone());
        }
        Ok(())
    }

    /// The real root drafts of `trunk` are listed under: its git top level, else itself.
    pub async fn repo_root(trunk: &Path) -> PathBuf {
        match git::detect(trunk).await {
            Some(r) => r.top,
            None => trunk.to_path_buf(),
        }
    }

    /// Active drafts of the repository `trunk` lies in, newest first.
    pub async fn list(&self, trunk: &Path) -> Result<Vec<Draft>, DraftError> {
        let repo = Self::repo_root(trunk).await.to_string_lossy().into_owned();
        self.store
            .with(move |db| rows::active_of_repo(db, &repo))
            .await
            .map_err(store_err)
    }

    async fn get(&self, id: &str) -> Result<Option<Draft>, DraftError> {
        let id = id.to_string();
        self.store
            .with(move |db| rows::get(db, &id))
            .await
            .map_err(store_err)
    }

    fn already_in(d: &Draft) -> DraftError {
        DraftError::AlreadyInDraft(format!(
            "already in draft '{}': /draft stash, /draft apply or /draft abandon first",
            d.label
        ))
    }

    fn on_trunk(what: &str) -> DraftError {
        DraftError::OnTrunk(format!("the session is on trunk (its real folder): {what}"))
    }

    fn manifest_path(&self, d: &Draft) -> PathBuf {
        d.dir
            .parent()
            .unwrap_or(&self.dir)
            .join(".manifests")
            .join(format!("{}.json", d.workspace_id))
    }

    /// Makes a draft of the session's trunk and enters it.
    pub async fn create(
        &self,
        sid: &str,
        trunk: &Path,
        label: &str,
        clean: bool,
        hooks: &dyn Hooks,
    ) -> Result<Draft, DraftError> {
        let label = check_label(label)?;
        let _g = self.lock.lock().await;
        if let Some(d) = self.current(sid) {
            return Err(Self::already_in(&d));
        }
        if !tokio::fs::metadata(trunk).await.is_ok_and(|m| m.is_dir()) {
            return Err(DraftError::unavailable(format!(
                "the session's folder {} does not exist",
                trunk.display()
            )));
        }
        let repo = git::detect(trunk).await;
        if clean && repo.is_none() {
            return Err(DraftError::unavailable(
                "a clean draft starts from the last commit, and this folder is not in a git repository",
            ));
        }
        let repo_root = repo.as_ref().map_or(trunk.to_path_buf(), |r| r.top.clone());
        if self.list(trunk).await?.iter().any(|d| d.label == label) {
            return Err(DraftError::Exists(format!(
                "a draft named '{label}' already exists here: /draft resume {label}"
            )));
        }
        let name = repo_root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "root".into());
        let key = hex::encode(Sha256::digest(repo_root.to_string_lossy().as_bytes()));
        let dir = self.dir.join(format!("{name}-{}", &key[..10])).join(&label);
        if tokio::fs::symlink_metadata(&dir).await.is_ok() {
            return Err(DraftError::Exists(format!(
                "the draft folder {} already exists",
                dir.display()
            )));
        }
        let root = match repo.as_ref().map(|r| r.prefix.trim_end_matches('/')) {
            Some(prefix) if !prefix.is_empty() => dir.join(prefix),
            _ => dir.clone(),
        };
        let mut d = Draft {
            workspace_id: uuid::Uuid::new_v4().to_string(),
            label: label.clone(),
            repo_root,
            trunk_root: trunk.to_path_buf(),
            dir: dir.clone(),
            root,
            backend: if repo.is_some() {
                Backend::Git
            } else {
                Backend::Copy
            },
            branch: repo.as_ref().map(|_| format!("vis-draft/{label}")),
            target_branch: None,
            baseline: None,
            state: DraftState::Active,
            session_id: Some(sid.to_string()),
            created_by: sid.to_string(),
            fork_ms: now_ms(),
            ended_ms: None,
            reason: None,
        };
        let args = Value::Object(d.hook_args());
        guard(hooks, "draft/create", &args).await?;
        match &repo {
            Some(r) => {
                let branch = d.branch.clone().unwrap_or_default();
                let made = git::create(r, &dir, &branch, clean, hooks, &args).await?;
                d.baseline = Some(made.baseline);
                d.target_branch = Some(made.target_branch);
            }
            None => {
                // The gateway's home is never copied (a folder inside it: only the drafts).
                let skip = if self.skip.iter().any(|s| trunk.starts_with(s)) {
                    vec![self.dir.clone()]
                } else {
                    self.skip.clone()
                };
                let (src, dst, mpath) = (trunk.to_path_buf(), dir.clone(), self.manifest_path(&d));
                let made = tokio::task::spawn_blocking(move || {
                    let m = copy::create(&src, &dst, &skip)?;
                    if let Some(p) = mpath.parent() {
                        std::fs::create_dir_all(p)
                            .map_err(|e| DraftError::failed(e.to_string()))?;
                    }
                    copy::save_manifest(&mpath, &m)
                })
                .await
                .map_err(|e| DraftError::failed(e.to_string()))?;
                if let Err(e) = made {
                    let _ = tokio::fs::remove_dir_all(&dir).await;
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.save(&d).await {
            let _ = self.remove_files(&d).await;
            return Err(e);
        }
        hooks
            .after("draft/create", &Value::Object(d.hook_args()), "created")
            .await;
        Ok(d)
    }

    /// Deletes a draft's files (its worktree and branch, or its copy and manifest).
    async fn remove_files(&self, d: &Draft) -> Result<(), DraftError> {
        match d.backend {
            Backend::Git => git::remove(d, &d.repo_root).await,
            Backend::Copy => {
                let _ = tokio::fs::remove_file(self.manifest_path(d)).await;
                match tokio::fs::remove_dir_all(&d.dir).await {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(DraftError::failed(
                        format!("cannot remove {}: {e}", d.dir.display()),
                    )),
                    _ => Ok(()),
                }
            }
        }
    }

    /// Lands the session's draft in the real folder and returns the session to trunk.
    pub async fn apply(
        &self,
        sid: &str,
        message: Option<&str>,
        mode: crate::config::DraftApply,
        hooks: &dyn Hooks,
    ) -> Result<Applied, DraftError> {
        let _g = self.lock.lock().await;
        let Some(mut d) = self.current(sid) else {
            return Err(Self::on_trunk("there is no draft to apply"));
        };
        let message = message
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("Draft '{}'", d.label));
        let mut args = Value::Object(d.hook_args());
        args["branch"] = json!(d.branch);
        args["target_branch"] = json!(d.target_branch);
        args["message"] = json!(message);
        let (files, commit) = match d.backend {
            Backend::Git => {
                let prepared = git::prepare(&d, &d.repo_root).await?;
                let files = prepared
                    .as_ref()
                    .map(|p| p.files.clone())
                    .unwrap_or_default();
                args["files"] = json!(files);
                guard(hooks, "draft/approve", &args).await?;
                let commit = match &prepared {
                    Some(p) => git::land(&d, &d.repo_root, p, &message, mode, hooks).await?,
                    None => None,
                };
                (files, commit)
            }
            Backend::Copy => {
                let (dir, mpath) = (d.dir.clone(), self.manifest_path(&d));
                let (files, base) = tokio::task::spawn_blocking(move || {
                    let base = copy::load_manifest(&mpath)?;
                    Ok::<_, DraftError>((copy::changed_files(&dir, &base)?, base))
                })
                .await
                .map_err(|e| DraftError::failed(e.to_string()))??;
                args["files"] = json!(files);
                guard(hooks, "draft/approve", &args).await?;
                let (trunk, dir) = (d.trunk_root.clone(), d.dir.clone());
                let landed = tokio::task::spawn_blocking(move || copy::apply(&trunk, &dir, &base))
                    .await
                    .map_err(|e| DraftError::failed(e.to_string()))??;
                (landed, None)
            }
        };
        d.state = DraftState::Applied;
        d.session_id = None;
        d.ended_ms = Some(now_ms());
        self.save(&d).await?;
        if let Err(e) = self.remove_files(&d).await {
            tracing::warn!(draft = %d.workspace_id, "an applied draft's files stay: {e}");
        }
        hooks
            .after(
                "draft/approve",
                &args,
                commit.as_deref().unwrap_or("applied"),
            )
            .await;
        Ok(Applied {
            draft: d,
            files,
            commit,
        })
    }

    /// The files a draft changed since it started.
    pub async fn changed(&self, d: &Draft) -> Result<Vec<String>, DraftError> {
        match d.backend {
            Backend::Git => Ok(git::changed(d).await?.1),
            Backend::Copy => {
                let (dir, mpath) = (d.dir.clone(), self.manifest_path(d));
                tokio::task::spawn_blocking(move || {
                    copy::changed_files(&dir, &copy::load_manifest(&mpath)?)
                })
                .await
                .map_err(|e| DraftError::failed(e.to_string()))?
            }
        }
    }

    /// Returns the session to trunk, keeping its draft as it is.
    pub async fn stash(&self, sid: &str) -> Result<Draft, DraftError> {
        let _g = self.lock.lock().await;
        let Some(mut d) = self.current(sid) else {
            return Err(Self::on_trunk("there is no draft to stash"));
        };
        d.session_id = None;
        self.save(&d).await?;
        Ok(d)
    }

    /// Enters an active draft of the session's repository.
    pub async fn resume(
        &self,
        sid: &str,
        trunk: &Path,
        target: Target,
    ) -> Result<Draft, DraftError> {
        let _g = self.lock.lock().await;
        if let Some(d) = self.current(sid) {
            return Err(Self::already_in(&d));
        }
        let repo = Self::repo_root(trunk).await;
        let found = match &target {
            Target::Id(id) => self.get(id).await?,
            Target::Label(l) => self.list(trunk).await?.into_iter().find(|d| &d.label == l),
        };
        let what = match &target {
            Target::Id(id) => format!("no draft {id}"),
            Target::Label(l) => format!("no draft named '{l}' in {}", repo.display()),
        };
        let mut d = found.ok_or_else(|| {
            DraftError::not_found(format!(
                "{what}: /draft list shows the drafts you can resume"
            ))
        })?;
        self.check_usable(&d, sid, &repo)?;
        d.session_id = Some(sid.to_string());
        self.save(&d).await?;
        Ok(d)
    }

    /// An active draft of this repository, not inside another session.
    fn check_usable(&self, d: &Draft, sid: &str, repo: &Path) -> Result<(), DraftError> {
        if d.state != DraftState::Active {
            return Err(DraftError::NotActive(format!(
                "draft '{}' was {} and is gone",
                d.label,
                d.state.as_str()
            )));
        }
        if d.repo_root != repo {
            return Err(DraftError::OtherRepo(format!(
                "draft '{}' belongs to {}, not to this session's {}",
                d.label,
                d.repo_root.display(),
                repo.display()
            )));
        }
        match &d.session_id {
            Some(other) if other != sid => Err(DraftError::InUse(format!(
                "draft '{}' is in use by another session",
                d.label
            ))),
            _ => Ok(()),
        }
    }

    /// Discards a draft for good: the session's current one, or the one named by `id`.
    pub async fn abandon(
        &self,
        sid: &str,
        trunk: &Path,
        id: Option<&str>,
        reason: Option<&str>,
        hooks: &dyn Hooks,
    ) -> Result<Draft, DraftError> {
        let _g = self.lock.lock().await;
        let mut d = match id {
            None => self.current(sid).ok_or_else(|| {
                Self::on_trunk("trunk is your real folder and cannot be abandoned")
            })?,
            Some(id) => {
                let d = self
                    .get(id)
                    .await?
                    .ok_or_else(|| DraftError::not_found(format!("no draft {id}")))?;
                self.check_usable(&d, sid, &Self::repo_root(trunk).await)?;
                d
            }
        };
        let args = Value::Object(d.hook_args());
        guard(hooks, "draft/discard", &args).await?;
        d.state = DraftState::Abandoned;
        d.session_id = None;
        d.ended_ms = Some(now_ms());
        d.reason = reason
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string);
        self.save(&d).await?;
        // The decision is made and stored; a folder that resists removal is only logged.
        if let Err(e) = self.remove_files(&d).await {
            tracing::warn!(draft = %d.workspace_id, "an abandoned draft's files stay: {e}");
        }
        hooks.after("draft/discard", &args, "discarded").await;
        Ok(d)
    }

    /// Forgets a deleted session's pin (its draft stays, parked).
    pub async fn release(&self, sid: &str) {
        if self.current(sid).is_some() {
            let _ = self.stash(sid).await;
        }
    }
}
