//! The seams between the proxy and its host (docs/decisions.md, A5). The gateway
//! implements these; the proxy never knows about sessions or Python.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use tokio::net::TcpStream;

use crate::deny::DeciderKind;
use crate::policy::Policy;

/// Who a proxy token belongs to.
#[derive(Debug, Clone)]
pub struct Principal {
    /// Opaque session id, handed back in every [`Decision`]. Shared: a principal is cloned
    /// for every request an intercepted tunnel carries.
    pub session_id: Arc<str>,
    /// The frozen, compiled policy for this session.
    pub policy: Arc<Policy>,
    /// Loopback ports that are always denied (the gateway's control plane;
    /// the proxy adds its own port itself).
    pub reserved_ports: Arc<[u16]>,
    /// The project whose network filters apply to this principal: opaque to the proxy,
    /// handed back to the [`FilterSet`]. `None`: only process-wide filters.
    pub project: Option<Arc<std::path::Path>>,
    /// What the token was handed out for (a command's program name), reported in every
    /// [`Decision`] as `command`. `None`: the session as a whole.
    pub label: Option<Arc<str>>,
}

/// Result of a token lookup.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// A live session.
    Found(Principal),
    /// No live session for this token (→ 407 / `01 01`).
    Unknown,
    /// The backend failed (→ 403 `vis-agent: session policy error`, fail closed).
    Failed(String),
}

/// token → principal.
#[async_trait]
pub trait Attribution: Send + Sync + 'static {
    /// Look a (non-blank) token up. Called once per HTTP request, per CONNECT
    /// and per SOCKS5 connection.
    async fn lookup(&self, token: &str) -> Lookup;
}

/// Verdict field of a [`Decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Allowed.
    Allow,
    /// Denied.
    Deny,
}

/// Lane field of a [`Decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// Plain HTTP forwarding.
    Http,
    /// Opaque CONNECT tunnel.
    Connect,
    /// Intercepted HTTPS request.
    Https,
    /// SOCKS5.
    Socks,
    /// Provider route (`/_vis/provider/<id>/<token>/…`).
    Provider,
}

/// `decided_by` of a [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecidedBy {
    /// Which stage decided.
    pub kind: DeciderKind,
    /// The selected rule's host pattern.
    pub rule_host: Option<String>,
    /// The filter's name.
    pub filter: Option<String>,
}

/// One egress decision record (the Companion API's record minus `id`/`seq`, which
/// the gateway assigns when it stores/publishes the record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Decision time, epoch milliseconds.
    pub ts: u64,
    /// allow / deny.
    pub decision: Verdict,
    /// Lane.
    pub lane: Lane,
    /// `http`, `https`, `socks`, `http-response`, `https-response`, `connect`.
    pub phase: &'static str,
    /// Method where visible.
    pub method: Option<String>,
    /// Path (+query) where visible.
    pub path: Option<String>,
    /// Target host (normalized).
    pub host: String,
    /// Target port.
    pub port: u16,
    /// Who decided.
    pub decided_by: DecidedBy,
    /// `X-Vis-Egress-Error` kind on denials.
    pub error_kind: Option<String>,
    /// Refusal sentence (or upstream error on an allowed-but-failed request).
    pub reason: Option<String>,
    /// Bytes client → upstream.
    pub bytes_up: u64,
    /// Bytes upstream → client.
    pub bytes_down: u64,
    /// Decision to close.
    pub duration_ms: u64,
    /// Seen inside TLS.
    pub is_intercepted: bool,
    /// Provider id when credential injection or the provider route applied.
    pub provider: Option<String>,
    /// A long-lived allowed flow (opaque tunnel, SOCKS5 connection, upgraded connection)
    /// is reported twice: `open` when it starts (bytes 0), `closed` with its byte counts
    /// and duration when it ends. `None` for a one-shot record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<FlowState>,
    /// Pairs an `open` record with its `closed` one (unique within the proxy; 0 for a
    /// one-shot record). Not serialized.
    #[serde(skip)]
    pub flow: u64,
    /// Learn mode let this request through; what enforcement would have answered
    /// (docs/decisions.md, L1). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_deny: Option<crate::policy::WouldDeny>,
    /// The program whose proxy token made the request ([`Principal::label`]). Absent when
    /// the token was the session's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// `state` of a [`Decision`] that belongs to a long-lived flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowState {
    /// The flow was allowed and is running.
    Open,
    /// The flow ended; bytes and duration are final.
    Closed,
}

/// Where decisions go. Must not block: push into a channel.
pub trait DecisionSink: Send + Sync + 'static {
    /// One record for the given session.
    fn record(&self, session_id: &str, decision: Decision);
}

/// Phase of a network filter call (docs/decisions.md, P6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// Plain HTTP request.
    #[serde(rename = "http")]
    Http,
    /// Intercepted HTTPS request.
    #[serde(rename = "https")]
    Https,
    /// SOCKS5 CONNECT.
    #[serde(rename = "socks")]
    Socks,
    /// Plain HTTP response head.
    #[serde(rename = "http-response")]
    HttpResponse,
    /// Intercepted HTTPS response head.
    #[serde(rename = "https-response")]
    HttpsResponse,
}

impl Phase {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Http => "http",
            Phase::Https => "https",
            Phase::Socks => "socks",
            Phase::HttpResponse => "http-response",
            Phase::HttpsResponse => "https-response",
        }
    }
}

