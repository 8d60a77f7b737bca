//! What every connection of a running proxy shares: the services the host handed in,
//! the settings, the CA, the upstream clients and the per-session concurrency slots.
//! Nothing here starts or serves anything (that is [`crate::Proxy`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::body::ProxyBody;
use crate::conn_pool::Upstreams;
use crate::dial::DeniedCache;
use crate::settings::ProxyConfig;
use crate::tls::{http1_only, CertAuthority};
use crate::traits::{
    Attribution, Credentials, DecisionSink, Dialer, FilterSet, NoCredentials, NoFilters, Resolver,
    SystemResolver, TcpDialer,
};
use crate::upstream::ValidatedConnector;
use hyper_util::client::legacy::Client;

/// Everything the proxy asks its host for (the proxy knows nothing of sessions or
/// Python: it asks these).
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

/// One client connection's admission (its place in the unauthenticated budget, then under
/// the overall cap); shared by whatever outlives the connection's first exchange (a tunnel,
/// an upgraded connection).
pub(crate) type ConnGuard = Arc<crate::admission::Conn>;

/// The state of one running proxy, shared by all its connections.
pub(crate) struct Shared {
    pub cfg: ProxyConfig,
    pub svc: Services,
    pub ca: CertAuthority,
    pub trusted_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Pooled client for requests whose upstream connection outlives the client
    /// connection's task (upgrades) and for provider routes to plain HTTP.
    pub http_client: Client<ValidatedConnector, ProxyBody>,
    /// How upstream connections are opened (dialer, timeout, TLS, idle sockets).
    pub up: Upstreams,
    pub own_port: u16,
    pub denied_cache: DeniedCache,
    /// Flows in use per session (read and written on every request: foldhash, seeded per map).
    sessions: Mutex<foldhash::HashMap<Arc<str>, usize>>,
}

/// Holds one of a session's concurrency slots (or none: a flow outside the cap, a probe).
pub(crate) struct SessionSlot(Option<(Arc<Shared>, Arc<str>)>);

impl SessionSlot {
    /// A slot that counts against no cap.
    pub(crate) fn uncounted() -> SessionSlot {
        SessionSlot(None)
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let Some((shared, sid)) = self.0.take() else {
            return;
        };
        let Ok(mut m) = shared.sessions.lock() else {
            return;
        };
        if let Some(n) = m.get_mut(&*sid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&*sid);
            }
        }
    }
}

impl Shared {
    /// Assemble the state (the listener is started by [`crate::Proxy::start`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: ProxyConfig,
        svc: Services,
        ca: CertAuthority,
        upstream_tls: Arc<rustls::ClientConfig>,
        trusted_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
        http_client: Client<ValidatedConnector, ProxyBody>,
        own_port: u16,
    ) -> Self {
        let up = Upstreams {
            dialer: svc.dialer.clone(),
            connect_timeout: cfg.connect_timeout,
            tls_h1: Arc::new(http1_only(&upstream_tls)),
            tls: upstream_tls,
            idle_tcp: Default::default(),
        };
        Shared {
            cfg,
            svc,
            ca,
            trusted_roots,
            http_client,
            up,
            own_port,
            denied_cache: Mutex::new(HashMap::new()),
            sessions: Mutex::default(),
        }
    }

    /// Take a per-session slot, or `None` when the session is at its cap.
    pub fn session_slot(self: &Arc<Self>, sid: &Arc<str>) -> Option<SessionSlot> {
        let mut m = self.sessions.lock().ok()?;
        let n = match m.get_mut(&**sid) {
            Some(n) => n,
            None => m.entry(sid.clone()).or_insert(0),
        };
        if *n >= self.cfg.max_per_session {
            return None;
        }
        *n += 1;
        Some(SessionSlot(Some((self.clone(), sid.clone()))))
    }
}
