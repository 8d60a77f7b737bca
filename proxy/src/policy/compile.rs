//! Compile a [`NetworkConfig`] once into a frozen [`Policy`] (docs/decisions.md, egress policy rules).

use std::collections::BTreeSet;
use std::sync::Arc;

use foldhash::HashSet;

use super::config::{Access, NetworkConfig};
use super::glob::Glob;
use crate::error::ProxyError;
use crate::ssrf::parse_ip_literal;

/// Normalize a host as sent by a client or written in config: trim,
/// lower-case, drop IPv6 brackets and trailing dots; IP literals in any
/// `inet_aton` spelling (`2130706433`, `0x7f.1`, `0177.0.0.1`) become their
/// canonical text (dotted quad / RFC 5952 IPv6).
pub fn normalize_host(raw: &str) -> String {
    let mut h = raw.trim().to_ascii_lowercase();
    if h.starts_with('[') && h.ends_with(']') && h.len() >= 2 {
        h = h[1..h.len() - 1].to_string();
    }
    while h.ends_with('.') && h.len() > 1 {
        h.pop();
    }
    // Already canonical dotted-quad (std rejects every other IPv4 form):
    // skip the re-formatting below.
    if h.parse::<std::net::Ipv4Addr>().is_ok() {
        return h;
    }
    match parse_ip_literal(&h) {
        Some(ip) => ip.to_string(),
        None => h,
    }
}

/// A compiled host pattern (docs/decisions.md, egress policy rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// `*`: every host.
    Any,
    /// `example.com`, `*.example.com` or `.example.com`: the apex and every subdomain.
    Domain(String),
}

impl HostPattern {
    /// Compile a pattern; `key` names the config path for errors. Wildcards
    /// other than `*` and a leading `*.` are rejected; a leading dot
    /// is treated as the bare domain.
    pub fn parse(raw: &str, key: &str) -> Result<(String, HostPattern), ProxyError> {
        let n = normalize_host(raw);
        if n == "*" {
            return Ok((n, HostPattern::Any));
        }
        let (shown, base) = if let Some(rest) = n.strip_prefix("*.") {
            (n.clone(), rest.to_string())
        } else if let Some(rest) = n.strip_prefix('.') {
            (rest.to_string(), rest.to_string())
        } else {
            (n.clone(), n.clone())
        };
        if base.is_empty() || base.contains('*') {
            return Err(ProxyError::Config(format!(
                "{key}: unsupported host pattern {raw:?} (use `*`, `example.com` or `*.example.com`)"
            )));
        }
        let base = normalize_host(&base);
        Ok((shown, HostPattern::Domain(base)))
    }

    /// Does this pattern match an already normalized host?
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Domain(d) => {
                host == d
                    || (host.len() > d.len()
                        && host.ends_with(d.as_str())
                        && host.as_bytes()[host.len() - d.len() - 1] == b'.')
            }
        }
    }

    /// Is this the `*` pattern?
    pub fn is_any(&self) -> bool {
        matches!(self, HostPattern::Any)
    }
}

/// One compiled rule (docs/decisions.md, egress policy rules).
#[derive(Debug, Clone)]
pub struct Rule {
    /// Normalized host pattern text (used for selection by length and reports).
    pub host: String,
    pub(crate) pattern: HostPattern,
    /// Upper-cased allowed methods; `*` = any.
    pub methods: BTreeSet<String>,
    pub(crate) allow: Vec<(String, Glob)>,
    /// Allowed ports; empty = any.
    pub ports: BTreeSet<u16>,
    /// `access: none` (docs/decisions.md, P3).
    pub closed: bool,
    order: usize,
}

impl Rule {
    /// True when this rule can deny some method/path, i.e. interception is
    /// needed to enforce it on HTTPS.
    pub fn restricts_requests(&self) -> bool {
        if self.methods.contains("*") {
            return false;
        }
        self.closed || !self.methods.is_empty() || !self.allow.is_empty()
    }
}

/// A frozen, compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) restricted: bool,
    pub(crate) deny_all: Option<String>,
    pub(crate) allowed: Vec<HostPattern>,
    pub(crate) denied: Vec<HostPattern>,
    pub(crate) exclude: Vec<HostPattern>,
    pub(crate) allow_private: bool,
    pub(crate) rules: Vec<Rule>,
    /// Concrete `denied_domains` names that are not IP literals: the SSRF floor
    /// resolves them.
    pub(crate) denied_names: Vec<String>,
    /// Concrete `denied_domains` entries that are IP literals, parsed once here
    /// rather than on every request.
    pub(crate) denied_ips: Vec<std::net::IpAddr>,
    /// `allowed` / `denied` domains as hash sets (built by `compile`), so the
    /// host gate costs one lookup per label instead of a scan of the lists.
    pub(crate) index: Option<Arc<HostIndex>>,
    /// Learn mode (docs/decisions.md, L1): what the allowlist would deny is allowed and
    /// recorded as "would deny".
    pub(crate) learn: bool,
}

