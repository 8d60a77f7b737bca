//! `/net-probe` and the lanes run the same steps: for a table of policies, filters and
//! targets, the probe's verdict (allow, or the refusal's kind and sentence) is what a
//! real client gets through plain HTTP, CONNECT (opaque or intercepted) and SOCKS5.

mod common;

use std::sync::Arc;

use common::*;
use vis_proxy::{NetworkFilter, Verdict};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    /// `curl --proxy http://…` to `http://host:port/x`.
    Http,
    /// `curl --proxy http://…` to `https://localhost:port/x` (CONNECT, intercepted when
    /// the policy or a filter needs it).
    Https,
    /// `curl --proxy socks5h://…`; the probe gets `host:port`.
    Socks,
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Allowed,
    Refused { kind: String, reason: String },
}

fn refused(kind: &str, reason: &str) -> Outcome {
    Outcome::Refused {
        kind: kind.into(),
        reason: reason.into(),
    }
}

struct Case {
    policy: &'static str,
    filters: fn() -> Vec<Arc<dyn NetworkFilter>>,
    via: Via,
    method: &'static str,
    /// `origin` is replaced by the origin's host (and port).
    host: &'static str,
    expect: Outcome,
}

fn none() -> Vec<Arc<dyn NetworkFilter>> {
    vec![]
}
fn no_post() -> Vec<Arc<dyn NetworkFilter>> {
    vec![Arc::new(BlockMethod("POST"))]
}
fn failing() -> Vec<Arc<dyn NetworkFilter>> {
    vec![Arc::new(Spy::default()), Arc::new(Failing)]
}

/// What the client's flow was recorded as: the first refusal (a `deny` record, or a name
/// that did not resolve), else allowed.
async fn lane_outcome(h: &Harness) -> Outcome {
    let records = h.sink.wait_for(1).await;
    for d in records {
        let kind = d.error_kind.clone().unwrap_or_default();
        if d.decision == Verdict::Deny || kind == "upstream-dns-failure" {
            return Outcome::Refused {
                kind,
                reason: d.reason.unwrap_or_default(),
            };
        }
    }
    Outcome::Allowed
}

async fn probe_outcome(h: &Harness, args: &str) -> Outcome {
    let principal = h.attribution.map.lock().unwrap()[TOKEN].clone();
    let r = h.proxy.probe(&principal, args).await.unwrap();
    if !r.tier1.allow {
        return Outcome::Refused {
            kind: r.tier1.error_kind.unwrap_or_default(),
            reason: r.tier1.reason.unwrap_or_default(),
        };
    }
    match r.filters.iter().find(|row| !row.allow) {
        Some(row) => {
            assert_eq!(r.final_verdict.reason, row.reason);
            Outcome::Refused {
                kind: if row.error.is_some() {
                    "filter-error"
                } else {
                    "blocked-by-filter"
                }
                .into(),
                reason: row.reason.clone().unwrap_or_default(),
            }
        }
        None => {
            assert!(r.final_verdict.allow);
            Outcome::Allowed
        }
    }
}

/// Run `case` through its lane and through the probe; both outcomes.
async fn run(case: &Case) -> (Outcome, Outcome) {
    let ca = test_ca();
    let plain = origin().await;
    let tls = tls_origin(&ca, &["localhost", "127.0.0.1"]).await;
    let h = start(Setup {
        policy: case.policy,
        filters: (case.filters)(),
        extra_roots: vec![ca.der.clone()],
        ..Default::default()
    })
    .await;
    h.resolver.set("meta.test", &["169.254.169.254"]);
    h.resolver.set("private.test", &["10.1.2.3"]);
    let port = match case.via {
        Via::Https => tls.port(),
        _ => plain.port(),
    };
    let host = case.host.replace("origin", "origin.test");
    let host = if case.via == Via::Https && case.host == "origin" {
        "localhost".to_string()
    } else {
        host
    };
    let host_port = if host.contains(':') {
        host.clone()
    } else {
        format!("{host}:{port}")
    };
    let bundle = temp_pem(h.proxy.ca_pem());
    let lane = match case.via {
        Via::Http => {
            let url = format!("http://{host_port}/x");
            curl(&["-X", case.method, "--proxy", &h.http_proxy(), &url]).await
        }
        Via::Https => {
            let url = format!("https://{host_port}/x");
            let ca = bundle.path().to_str().unwrap();
            let proxy = h.http_proxy();
            let args = ["--http1.1", "-X", case.method, "--proxy", &proxy];
            curl(&[&args[..], &["--cacert", ca, url.as_str()]].concat()).await
        }
        Via::Socks => {
            let url = format!("http://{host_port}/x");
            curl(&["--proxy", &h.socks_proxy(), &url]).await
        }
    };
    let lane_seen = lane_outcome(&h).await;
    if lane_seen == Outcome::Allowed {
        // every allowed case reaches its origin
        assert_eq!(lane.status(), 200, "{lane:?}");
    }
    let args = match case.via {
        Via::Http => format!("{} http://{host_port}/x", case.method),
        Via::Https => format!("{} https://{host_port}/x", case.method),
        Via::Socks => host_port.clone(),
    };
    (lane_seen, probe_outcome(&h, &args).await)
}

