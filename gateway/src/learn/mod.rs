//! Learn mode (docs/decisions.md, L1): the least-privilege network policy proposed from what
//! a session (or a project) really did, reviewed and applied to the project's `vis.yml`.
//!
//! * `propose` — observations → the smallest rules and the YAML (pure).
//! * `edit` — the minimal, checked edit of `vis.yml` (pure).
//! * `rows` — the egress rows read, the sessions' mode switches, the changes applied.
//! * this file — [`Learn`], the small typed API the routes and `/net` call.

pub mod edit;
pub mod propose;
pub mod rows;

use crate::config::Config;
use crate::sandbox::Sandbox;
use crate::store::Store;
use rows::Scope;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use vis_companion_api::learn::{
    EgressMode, EgressProposal, PolicyChange, ProposedRule, SuggestedAdditions,
};
use vis_proxy::policy::{Mode, NetworkConfig};

/// What went wrong, for the routes to answer.
#[derive(Debug)]
pub enum LearnError {
    /// The request names something that is not there, or asks for nothing (400).
    Invalid(String),
    /// The project's configuration or file cannot be read or edited safely (409).
    Conflict(String),
    /// The store or the file system failed (500).
    Failed(String),
}

impl std::fmt::Display for LearnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LearnError::Invalid(m) | LearnError::Conflict(m) | LearnError::Failed(m) => {
                f.write_str(m)
            }
        }
    }
}

fn failed(e: impl std::fmt::Display) -> LearnError {
    LearnError::Failed(e.to_string())
}

/// The projects' configuration as learn mode needs it (the gateway's configuration job).
#[async_trait::async_trait]
pub trait Projects: Send + Sync + 'static {
    /// The configuration of a project (home layers + the project's own).
    async fn project(&self, root: &Path) -> Result<Config, String>;
    /// Re-reads the configuration after `vis.yml` changed.
    async fn reload(&self, root: &Path) -> Result<(), String>;
}

pub struct Learn {
    store: Store,
    configuration: Arc<dyn Projects>,
    sandbox: OnceLock<Arc<Sandbox>>,
}

/// Parses `learn` / `enforce`.
pub fn parse_mode(s: &str) -> Result<Mode, LearnError> {
    match s.trim() {
        "learn" => Ok(Mode::Learn),
        "enforce" => Ok(Mode::Enforce),
        other => Err(LearnError::Invalid(format!(
            "mode must be \"learn\" or \"enforce\" (or null to follow the project), not {other:?}"
        ))),
    }
}

impl Learn {
    pub fn new(store: Store, configuration: Arc<dyn Projects>) -> Learn {
        Learn {
            store,
            configuration,
            sandbox: OnceLock::new(),
        }
    }

