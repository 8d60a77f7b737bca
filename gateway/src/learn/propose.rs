//! The smallest `jail.network` policy that allows what was seen (docs/decisions.md, L1): pure,
//! and stable — the same observations give the same rules and the same YAML, byte for byte,
//! whatever their order.
//!
//! * Hosts: an exact host when one host of a registrable domain (public-suffix aware) was
//!   seen; `*.<longest common suffix>` when several were. IP literals and single-label names
//!   (`localhost`) are always exact.
//! * Ports: the ones seen. Methods: the ones seen; `access: read-only` when only GET, HEAD
//!   and OPTIONS were used; no method restriction when methods were not visible (an opaque
//!   tunnel, SOCKS, or a folded record that mixed methods).
//! * Paths: when every request of a rule was under one directory prefix, the rule allows
//!   that prefix only (`allow: [{method, path: '<prefix>/*'}]`).
//! * Nothing seen: `denied_domains: ['*']` (an empty allowlist would allow everything).

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use vis_companion_api::learn::{Evidence, ProposedRule};
use vis_proxy::policy::NetworkConfig;

/// One recorded egress decision (or a folded record of several), as the proposal sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub host: String,
    pub port: u16,
    /// Method and path are not visible (CONNECT tunnel, SOCKS).
    pub tunnel: bool,
    /// `None` on a visible lane: a folded record that mixed methods.
    pub method: Option<String>,
    /// Path with query; `None`: not visible or mixed.
    pub path: Option<String>,
    pub count: u64,
    pub first_ts: u64,
    pub last_ts: u64,
    pub command: Option<String>,
    /// The policy in force would have denied it.
    pub would_deny: bool,
}

const SAFE: [&str; 3] = ["GET", "HEAD", "OPTIONS"];

#[derive(Default)]
struct Seen {
    hosts: BTreeSet<String>,
    ports: BTreeSet<u16>,
    methods: BTreeSet<String>,
    methods_unknown: bool,
    dirs: Vec<Vec<String>>,
    paths_unknown: bool,
    visible: bool,
    requests: u64,
    would_deny: u64,
    first: u64,
    last: u64,
    commands: BTreeSet<String>,
}

impl Seen {
    fn add(&mut self, o: &Observation) {
        self.hosts.insert(o.host.clone());
        self.ports.insert(o.port);
        if !o.tunnel {
            self.visible = true;
            match &o.method {
                Some(m) => {
                    self.methods.insert(m.to_ascii_uppercase());
                }
                None => self.methods_unknown = true,
            }
            match &o.path {
                Some(p) => self.dirs.push(directory(p)),
                None => self.paths_unknown = true,
            }
        }
        let count = o.count.max(1);
        self.requests += count;
        if o.would_deny {
            self.would_deny += count;
        }
        self.first = if self.first == 0 {
            o.first_ts
        } else {
            self.first.min(o.first_ts)
        };
        self.last = self.last.max(o.last_ts.max(o.first_ts));
        if let Some(c) = &o.command {
            self.commands.insert(c.clone());
        }
    }

    fn merge(&mut self, other: Seen) {
        self.hosts.extend(other.hosts);
        self.ports.extend(other.ports);
        self.methods.extend(other.methods);
        self.methods_unknown |= other.methods_unknown;
        self.dirs.extend(other.dirs);
        self.paths_unknown |= other.paths_unknown;
        self.visible |= other.visible;
        self.requests += other.requests;
        self.would_deny += other.would_deny;
        self.first = match (self.first, other.first) {
            (0, b) => b,
            (a, 0) => a,
            (a, b) => a.min(b),
        };
        self.last = self.last.max(other.last);
        self.commands.extend(other.commands);
    }
}

/// The directory segments of a path (query dropped, last segment dropped).
fn directory(path: &str) -> Vec<String> {
    let path = path.split('?').next().unwrap_or("");
    let path = vis_proxy::policy::normalize_path(path);
    let mut segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if !path.ends_with('/') {
        segs.pop();
    }
    segs
}

fn common_prefix(dirs: &[Vec<String>]) -> Vec<String> {
    let Some(first) = dirs.first() else {
        return Vec::new();
    };
    let mut n = first.len();
    for d in &dirs[1..] {
        n = n.min(d.iter().zip(first).take_while(|(a, b)| a == b).count());
    }
    first[..n].to_vec()
}

/// The host's registrable domain (public-suffix aware), `None` for IP literals, single
/// labels and names without one.
fn registrable(host: &str) -> Option<String> {
    if host.parse::<std::net::IpAddr>().is_ok() || !host.contains('.') {
        return None;
    }
    let d = psl::domain_str(host)?;
    Some(d.to_string())
}

/// The longest common label suffix of the hosts.
fn common_suffix(hosts: &BTreeSet<String>) -> String {
    let split: Vec<Vec<&str>> = hosts.iter().map(|h| h.rsplit('.').collect()).collect();
    let mut out: Vec<&str> = Vec::new();
    for i in 0.. {
        let Some(label) = split[0].get(i) else { break };
        if split.iter().all(|s| s.get(i) == Some(label)) {
            out.push(label);
        } else {
            break;
        }
    }
    out.reverse();
    out.join(".")
}

