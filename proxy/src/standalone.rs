//! Stand-alone mode (docs/decisions.md, A5): run the proxy from a policy file, for
//! users who only want the egress proxy (`vis-gateway proxy --policy FILE`).
//!
//! File format (YAML, closed maps — unknown keys are errors naming the key):
//!
//! ```yaml
//! listen: 127.0.0.1:8899        # optional; default 127.0.0.1:0 (OS-assigned)
//! tokens:                       # required; each is a valid proxy token
//!   - 0b7c2a9e-2f9b-4c1e-9d43-1c1b1f0e8a11
//! reserved_ports: [7890]        # optional; loopback ports always denied
//! network:                      # optional; the `jail.network` keys
//!   allowed_domains: [example.com]
//!   rules:
//!     - {host: api.example.com, access: read-only}
//! ```
//!
//! Every token gets the same policy; decisions are written to the log
//! (`tracing`, target `vis_proxy`) with session id `standalone-<n>` (the
//! token's position in the list — tokens never appear in logs).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;

use crate::engine::Proxy;
use crate::error::ProxyError;
use crate::policy::config::{NonBlank, Port};
use crate::policy::{NetworkConfig, Policy};
use crate::settings::ProxyConfig;
use crate::state::Services;
use crate::traits::{Attribution, LogSink, Lookup, Principal};

/// The policy file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandaloneFile {
    /// Listen address.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Accepted proxy tokens.
    pub tokens: Vec<NonBlank>,
    /// Reserved loopback ports.
    #[serde(default)]
    pub reserved_ports: Vec<Port>,
    /// `jail.network` keys.
    #[serde(default)]
    pub network: NetworkConfig,
}

impl StandaloneFile {
    /// Parse YAML text; errors name the key path.
    pub fn from_yaml(text: &str) -> Result<Self, ProxyError> {
        let de = serde_norway::Deserializer::from_str(text);
        let f: StandaloneFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let mut m = crate::policy::config::describe_path_error("", &e);
            let inner = e.inner().to_string();
            if e.path().to_string().split('.').count() <= 1
                && NETWORK_KEYS
                    .iter()
                    .any(|k| inner.starts_with(&format!("unknown field `{k}`")))
            {
                m.push_str(" (policy keys such as this one go under `network:`)");
            }
            ProxyError::Config(m)
        })?;
        if f.tokens.is_empty() {
            return Err(ProxyError::Config(
                "tokens: at least one token is required".into(),
            ));
        }
        let network = f.network.clone().validate_in("network")?;
        Ok(StandaloneFile { network, ..f })
    }
}

/// How to run stand-alone.
#[derive(Debug, Clone)]
pub struct StandaloneConfig {
    /// The YAML policy file.
    pub policy_file: PathBuf,
    /// Overrides `listen:` from the file.
    pub listen: Option<SocketAddr>,
    /// Limits and trust (its `listen` is replaced). `extra_roots` from
    /// `VIS_SYSTEM_CA_CERT` are added automatically.
    pub proxy: ProxyConfig,
}

impl StandaloneConfig {
    /// Defaults for a policy file.
    pub fn new(policy_file: impl Into<PathBuf>) -> Self {
        StandaloneConfig {
            policy_file: policy_file.into(),
            listen: None,
            proxy: ProxyConfig::default(),
        }
    }
}

struct StaticTokens {
    tokens: Vec<String>,
    policy: Arc<Policy>,
    reserved: Arc<[u16]>,
}

#[async_trait]
impl Attribution for StaticTokens {
    async fn lookup(&self, token: &str) -> Lookup {
        match self.tokens.iter().position(|t| t == token) {
            Some(i) => Lookup::Found(Principal {
                session_id: format!("standalone-{i}").into(),
                policy: self.policy.clone(),
                reserved_ports: self.reserved.clone(),
                project: None,
                label: None,
            }),
            None => Lookup::Unknown,
        }
    }
}

/// Keys of the `network:` section, for the hint when one is put at the top level.
const NETWORK_KEYS: &[&str] = &[
    "allowed_domains",
    "denied_domains",
    "exclude_domains",
    "allow_private",
    "inbound_ports",
    "rules",
];

/// Read the file and start the proxy; returns the running proxy.
pub async fn start_standalone(cfg: StandaloneConfig) -> Result<Proxy, ProxyError> {
    let text = tokio::fs::read_to_string(&cfg.policy_file)
        .await
        .map_err(|e| {
            ProxyError::Config(format!(
                "cannot read the policy file {}: {e}",
                cfg.policy_file.display()
            ))
        })?;
    let file = StandaloneFile::from_yaml(&text)?;
    let policy = Arc::new(Policy::compile(&file.network)?);
    let attribution = StaticTokens {
        tokens: file.tokens.iter().map(|t| t.0.clone()).collect(),
        policy,
        reserved: file.reserved_ports.iter().map(|p| p.0).collect(),
    };
    let mut pc = cfg.proxy.with_env_extra_roots().await?;
    if let Some(l) = cfg.listen.or(file.listen) {
        pc.listen = l;
    }
    Proxy::start(pc, Services::new(Arc::new(attribution), Arc::new(LogSink))).await
}

/// Run stand-alone until Ctrl-C. Prints the listening address to stderr.
pub async fn run_standalone(cfg: StandaloneConfig) -> Result<(), ProxyError> {
    let proxy = start_standalone(cfg).await?;
    eprintln!("vis egress proxy listening on {}", proxy.local_addr());
    tokio::signal::ctrl_c().await?;
    proxy.shutdown();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_format_parses_and_unknown_keys_name_their_path() {
        let f = StandaloneFile::from_yaml(
            "listen: 127.0.0.1:0\ntokens: [a]\nnetwork:\n  allowed_domains: [x.com]\n",
        )
        .unwrap();
        assert_eq!(f.tokens.len(), 1);
        let e =
            StandaloneFile::from_yaml("tokens: [a]\nnetwork:\n  rules: [{host: x, acces: ro}]\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("network.rules[0]") && e.contains("acces"), "{e}");
        let e = StandaloneFile::from_yaml("tokens: []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tokens"), "{e}");
        let e = StandaloneFile::from_yaml("tokens: [a]\nnetwork: {inbound_ports: [1, 1]}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("inbound_ports"), "{e}");
    }

    #[test]
    fn errors_name_the_stand_alone_files_own_sections_and_each_key_once() {
        let e = StandaloneFile::from_yaml("tokens: [a]\nnetwork: {inbound_ports: [1, 1]}\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("config error: network.inbound_ports[1]"),
            "{e}"
        );
        let e = StandaloneFile::from_yaml("tokens: [a]\nallowed_domains: [x]\n")
            .unwrap_err()
            .to_string();
        assert_eq!(e.matches("allowed_domains").count(), 1, "{e}");
        assert!(
            e.contains("at the top level") && e.contains("under `network:`"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_missing_policy_file_is_named_once() {
        let e = start_standalone(StandaloneConfig::new("/nonexistent/policy.yml"))
            .await
            .err()
            .map(|e| format!("{:#}", anyhow_like(&e)))
            .unwrap_or_default();
        assert!(e.contains("/nonexistent/policy.yml"), "{e}");
        assert_eq!(e.matches("No such file").count(), 1, "{e}");
    }

    /// The error and its sources, as `anyhow`'s `{:#}` prints them.
    fn anyhow_like(e: &ProxyError) -> String {
        let mut out = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            out.push_str(&format!(": {s}"));
            src = s.source();
        }
        out
    }
}
