//! `decide(policy, request)` — a pure function, evaluated in the order of
//! The evaluation order of docs/decisions.md, egress policy rules, with the fixes of (docs/decisions.md, P3).

use foldhash::HashSet;

use super::compile::{HostPattern, Policy, Rule};
use crate::deny::{kind, DeciderKind, Denial};

/// What `decide` looks at. `host` must already be normalized
/// ([`super::compile::normalize_host`]); `method` is `None` for CONNECT/SOCKS;
/// `path` is the raw request target path with its query.
#[derive(Debug, Clone, Copy)]
pub struct DecideInput<'a> {
    /// Upper- or lower-case method; `None` for tunnels.
    pub method: Option<&'a str>,
    /// Normalized host.
    pub host: &'a str,
    /// Raw path + `?query`.
    pub path: Option<&'a str>,
    /// Target port; `None` skips port checks.
    pub port: Option<u16>,
}

/// What enforcement would have answered a request learn mode let through.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WouldDeny {
    /// The `X-Vis-Egress-Error` kind enforcement would send.
    pub error_kind: String,
    /// The refusal sentence enforcement would send.
    pub reason: String,
}

/// An allow verdict, with who decided (for the decision record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// Which stage allowed.
    pub decider: DeciderKind,
    /// The selected rule's host pattern.
    pub rule_host: Option<String>,
    /// Learn mode let through what the policy would deny (docs/decisions.md, L1).
    pub would_deny: Option<WouldDeny>,
}

fn host_denial(policy: &Policy, host: &str) -> Option<Denial> {
    let specific = |list: &[HostPattern], set: Option<&HashSet<String>>| match set {
        Some(set) => super::compile::domain_set_matches(set, host),
        None => list.iter().any(|p| !p.is_any() && p.matches(host)),
    };
    let has_star = |list: &[HostPattern]| list.iter().any(|p| p.is_any());
    let index = policy.index.as_deref();
    let reason = || format!("host not permitted: {host}");
    if specific(&policy.denied, index.map(|i| &i.denied)) {
        return Some(Denial::policy(
            kind::DENYLIST,
            reason(),
            DeciderKind::HostGate,
        ));
    }
    if specific(&policy.allowed, index.map(|i| &i.allowed)) {
        return None;
    }
    if has_star(&policy.denied) {
        return Some(Denial::policy(
            kind::DENYLIST,
            reason(),
            DeciderKind::HostGate,
        ));
    }
    if policy.allowed.is_empty() || has_star(&policy.allowed) {
        return None;
    }
    Some(Denial::policy(
        kind::ALLOWLIST,
        reason(),
        DeciderKind::HostGate,
    ))
}

