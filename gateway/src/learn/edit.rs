//! Writing reviewed rules into a project's `vis.yml` as a minimal edit (docs/decisions.md,
//! L1): a lossless YAML tree (`yaml-edit`) keeps every comment, blank line, key order and
//! quoting of the file; only `jail.network.allowed_domains`, `jail.network.rules` and
//! `jail.network.mode` change (created, with `jail` and `network`, when absent).
//!
//! The edit is checked before anything is written: the new text must parse, its
//! `jail.network` must be a valid policy, and the whole document must equal the old one
//! with exactly these changes (compared as data). Otherwise the edit is refused and the file
//! is left as it was.

use super::propose::{rule_yaml, RuleYaml};
use serde_json::{json, Value};
use std::str::FromStr;
use vis_companion_api::learn::ProposedRule;
use vis_proxy::policy::NetworkConfig;
use yaml_edit::{Document, Mapping, Sequence};

/// What to write.
pub struct Edit<'a> {
    pub rules: &'a [ProposedRule],
    /// Set `mode` (`enforce` / `learn`), or leave it.
    pub mode: Option<&'a str>,
}

fn parse_data(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    let v: Value = serde_norway::from_str(text).map_err(|e| format!("vis.yml: {e}"))?;
    Ok(if v.is_null() { json!({}) } else { v })
}

fn rule_value(r: &RuleYaml) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

/// The hosts to add to `allowed_domains` (not there yet), in the rules' order.
fn new_hosts(current: &Value, rules: &[ProposedRule]) -> Vec<String> {
    let have: Vec<String> = current
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(vis_proxy::policy::normalize_host)
                .collect()
        })
        .unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for r in rules {
        let h = vis_proxy::policy::normalize_host(&r.host);
        if !have.contains(&h) && !out.contains(&r.host) {
            out.push(r.host.clone());
        }
    }
    out
}

/// The expected data after the edit, from the data before it.
fn expected(mut before: Value, edit: &Edit<'_>) -> Value {
    if !before["jail"].is_object() {
        before["jail"] = json!({});
    }
    if !before["jail"]["network"].is_object() {
        before["jail"]["network"] = json!({});
    }
    let net = &mut before["jail"]["network"];
    let hosts = new_hosts(&net["allowed_domains"], edit.rules);
    if !net["allowed_domains"].is_array() {
        net["allowed_domains"] = json!([]);
    }
    if let Some(a) = net["allowed_domains"].as_array_mut() {
        a.extend(hosts.into_iter().map(Value::String));
    }
    if !net["rules"].is_array() {
        net["rules"] = json!([]);
    }
    if let Some(a) = net["rules"].as_array_mut() {
        a.extend(edit.rules.iter().map(|r| rule_value(&rule_yaml(r))));
    }
    if let Some(m) = edit.mode {
        net["mode"] = json!(m);
    }
    before
}

/// A scalar as YAML writes it (quoted only when it must be: `'*.example.com'`).
fn scalar(s: &str) -> String {
    serde_norway::to_string(s)
        .map(|t| t.trim_end().to_string())
        .unwrap_or_else(|_| format!("{s:?}"))
}

/// A rule as a block mapping in the keys' natural order (host, access, methods, ports,
/// allow), lists of scalars in flow style.
fn rule_text(r: &RuleYaml) -> String {
    let mut t = format!("host: {}\n", scalar(&r.host));
    if let Some(a) = r.access {
        t.push_str(&format!("access: {a}\n"));
    }
    if !r.methods.is_empty() {
        let m: Vec<String> = r.methods.iter().map(|m| scalar(m)).collect();
        t.push_str(&format!("methods: [{}]\n", m.join(", ")));
    }
    if !r.ports.is_empty() {
        let p: Vec<String> = r.ports.iter().map(u16::to_string).collect();
        t.push_str(&format!("ports: [{}]\n", p.join(", ")));
    }
    if !r.allow.is_empty() {
        t.push_str("allow:\n");
        for a in &r.allow {
            t.push_str(&format!(
                "  - method: {}\n    path: {}\n",
                scalar(&a.method),
                scalar(&a.path)
            ));
        }
    }
    t
}

fn to_yaml_mapping(r: &RuleYaml) -> Result<Mapping, String> {
    let text = rule_text(r);
    Document::from_str(&text)
        .map_err(|e| e.to_string())?
        .as_mapping()
        .ok_or_else(|| "a rule is not a mapping".to_string())
}

/// Applies the edit to the text of a `vis.yml` (empty for a file that does not exist).
pub fn apply(text: &str, edit: &Edit<'_>) -> Result<String, String> {
    let before = parse_data(text)?;
    if !before.is_object() {
        return Err("vis.yml: the top level is not a mapping".into());
    }
    for (path, v) in [
        ("jail", &before["jail"]),
        ("jail.network", &before["jail"]["network"]),
    ] {
        if !v.is_null() && !v.is_object() {
            return Err(format!("vis.yml: `{path}` is not a mapping"));
        }
    }
    for key in ["allowed_domains", "rules"] {
        let v = &before["jail"]["network"][key];
        if !v.is_null() && !v.is_array() {
            return Err(format!("vis.yml: `jail.network.{key}` is not a list"));
        }
    }
    let doc = if text.trim().is_empty() {
        Document::new_mapping()
    } else {
        Document::from_str(text).map_err(|e| format!("vis.yml: {e}"))?
    };
    let root = doc
        .as_mapping()
        .ok_or("vis.yml: the top level is not a mapping")?;
    if root.get_mapping("jail").is_none() {
        root.set("jail", Mapping::new());
    }
    let jail = root
        .get_mapping("jail")
        .ok_or("vis.yml: cannot edit `jail`")?;
    if jail.get_mapping("network").is_none() {
        jail.set("network", Mapping::new());
    }
    let net = jail
        .get_mapping("network")
        .ok_or("vis.yml: cannot edit `jail.network`")?;
    let hosts = new_hosts(&before["jail"]["network"]["allowed_domains"], edit.rules);
    if !hosts.is_empty() {
        if net.get_sequence("allowed_domains").is_none() {
            net.set("allowed_domains", Sequence::new());
        }
        let seq = net
            .get_sequence("allowed_domains")
            .ok_or("vis.yml: `jail.network.allowed_domains` is not a list")?;
        for h in hosts {
            seq.push(h.as_str());
        }
    }
    if !edit.rules.is_empty() {
        if net.get_sequence("rules").is_none() {
            net.set("rules", Sequence::new());
        }
        let seq = net
            .get_sequence("rules")
            .ok_or("vis.yml: `jail.network.rules` is not a list")?;
        for r in edit.rules {
            seq.push(to_yaml_mapping(&rule_yaml(r))?);
        }
    }
    if let Some(m) = edit.mode {
        net.set("mode", m);
    }
    let out = doc.to_string();
    // the check: exactly the intended change, and a valid policy
    let after = parse_data(&out).map_err(|e| format!("the edited file does not parse: {e}"))?;
    if after != expected(before, edit) {
        return Err(
            "the edit would change more than jail.network; vis.yml was left as it was".into(),
        );
    }
    NetworkConfig::from_json_value(after["jail"]["network"].clone())
        .map_err(|e| format!("the edited policy is invalid: {e}"))?;
    Ok(out)
}

#[cfg(test)]
#[path = "edit_tests.rs"]
mod tests;
