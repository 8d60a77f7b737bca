//! The sandbox runner: every child process of a session runs with the proxy environment
//! (docs/decisions.md, P10) and a proxy token that attributes its traffic to the session (docs/decisions.md, P2); the
//! proxy reports each decision into the session's stream (docs/decisions.md, G4).

pub mod aggregate;
pub mod credentials;
pub mod env;
pub mod jail;
pub mod run;
pub mod shell;
pub mod sink;
pub mod tokens;

use crate::bus::Bus;
use crate::config::Config;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vis_proxy::policy::{NetworkConfig, Policy};
use vis_proxy::{Principal, Proxy, ProxyConfig, Services};

pub struct Sandbox {
    pub proxy: Proxy,
    pub tokens: Arc<tokens::Tokens>,
    pub ca_bundle: PathBuf,
    /// The children's `WGETRC`, naming the bundle.
    pub wgetrc: PathBuf,
    /// The gateway's own ports, always denied to children (shared by every principal).
    pub reserved_ports: Arc<[u16]>,
    /// Phantom keys and routes of the configured LLM providers (docs/decisions.md, P8).
    pub routes: Arc<credentials::ProviderRoutes>,
}

/// Compiles a session's `jail.network` policy; a broken policy denies everything (fail closed).
pub fn compile_policy(cfg: &Config) -> Arc<Policy> {
    let Some(net) = cfg.jail.network.clone() else {
        return Arc::new(Policy::unrestricted());
    };
    match NetworkConfig::from_json_value(net).and_then(|n| Policy::compile(&n)) {
        Ok(p) => Arc::new(p),
        Err(e) => Arc::new(Policy::deny_all(Some(format!(
            "the session's jail.network policy is invalid: {e}"
        )))),
    }
}

impl Sandbox {
    /// Starts the proxy on a loopback port and writes the child CA bundle under the home.
    pub async fn start(
        home: &Path,
        bus: Arc<Bus>,
        reserved_ports: Vec<u16>,
        filters: Arc<dyn vis_proxy::FilterSet>,
    ) -> Result<Sandbox> {
        let tokens = Arc::new(tokens::Tokens::default());
        let routes = Arc::new(credentials::ProviderRoutes::default());
        let cfg = ProxyConfig::default()
            .with_env_extra_roots()
            .await
            .context("VIS_SYSTEM_CA_CERT")?;
        let forget = routes.clone();
        tokens.on_revoke(Box::new(move |sid| forget.forget(sid)));
        let egress = sink::EgressSink::new(bus);
        egress.spawn_flusher();
        let svc = Services::new(Arc::new(tokens::TokenLookup(tokens.clone())), egress)
            .with_credentials(Arc::new(credentials::RoutesCredentials(routes.clone())))
            .with_filters(filters);
        let proxy = Proxy::start(cfg, svc)
            .await
            .context("cannot start the egress proxy")?;
        let dir = home.join("ca");
        std::fs::create_dir_all(&dir)?;
        let ca_bundle = dir.join(format!("bundle-{}.pem", std::process::id()));
        std::fs::write(&ca_bundle, proxy.ca_bundle_pem())
            .with_context(|| format!("cannot write {}", ca_bundle.display()))?;
        let wgetrc = dir.join(format!("wgetrc-{}", std::process::id()));
        std::fs::write(&wgetrc, env::wgetrc(&ca_bundle))
            .with_context(|| format!("cannot write {}", wgetrc.display()))?;
        Ok(Sandbox {
            proxy,
            tokens,
            ca_bundle,
            wgetrc,
            reserved_ports: reserved_ports.into(),
            routes,
        })
    }

    pub fn port(&self) -> u16 {
        self.proxy.local_addr().port()
    }

    /// The session's principal, minting its token on first use. `root` is the session's
    /// project: its extensions' filters (and only theirs, with the global ones) decide the
    /// session's traffic.
    pub fn token(&self, sid: &str, root: &Path, cfg: &Config) -> String {
        self.tokens.token_for(
            || Principal {
                session_id: sid.into(),
                policy: self.session_policy(sid, cfg),
                reserved_ports: self.reserved_ports.clone(),
                project: Some(Arc::from(root)),
                label: None,
            },
            sid,
        )
    }

