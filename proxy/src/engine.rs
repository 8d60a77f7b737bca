//! Shared proxy state, the service bundle and the running [`Proxy`] handle.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::body::ProxyBody;
use crate::error::ProxyError;
use crate::settings::ProxyConfig;
use crate::tls::{upstream_client_config, CertAuthority};
use crate::traits::{
    Attribution, Credentials, DecisionSink, Dialer, FilterSet, NetworkFilter, NoCredentials,
    NoFilters, Principal, Resolver, SystemResolver, TcpDialer,
};
use crate::upstream::ValidatedConnector;

/// Everything the proxy asks its host for (decision A5).
#[derive(Clone)]
pub struct Services {
    /// token → principal.
    pub attribution: Arc<dyn Attribution>,
    /// Where decisions go.
    pub sink: Arc<dyn DecisionSink>,
    /// Ordered network filters.
    pub filters: Arc<dyn FilterSet>,
    /// DNS.
    pub resolver: Arc<dyn Resolver>,
    /// TCP connects.
    pub dialer: Arc<dyn Dialer>,
    /// Provider credentials (phantom → secret swap).
    pub credentials: Arc<dyn Credentials>,
}

impl Services {
    /// Services with no filters, the system resolver and real TCP dials.
    pub fn new(attribution: Arc<dyn Attribution>, sink: Arc<dyn DecisionSink>) -> Self {
        Services {
            attribution,
            sink,
            filters: Arc::new(NoFilters),
            resolver: Arc::new(SystemResolver),
            dialer: Arc::new(TcpDialer),
            credentials: Arc::new(NoCredentials),
        }
    }
    /// Replace the filter set.
    pub fn with_filters(mut self, f: Arc<dyn FilterSet>) -> Self {
        self.filters = f;
        self
    }
    /// Replace the resolver.
    pub fn with_resolver(mut self, r: Arc<dyn Resolver>) -> Self {
        self.resolver = r;
        self
    }
    /// Replace the provider credentials.
    pub fn with_credentials(mut self, c: Arc<dyn Credentials>) -> Self {
        self.credentials = c;
        self
    }
    /// Replace the dialer.
    pub fn with_dialer(mut self, d: Arc<dyn Dialer>) -> Self {
        self.dialer = d;
        self
    }
}

pub(crate) struct Shared {
    pub cfg: ProxyConfig,
    pub svc: Services,
    pub ca: CertAuthority,
    pub upstream_tls: Arc<rustls::ClientConfig>,
    pub trusted_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub http_client: Client<ValidatedConnector, ProxyBody>,
    pub own_port: u16,
    pub denied_cache: crate::dial::DeniedCache,
    /// Idle plain-HTTP upstream sockets left by ended client connections.
    pub idle_tcp: crate::conn_pool::IdleTcp,
    sessions: Mutex<HashMap<String, usize>>,
}

/// Holds one of a session's concurrency slots.
pub(crate) struct SessionSlot {
    shared: Arc<Shared>,
    sid: String,
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        if let Ok(mut m) = self.shared.sessions.lock() {
            if let Some(n) = m.get_mut(&self.sid) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    m.remove(&self.sid);
                }
            }
        }
    }
}

impl Shared {
    pub fn filters(&self, p: &Principal) -> Vec<Arc<dyn NetworkFilter>> {
        self.svc.filters.filters(p)
    }

    /// Take a per-session slot, or `None` when the session is at its cap.
    pub fn session_slot(self: &Arc<Self>, sid: &str) -> Option<SessionSlot> {
        let mut m = self.sessions.lock().ok()?;
        let n = match m.get_mut(sid) {
            Some(n) => n,
            None => m.entry(sid.to_string()).or_insert(0),
        };
        if *n >= self.cfg.max_per_session {
            return None;
        }
        *n += 1;
        Some(SessionSlot {
            shared: self.clone(),
            sid: sid.to_string(),
        })
    }
}

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
        let shared = Arc::new(Shared {
            cfg,
            svc,
            ca,
            upstream_tls,
            trusted_roots,
            http_client,
            own_port: addr.port(),
            denied_cache: Mutex::new(HashMap::new()),
            idle_tcp: Default::default(),
            sessions: Mutex::new(HashMap::new()),
        });
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

    /// The children's CA bundle (§7): the interception CA first, then every
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

    /// Stop accepting (idempotent). Established connections finish on their own.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }
}
