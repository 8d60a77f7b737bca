//! Configuration: YAML with snake_case keys, deep-merged in this order (later wins):
//! `<home>/config.yml` (or `<home>/vis.yml`), `<home>/state.yml`, `<project>/vis.yml`,
//! `<project>/.vis/config.yml`. Each file is checked on its own first, so an unknown key or a
//! wrong type is reported with the key's path AND the file it is in.

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use serde_norway::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One provider entry under `providers:`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// `openai`, `anthropic` or `openai-compatible`.
    pub api_style: Option<String>,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    /// Name of an environment variable holding the key.
    pub api_key_env: Option<String>,
    pub model: Option<String>,
    #[serde(default)]
    pub models: Vec<String>,
    pub max_retries: Option<u32>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The model's context window in tokens, when the provider's listing and the table of
    /// well-known models do not know it (a local server, say).
    pub context_window: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JailSection {
    pub enabled: Option<bool>,
    /// The egress policy (docs/decisions.md, P3 and the egress policy rules); validated by the proxy's policy compiler.
    pub network: Option<serde_json::Value>,
}

/// How the model's tools are offered (docs/decisions.md, G6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelTools {
    /// One tool, `python_execution`; everything else is a function inside it.
    #[default]
    Sandbox,
    /// One provider tool per built-in and Symbol (for models that cannot write code).
    Functions,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PythonExecutionSection {
    /// A block's time limit in seconds (default 300); a call with a timeout of its own
    /// (`shell(cmd, timeout=600)`) extends its block.
    pub timeout_s: Option<u64>,
    /// Background jobs a session may have running at once (default 8).
    pub max_background_jobs: Option<usize>,
}

/// How a draft's apply lands its changes (docs/decisions.md, W1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DraftApply {
    /// One commit on the target branch whose parent is its tip.
    #[default]
    Commit,
    /// The changes are written to trunk's files, uncommitted and unstaged.
    Uncommitted,
}

/// `drafts:`: how drafts land.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DraftsSection {
    /// `commit` (default) or `uncommitted`.
    pub apply: Option<DraftApply>,
    /// The model's `draft_approve` lands a draft without asking the user (default false:
    /// the user is asked with a form).
    pub model_may_approve: Option<bool>,
}

/// The agent loop's budgets (`agent:` in `vis.yml`; docs/decisions.md, T4).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// Model requests one turn may make (default 200).
    pub max_steps: Option<usize>,
    /// Wall-clock minutes one turn may run (default 120).
    pub max_minutes: Option<u64>,
    /// The same failing call repeated this many times in a row stops the turn (default 3).
    pub repeated_failures: Option<usize>,
}

/// The merged configuration.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderEntry>,
    pub default_provider: Option<String>,
    pub default_model: Option<String>,
    #[serde(default)]
    pub jail: JailSection,
    /// Extra environment for extensions and sandbox children of this project.
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    /// `sandbox` (default) or `functions`; `VIS_MODEL_TOOLS` sets the gateway-wide default.
    pub model_tools: Option<ModelTools>,
    #[serde(default)]
    pub python_execution: PythonExecutionSection,
    /// MCP servers (`mcp.servers.<name>`), offered in the sandbox under their names.
    #[serde(default)]
    pub mcp: McpSection,
    #[serde(default)]
    pub drafts: DraftsSection,
    /// Replaces the core system prompt (`.vis/SYSTEM.md` wins over it).
    pub system_prompt: Option<String>,
    /// Appended after the project's instructions (after `.vis/APPEND_SYSTEM.md`).
    pub append_system_prompt: Option<String>,
    /// The agent loop's budgets.
    #[serde(default)]
    pub agent: AgentSection,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// Each entry as written; it is read on its own (`mcp::spec::from_config`), so one
    /// that cannot work is reported on that server, not as a broken configuration.
    #[serde(default)]
    pub servers: BTreeMap<String, serde_json::Value>,
}

impl Config {
    /// The project's tool mode: its `model_tools`, else `VIS_MODEL_TOOLS`, else the sandbox.
    pub fn model_tools(&self) -> ModelTools {
        self.model_tools.unwrap_or_else(|| {
            match crate::start_env::var("VIS_MODEL_TOOLS").as_deref() {
                Some("functions") => ModelTools::Functions,
                _ => ModelTools::Sandbox,
            }
        })
    }

    /// A `python_execution` block's time limit (`python_execution.timeout_s`).
    pub fn block_limit(&self) -> std::time::Duration {
        self.python_execution
            .timeout_s
            .filter(|s| *s > 0)
            .map(std::time::Duration::from_secs)
            .unwrap_or(DEFAULT_BLOCK_LIMIT)
    }

    /// Running background jobs a session may have (`python_execution.max_background_jobs`).
    pub fn max_background_jobs(&self) -> usize {
        self.python_execution
            .max_background_jobs
            .unwrap_or(DEFAULT_MAX_JOBS)
    }
}

/// Running background jobs a session may have when `vis.yml` says nothing.
pub const DEFAULT_MAX_JOBS: usize = 8;

/// A `python_execution` block's time limit when `vis.yml` sets none.
pub const DEFAULT_BLOCK_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// A duration in milliseconds from the environment variable `name`, else `default`
/// (unset or not a whole number).
pub fn env_ms(name: &str, default: std::time::Duration) -> std::time::Duration {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map(std::time::Duration::from_millis)
        .unwrap_or(default)
}