    /// The session's policy: the project's, with the session's own mode switch applied.
    pub fn session_policy(&self, sid: &str, cfg: &Config) -> Arc<Policy> {
        let policy = compile_policy(cfg);
        match self.tokens.mode_of(sid) {
            Some(mode) => Arc::new((*policy).clone().with_mode(mode)),
            None => policy,
        }
    }

    /// Re-decides the session's live token with its current policy (after a `vis.yml` edit
    /// or a mode switch).
    pub fn refresh_policy(&self, sid: &str, cfg: &Config) {
        self.tokens.repolicy(sid, self.session_policy(sid, cfg));
    }

    /// The full child environment for a session's process.
    pub fn child_env(&self, sid: &str, root: &Path, cfg: &Config) -> BTreeMap<String, String> {
        self.child_env_for(sid, root, cfg, None)
    }

    /// [`Self::child_env`] for one program (`command`: its name), whose egress decisions then
    /// name it; `None` uses the session's own token.
    pub fn child_env_for(
        &self,
        sid: &str,
        root: &Path,
        cfg: &Config,
        command: Option<&str>,
    ) -> BTreeMap<String, String> {
        let label = command
            .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
            .map(|c| c.chars().take(64).collect::<String>())
            .filter(|c| !c.is_empty());
        let token = match label {
            Some(l) => self.tokens.token_for_label(
                || Principal {
                    session_id: sid.into(),
                    policy: self.session_policy(sid, cfg),
                    reserved_ports: self.reserved_ports.clone(),
                    project: Some(Arc::from(root)),
                    label: None,
                },
                sid,
                &l,
            ),
            None => self.token(sid, root, cfg),
        };
        let mut project = env::project_env(root, &cfg.environment);
        project.extend(self.routes.child_vars(sid, self.port(), &token));
        let proxy = env::ProxyEnv {
            port: self.port(),
            token,
            ca_bundle: self.ca_bundle.clone(),
            wgetrc: self.wgetrc.clone(),
        };
        let mut env = env::child_env(crate::start_env::vars(), &project, &proxy);
        // The child can name its session (e.g. to read its egress decisions).
        env.insert("VIS_SESSION_ID".into(), sid.to_string());
        env
    }

    /// The jail's argv prefix when the session's config asks for it (`jail.enabled: true`),
    /// `None` when it does not, or why this host cannot enforce it (fail closed: the caller
    /// must not run the child). Blocks on a trial run the first time.
    pub fn jail_prefix(&self, root: &Path, cfg: &Config) -> Result<Option<Vec<String>>, String> {
        if cfg.jail.enabled != Some(true) {
            return Ok(None);
        }
        let home = self.ca_bundle.parent().and_then(|ca| ca.parent());
        let log_file = home.map(|h| h.join("logs")).and_then(|logs| {
            std::fs::create_dir_all(&logs).ok()?;
            Some(logs.join("pasta.log"))
        });
        let spec = jail::JailSpec {
            proxy_port: self.port(),
            root: root.to_path_buf(),
            hide: home.map(Path::to_path_buf).into_iter().collect(),
            expose_ro: vec![self.ca_bundle.clone(), self.wgetrc.clone()],
            as_root: jail::running_as_root(),
            log_file,
        };
        jail::prepare(&spec).map(Some)
    }

    /// `/net-probe` for a session: host gate, SSRF class and filters, no socket opened.
    pub async fn probe(
        &self,
        sid: &str,
        root: &Path,
        cfg: &Config,
        args: &str,
    ) -> Result<String, String> {
        self.token(sid, root, cfg);
        let principal = self
            .tokens
            .principal_of(sid)
            .ok_or("the session has no proxy token")?;
        let report = self
            .proxy
            .probe(&principal, args)
            .await
            .map_err(|e| e.to_string())?;
        Ok(report.render())
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ca_bundle);
        let _ = std::fs::remove_file(&self.wgetrc);
    }
}