    /// The running proxy: the sessions' stored mode switches are handed to it.
    pub async fn install_sandbox(&self, sandbox: Arc<Sandbox>) {
        match self.store.with(rows::modes).await {
            Ok(modes) => {
                for (sid, m) in modes {
                    if let Ok(mode) = parse_mode(&m) {
                        sandbox.tokens.set_mode(&sid, Some(mode));
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the sessions' network modes"),
        }
        let _ = self.sandbox.set(sandbox);
    }

    async fn network(&self, root: &Path) -> Result<(NetworkConfig, Option<bool>), LearnError> {
        let cfg = self
            .configuration
            .project(root)
            .await
            .map_err(LearnError::Conflict)?;
        let net = match cfg.jail.network.clone() {
            Some(v) => NetworkConfig::from_json_value(v).map_err(|e| {
                LearnError::Conflict(format!("the project's jail.network is invalid: {e}"))
            })?,
            None => NetworkConfig::default(),
        };
        Ok((net, cfg.jail.enabled))
    }

    async fn observed(
        &self,
        scope: &Scope,
        denials: bool,
    ) -> Result<Vec<propose::Observation>, LearnError> {
        let scope = scope.clone();
        let rows = self
            .store
            .with(move |db| rows::egress_rows(db, &scope))
            .await
            .map_err(failed)?;
        Ok(rows
            .iter()
            .filter_map(|r| rows::observation(r, denials))
            .collect())
    }

    /// The session's own mode switch, if any.
    pub async fn session_override(&self, sid: &str) -> Result<Option<Mode>, LearnError> {
        let id = sid.to_string();
        let m = self
            .store
            .with(move |db| rows::mode(db, &id))
            .await
            .map_err(failed)?;
        Ok(m.and_then(|m| parse_mode(&m).ok()))
    }

    /// The mode in force for a session of `root`.
    pub async fn mode(&self, sid: &str, root: &Path) -> Result<EgressMode, LearnError> {
        let (net, _) = self.network(root).await?;
        let project = net.mode.unwrap_or(Mode::Enforce);
        let own = self.session_override(sid).await?;
        Ok(EgressMode {
            session_id: sid.to_string(),
            mode: own.unwrap_or(project).as_str().to_string(),
            project_mode: project.as_str().to_string(),
            session_override: own.map(|m| m.as_str().to_string()),
        })
    }

    /// Switches the session's own mode (`None`: follow the project); the session's next
    /// request is decided by it.
    pub async fn set_mode(
        &self,
        sid: &str,
        root: &Path,
        mode: Option<Mode>,
    ) -> Result<EgressMode, LearnError> {
        let (id, m) = (sid.to_string(), mode.map(|m| m.as_str()));
        self.store
            .with(move |db| rows::set_mode(db, &id, m))
            .await
            .map_err(failed)?;
        if let Some(sb) = self.sandbox.get() {
            sb.tokens.set_mode(sid, mode);
            let cfg = self
                .configuration
                .project(root)
                .await
                .map_err(LearnError::Conflict)?;
            sb.refresh_policy(sid, &cfg);
        }
        tracing::info!(session = %sid, mode = ?mode, "egress mode switched for the session");
        self.mode(sid, root).await
    }

    /// The proposal from the scope's recorded egress.
    pub async fn proposal(
        &self,
        scope: Scope,
        root: &Path,
        sid_for_mode: Option<&str>,
    ) -> Result<EgressProposal, LearnError> {
        let (net, enabled) = self.network(root).await?;
        let seen = self.observed(&scope, false).await?;
        let rules = propose::rules(&seen);
        let yaml = propose::yaml(&rules, &net, enabled);
        let mode = match sid_for_mode {
            Some(sid) => self.mode(sid, root).await?.mode,
            None => net.mode.unwrap_or(Mode::Enforce).as_str().to_string(),
        };
        let (scope_name, session_id) = match scope {
            Scope::Session(sid) => ("session", Some(sid)),
            Scope::Project(_) => ("project", None),
        };
        Ok(EgressProposal {
            scope: scope_name.into(),
            session_id,
            root: root.to_string_lossy().into_owned(),
            mode,
            yaml,
            rules,
        })
    }

    /// Enforce-mode denials a proposal would have allowed, grouped by that rule.
    pub async fn suggested(
        &self,
        scope: Scope,
        root: &Path,
    ) -> Result<SuggestedAdditions, LearnError> {
        let seen = self.observed(&scope, true).await?;
        let denials = seen.iter().map(|o| o.count.max(1)).sum();
        let (scope_name, session_id) = match scope {
            Scope::Session(sid) => ("session", Some(sid)),
            Scope::Project(_) => ("project", None),
        };
        Ok(SuggestedAdditions {
            scope: scope_name.into(),
            session_id,
            root: root.to_string_lossy().into_owned(),
            denials,
            rules: propose::rules(&seen),
        })
    }

    /// Writes `chosen` rules (and `mode: enforce` when asked) into `<root>/vis.yml`, records
    /// who applied what, and re-decides the live sessions of the project with the new policy.
    pub async fn apply(
        &self,
        root: &Path,
        sid: Option<&str>,
        chosen: Vec<ProposedRule>,
        enforce: bool,
        applied_by: &str,
    ) -> Result<PolicyChange, LearnError> {
        if chosen.is_empty() && !enforce {
            return Err(LearnError::Invalid(
                "nothing to apply: choose at least one rule or switch enforce on".into(),
            ));
        }
        let file: PathBuf = root.join("vis.yml");
        let rules = chosen.clone();
        let path = file.clone();
        tokio::task::spawn_blocking(move || -> Result<(), LearnError> {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(failed(format!("cannot read {}: {e}", path.display()))),
            };
            let out = edit::apply(
                &text,
                &edit::Edit {
                    rules: &rules,
                    mode: enforce.then_some("enforce"),
                },
            )
            .map_err(LearnError::Conflict)?;
            write_replacing(&path, &out)
                .map_err(|e| failed(format!("cannot write {}: {e}", path.display())))
        })
        .await
        .map_err(failed)??;
        let root_s = root.to_string_lossy().into_owned();
        let mut change = PolicyChange {
            id: 0,
            root: root_s.clone(),
            file: file.to_string_lossy().into_owned(),
            session_id: sid.map(str::to_string),
            applied_by: applied_by.to_string(),
            applied_at: vis_companion_api::sse::now_ms(),
            rules: chosen,
            mode: enforce.then(|| "enforce".to_string()),
        };
        let record = serde_json::to_string(&change).map_err(failed)?;
        let (at, sid_s) = (change.applied_at, change.session_id.clone());
        change.id = self
            .store
            .with(move |db| rows::insert_change(db, &root_s, sid_s.as_deref(), at, &record))
            .await
            .map_err(failed)?;
        tracing::info!(root = %root.display(), by = %applied_by, rules = change.rules.len(),
            enforce, "network policy applied to vis.yml");
        if let Err(e) = self.configuration.reload(root).await {
            tracing::warn!(error = %e, "reload after the policy edit failed");
        }
        if let Some(sb) = self.sandbox.get() {
            let cfg = self
                .configuration
                .project(root)
                .await
                .map_err(LearnError::Conflict)?;
            for s in sb.tokens.sessions_of(root) {
                sb.refresh_policy(&s, &cfg);
            }
        }
        Ok(change)
    }

    /// A project's applied changes, newest first.
    pub async fn changes(&self, root: &Path) -> Result<Vec<PolicyChange>, LearnError> {
        let r = root.to_string_lossy().into_owned();
        let rows = self
            .store
            .with(move |db| rows::changes(db, &r))
            .await
            .map_err(failed)?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, rec)| {
                let mut c: PolicyChange = serde_json::from_str(&rec).ok()?;
                c.id = id;
                Some(c)
            })
            .collect())
    }
}

