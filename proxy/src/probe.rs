//! `/net-probe` (docs/decisions.md, E8): the flow's steps ([`crate::phases`]) on a
//! synthetic request with a connector that does not dial, then every filter one by one.
//!
//! Tier 1 is the steps up to the connect with no filters registered: the host gate,
//! the rules and the SSRF floor (the name is resolved, no socket is opened). Only when
//! Tier 1 allows does every filter run, each reported on its own; the final verdict is
//! Tier 1's denial, else the first filter's, else allow — what a lane answers, except
//! when both a filter and the SSRF floor would refuse: a lane runs its filters before
//! the floor and reports the filter, the probe (whose Tier 1 runs no filter) the floor.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::deny::Denial;
use crate::dial::validate_with;
use crate::filters::{run_all, FilterRow};
use crate::lanes::target::parse_authority;
use crate::phases::{self, Cleared, Env, Framing, Step, Target};
use crate::policy::normalize_host;
use crate::record::RecordBase;
use crate::state::SessionSlot;
use crate::traits::{
    Decision, DecisionSink, FilterCtx, FilterSet, Lane, NetworkFilter, Phase, Principal,
    ProviderCredential, Resolver,
};

/// Usage text for a blank target.
pub const USAGE: &str = "Usage: /net-probe [METHOD] <url | host[:port]>";

const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT",
];

/// Why a probe could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// Blank input.
    #[error("{}", USAGE)]
    Usage,
    /// No host in the target.
    #[error("Can't parse a host out of {0}")]
    NoHost(String),
    /// Unparsable URL.
    #[error("Bad URL: {0}")]
    BadUrl(String),
}

/// The synthetic request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeTarget {
    /// `http`, `https` or `socks`.
    pub scheme: &'static str,
    /// Filter phase.
    pub phase: Phase,
    /// Method (`None` for host:port).
    pub method: Option<String>,
    /// Normalized host.
    pub host: String,
    /// Port (0 = not given).
    pub port: u16,
    /// Path + query (`None` for host:port).
    pub path: Option<String>,
}

/// Parse `/net-probe` arguments.
pub fn parse_args(args: &str) -> Result<ProbeTarget, ProbeError> {
    let parts: Vec<&str> = args.split_whitespace().collect();
    let (method, target) = match parts.as_slice() {
        [] => return Err(ProbeError::Usage),
        [m, t, ..] if METHODS.contains(&m.to_ascii_uppercase().as_str()) => {
            (m.to_ascii_uppercase(), *t)
        }
        [t, ..] => ("GET".to_string(), *t),
    };
    let lower = target.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        let uri: http::Uri = target
            .parse()
            .map_err(|e: http::uri::InvalidUri| ProbeError::BadUrl(e.to_string()))?;
        let https = lower.starts_with("https://");
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| ProbeError::NoHost(target.to_string()))?;
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path = uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        return Ok(ProbeTarget {
            scheme: if https { "https" } else { "http" },
            phase: if https { Phase::Https } else { Phase::Http },
            method: Some(method),
            host: normalize_host(host),
            port,
            path: Some(if path.is_empty() { "/".into() } else { path }),
        });
    }
    let explicit_port = target.rsplit_once(':').map(|(h, p)| {
        p.chars().all(|c| c.is_ascii_digit()) && (!h.contains(':') || h.ends_with(']'))
    });
    let (host, port) =
        parse_authority(target).ok_or_else(|| ProbeError::NoHost(target.to_string()))?;
    Ok(ProbeTarget {
        scheme: "socks",
        phase: Phase::Socks,
        method: None,
        host,
        port: if explicit_port == Some(true) { port } else { 0 },
        path: None,
    })
}

/// Tier-1 verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tier1 {
    /// Allowed by host gate, rules and the SSRF floor.
    pub allow: bool,
    /// Refusal sentence.
    pub reason: Option<String>,
    /// Egress error kind.
    pub error_kind: Option<String>,
}

/// Final verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Final {
    /// Allowed.
    pub allow: bool,
    /// Refusal sentence.
    pub reason: Option<String>,
}