/// Percent-decode the path part, remove dot segments (RFC 3986, section 5.2.4) and
/// re-append the raw query: the string rule globs are matched against.
pub fn normalize_path(raw: &str) -> String {
    let (path, query) = match raw.find('?') {
        Some(i) => (&raw[..i], Some(&raw[i + 1..])),
        None => (raw, None),
    };
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = decoded.split('/').collect();
    let absolute = decoded.starts_with('/');
    let last = segs.len().saturating_sub(1);
    for (i, seg) in segs.iter().enumerate() {
        if i == 0 && absolute {
            continue;
        }
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut p = String::from("/");
    p.push_str(&out.join("/"));
    if let Some(q) = query {
        p.push('?');
        p.push_str(q);
    }
    p
}

fn method_allowed(rule: &Rule, method: &str, path: &str) -> bool {
    if rule.closed && rule.methods.is_empty() && rule.allow.is_empty() {
        return false;
    }
    if rule.methods.is_empty() && rule.allow.is_empty() {
        return true;
    }
    if rule.methods.contains("*") || rule.methods.contains(method) {
        return true;
    }
    let norm = normalize_path(path);
    rule.allow
        .iter()
        .any(|(m, g)| (m == "*" || m == method) && g.matches(&norm))
}

/// Evaluate a request against a policy (docs/decisions.md, egress policy rules).
pub fn decide(policy: &Policy, req: DecideInput<'_>) -> Result<Allowed, Denial> {
    if !policy.restricted {
        return Ok(Allowed {
            decider: DeciderKind::Default,
            rule_host: None,
            would_deny: None,
        });
    }
    if let Some(reason) = &policy.deny_all {
        return Err(Denial::policy(
            kind::DENYLIST,
            reason.clone(),
            DeciderKind::Default,
        ));
    }
    if let Some(d) = host_denial(policy, req.host) {
        return Err(d);
    }
    let rule = policy.select_rule(req.host);
    let rule_host = rule.map(|r| r.host.clone());
    if let (Some(r), Some(port)) = (rule, req.port) {
        if !r.ports.is_empty() && !r.ports.contains(&port) {
            return Err(Denial::policy(
                kind::PORT_POLICY,
                format!("port {port} not allowed for host {}", req.host),
                DeciderKind::Rule,
            )
            .with_rule(rule_host));
        }
    }
    let Some(method) = req.method else {
        return Ok(Allowed {
            decider: if rule.is_some() {
                DeciderKind::Rule
            } else {
                DeciderKind::HostGate
            },
            rule_host,
            would_deny: None,
        });
    };
    let Some(r) = rule else {
        return Ok(Allowed {
            decider: DeciderKind::HostGate,
            rule_host,
            would_deny: None,
        });
    };
    let method = method.to_ascii_uppercase();
    let path = req.path.unwrap_or("/");
    if method_allowed(r, &method, path) {
        Ok(Allowed {
            decider: DeciderKind::Rule,
            rule_host,
            would_deny: None,
        })
    } else {
        Err(Denial::policy(
            kind::METHOD_POLICY,
            format!("method {method} {path} not allowed for host {}", req.host),
            DeciderKind::Rule,
        )
        .with_rule(rule_host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    fn p(y: &str) -> Policy {
        Policy::from_yaml(y).unwrap()
    }
    fn d(
        pol: &Policy,
        m: Option<&str>,
        h: &str,
        path: &str,
        port: Option<u16>,
    ) -> Result<Allowed, Denial> {
        decide(
            pol,
            DecideInput {
                method: m,
                host: h,
                path: Some(path),
                port,
            },
        )
    }
    fn ok(pol: &Policy, m: &str, h: &str, path: &str, port: Option<u16>) -> bool {
        d(pol, Some(m), h, path, port).is_ok()
    }
    fn kind_of(r: Result<Allowed, Denial>) -> &'static str {
        r.unwrap_err().error_kind().unwrap()
    }

    #[test]
    fn no_policy_allows_everything() {
        assert!(ok(
            &Policy::unrestricted(),
            "DELETE",
            "anything.com",
            "/",
            Some(1)
        ));
    }

    #[test]
    fn deny_all_sentinel_denies_with_its_reason() {
        let e = d(&Policy::deny_all(None), Some("GET"), "x.com", "/", None).unwrap_err();
        assert_eq!(e.reason, "vis-agent: egress denied");
    }

    #[test]
    fn allowlist_with_specific_deny_beats_allow_and_includes_subdomains() {
        let pol = p("allowed_domains: [example.com]\ndenied_domains: [evil.example.com]\n");
        assert!(ok(&pol, "GET", "example.com", "/", None));
        assert!(ok(&pol, "GET", "api.example.com", "/", None));
        assert_eq!(
            kind_of(d(&pol, Some("GET"), "other.com", "/", None)),
            kind::ALLOWLIST
        );
        let e = d(&pol, Some("GET"), "evil.example.com", "/", None).unwrap_err();
        assert_eq!(e.error_kind(), Some(kind::DENYLIST));
        assert_eq!(e.reason, "host not permitted: evil.example.com");
        assert!(d(&pol, None, "api.example.com", "/", Some(443)).is_ok());
        assert!(d(&pol, None, "evil.example.com", "/", Some(443)).is_err());
    }

    #[test]
    fn host_gate_specificity_rows() {
        let pol = p("denied_domains: ['*']\nallowed_domains: [example.com]\n");
        assert!(ok(&pol, "GET", "sub.example.com", "/", None));
        assert_eq!(
            kind_of(d(&pol, Some("GET"), "x.com", "/", None)),
            kind::DENYLIST
        );
        let pol = p("allowed_domains: ['*']\ndenied_domains: [example.com]\n");
        assert!(ok(&pol, "GET", "x.com", "/", None));
        assert!(!ok(&pol, "GET", "a.example.com", "/", None));
        let pol = p("allowed_domains: ['*']\ndenied_domains: ['*']\n");
        assert!(!ok(&pol, "GET", "x.com", "/", None));
        let pol = p("allowed_domains: [example.com]\n");
        assert_eq!(
            kind_of(d(&pol, Some("GET"), "93.184.216.34", "/", None)),
            kind::ALLOWLIST
        );
    }

    #[test]
    fn read_only_with_allow_entry_rows() {
        let pol = p("rules: [{host: api.x.com, access: read-only, allow: [{method: POST, path: '/repos/**'}]}]\n");
        assert!(ok(&pol, "GET", "api.x.com", "/x", None));
        assert!(ok(&pol, "head", "api.x.com", "/x", None));
        assert!(!ok(&pol, "POST", "api.x.com", "/x", None));
        assert!(!ok(&pol, "DELETE", "api.x.com", "/x", None));
        assert!(ok(&pol, "POST", "api.x.com", "/repos/me/x", None));
        let e = d(&pol, Some("POST"), "api.x.com", "/issues", None).unwrap_err();
        assert_eq!(e.error_kind(), Some(kind::METHOD_POLICY));
        assert_eq!(
            e.reason,
            "method POST /issues not allowed for host api.x.com"
        );
        assert_eq!(e.rule_host.as_deref(), Some("api.x.com"));
        let pol = p("rules: [{host: x.com, methods: [GET]}]\n");
        assert!(ok(&pol, "GET", "x.com", "/", None));
        assert!(!ok(&pol, "POST", "x.com", "/", None));
    }

    #[test]
    fn port_rows() {
        let pol = p("rules: [{host: x.com, ports: [22, 443]}]\n");
        assert!(ok(&pol, "GET", "x.com", "/", Some(443)));
        assert!(ok(&pol, "GET", "x.com", "/", Some(22)));
        let e = d(&pol, Some("GET"), "x.com", "/", Some(6379)).unwrap_err();
        assert_eq!(e.error_kind(), Some(kind::PORT_POLICY));
        assert_eq!(e.reason, "port 6379 not allowed for host x.com");
        assert!(!ok(&pol, "GET", "x.com", "/", Some(80)));
        assert!(ok(&pol, "GET", "x.com", "/", None), "no port ignores ports");
        let pol = p("rules: [{host: db.x, ports: [5432]}]\n");
        assert!(ok(&pol, "POST", "db.x", "/", Some(5432)));
        assert!(!ok(&pol, "POST", "db.x", "/", Some(3306)));
        let pol = p("rules: [{host: x.com, methods: [GET]}]\n");
        assert!(
            ok(&pol, "GET", "x.com", "/", Some(12345)),
            "no ports means any port"
        );
        let pol = p("rules: [{host: x.com, access: ro, ports: ['443']}]\n");
        assert!(ok(&pol, "GET", "x.com", "/", Some(443)));
        assert_eq!(
            kind_of(d(&pol, Some("POST"), "x.com", "/", Some(443))),
            kind::METHOD_POLICY
        );
        assert_eq!(
            kind_of(d(&pol, Some("GET"), "x.com", "/", Some(8443))),
            kind::PORT_POLICY
        );
        assert!(d(&pol, None, "x.com", "/", Some(443)).is_ok());
    }

    #[test]
    fn access_none_denies_every_method_on_that_host() {
        let pol = p("rules: [{host: x.com, access: none}]\n");
        for m in ["GET", "POST", "HEAD", "OPTIONS", "DELETE", "PROPFIND"] {
            assert_eq!(
                kind_of(d(&pol, Some(m), "x.com", "/", None)),
                kind::METHOD_POLICY,
                "{m}"
            );
        }
        assert!(ok(&pol, "GET", "other.com", "/", None));
        let pol = p("rules: [{host: x.com, access: none, methods: [GET]}]\n");
        assert!(
            ok(&pol, "GET", "x.com", "/", None),
            "closed + methods = deny except these"
        );
        assert!(!ok(&pol, "POST", "x.com", "/", None));
    }

    #[test]
    fn paths_are_matched_after_decoding_and_dot_segment_removal() {
        let pol = p("rules: [{host: x.com, access: ro, allow: [{method: POST, path: '/v1/issues/**'}, {method: POST, path: /v1/exact}]}]\n");
        assert!(ok(&pol, "POST", "x.com", "/v1/issues/1", None));
        assert!(!ok(&pol, "POST", "x.com", "/v1/issues/../admin", None));
        assert!(!ok(&pol, "POST", "x.com", "/v1/issues/%2e%2e/admin", None));
        assert!(!ok(&pol, "POST", "x.com", "/v1/issues/%2E%2E/admin", None));
        assert!(ok(&pol, "POST", "x.com", "/v1/exact", None));
        assert!(!ok(&pol, "POST", "x.com", "/v1/exact?x=1", None));
        assert_eq!(normalize_path("/a/../admin"), "/admin");
        assert_eq!(normalize_path("/a/./b/../c?q=/../x"), "/a/c?q=/../x");
        assert_eq!(normalize_path("/a/b/.."), "/a/");
    }

    #[test]
    fn longest_host_pattern_rule_wins_and_rules_do_not_cascade() {
        let pol = p("rules: [{host: '*.example.com', access: ro}, {host: api.example.com, access: rw}, {host: '*', methods: [GET]}]\n");
        assert!(ok(&pol, "POST", "api.example.com", "/", None));
        assert!(!ok(&pol, "POST", "www.example.com", "/", None));
        assert!(!ok(&pol, "POST", "other.org", "/", None));
        let e = d(&pol, Some("POST"), "www.example.com", "/", None).unwrap_err();
        assert_eq!(e.rule_host.as_deref(), Some("*.example.com"));
    }

    #[test]
    fn equal_length_rules_prefer_the_non_wildcard_pattern() {
        let pol = p("rules: [{host: '*.ab.com', access: ro}, {host: 'xx.ab.com', access: rw}]\n");
        assert_eq!(pol.select_rule("xx.ab.com").unwrap().host, "xx.ab.com");
    }

    #[test]
    fn rules_never_grant_host_access() {
        let pol = p("allowed_domains: [a.com]\nrules: [{host: b.com, access: rw}]\n");
        assert_eq!(
            kind_of(d(&pol, Some("GET"), "b.com", "/", None)),
            kind::ALLOWLIST
        );
    }

    #[test]
    fn fifty_thousand_decisions_are_cheap() {
        let pol = p("allowed_domains: [example.com]\nrules: [{host: example.com, access: ro, allow: [{method: POST, path: '/repos/**'}]}]\n");
        for i in 0..50_000u32 {
            let path = format!("/repos/{i}/x");
            assert!(ok(&pol, "POST", "api.example.com", &path, Some(443)));
        }
    }
}