/// The `Domain` patterns of the host lists, for suffix lookups (foldhash: read on every
/// request; the keys come from the policy, not from requests).
#[derive(Debug, Default)]
pub(crate) struct HostIndex {
    pub(crate) allowed: HashSet<String>,
    pub(crate) denied: HashSet<String>,
}

impl HostIndex {
    fn of(list: &[HostPattern]) -> HashSet<String> {
        list.iter()
            .filter_map(|p| match p {
                HostPattern::Domain(d) => Some(d.clone()),
                HostPattern::Any => None,
            })
            .collect()
    }
}

/// Does a `Domain` pattern in `set` match `host` — `host` itself or a
/// suffix after one of its dots (exactly [`HostPattern::matches`])?
pub(crate) fn domain_set_matches(set: &HashSet<String>, host: &str) -> bool {
    if set.is_empty() {
        return false;
    }
    if set.contains(host) {
        return true;
    }
    host.bytes()
        .enumerate()
        .any(|(i, b)| b == b'.' && set.contains(&host[i + 1..]))
}

impl Policy {
    /// "No policy": every public host allowed (the SSRF floor still applies).
    pub fn unrestricted() -> Self {
        Policy {
            restricted: false,
            deny_all: None,
            allowed: vec![],
            denied: vec![],
            exclude: vec![],
            allow_private: false,
            rules: vec![],
            denied_names: vec![],
            denied_ips: vec![],
            index: None,
            learn: false,
        }
    }

    /// A sentinel that denies everything with the given reason.
    pub fn deny_all(reason: Option<String>) -> Self {
        Policy {
            restricted: true,
            deny_all: Some(reason.unwrap_or_else(|| "vis-agent: egress denied".into())),
            ..Policy::unrestricted()
        }
    }

    /// Is learn mode on (docs/decisions.md, L1)?
    pub fn is_learning(&self) -> bool {
        self.learn
    }

    /// This policy with learn mode switched on or off (a per-session override). The
    /// deny-all sentinel of a broken policy never learns.
    pub fn with_mode(mut self, mode: super::config::Mode) -> Policy {
        self.learn = mode == super::config::Mode::Learn && self.deny_all.is_none();
        self
    }

    /// Does the host match a specific (non-`*`) `denied_domains` entry?
    pub(crate) fn explicitly_denied(&self, host: &str) -> bool {
        match self.index.as_deref() {
            Some(i) => domain_set_matches(&i.denied, host),
            None => self.denied.iter().any(|p| !p.is_any() && p.matches(host)),
        }
    }

    /// Is this the "no policy" case?
    pub fn is_unrestricted(&self) -> bool {
        !self.restricted
    }

    /// Does `allow_private` apply?
    pub fn allow_private(&self) -> bool {
        self.allow_private
    }

    /// Concrete (non-glob) `denied_domains` names, resolved by the SSRF floor.
    pub fn denied_names(&self) -> &[String] {
        &self.denied_names
    }

    /// Concrete `denied_domains` entries that are IP literals, refused by the SSRF floor.
    pub fn denied_ips(&self) -> &[std::net::IpAddr] {
        &self.denied_ips
    }

    /// Is this (normalized) host in `exclude_domains`?
    pub fn is_excluded(&self, host: &str) -> bool {
        self.exclude.iter().any(|p| p.matches(host))
    }

    /// The rule selected for a host: longest pattern text, then a
    /// non-wildcard pattern, then configuration order.
    pub fn select_rule(&self, host: &str) -> Option<&Rule> {
        self.rules
            .iter()
            .filter(|r| r.pattern.matches(host))
            .min_by_key(|r| {
                (
                    std::cmp::Reverse(r.host.len()),
                    r.host.contains('*'),
                    r.order,
                )
            })
    }