/// The serializable probe report (`{target, tier1, filters, final}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// The synthetic request.
    pub target: ProbeTarget,
    /// Host gate / port / SSRF.
    pub tier1: Tier1,
    /// Every filter's own verdict (empty when Tier 1 denied).
    pub filters: Vec<FilterRow>,
    /// Overall.
    #[serde(rename = "final")]
    pub final_verdict: Final,
}

/// What a probe needs.
#[derive(Clone)]
pub struct ProbeDeps {
    /// DNS (the same resolver the proxy uses).
    pub resolver: Arc<dyn Resolver>,
    /// Filters.
    pub filters: Arc<dyn FilterSet>,
    /// Per-filter timeout.
    pub filter_timeout: Duration,
    /// The proxy's own port (reserved), if running.
    pub proxy_port: Option<u16>,
}

fn tier1_deny(d: Denial) -> Tier1 {
    Tier1 {
        allow: false,
        reason: Some(d.reason.clone()),
        error_kind: d.error_kind().map(str::to_string),
    }
}

/// The probe's view of the proxy: Tier 1 has no filters (they are reported one by one
/// afterwards), no credentials (a synthetic request carries no key), no session slot
/// and no records.
struct ProbeEnv<'a> {
    deps: &'a ProbeDeps,
    sink: Arc<dyn DecisionSink>,
}

/// Records of a probe go nowhere.
struct Discard;

impl DecisionSink for Discard {
    fn record(&self, _: &str, _: Decision) {}
}

impl Env for ProbeEnv<'_> {
    fn sink(&self) -> &Arc<dyn DecisionSink> {
        &self.sink
    }
    fn slot(&self, _: &Arc<str>) -> Option<SessionSlot> {
        Some(SessionSlot::uncounted())
    }
    fn filters(&self, _: &Principal) -> Vec<Arc<dyn NetworkFilter>> {
        Vec::new()
    }
    fn filter_timeout(&self) -> Duration {
        self.deps.filter_timeout
    }
    fn credentials(&self, _: &Principal) -> Arc<[ProviderCredential]> {
        crate::traits::no_credentials()
    }
    async fn validate(
        &self,
        principal: &Principal,
        host: &str,
        port: u16,
    ) -> Result<SocketAddr, Denial> {
        let resolver = self.deps.resolver.as_ref();
        validate_with(resolver, None, self.deps.proxy_port, principal, host, port).await
    }
}

/// The synthetic request: known principal, a connector that does not dial.
struct ProbeFlow {
    principal: Option<Principal>,
}

impl Framing for ProbeFlow {
    type Answer = Tier1;
    type Upstream = ();

    async fn attribute(&mut self) -> Result<Principal, Denial> {
        self.principal
            .take()
            .ok_or_else(|| Denial::auth(crate::deny::reason::MISSING_TOKEN))
    }
    async fn connect(&mut self, _: &Target, _: &Cleared) -> Result<(), Denial> {
        Ok(())
    }
    async fn relay(self, _: (), _: Cleared) -> Tier1 {
        Tier1 {
            allow: true,
            reason: None,
            error_kind: None,
        }
    }
    async fn refuse(self, _: Step, d: Denial) -> Tier1 {
        tier1_deny(d)
    }
}

