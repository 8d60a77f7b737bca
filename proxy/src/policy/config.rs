//! `jail.network` configuration (docs/decisions.md, egress policy rules): a closed map parsed
//! with serde; unknown keys and bad values are errors naming the key path.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;

use crate::error::ProxyError;

/// The `jail.network` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Host allowlist.
    #[serde(default)]
    pub allowed_domains: Vec<NonBlank>,
    /// Host denylist.
    #[serde(default)]
    pub denied_domains: Vec<NonBlank>,
    /// Hosts that are always opaque tunnels.
    #[serde(default)]
    pub exclude_domains: Vec<NonBlank>,
    /// Let private addresses through the SSRF floor.
    #[serde(default)]
    pub allow_private: bool,
    /// Process jail only; validated here, unused by the proxy.
    #[serde(default)]
    pub inbound_ports: Vec<Port>,
    /// Per-host method / path / port rules.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// `enforce` (the default) or `learn`: allow what the allowlist would deny and record it
    /// as "would deny" (docs/decisions.md, L1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

/// `mode` of the `jail.network` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Deny what the policy denies (the default).
    Enforce,
    /// Allow what the allowlist would deny, recording it as "would deny"; the SSRF floor,
    /// explicit denials and network filters still deny.
    Learn,
}

impl Mode {
    /// The wire / config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Learn => "learn",
        }
    }
}

/// One entry of `rules`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Host pattern (required).
    pub host: NonBlank,
    /// Method preset.
    #[serde(default)]
    pub access: Option<Access>,
    /// Extra allowed methods.
    #[serde(default)]
    pub methods: Vec<NonBlank>,
    /// Allowed ports (empty = any).
    #[serde(default)]
    pub ports: Vec<Port>,
    /// Method + path globs.
    #[serde(default)]
    pub allow: Vec<AllowEntry>,
}

/// One `allow` entry of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AllowEntry {
    /// Method (or `*`).
    pub method: NonBlank,
    /// Path glob, default `*`.
    #[serde(default)]
    pub path: Option<NonBlank>,
}

/// `access` presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Access {
    /// GET HEAD OPTIONS.
    #[serde(rename = "read-only", alias = "readonly", alias = "ro")]
    ReadOnly,
    /// Any method.
    #[serde(
        rename = "read-write",
        alias = "readwrite",
        alias = "rw",
        alias = "full",
        alias = "all"
    )]
    ReadWrite,
    /// No method (closed rule; docs/decisions.md, P3).
    #[serde(rename = "none", alias = "deny", alias = "closed")]
    None,
}

/// A non-blank string (trimmed on parse).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct NonBlank(pub String);

impl<'de> Deserialize<'de> for NonBlank {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let t = s.trim();
        if t.is_empty() {
            return Err(de::Error::custom("must be a non-blank string"));
        }
        Ok(NonBlank(t.to_string()))
    }
}

/// A port 1..=65535, given as an integer or a numeric string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Port(pub u16);

