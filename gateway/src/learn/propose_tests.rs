//! Synthetic traffic → proposals: minimal, stable, and accepted by the policy compiler.

use super::*;
use vis_proxy::policy::{decide, DecideInput, Policy};

fn obs(host: &str, port: u16, method: &str, path: &str) -> Observation {
    Observation {
        host: host.into(),
        port,
        tunnel: false,
        method: Some(method.into()),
        path: Some(path.into()),
        count: 1,
        first_ts: 1_000,
        last_ts: 1_000,
        command: None,
        would_deny: true,
    }
}

fn compiled(rules: &[ProposedRule]) -> Policy {
    let y = yaml(rules, &NetworkConfig::default(), None);
    let top: serde_json::Value = serde_norway::from_str(&y).expect("yaml");
    let net = NetworkConfig::from_json_value(top["jail"]["network"].clone()).expect("valid");
    Policy::compile(&net).expect("compiles")
}

fn allows(p: &Policy, method: &str, host: &str, path: &str, port: u16) -> bool {
    decide(
        p,
        DecideInput {
            method: Some(method),
            host,
            path: Some(path),
            port: Some(port),
        },
    )
    .is_ok()
}

#[test]
fn thirty_subdomains_of_one_domain_become_one_wildcard() {
    let seen: Vec<Observation> = (0..30)
        .map(|i| obs(&format!("mirror{i}.example.com"), 443, "GET", "/x"))
        .collect();
    let r = rules(&seen);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].host, "*.example.com");
    assert_eq!(r[0].evidence.hosts.len(), 30);
    assert_eq!(r[0].evidence.requests, 30);
    let p = compiled(&r);
    assert!(allows(&p, "GET", "mirror7.example.com", "/x", 443));
    assert!(!allows(&p, "GET", "example.org", "/x", 443));
}

#[test]
fn one_subdomain_is_its_exact_host_and_registrable_domains_are_public_suffix_aware() {
    let r = rules(&[obs("files.example.com", 443, "GET", "/a/b")]);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].host, "files.example.com");
    let p = compiled(&r);
    assert!(!allows(&p, "GET", "www.example.com", "/a/b", 443));
    // two hosts under different registrable domains of one public suffix stay apart
    let r = rules(&[
        obs("a.one.co.uk", 443, "GET", "/"),
        obs("b.two.co.uk", 443, "GET", "/"),
    ]);
    let hosts: Vec<&str> = r.iter().map(|r| r.host.as_str()).collect();
    assert_eq!(hosts, ["a.one.co.uk", "b.two.co.uk"]);
    // the wildcard is as narrow as the hosts allow
    let r = rules(&[
        obs("a.cdn.example.com", 443, "GET", "/"),
        obs("b.cdn.example.com", 443, "GET", "/"),
    ]);
    assert_eq!(r[0].host, "*.cdn.example.com");
    // IP literals and single labels are exact
    let r = rules(&[
        obs("127.0.0.1", 8080, "GET", "/"),
        obs("127.0.0.2", 8080, "GET", "/"),
        obs("localhost", 8080, "GET", "/"),
    ]);
    let hosts: Vec<&str> = r.iter().map(|r| r.host.as_str()).collect();
    assert_eq!(hosts, ["127.0.0.1", "127.0.0.2", "localhost"]);
}

#[test]
fn get_only_traffic_is_read_only_and_a_post_makes_it_a_method_list() {
    let r = rules(&[
        obs("pypi.test", 443, "GET", "/simple/a/"),
        obs("pypi.test", 443, "HEAD", "/packages/a.whl"),
    ]);
    assert!(r[0].read_only);
    assert_eq!(r[0].path_prefix, None, "two top-level folders: no prefix");
    assert_eq!(rule_yaml(&r[0]).access, Some("read-only"));
    let p = compiled(&r);
    assert!(allows(&p, "GET", "pypi.test", "/anything", 443));
    assert!(!allows(&p, "POST", "pypi.test", "/simple/a/", 443));
    assert!(
        !allows(&p, "GET", "pypi.test", "/simple/a/", 80),
        "ports seen only"
    );

    let r = rules(&[
        obs("api.test", 443, "GET", "/"),
        obs("api.test", 443, "post", "/"),
    ]);
    assert!(!r[0].read_only);
    assert_eq!(r[0].methods, ["GET", "POST"]);
    let p = compiled(&r);
    assert!(allows(&p, "POST", "api.test", "/", 443));
    assert!(!allows(&p, "DELETE", "api.test", "/", 443));
}