/// The dotted keys whose values differ between two configurations, one level deep under
/// the sections (`providers.local`, `jail.network`, `default_model`), sorted.
pub fn changed_keys(old: &Config, new: &Config) -> Vec<String> {
    fn walk(
        prefix: &str,
        a: &serde_json::Value,
        b: &serde_json::Value,
        depth: usize,
        out: &mut Vec<String>,
    ) {
        match (a, b) {
            (serde_json::Value::Object(x), serde_json::Value::Object(y)) if depth < 2 => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                let null = serde_json::Value::Null;
                for k in keys {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(
                        &key,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        depth + 1,
                        out,
                    );
                }
            }
            _ if a != b => out.push(prefix.to_string()),
            _ => {}
        }
    }
    let (a, b) = (
        serde_json::to_value(old).unwrap_or_default(),
        serde_json::to_value(new).unwrap_or_default(),
    );
    let mut out = Vec::new();
    walk("", &a, &b, 0, &mut out);
    out
}

/// The files read for a project, in merge order.
pub fn layer_paths(home: &Path, project: &Path) -> Vec<PathBuf> {
    let home_cfg = if home.join("config.yml").exists() {
        home.join("config.yml")
    } else {
        home.join("vis.yml")
    };
    vec![
        home_cfg,
        home.join("state.yml"),
        project.join("vis.yml"),
        project.join(".vis").join("config.yml"),
    ]
}

/// Deep merge: maps merge key by key, anything else is replaced by the later value.
pub fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Mapping(b), Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn check(value: Value, origin: &str) -> Result<Config> {
    let cfg: Config = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." {
            String::new()
        } else {
            format!(" at `{path}`")
        };
        anyhow!("config error in {origin}{key}: {}", e.inner())
    })?;
    if let Some(net) = &cfg.jail.network {
        // The egress policy compiler names the key (`jail.network.rules[0].access: …`).
        vis_proxy::policy::NetworkConfig::from_json_value(net.clone())
            .and_then(|n| vis_proxy::policy::Policy::compile(&n))
            .map_err(|e| anyhow!("config error in {origin}: {e}"))?;
    }
    Ok(cfg)
}

/// [`load`] on a blocking thread, for async callers (errors as text).
pub async fn load_async(home: &Path, project: &Path) -> Result<Config, String> {
    let (home, project) = (home.to_path_buf(), project.to_path_buf());
    tokio::task::spawn_blocking(move || load(&home, &project))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// Loads and merges the layers for `project`.
pub fn load(home: &Path, project: &Path) -> Result<Config> {
    let mut merged = Value::Mapping(Default::default());
    for path in layer_paths(home, project) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(anyhow!("cannot read {}: {e}", path.display())),
        };
        let origin = path.display().to_string();
        let value: Value =
            serde_norway::from_str(&text).map_err(|e| anyhow!("config error in {origin}: {e}"))?;
        let value = if value.is_null() {
            Value::Mapping(Default::default())
        } else {
            value
        };
        check(value.clone(), &origin)?;
        merge(&mut merged, value);
    }
    check(merged, "the merged configuration")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder with `home/` and `proj/.vis/`, removed when dropped.
    fn tmp() -> tempfile::TempDir {
        let d = tempfile::Builder::new()
            .prefix("vis-cfg-")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(d.path().join("home")).unwrap();
        std::fs::create_dir_all(d.path().join("proj/.vis")).unwrap();
        d
    }

    #[test]
    fn later_layers_win_and_maps_merge() {
        let d = tmp();
        std::fs::write(
            d.path().join("home/config.yml"),
            "providers:\n  a:\n    api_style: openai\n    model: m1\ndefault_provider: a\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("proj/vis.yml"),
            "providers:\n  a:\n    model: m2\n",
        )
        .unwrap();
        std::fs::write(d.path().join("proj/.vis/config.yml"), "default_model: x\n").unwrap();
        let c = load(&d.path().join("home"), &d.path().join("proj")).unwrap();
        assert_eq!(c.providers["a"].model.as_deref(), Some("m2"));
        assert_eq!(c.providers["a"].api_style.as_deref(), Some("openai"));
        assert_eq!(c.default_model.as_deref(), Some("x"));
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_the_key_and_the_file() {
        let d = tmp();
        std::fs::write(
            d.path().join("proj/vis.yml"),
            "providers:\n  a:\n    modle: m\n",
        )
        .unwrap();
        let e = load(&d.path().join("home"), &d.path().join("proj"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("proj/vis.yml"), "{e}");
        assert!(e.contains("providers.a"), "{e}");
        assert!(e.contains("modle"), "{e}");
    }

    #[test]
    fn a_bad_network_policy_is_an_error_naming_the_key_and_the_file() {
        let d = tmp();
        std::fs::write(
            d.path().join("proj/vis.yml"),
            "jail:\n  network:\n    rules:\n      - host: example.com\n        acces: read-only\n",
        )
        .unwrap();
        let e = load(&d.path().join("home"), &d.path().join("proj"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("proj/vis.yml"), "{e}");
        assert!(e.contains("jail.network.rules[0]"), "{e}");
        assert!(e.contains("acces"), "{e}");
    }

    #[test]
    fn a_wrong_type_is_an_error_naming_the_key() {
        let d = tmp();
        std::fs::write(d.path().join("home/vis.yml"), "jail:\n  enabled: maybe\n").unwrap();
        let e = load(&d.path().join("home"), &d.path().join("proj"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("jail.enabled"), "{e}");
        assert!(e.contains("home/vis.yml"), "{e}");
    }
}
