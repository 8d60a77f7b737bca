//! How a session reaches its MCP servers: the child environment and jail of a stdio
//! server, and the egress proxy (with the session's token and the proxy's CA) that every
//! HTTP request to a server or its sign-in goes through.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where and how a connection's process or requests run.
#[derive(Debug, Clone)]
pub struct Reach {
    /// The child environment (proxy variables, CA bundle, scrubbed secrets).
    pub env: BTreeMap<String, String>,
    /// The jail's argv prefix (empty: no jail).
    pub jail: Vec<String>,
    /// The working directory when the server names none.
    pub cwd: PathBuf,
    /// `http://<token>:…@127.0.0.1:<port>`: the egress proxy for HTTP servers.
    pub proxy_url: Option<String>,
    /// The PEM bundle the proxy's interception chains to.
    pub ca_bundle: Option<PathBuf>,
}

/// A client builder that goes through the egress proxy and trusts its CA.
pub async fn http_builder(reach: &Reach) -> Result<reqwest::ClientBuilder, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = reqwest::Client::builder();
    if let Some(p) = &reach.proxy_url {
        b = b.proxy(reqwest::Proxy::all(p).map_err(|e| e.to_string())?);
    }
    if let Some(path) = &reach.ca_bundle {
        let pem = tokio::fs::read(path)
            .await
            .map_err(|e| format!("cannot read the CA bundle {}: {e}", path.display()))?;
        for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| e.to_string())? {
            b = b.add_root_certificate(cert);
        }
    }
    Ok(b)
}

/// How a session's MCP connections run: its child environment, the jail, the proxy.
pub fn reach(
    sandbox: &crate::sandbox::Sandbox,
    sid: &str,
    root: &std::path::Path,
    cfg: &crate::config::Config,
) -> Result<Reach, String> {
    let env = sandbox.child_env(sid, root, cfg);
    let jail = sandbox.jail_prefix(root, cfg)?.unwrap_or_default();
    let token = sandbox.token(sid, root, cfg);
    Ok(Reach {
        env,
        jail,
        cwd: root.to_path_buf(),
        proxy_url: Some(format!(
            "http://{token}:{}@127.0.0.1:{}",
            crate::sandbox::env::PROXY_PASSWORD,
            sandbox.port()
        )),
        ca_bundle: Some(sandbox.ca_bundle.clone()),
    })
}
