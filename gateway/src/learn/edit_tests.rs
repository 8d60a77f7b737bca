//! The `vis.yml` edit keeps everything but the lines it adds, byte for byte.

use super::*;
use vis_companion_api::learn::Evidence;

fn rule(host: &str, methods: &[&str], read_only: bool, prefix: Option<&str>) -> ProposedRule {
    ProposedRule {
        id: host.into(),
        host: host.into(),
        ports: vec![80],
        methods: methods.iter().map(|m| m.to_string()).collect(),
        read_only,
        path_prefix: prefix.map(str::to_string),
        already_allowed: false,
        evidence: Evidence {
            requests: 1,
            would_deny: 1,
            first_seen: 1,
            last_seen: 1,
            commands: vec![],
            hosts: vec![host.into()],
        },
    }
}

const FILE: &str = "\
# Project settings — keep this header
model: openai/gpt-4o   # the default model

providers:
  openai: {api_key_env: OPENAI_API_KEY}

jail:
  enabled: true   # bwrap + pasta
  network:
    mode: learn
    # hosts we trust
    allowed_domains:
      - pypi.org   # packages
    rules:
      - host: pypi.org
        access: read-only

# tools section
python_execution: {timeout_s: 60}
";

#[test]
fn comments_order_and_other_keys_are_kept_byte_for_byte() {
    let rules = [
        rule("*.example.com", &["GET"], true, None),
        rule("127.0.0.1", &["GET", "POST"], false, Some("/api")),
    ];
    let out = apply(
        FILE,
        &Edit {
            rules: &rules,
            mode: Some("enforce"),
        },
    )
    .unwrap();
    let expected = "\
# Project settings — keep this header
model: openai/gpt-4o   # the default model

providers:
  openai: {api_key_env: OPENAI_API_KEY}

jail:
  enabled: true   # bwrap + pasta
  network:
    mode: enforce
    # hosts we trust
    allowed_domains:
      - pypi.org   # packages
      - '*.example.com'
      - 127.0.0.1
    rules:
      - host: pypi.org
        access: read-only
      - host: '*.example.com'
        access: read-only
        ports: [80]
      - host: 127.0.0.1
        ports: [80]
        allow:
          - method: GET
            path: /api/*
          - method: POST
            path: /api/*

# tools section
python_execution: {timeout_s: 60}
";
    assert_eq!(out, expected, "\n{out}");
    let net: Value = serde_norway::from_str::<Value>(&out).unwrap()["jail"]["network"].clone();
    NetworkConfig::from_json_value(net).unwrap();
}

#[test]
fn a_file_without_jail_gets_the_block_appended_and_keeps_its_text() {
    let text = "# only a model\nmodel: x   # keep\n";
    let rules = [rule("localhost", &["GET"], true, None)];
    let out = apply(
        text,
        &Edit {
            rules: &rules,
            mode: None,
        },
    )
    .unwrap();
    assert!(out.starts_with(text), "{out}");
    let v: Value = serde_norway::from_str(&out).unwrap();
    assert_eq!(
        v["jail"]["network"]["allowed_domains"],
        json!(["localhost"])
    );
    assert_eq!(v["model"], "x");
    assert!(v["jail"]["network"].get("mode").is_none());
    // an empty (or missing) file works as well
    let out = apply(
        "",
        &Edit {
            rules: &rules,
            mode: Some("enforce"),
        },
    )
    .unwrap();
    let v: Value = serde_norway::from_str(&out).unwrap();
    assert_eq!(v["jail"]["network"]["mode"], "enforce");
}

#[test]
fn a_host_already_allowed_is_not_listed_twice_and_flow_lists_stay_flow_lists() {
    let text = "jail:\n  network: {allowed_domains: [LocalHost, b.test], rules: []}\nz: 1\n";
    let rules = [rule("localhost", &["GET"], true, None)];
    let out = apply(
        text,
        &Edit {
            rules: &rules,
            mode: None,
        },
    )
    .unwrap();
    let v: Value = serde_norway::from_str(&out).unwrap();
    assert_eq!(
        v["jail"]["network"]["allowed_domains"],
        json!(["LocalHost", "b.test"])
    );
    assert_eq!(v["jail"]["network"]["rules"][0]["host"], "localhost");
    assert!(out.ends_with("z: 1\n"), "{out}");
}

#[test]
fn a_file_that_cannot_be_edited_safely_is_refused() {
    let rules = [rule("localhost", &["GET"], true, None)];
    let e = apply(
        "jail: [1, 2]\n",
        &Edit {
            rules: &rules,
            mode: None,
        },
    )
    .unwrap_err();
    assert!(e.contains("`jail` is not a mapping"), "{e}");
    let e = apply(
        "- a\n- b\n",
        &Edit {
            rules: &rules,
            mode: None,
        },
    )
    .unwrap_err();
    assert!(e.contains("top level"), "{e}");
    let e = apply(
        "jail: {network: {allowed_domains: x}}\n",
        &Edit {
            rules: &rules,
            mode: None,
        },
    )
    .unwrap_err();
    assert!(e.contains("allowed_domains"), "{e}");
}