/// What a filter sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilterCtx {
    /// Phase.
    pub phase: Phase,
    /// Method (`None` for socks).
    pub method: Option<String>,
    /// Normalized host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Raw path + query (`None` for socks).
    pub path: Option<String>,
    /// Lower-cased name → trimmed value; last duplicate wins. Response
    /// phases: the response headers.
    pub headers: BTreeMap<String, String>,
    /// Request phases: the body (UTF-8, lossy) when `Content-Length` ≤ 1 MiB.
    pub body: Option<String>,
    /// Response phases: the status code.
    pub status: Option<u16>,
}

/// A filter's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterVerdict {
    /// Let it through.
    Allow,
    /// Deny with this reason.
    Block(String),
}

/// A filter failure; DENIES with kind `filter-error` and the reason
/// `network filter error in '<name>': <message>` (the proxy adds the prefix
/// unless `message` already starts with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// Message.
    pub message: String,
    /// Traceback, if the filter has one (Python).
    pub trace: Option<String>,
}

/// A network filter (docs/decisions.md, P6).
#[async_trait]
pub trait NetworkFilter: Send + Sync + 'static {
    /// Owner / extension name, used in reasons and reports.
    fn name(&self) -> &str;
    /// Inspect one request or response head.
    async fn check(&self, ctx: &FilterCtx) -> Result<FilterVerdict, FilterError>;
}

/// The ordered filters for a principal (registration order).
pub trait FilterSet: Send + Sync + 'static {
    /// Filters that apply to this principal, in order.
    fn filters(&self, principal: &Principal) -> Vec<Arc<dyn NetworkFilter>>;
}

/// No filters at all.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoFilters;

impl FilterSet for NoFilters {
    fn filters(&self, _: &Principal) -> Vec<Arc<dyn NetworkFilter>> {
        Vec::new()
    }
}

/// A fixed, process-global filter list.
#[derive(Default, Clone)]
pub struct StaticFilters(pub Vec<Arc<dyn NetworkFilter>>);

impl FilterSet for StaticFilters {
    fn filters(&self, _: &Principal) -> Vec<Arc<dyn NetworkFilter>> {
        self.0.clone()
    }
}

/// One provider credential for a principal (docs/decisions.md, P8).
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderCredential {
    /// Provider id (reported in decisions).
    pub provider: String,
    /// The provider's own hosts (domain patterns, e.g. `api.openai.com`).
    pub hosts: Vec<String>,
    /// The shape-preserving phantom the sandbox sees.
    pub phantom: String,
    /// The real secret (never shown to filters or logs).
    pub secret: String,
    /// The provider's configured base URL (`https://api.openai.com/v1`),
    /// served to children at `/_vis/provider/<provider>/<token>/…`.
    pub base_url: Option<String>,
}

impl std::fmt::Debug for ProviderCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderCredential")
            .field("provider", &self.provider)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// Which provider credentials apply to a principal.
pub trait Credentials: Send + Sync + 'static {
    /// The principal's phantom → secret mappings. Asked for on every request: an
    /// implementation hands out a list it keeps (a reference count, not a copy).
    fn credentials(&self, principal: &Principal) -> Arc<[ProviderCredential]>;
}

/// An empty credential list, shared (handing it out allocates nothing).
pub fn no_credentials() -> Arc<[ProviderCredential]> {
    static EMPTY: std::sync::LazyLock<Arc<[ProviderCredential]>> =
        std::sync::LazyLock::new(|| Arc::from(Vec::new()));
    EMPTY.clone()
}

/// No provider credentials.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCredentials;

impl Credentials for NoCredentials {
    fn credentials(&self, _: &Principal) -> Arc<[ProviderCredential]> {
        no_credentials()
    }
}

/// Name resolution. Called ONCE per target; the proxy never re-resolves.
#[async_trait]
pub trait Resolver: Send + Sync + 'static {
    /// Every address of `host`.
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>>;
}

/// tokio's `lookup_host` (the system resolver on a blocking thread).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        let addrs = tokio::net::lookup_host((host, port)).await?;
        let mut out: Vec<IpAddr> = Vec::new();
        for a in addrs {
            if !out.contains(&a.ip()) {
                out.push(a.ip());
            }
        }
        Ok(out)
    }
}

/// Opening a TCP connection to an already validated address.
#[async_trait]
pub trait Dialer: Send + Sync + 'static {
    /// Connect; the proxy wraps this in its connect timeout.
    async fn dial(&self, addr: SocketAddr) -> io::Result<TcpStream>;
}

/// Real TCP connects.
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpDialer;

#[async_trait]
impl Dialer for TcpDialer {
    async fn dial(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        let s = TcpStream::connect(addr).await?;
        let _ = s.set_nodelay(true);
        Ok(s)
    }
}

/// Discards decisions (logs them at debug level).
#[derive(Debug, Default, Clone, Copy)]
pub struct LogSink;

impl DecisionSink for LogSink {
    fn record(&self, session_id: &str, d: Decision) {
        tracing::info!(
            session = session_id,
            decision = ?d.decision,
            lane = ?d.lane,
            host = %d.host,
            port = d.port,
            method = ?d.method,
            path = ?d.path,
            reason = ?d.reason,
            bytes_up = d.bytes_up,
            bytes_down = d.bytes_down,
            "egress decision"
        );
    }
}
