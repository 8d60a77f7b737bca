//! Limits and TLS trust settings (defaults of docs/decisions.md, P9).

use std::net::SocketAddr;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::error::ProxyError;

/// Proxy configuration. `Default` gives the spec's defaults on `127.0.0.1:0`.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Listen address (must be loopback in production).
    pub listen: SocketAddr,
    /// First byte after accept (10 s).
    pub first_byte_timeout: Duration,
    /// Request head / SOCKS handshake / interception handshake (10 s).
    pub head_timeout: Duration,
    /// Upstream connect (15 s).
    pub connect_timeout: Duration,
    /// Idle tunnel teardown (15 min without a byte either way).
    pub idle_timeout: Duration,
    /// A streamed request body that sends nothing this long is cut (60 s; 408 when no
    /// response has started).
    pub body_idle_timeout: Duration,
    /// Per-filter timeout (5 s); a timeout denies.
    pub filter_timeout: Duration,
    /// Concurrent client connections overall, established tunnels included (2048,
    /// `VIS_PROXY_MAX_CONNECTIONS`); lowered at start so that every connection's
    /// descriptors fit under the process's limit with `reserved_fds` to spare.
    pub max_connections: usize,
    /// Descriptors kept free for the rest of the process (the Companion API, the store,
    /// extension workers): `None` = a quarter of the process's limit, at most 4096.
    pub reserved_fds: Option<usize>,
    /// Concurrent attributed requests/tunnels per session (256).
    pub max_per_session: usize,
    /// Connections not yet attributed to a session, counted apart from `max_connections`
    /// (256, `VIS_PROXY_MAX_UNAUTHENTICATED`); when full, a new connection takes the place
    /// of the oldest one that has not sent a byte.
    pub max_unauthenticated: usize,
    /// Time a connection has to get a request attributed before it is closed (10 s).
    pub auth_timeout: Duration,
    /// Request head size cap (64 KiB).
    pub max_header_bytes: usize,
    /// Leaf certificate LRU bound (1024).
    pub leaf_cache_size: usize,
    /// Trust the OS roots for upstream TLS (true).
    pub use_system_roots: bool,
    /// Extra upstream roots (`VIS_SYSTEM_CA_CERT`, or injected by tests).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// How long resolved addresses of denied names are cached (30 s).
    pub denied_name_ttl: Duration,
    /// Event-loop threads that serve connections, each a single-threaded
    /// runtime that keeps a connection for its whole life
    /// ([`crate::default_io_threads`]: `VIS_PROXY_IO_THREADS`, else one per
    /// CPU, at most 4). `0` serves connections on the runtime that started
    /// the proxy.
    pub io_threads: usize,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            first_byte_timeout: Duration::from_secs(10),
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(15 * 60),
            body_idle_timeout: Duration::from_secs(60),
            filter_timeout: Duration::from_secs(5),
            max_connections: std::env::var("VIS_PROXY_MAX_CONNECTIONS")
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|n| *n > 0)
                .unwrap_or(2048),
            reserved_fds: None,
            max_per_session: 256,
            max_unauthenticated: std::env::var("VIS_PROXY_MAX_UNAUTHENTICATED")
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|n| *n > 0)
                .unwrap_or(256),
            auth_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            leaf_cache_size: 1024,
            use_system_roots: true,
            extra_roots: Vec::new(),
            denied_name_ttl: Duration::from_secs(30),
            io_threads: crate::io_threads::default_io_threads(),
        }
    }
}

/// Parse every certificate of a PEM text.
pub fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, ProxyError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem).collect();
    let certs = certs.map_err(|e| ProxyError::Tls(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(ProxyError::Tls("no certificate in PEM".into()));
    }
    Ok(certs)
}

impl ProxyConfig {
    /// Add the roots named by `VIS_SYSTEM_CA_CERT` (a PEM file path, or PEM
    /// text itself), if set.
    pub async fn with_env_extra_roots(mut self) -> Result<Self, ProxyError> {
        let Ok(v) = std::env::var("VIS_SYSTEM_CA_CERT") else {
            return Ok(self);
        };
        if v.trim().is_empty() {
            return Ok(self);
        }
        let pem = if v.contains("-----BEGIN") {
            v.into_bytes()
        } else {
            tokio::fs::read(v.trim()).await?
        };
        self.extra_roots.extend(certs_from_pem(&pem)?);
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn vis_system_ca_cert_may_name_a_file_or_hold_pem_text() {
        let ca = crate::tls::CertAuthority::new(1).unwrap();
        let path = std::env::temp_dir().join(format!("vis-proxy-test-{}.pem", std::process::id()));
        std::fs::write(&path, ca.ca_pem()).unwrap();
        std::env::set_var("VIS_SYSTEM_CA_CERT", &path);
        let c = ProxyConfig::default().with_env_extra_roots().await.unwrap();
        assert_eq!(c.extra_roots.len(), 1);
        std::env::set_var("VIS_SYSTEM_CA_CERT", ca.ca_pem());
        let c = ProxyConfig::default().with_env_extra_roots().await.unwrap();
        assert_eq!(&c.extra_roots[0], ca.ca_der());
        std::env::set_var(
            "VIS_SYSTEM_CA_CERT",
            "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
        );
        assert!(ProxyConfig::default().with_env_extra_roots().await.is_err());
        std::env::remove_var("VIS_SYSTEM_CA_CERT");
        let _ = std::fs::remove_file(path);
    }
}