    /// Compile a parsed `jail.network` block.
    pub fn compile(cfg: &NetworkConfig) -> Result<Policy, ProxyError> {
        let list = |name: &str,
                    v: &[super::config::NonBlank]|
         -> Result<Vec<(String, HostPattern)>, ProxyError> {
            v.iter()
                .enumerate()
                .map(|(i, s)| HostPattern::parse(&s.0, &format!("jail.network.{name}[{i}]")))
                .collect()
        };
        let allowed = list("allowed_domains", &cfg.allowed_domains)?;
        let denied = list("denied_domains", &cfg.denied_domains)?;
        let exclude = list("exclude_domains", &cfg.exclude_domains)?;

        let mut rules: Vec<Rule> = Vec::new();
        for (i, rc) in cfg.rules.iter().enumerate() {
            let (host, pattern) =
                HostPattern::parse(&rc.host.0, &format!("jail.network.rules[{i}].host"))?;
            let mut methods: BTreeSet<String> = match rc.access {
                Some(Access::ReadOnly) => ["GET", "HEAD", "OPTIONS"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                Some(Access::ReadWrite) => ["*".to_string()].into_iter().collect(),
                Some(Access::None) | None => BTreeSet::new(),
            };
            methods.extend(rc.methods.iter().map(|m| m.0.to_ascii_uppercase()));
            let allow: Vec<(String, Glob)> = rc
                .allow
                .iter()
                .map(|a| {
                    (
                        a.method.0.to_ascii_uppercase(),
                        Glob::new(a.path.as_ref().map(|p| p.0.as_str()).unwrap_or("*")),
                    )
                })
                .collect();
            let ports: BTreeSet<u16> = rc.ports.iter().map(|p| p.0).collect();
            let closed = rc.access == Some(Access::None);
            if let Some(existing) = rules.iter_mut().find(|r| r.host == host) {
                existing.methods.extend(methods);
                existing.allow.extend(allow);
                existing.ports.extend(ports);
                existing.closed |= closed;
            } else {
                rules.push(Rule {
                    host,
                    pattern,
                    methods,
                    allow,
                    ports,
                    closed,
                    order: i,
                });
            }
        }
        rules.retain(|r| {
            r.closed || !r.methods.is_empty() || !r.allow.is_empty() || !r.ports.is_empty()
        });

        let no_policy = denied.is_empty()
            && (allowed.is_empty() || allowed.iter().any(|(_, p)| p.is_any()))
            && rules.is_empty()
            && !cfg.allow_private;
        if no_policy {
            // (docs/decisions.md, P5) beats the reference: excluded hosts stay opaque even
            // without a policy (filters could otherwise intercept them).
            return Ok(Policy {
                exclude: exclude.into_iter().map(|(_, p)| p).collect(),
                learn: cfg.mode == Some(super::config::Mode::Learn),
                ..Policy::unrestricted()
            });
        }
        let (mut denied_names, mut denied_ips) = (Vec::new(), Vec::new());
        for (shown, p) in &denied {
            if shown.starts_with("*.") {
                continue;
            }
            if let HostPattern::Domain(d) = p {
                match parse_ip_literal(d) {
                    Some(ip) => denied_ips.push(ip),
                    None => denied_names.push(d.clone()),
                }
            }
        }
        let allowed: Vec<HostPattern> = allowed.into_iter().map(|(_, p)| p).collect();
        let denied: Vec<HostPattern> = denied.into_iter().map(|(_, p)| p).collect();
        let index = Arc::new(HostIndex {
            allowed: HostIndex::of(&allowed),
            denied: HostIndex::of(&denied),
        });
        Ok(Policy {
            restricted: true,
            deny_all: None,
            allowed,
            denied,
            exclude: exclude.into_iter().map(|(_, p)| p).collect(),
            allow_private: cfg.allow_private,
            rules,
            denied_names,
            denied_ips,
            index: Some(index),
            learn: cfg.mode == Some(super::config::Mode::Learn),
        })
    }

    /// Parse and compile a YAML `jail.network` block.
    pub fn from_yaml(s: &str) -> Result<Policy, ProxyError> {
        Policy::compile(&NetworkConfig::from_yaml_str(s)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(y: &str) -> Policy {
        Policy::from_yaml(y).unwrap()
    }

    #[test]
    fn star_allowlist_and_empty_lists_compile_to_no_policy() {
        assert!(p("allowed_domains: ['*']\ndenied_domains: []\nrules: []\n").is_unrestricted());
        assert!(p("allowed_domains: []\ndenied_domains: []\n").is_unrestricted());
        assert!(p("exclude_domains: [x.com]\n").is_unrestricted());
    }

    #[test]
    fn any_deny_entry_strict_allowlist_rule_or_allow_private_compiles_to_a_policy() {
        assert!(!p("denied_domains: [x.com]\n").is_unrestricted());
        assert!(!p("allowed_domains: [x.com]\n").is_unrestricted());
        assert!(!p("rules: [{host: x.com, ports: [443]}]\n").is_unrestricted());
        assert!(!p("allow_private: true\n").is_unrestricted());
    }

    #[test]
    fn exclude_domains_are_normalized_and_match_subdomains() {
        let pol =
            p("allowed_domains: [x.com]\nexclude_domains: ['GitHub.com', '*.pinned.example']\n");
        assert!(pol.is_excluded("github.com"));
        assert!(pol.is_excluded("api.github.com"));
        assert!(pol.is_excluded("x.pinned.example"));
        assert!(!pol.is_excluded("example.com"));
        assert!(!Policy::unrestricted().is_excluded("github.com"));
        let only_exclude = p("exclude_domains: [pinned.example]\n");
        assert!(only_exclude.is_unrestricted());
        assert!(
            only_exclude.is_excluded("api.pinned.example"),
            "excluded hosts stay opaque (docs/decisions.md, P5)"
        );
    }

    #[test]
    fn mid_string_wildcards_are_rejected_and_leading_dot_means_the_domain() {
        let e = Policy::from_yaml("allowed_domains: [ok.com, 'api*.x.com']\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("allowed_domains[1]"), "{e}");
        let pol = p("allowed_domains: ['.example.com']\n");
        assert!(pol.allowed[0].matches("api.example.com"));
    }

    #[test]
    fn access_none_is_kept_as_a_closed_rule() {
        let pol = p("rules: [{host: x.com, access: none}]\n");
        assert_eq!(pol.rules.len(), 1);
        assert!(pol.rules[0].closed);
    }

    #[test]
    fn empty_rules_are_dropped_and_same_host_rules_merge() {
        let pol = p(
            "rules: [{host: a.com}, {host: B.com, methods: [get]}, {host: b.com, ports: [22]}]\n",
        );
        assert_eq!(pol.rules.len(), 1);
        assert!(pol.rules[0].methods.contains("GET"));
        assert!(pol.rules[0].ports.contains(&22));
    }

    #[test]
    fn host_normalization_canonicalizes_ip_spellings() {
        assert_eq!(normalize_host(" Example.COM. "), "example.com");
        assert_eq!(normalize_host("2130706433"), "127.0.0.1");
        // leading zeros are octal, never taken as canonical dotted-quad
        assert_eq!(normalize_host("010.0.0.1"), "8.0.0.1");
        assert_eq!(normalize_host("127.000.000.001"), "127.0.0.1");
        assert_eq!(normalize_host("10.0.0.1"), "10.0.0.1");
        assert_eq!(normalize_host("[0:0:0:0:0:0:0:1]"), "::1");
    }

    #[test]
    fn concrete_denied_entries_are_split_into_names_to_resolve_and_parsed_addresses() {
        let pol = Policy::from_yaml(
            "denied_domains: [bad.example.com, '*.x.example.com', 192.0.2.1, '[::1]', 0x7f.1, '*']\n",
        )
        .unwrap();
        assert_eq!(pol.denied_names(), ["bad.example.com"]);
        let ips: Vec<String> = pol.denied_ips().iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["192.0.2.1", "::1", "127.0.0.1"]);
    }

    #[test]
    fn the_host_index_agrees_with_the_pattern_scan() {
        let pol = Policy::from_yaml(
            "allowed_domains: [example.com, '*.svc.test', .dot.org, 127.0.0.1, '::1']\ndenied_domains: [bad.example.com, '*.x.example.com']\n",
        )
        .unwrap();
        let idx = pol.index.as_deref().unwrap();
        for host in [
            "example.com",
            "a.example.com",
            "xexample.com",
            "bad.example.com",
            "a.bad.example.com",
            "x.example.com",
            "y.x.example.com",
            "svc.test",
            "a.svc.test",
            "asvc.test",
            "dot.org",
            "a.b.dot.org",
            "org",
            "com",
            "127.0.0.1",
            "0.0.1",
            "::1",
            "",
            ".",
            "example.com.evil",
        ] {
            let scan_a = pol.allowed.iter().any(|p| !p.is_any() && p.matches(host));
            let scan_d = pol.denied.iter().any(|p| !p.is_any() && p.matches(host));
            assert_eq!(
                domain_set_matches(&idx.allowed, host),
                scan_a,
                "allowed {host}"
            );
            assert_eq!(
                domain_set_matches(&idx.denied, host),
                scan_d,
                "denied {host}"
            );
        }
    }
}