/// Run a probe for `principal` (its frozen policy and reserved ports).
pub async fn probe(
    deps: &ProbeDeps,
    principal: &Principal,
    args: &str,
) -> Result<ProbeReport, ProbeError> {
    let t = parse_args(args)?;
    let target = Target {
        base: Arc::new(RecordBase {
            lane: if t.phase == Phase::Socks {
                Lane::Socks
            } else {
                Lane::Http
            },
            phase: t.phase.as_str(),
            method: t.method.clone(),
            path: t.path.clone(),
            host: t.host.clone(),
            port: t.port,
            is_intercepted: false,
        }),
        // a bare host (port 0) skips the port checks
        check_port: (t.port != 0).then_some(t.port),
        route: None,
        request_phase: Some(t.phase),
        response_phase: None,
    };
    let env = ProbeEnv {
        deps,
        sink: Arc::new(Discard),
    };
    let flow = ProbeFlow {
        principal: Some(principal.clone()),
    };
    let tier1 = phases::run(&env, target, flow).await;
    let mut filters = Vec::new();
    if tier1.allow {
        let ctx = FilterCtx {
            phase: t.phase,
            method: t.method.clone(),
            host: t.host.clone(),
            port: t.port,
            path: t.path.clone(),
            headers: BTreeMap::new(),
            body: None,
            status: None,
        };
        filters = run_all(&deps.filters.filters(principal), &ctx, deps.filter_timeout).await;
    }
    let final_verdict = if !tier1.allow {
        Final {
            allow: false,
            reason: tier1.reason.clone(),
        }
    } else if let Some(row) = filters.iter().find(|r| !r.allow) {
        Final {
            allow: false,
            reason: row.reason.clone(),
        }
    } else {
        Final {
            allow: true,
            reason: None,
        }
    };
    Ok(ProbeReport {
        target: t,
        tier1,
        filters,
        final_verdict,
    })
}