fn table() -> Vec<Case> {
    let ro =
        "rules: [{host: origin.test, access: read-only}, {host: localhost, access: read-only}]\n";
    vec![
        Case {
            policy: "{}",
            filters: none,
            via: Via::Http,
            method: "GET",
            host: "origin",
            expect: Outcome::Allowed,
        },
        Case {
            policy: "allowed_domains: [other.test]\n",
            filters: none,
            via: Via::Http,
            method: "GET",
            host: "origin",
            expect: refused("blocked-by-allowlist", "host not permitted: origin.test"),
        },
        Case {
            policy: "denied_domains: [origin.test]\n",
            filters: none,
            via: Via::Socks,
            method: "GET",
            host: "origin",
            expect: refused("blocked-by-denylist", "host not permitted: origin.test"),
        },
        Case {
            policy: ro,
            filters: none,
            via: Via::Http,
            method: "POST",
            host: "origin",
            expect: refused(
                "blocked-by-method-policy",
                "method POST /x not allowed for host origin.test",
            ),
        },
        Case {
            policy: ro,
            filters: none,
            via: Via::Https,
            method: "POST",
            host: "origin",
            expect: refused(
                "blocked-by-method-policy",
                "method POST /x not allowed for host localhost",
            ),
        },
        Case {
            policy: ro,
            filters: none,
            via: Via::Https,
            method: "GET",
            host: "origin",
            expect: Outcome::Allowed,
        },
        Case {
            policy: "rules: [{host: origin.test, ports: [1]}]\n",
            filters: none,
            via: Via::Socks,
            method: "GET",
            host: "origin",
            expect: refused("blocked-by-port-policy", ""),
        },
        Case {
            policy: "{}",
            filters: none,
            via: Via::Http,
            method: "GET",
            host: "meta.test:80",
            expect: refused("blocked-by-ssrf", ""),
        },
        Case {
            policy: "{}",
            filters: none,
            via: Via::Socks,
            method: "GET",
            host: "private.test:80",
            expect: refused("blocked-by-ssrf", ""),
        },
        Case {
            policy: "{}",
            filters: none,
            via: Via::Http,
            method: "GET",
            host: "nx.test:80",
            expect: refused("upstream-dns-failure", "cannot resolve host: nx.test"),
        },
        Case {
            policy: "{}",
            filters: no_post,
            via: Via::Http,
            method: "POST",
            host: "origin",
            expect: refused("blocked-by-filter", "no POST to origin.test"),
        },
        Case {
            policy: "{}",
            filters: no_post,
            via: Via::Https,
            method: "POST",
            host: "origin",
            expect: refused("blocked-by-filter", "no POST to localhost"),
        },
        Case {
            policy: "{}",
            filters: no_post,
            via: Via::Socks,
            method: "POST",
            host: "origin",
            expect: Outcome::Allowed,
        },
        Case {
            policy: "{}",
            filters: failing,
            via: Via::Socks,
            method: "GET",
            host: "origin",
            expect: refused("filter-error", "network filter error in 'failing': boom"),
        },
        Case {
            policy: "{}",
            filters: failing,
            via: Via::Http,
            method: "GET",
            host: "origin",
            expect: refused("filter-error", "network filter error in 'failing': boom"),
        },
    ]
}

/// The reason is compared in full where the table gives it; an empty one in the table
/// means "any sentence" (SSRF and port sentences name addresses chosen at run time).
fn matches(expect: &Outcome, got: &Outcome) -> bool {
    match (expect, got) {
        (Outcome::Allowed, Outcome::Allowed) => true,
        (Outcome::Refused { kind, reason }, Outcome::Refused { kind: k, reason: r }) => {
            kind == k && (reason.is_empty() || reason == r)
        }
        _ => false,
    }
}

#[tokio::test]
async fn the_probe_gives_the_verdict_a_client_gets_on_every_lane_for_a_table_of_cases() {
    for (i, case) in table().iter().enumerate() {
        let (lane, probe) = run(case).await;
        let what = format!(
            "case {i}: {:?} {} {} with policy {:?}",
            case.via, case.method, case.host, case.policy
        );
        assert!(matches(&case.expect, &lane), "{what}: lane {lane:?}");
        assert_eq!(lane, probe, "{what}: the probe differs from the lane");
    }
}

#[tokio::test]
async fn when_a_filter_and_the_ssrf_floor_both_refuse_the_lane_reports_the_filter_and_the_probe_the_floor(
) {
    // Lanes run filters before the floor; the probe's Tier 1 (host gate, rules, floor)
    // runs no filter, and a Tier-1 refusal runs none afterwards either.
    let case = Case {
        policy: "{}",
        filters: no_post,
        via: Via::Http,
        method: "POST",
        host: "meta.test:80",
        expect: refused("blocked-by-filter", "no POST to meta.test"),
    };
    let (lane, probe) = run(&case).await;
    assert!(matches(&case.expect, &lane), "{lane:?}");
    assert!(
        matches(&refused("blocked-by-ssrf", ""), &probe),
        "{probe:?}"
    );
}