/// Replaces a file through a sibling temporary file (never a half-written `vis.yml`),
/// keeping its permissions.
fn write_replacing(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("yml.vis-edit");
    std::fs::write(&tmp, text)?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::rename(&tmp, path)
}

/// Markdown for `/net propose` and the review form: one line per rule with its evidence.
pub fn describe(rules: &[ProposedRule]) -> String {
    let mut out = String::new();
    for r in rules {
        let what = if r.methods.is_empty() {
            "any method".to_string()
        } else if r.read_only {
            "read-only".to_string()
        } else {
            r.methods.join(", ")
        };
        let ports: Vec<String> = r.ports.iter().map(u16::to_string).collect();
        let e = &r.evidence;
        out.push_str(&format!(
            "- `{}` port {} — {}{}; {} request(s), {} would be denied now{}{}\n",
            r.host,
            ports.join(", "),
            what,
            r.path_prefix
                .as_deref()
                .map(|p| format!(" under `{p}/`"))
                .unwrap_or_default(),
            e.requests,
            e.would_deny,
            if e.commands.is_empty() {
                String::new()
            } else {
                format!("; by {}", e.commands.join(", "))
            },
            if e.hosts.len() > 1 {
                format!("; {} hosts", e.hosts.len())
            } else {
                String::new()
            },
        ));
    }
    out
}