impl<'de> Deserialize<'de> for Port {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Port;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a port number 1..65535")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Port, E> {
                if (1..=65535).contains(&v) {
                    Ok(Port(v as u16))
                } else {
                    Err(E::custom(format!("port {v} out of range 1..65535")))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Port, E> {
                if v < 0 {
                    return Err(E::custom(format!("port {v} out of range 1..65535")));
                }
                self.visit_u64(v as u64)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Port, E> {
                match v.trim().parse::<u64>() {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!("port {v:?} is not a number"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

fn path_error<E: fmt::Display>(e: serde_path_to_error::Error<E>) -> ProxyError {
    ProxyError::Config(describe_path_error("jail.network", &e))
}

/// `<section>.<key path>: <what is wrong>`, naming each key once: for an unknown key serde's
/// path already ends with that key, which the message names itself, so the path stops at its
/// parent.
pub(crate) fn describe_path_error<E: fmt::Display>(
    section: &str,
    e: &serde_path_to_error::Error<E>,
) -> String {
    let inner = e.inner().to_string();
    let mut segments: Vec<String> = e
        .path()
        .to_string()
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(last) = segments.last() {
        if inner.starts_with(&format!("unknown field `{last}`")) {
            segments.pop();
        }
    }
    let mut at: Vec<&str> = section.split('.').filter(|s| !s.is_empty()).collect();
    at.extend(segments.iter().map(String::as_str));
    if at.is_empty() {
        format!("at the top level: {inner}")
    } else {
        format!("{}: {inner}", at.join("."))
    }
}

impl NetworkConfig {
    /// Parse from a JSON value (as the gateway's config loader holds it).
    pub fn from_json_value(v: serde_json::Value) -> Result<Self, ProxyError> {
        let cfg: NetworkConfig = serde_path_to_error::deserialize(v).map_err(path_error)?;
        cfg.validate()
    }

    /// The model-facing view without the gateway-owned keys
    /// (`is_jailed`, `changes_require`, `generation`): `enabled`,
    /// `allowed_domains`, `denied_domains`, `exclude_domains`,
    /// `allow_private`, `inbound_ports` (rules are not shown).
    pub fn access_view(&self) -> serde_json::Value {
        serde_json::json!({
            "enabled": true,
            "allowed_domains": self.allowed_domains,
            "denied_domains": self.denied_domains,
            "exclude_domains": self.exclude_domains,
            "allow_private": self.allow_private,
            "inbound_ports": self.inbound_ports,
        })
    }

    /// Parse from YAML text.
    pub fn from_yaml_str(s: &str) -> Result<Self, ProxyError> {
        let de = serde_norway::Deserializer::from_str(s);
        let cfg: NetworkConfig = serde_path_to_error::deserialize(de).map_err(path_error)?;
        cfg.validate()
    }

    pub(crate) fn validate(self) -> Result<Self, ProxyError> {
        self.validate_in("jail.network")
    }

    /// [`Self::validate`], naming keys under `section` (`network` in a stand-alone file).
    pub(crate) fn validate_in(self, section: &str) -> Result<Self, ProxyError> {
        let mut seen = std::collections::HashSet::new();
        for (i, p) in self.inbound_ports.iter().enumerate() {
            if !seen.insert(p.0) {
                return Err(ProxyError::Config(format!(
                    "{section}.inbound_ports[{i}]: duplicate port {}",
                    p.0
                )));
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key_of_the_closed_map() {
        let c = NetworkConfig::from_yaml_str(
            "allowed_domains: [example.com]\ndenied_domains: ['*']\nexclude_domains: [pinned.example]\nallow_private: true\ninbound_ports: [5273, '4200']\nrules:\n  - host: api.example.com\n    access: ro\n    methods: [post]\n    ports: [443, '22']\n    allow: [{method: POST, path: /repos/**}]\n",
        )
        .unwrap();
        assert_eq!(c.rules[0].access, Some(Access::ReadOnly));
        assert_eq!(c.rules[0].ports, vec![Port(443), Port(22)]);
        assert_eq!(c.inbound_ports, vec![Port(5273), Port(4200)]);
        assert_eq!(c.mode, None);
    }

    #[test]
    fn mode_is_enforce_or_learn_and_nothing_else() {
        let c = NetworkConfig::from_yaml_str("mode: learn\n").unwrap();
        assert_eq!(c.mode, Some(Mode::Learn));
        let c = NetworkConfig::from_yaml_str("mode: enforce\n").unwrap();
        assert_eq!(c.mode, Some(Mode::Enforce));
        let e = NetworkConfig::from_yaml_str("mode: watch\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("jail.network.mode"), "{e}");
    }

    #[test]
    fn an_unknown_key_is_named_once_under_its_parent() {
        let e = NetworkConfig::from_yaml_str("allowed_domain: [x]\n")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("jail.network.allowed_domain"), "{e}");
        assert!(
            e.starts_with("config error: jail.network: unknown field `allowed_domain`"),
            "{e}"
        );
    }

    #[test]
    fn unknown_key_is_an_error_naming_the_key() {
        let e = NetworkConfig::from_yaml_str("allowed_domain: [x]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("allowed_domain"), "{e}");
        let e = NetworkConfig::from_yaml_str("rules: [{host: x, acces: ro}]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rules[0]") && e.contains("acces"), "{e}");
    }

    #[test]
    fn bad_values_are_errors_naming_the_key() {
        let e = NetworkConfig::from_yaml_str("rules: [{host: x, ports: [70000]}]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rules[0].ports[0]"), "{e}");
        let e = NetworkConfig::from_yaml_str("rules: [{host: x, access: sometimes}]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rules[0].access"), "{e}");
        let e = NetworkConfig::from_yaml_str("allowed_domains: ['  ']\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("allowed_domains[0]"), "{e}");
        let e = NetworkConfig::from_yaml_str("rules: [{access: ro}]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("host"), "{e}");
        let e = NetworkConfig::from_yaml_str("inbound_ports: [1, 1]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("inbound_ports[1]"), "{e}");
    }

    #[test]
    fn the_access_view_hides_rules_and_round_trips_ports() {
        let c = NetworkConfig::from_yaml_str("allowed_domains: [a.com]\ninbound_ports: ['4200']\nrules: [{host: a.com, access: ro}]\n").unwrap();
        let v = c.access_view();
        assert_eq!(v["inbound_ports"], serde_json::json!([4200]));
        assert_eq!(v["allowed_domains"], serde_json::json!(["a.com"]));
        assert!(v.get("rules").is_none());
        let back = NetworkConfig::from_json_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn json_values_parse_the_same_way() {
        let c = NetworkConfig::from_json_value(
            serde_json::json!({"rules":[{"host":"x","ports":["443"]}]}),
        )
        .unwrap();
        assert_eq!(c.rules[0].ports, vec![Port(443)]);
    }
}
