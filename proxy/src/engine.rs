//! The running [`Proxy`]: start (CA, upstream roots, listener), the children's CA
//! bundle, `/net-probe` and shutdown. The state its connections share is in `state.rs`.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::error::ProxyError;
use crate::probe::{ProbeDeps, ProbeError, ProbeReport};
use crate::settings::ProxyConfig;
use crate::state::{Services, Shared};
use crate::tls::{upstream_client_config, CertAuthority};
use crate::traits::Principal;
use crate::upstream::ValidatedConnector;

/// A running proxy. Dropping it (or [`Proxy::shutdown`]) stops accepting;
/// established connections finish on their own.
pub struct Proxy {
    pub(crate) shared: Arc<Shared>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
}

impl Proxy {
    /// Mint the CA, load upstream roots, bind the listener and start serving.
    pub async fn start(cfg: ProxyConfig, svc: Services) -> Result<Proxy, ProxyError> {
        let listener = TcpListener::bind(cfg.listen).await?;
        let addr = listener.local_addr()?;
        let (use_sys, extra, cache) = (
            cfg.use_system_roots,
            cfg.extra_roots.clone(),
            cfg.leaf_cache_size,
        );
        let (ca, (upstream_tls, trusted_roots)) =
            tokio::task::spawn_blocking(move || -> Result<_, ProxyError> {
                Ok((
                    CertAuthority::new(cache)?,
                    upstream_client_config(use_sys, &extra)?,
                ))
            })
            .await
            .map_err(|e| ProxyError::Tls(e.to_string()))??;
        let http_client = Client::builder(TokioExecutor::new()).build(ValidatedConnector {
            dialer: svc.dialer.clone(),
            timeout: cfg.connect_timeout,
        });
        let shared = Arc::new(Shared::new(
            cfg,
            svc,
            ca,
            upstream_tls,
            trusted_roots,
            http_client,
            addr.port(),
        ));
        let (stop, stop_rx) = watch::channel(false);
        let io = crate::io_threads::IoThreads::start(shared.cfg.io_threads, &stop_rx)?;
        match io.accept_handle() {
            Some(handle) => {
                // the listener moves to the proxy thread's event loop
                let std_listener = listener.into_std()?;
                let shared = shared.clone();
                handle.spawn(async move {
                    match TcpListener::from_std(std_listener) {
                        Ok(l) => crate::listener::serve(l, shared, io, stop_rx).await,
                        Err(e) => tracing::error!(error = %e, "the proxy cannot listen"),
                    }
                });
            }
            None => {
                tokio::spawn(crate::listener::serve(
                    listener,
                    shared.clone(),
                    io,
                    stop_rx,
                ));
            }
        }
        Ok(Proxy { shared, addr, stop })
    }

    /// The bound address (`127.0.0.1:<port>`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The interception CA certificate (PEM) for the children's CA bundle.
    pub fn ca_pem(&self) -> &str {
        self.shared.ca.ca_pem()
    }

    /// The children's CA bundle: the interception CA first, then every
    /// root the proxy trusts upstream (system roots + `VIS_SYSTEM_CA_CERT`),
    /// deduplicated, as PEM. Write it to the file named by `SSL_CERT_FILE` & co.
    pub fn ca_bundle_pem(&self) -> String {
        let mut out = String::from(self.ca_pem());
        if !out.ends_with('\n') {
            out.push('\n');
        }
        for r in &self.shared.trusted_roots {
            if r != self.shared.ca.ca_der() {
                out.push_str(&crate::tls::pem_encode(r));
            }
        }
        out
    }

    /// The interception CA certificate (DER).
    pub fn ca_der(&self) -> &[u8] {
        self.shared.ca.ca_der().as_ref()
    }

    /// `/net-probe` with this proxy's resolver, filters and reserved port: the same
    /// phases as a request, with a connector that does not dial.
    pub async fn probe(
        &self,
        principal: &Principal,
        args: &str,
    ) -> Result<ProbeReport, ProbeError> {
        let s = &self.shared;
        let deps = ProbeDeps {
            resolver: s.svc.resolver.clone(),
            filters: s.svc.filters.clone(),
            filter_timeout: s.cfg.filter_timeout,
            proxy_port: Some(s.own_port),
        };
        crate::probe::probe(&deps, principal, args).await
    }

    /// Stop accepting (idempotent). Established connections finish on their own.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }
}
