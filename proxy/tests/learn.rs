//! Learn mode on the wire (docs/decisions.md, L1): what the allowlist would deny passes and is
//! recorded as "would deny"; explicit denials, network filters and the SSRF floor still deny.

mod common;

use std::sync::Arc;

use common::*;
use vis_proxy::Verdict;

const LEARNING: &str = "mode: learn\nallowed_domains: [other.test]\ndenied_domains: [evil.test]\n";

#[tokio::test]
async fn learn_mode_lets_allowlist_denials_through_and_keeps_every_other_denial() {
    let o = origin().await;
    let h = start(Setup {
        policy: LEARNING,
        filters: vec![Arc::new(BlockMethod("DELETE"))],
        ..Default::default()
    })
    .await;
    h.resolver.set("evil.test", &["127.0.0.9"]);
    h.resolver.set("meta.test", &["169.254.169.254"]);
    h.resolver.set("lan.test", &["10.0.0.7"]);
    let proxy = h.http_proxy();
    let url = |host: &str| format!("http://{host}:{}/learn/me", o.port());

    let r = curl(&["--proxy", &proxy, &url("origin.test")]).await;
    assert_eq!(r.status(), 200, "{r:?}");
    let recs = h.sink.wait_for(1).await;
    let allow = recs.last().unwrap();
    assert_eq!(allow.decision, Verdict::Allow);
    let w = allow.would_deny.as_ref().expect("marked would-deny");
    assert_eq!(w.error_kind, "blocked-by-allowlist");
    assert_eq!(w.reason, "host not permitted: origin.test");
    let json = serde_json::to_value(allow).unwrap();
    assert_eq!(json["would_deny"]["error_kind"], "blocked-by-allowlist");

    // a host on the allowlist is a plain allow (no would_deny member on the wire)
    let r = curl(&["--proxy", &proxy, &url("other.test")]).await;
    assert_eq!(r.status(), 200);
    let recs = h.sink.wait_for(2).await;
    assert!(recs[1].would_deny.is_none());
    assert!(serde_json::to_value(&recs[1])
        .unwrap()
        .get("would_deny")
        .is_none());

    // the filter, an explicit denial and the SSRF floor do not learn
    let kind = |r: &Curl| r.header("x-vis-egress-error").unwrap_or_default();
    let r = curl(&["--proxy", &proxy, "-X", "DELETE", &url("origin.test")]).await;
    assert_eq!((r.status(), kind(&r).as_str()), (403, "blocked-by-filter"));
    let r = curl(&["--proxy", &proxy, &url("evil.test")]).await;
    assert_eq!(
        (r.status(), kind(&r).as_str()),
        (403, "blocked-by-denylist")
    );
    for host in ["meta.test", "169.254.169.254", "lan.test"] {
        let r = curl(&["--proxy", &proxy, &url(host)]).await;
        assert_eq!(
            (r.status(), kind(&r).as_str()),
            (403, "blocked-by-ssrf"),
            "{host}"
        );
    }
    assert!(
        h.dialer.dialled().iter().all(|a| a.ip().is_loopback()),
        "{:?}",
        h.dialer.dialled()
    );
    assert_eq!(
        o.seen().len(),
        2,
        "only the two allowed GETs reached the origin"
    );
}