impl ProbeReport {
    /// The text body of the slash command.
    pub fn render(&self) -> String {
        let t = &self.target;
        let mut out = String::new();
        let scheme = t.scheme.to_ascii_uppercase();
        let method = t
            .method
            .as_ref()
            .map(|m| format!("{m} "))
            .unwrap_or_default();
        let host = if t.host.contains(':') {
            format!("[{}]", t.host)
        } else {
            t.host.clone()
        };
        let _ = writeln!(
            out,
            "Target: {scheme} {method}{host}:{}{}",
            t.port,
            t.path.as_deref().unwrap_or("")
        );
        let _ = writeln!(out);
        let verdict = |allow: bool, reason: &Option<String>| {
            if allow {
                "ALLOW".to_string()
            } else {
                format!("DENY — {}", reason.as_deref().unwrap_or(""))
            }
        };
        let _ = writeln!(
            out,
            "Tier-1 (host / port / SSRF): {}",
            verdict(self.tier1.allow, &self.tier1.reason)
        );
        let _ = writeln!(out, "network_filters ({}):", self.filters.len());
        if self.filters.is_empty() {
            let _ = writeln!(out, "  (none registered)");
        }
        for r in &self.filters {
            match (&r.error, r.allow) {
                (_, true) => {
                    let _ = writeln!(out, "  • {} → ALLOW", r.owner);
                }
                (None, false) => {
                    let _ = writeln!(
                        out,
                        "  • {} → DENY — {}",
                        r.owner,
                        r.reason.as_deref().unwrap_or("")
                    );
                }
                (Some(e), false) => {
                    let _ = writeln!(out, "  • {} → DENY", r.owner);
                    let _ = writeln!(out, "      ⚠ CRASHED (fail-closed): {}", e.message);
                    if let Some(trace) = &e.trace {
                        let _ = writeln!(out, "{trace}");
                    }
                }
            }
        }
        let _ = writeln!(out);
        let _ = write!(
            out,
            "FINAL: {}",
            verdict(self.final_verdict.allow, &self.final_verdict.reason)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::traits::{FilterError, FilterVerdict, NetworkFilter, StaticFilters};
    use async_trait::async_trait;
    use std::io;
    use std::net::IpAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Fixed;
    #[async_trait]
    impl Resolver for Fixed {
        async fn resolve(&self, host: &str, _: u16) -> io::Result<Vec<IpAddr>> {
            match host {
                "example.com" => Ok(vec!["93.184.216.34".parse().unwrap()]),
                _ => Err(io::Error::other("nx")),
            }
        }
    }
    struct F(&'static str, u8, Arc<AtomicUsize>);
    #[async_trait]
    impl NetworkFilter for F {
        fn name(&self) -> &str {
            self.0
        }
        async fn check(&self, ctx: &FilterCtx) -> Result<FilterVerdict, FilterError> {
            self.2.fetch_add(1, Ordering::SeqCst);
            match self.1 {
                0 => Ok(FilterVerdict::Allow),
                1 if ctx.method.as_deref() == Some("POST") => {
                    Ok(FilterVerdict::Block("no POST".into()))
                }
                1 => Ok(FilterVerdict::Allow),
                _ => Err(FilterError {
                    message: "kaboom".into(),
                    trace: Some("Traceback: line 1".into()),
                }),
            }
        }
    }

    fn deps(calls: &Arc<AtomicUsize>) -> ProbeDeps {
        let filters: Vec<Arc<dyn NetworkFilter>> = vec![
            Arc::new(F("allow", 0, calls.clone())),
            Arc::new(F("no-post", 1, calls.clone())),
            Arc::new(F("raiser", 2, calls.clone())),
        ];
        ProbeDeps {
            resolver: Arc::new(Fixed),
            filters: Arc::new(StaticFilters(filters)),
            filter_timeout: Duration::from_secs(1),
            proxy_port: None,
        }
    }
    fn principal(yaml: &str) -> Principal {
        Principal {
            session_id: "s".into(),
            policy: Arc::new(Policy::from_yaml(yaml).unwrap()),
            reserved_ports: Arc::from([]),
            project: None,
            label: None,
        }
    }

    #[test]
    fn probe_arguments_parse_like_the_slash_command() {
        assert_eq!(parse_args("  "), Err(ProbeError::Usage));
        let t = parse_args("post https://Example.com/x?token=abc").unwrap();
        assert_eq!(
            (t.method.as_deref(), t.port, t.path.as_deref(), t.phase),
            (Some("POST"), 443, Some("/x?token=abc"), Phase::Https)
        );
        let t = parse_args("example.com:22").unwrap();
        assert_eq!((t.scheme, t.port, t.method), ("socks", 22, None));
        assert_eq!(parse_args("example.com").unwrap().port, 0);
        assert!(matches!(
            parse_args("http://"),
            Err(ProbeError::BadUrl(_)) | Err(ProbeError::NoHost(_))
        ));
    }

    #[tokio::test]
    async fn every_filter_runs_and_the_first_deny_is_final() {
        let calls = Arc::new(AtomicUsize::new(0));
        let r = probe(&deps(&calls), &principal("{}"), "POST https://example.com/")
            .await
            .unwrap();
        assert!(r.tier1.allow);
        assert_eq!(r.filters.len(), 3);
        assert_eq!(r.filters[1].reason.as_deref(), Some("no POST"));
        assert!(r.filters[1].error.is_none());
        assert!(r.filters[2].error.is_some());
        assert!(!r.final_verdict.allow);
        assert_eq!(r.final_verdict.reason.as_deref(), Some("no POST"));
        let text = r.render();
        assert!(text.contains("⚠ CRASHED (fail-closed): kaboom"), "{text}");
        assert!(text.contains("Traceback: line 1"));
        assert!(text.ends_with("FINAL: DENY — no POST"));
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("final").is_some());
    }

    #[tokio::test]
    async fn tier1_denials_run_no_filters() {
        let calls = Arc::new(AtomicUsize::new(0));
        let r = probe(
            &deps(&calls),
            &principal("rules: [{host: example.com, access: ro}]\n"),
            "POST https://example.com/",
        )
        .await
        .unwrap();
        assert_eq!(
            r.tier1.reason.as_deref(),
            Some("method POST / not allowed for host example.com")
        );
        let r = probe(
            &deps(&calls),
            &principal("allowed_domains: [example.com]\n"),
            "https://google.com/",
        )
        .await
        .unwrap();
        assert_eq!(
            r.final_verdict.reason.as_deref(),
            Some("host not permitted: google.com")
        );
        let r = probe(&deps(&calls), &principal("{}"), "http://169.254.169.254/")
            .await
            .unwrap();
        assert_eq!(r.tier1.error_kind.as_deref(), Some("blocked-by-ssrf"));
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        let r = probe(&deps(&calls), &principal("{}"), "GET https://example.com/")
            .await
            .unwrap();
        assert!(!r.final_verdict.allow && r.filters[2].error.is_some());
    }
}