#[test]
fn a_host_used_under_one_prefix_is_allowed_that_prefix_only() {
    let r = rules(&[
        obs(
            "git.test",
            80,
            "GET",
            "/repo.git/info/refs?service=git-upload-pack",
        ),
        obs("git.test", 80, "POST", "/repo.git/git-upload-pack"),
    ]);
    assert_eq!(r[0].path_prefix.as_deref(), Some("/repo.git"));
    let p = compiled(&r);
    assert!(allows(
        &p,
        "GET",
        "git.test",
        "/repo.git/info/refs?service=git-upload-pack",
        80
    ));
    assert!(allows(
        &p,
        "POST",
        "git.test",
        "/repo.git/git-upload-pack",
        80
    ));
    assert!(!allows(
        &p,
        "POST",
        "git.test",
        "/other.git/git-upload-pack",
        80
    ));
    assert!(!allows(&p, "GET", "git.test", "/repo.git/../etc", 80));
}

#[test]
fn tunnels_and_mixed_records_do_not_restrict_what_was_not_seen() {
    let mut t = obs("tls.test", 443, "GET", "/");
    t.tunnel = true;
    t.method = None;
    t.path = None;
    let r = rules(&[t]);
    assert!(r[0].methods.is_empty() && !r[0].read_only && r[0].path_prefix.is_none());
    let p = compiled(&r);
    assert!(allows(&p, "POST", "tls.test", "/", 443));
    let mut folded = obs("mix.test", 80, "GET", "/a/b");
    folded.method = None;
    folded.count = 40;
    let r = rules(&[folded, obs("mix.test", 80, "GET", "/a/c")]);
    assert!(r[0].methods.is_empty(), "{r:?}");
    assert_eq!(r[0].evidence.requests, 41);
}

#[test]
fn the_same_traffic_in_any_order_gives_the_same_yaml_byte_for_byte() {
    let mut seen = vec![
        obs("b.example.com", 443, "GET", "/x"),
        obs("a.example.com", 443, "GET", "/y"),
        obs("127.0.0.1", 8080, "POST", "/api/items"),
        obs("localhost", 9000, "GET", "/repo.git/info/refs"),
    ];
    seen[2].command = Some("curl".into());
    seen[0].first_ts = 5;
    let first = yaml(&rules(&seen), &NetworkConfig::default(), Some(true));
    seen.reverse();
    seen.rotate_left(1);
    let second = yaml(&rules(&seen), &NetworkConfig::default(), Some(true));
    assert_eq!(first, second);
    assert!(
        first.starts_with("jail:\n  enabled: true\n  network:\n    mode: enforce\n"),
        "{first}"
    );
    let r = rules(&seen);
    let curl = r.iter().find(|r| r.host == "127.0.0.1").unwrap();
    assert_eq!(curl.evidence.commands, ["curl"]);
    let wild = r.iter().find(|r| r.host == "*.example.com").unwrap();
    assert_eq!(
        (wild.evidence.first_seen, wild.evidence.last_seen),
        (5, 1_000)
    );
}

#[test]
fn nothing_seen_denies_everything_and_current_denials_are_kept() {
    let current =
        NetworkConfig::from_yaml_str("denied_domains: [evil.test]\nexclude_domains: [pin.test]\n")
            .unwrap();
    let y = yaml(&[], &current, None);
    let top: serde_json::Value = serde_norway::from_str(&y).unwrap();
    let net = &top["jail"]["network"];
    assert_eq!(net["denied_domains"], serde_json::json!(["evil.test", "*"]));
    assert_eq!(net["exclude_domains"], serde_json::json!(["pin.test"]));
    let p = Policy::compile(&NetworkConfig::from_json_value(net.clone()).unwrap()).unwrap();
    assert!(!allows(&p, "GET", "any.test", "/", 443));
}