/// The rules that allow `seen`. `allowed_now`: would the policy in force allow everything
/// of a rule? (Derived from the observations: no would-deny among them.)
pub fn rules(seen: &[Observation]) -> Vec<ProposedRule> {
    let mut by_host: BTreeMap<String, Seen> = BTreeMap::new();
    for o in seen {
        by_host.entry(o.host.clone()).or_default().add(o);
    }
    // group hosts: registrable domain → hosts
    let mut groups: BTreeMap<String, Seen> = BTreeMap::new();
    let mut by_domain: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for host in by_host.keys() {
        match registrable(host) {
            Some(d) => by_domain.entry(d).or_default().push(host.clone()),
            None => by_domain
                .entry(host.clone())
                .or_default()
                .push(host.clone()),
        }
    }
    for (_, hosts) in by_domain {
        let mut merged = Seen::default();
        for h in &hosts {
            if let Some(s) = by_host.remove(h) {
                merged.merge(s);
            }
        }
        let pattern = if hosts.len() == 1 {
            hosts[0].clone()
        } else {
            format!("*.{}", common_suffix(&merged.hosts))
        };
        groups.insert(pattern, merged);
    }
    groups
        .into_iter()
        .map(|(pattern, s)| {
            let restrict_methods = s.visible && !s.methods_unknown;
            let methods: Vec<String> = if restrict_methods {
                s.methods.iter().cloned().collect()
            } else {
                Vec::new()
            };
            let read_only = restrict_methods
                && !methods.is_empty()
                && methods.iter().all(|m| SAFE.contains(&m.as_str()));
            let prefix = common_prefix(&s.dirs);
            let path_prefix = (restrict_methods && !s.paths_unknown && !prefix.is_empty())
                .then(|| format!("/{}", prefix.join("/")));
            ProposedRule {
                id: pattern.clone(),
                host: pattern,
                ports: s.ports.into_iter().collect(),
                methods,
                read_only,
                path_prefix,
                already_allowed: s.would_deny == 0,
                evidence: Evidence {
                    requests: s.requests,
                    would_deny: s.would_deny,
                    first_seen: s.first,
                    last_seen: s.last,
                    commands: s.commands.into_iter().collect(),
                    hosts: s.hosts.into_iter().collect(),
                },
            }
        })
        .collect()
}

/// A rule of the `rules:` list as the YAML shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleYaml {
    pub host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<AllowYaml>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllowYaml {
    pub method: String,
    pub path: String,
}

/// The `rules:` entry of a proposed rule.
pub fn rule_yaml(r: &ProposedRule) -> RuleYaml {
    let mut y = RuleYaml {
        host: r.host.clone(),
        access: None,
        methods: Vec::new(),
        ports: r.ports.clone(),
        allow: Vec::new(),
    };
    match (&r.path_prefix, r.read_only) {
        (Some(prefix), _) => {
            y.allow = r
                .methods
                .iter()
                .map(|m| AllowYaml {
                    method: m.clone(),
                    path: format!("{prefix}/*"),
                })
                .collect();
        }
        (None, true) => y.access = Some("read-only"),
        (None, false) => y.methods = r.methods.clone(),
    }
    y
}

#[derive(Serialize)]
struct NetworkYaml<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed_domains: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    denied_domains: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    exclude_domains: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_private: bool,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    inbound_ports: &'a [vis_proxy::policy::config::Port],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rules: Vec<RuleYaml>,
}

#[derive(Serialize)]
struct JailYaml<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    network: NetworkYaml<'a>,
}

#[derive(Serialize)]
struct Top<'a> {
    jail: JailYaml<'a>,
}

/// The complete `jail:` block: the rules, `mode: enforce`, and the keys of the current
/// network block that are not allowances (denials, exclusions, `allow_private`,
/// `inbound_ports`), kept as they are.
pub fn yaml(rules: &[ProposedRule], current: &NetworkConfig, enabled: Option<bool>) -> String {
    let mut denied: Vec<String> = current.denied_domains.iter().map(|d| d.0.clone()).collect();
    if rules.is_empty() && !denied.iter().any(|d| d == "*") {
        denied.push("*".into());
    }
    let top = Top {
        jail: JailYaml {
            enabled,
            network: NetworkYaml {
                mode: "enforce",
                allowed_domains: rules.iter().map(|r| r.host.clone()).collect(),
                denied_domains: denied,
                exclude_domains: current
                    .exclude_domains
                    .iter()
                    .map(|d| d.0.clone())
                    .collect(),
                allow_private: current.allow_private,
                inbound_ports: &current.inbound_ports,
                rules: rules.iter().map(rule_yaml).collect(),
            },
        },
    };
    serde_norway::to_string(&top).unwrap_or_default()
}

#[cfg(test)]
#[path = "propose_tests.rs"]
mod tests;
