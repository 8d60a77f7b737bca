//! Egress decisions into the session's stream and store (decision G4): each becomes a
//! live-only `egress.decision` event and a row served by `GET /v1/sessions/:sid/egress`.
//!
//! This runs once per proxied request on the proxy's threads, so the record is serialized
//! once, straight to text (no `serde_json::Value` tree), and the event and the row are cut
//! from that text.

use crate::bus::{Bus, SeqRow};
use crate::store::rows;
use std::sync::Arc;
use vis_proxy::{Decision, DecisionSink};

pub struct EgressSink {
    pub bus: Arc<Bus>,
}

impl DecisionSink for EgressSink {
    fn record(&self, session_id: &str, decision: Decision) {
        crate::metrics::egress_decision(session_id, &decision);
        let Ok(json) = serde_json::to_string(&decision) else {
            return;
        };
        // A v4 UUID from the thread's generator (no `getrandom` system call per request).
        let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        let ts_member = format!("{{\"ts\":{},", decision.ts);
        let sid = session_id.to_string();
        // `json` is `{"ts":…,"decision":…,…}`. The row keeps every member and adds `id` and
        // `seq`; the event drops `ts` (the envelope's `ts` is the publish time) and adds `id`.
        let Some(rest) = json.strip_prefix(ts_member.as_str()) else {
            // `ts` is the record's first field (`the_record_serializes_ts_first…` holds it).
            tracing::error!("an egress record did not start with its ts; not recorded");
            return;
        };
        let members = format!("\"id\":\"{id}\",{rest}");
        let row: SeqRow = Box::new(move |c, seq| {
            let all = &json[1..];
            let data = format!("{{\"id\":\"{id}\",\"seq\":{seq},{all}");
            rows::insert_egress(c, &sid, seq, &data)
        });
        self.bus
            .publish_members_with_row(session_id, "egress.decision", &members, Some(row));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use std::task::{Context, Poll};
    use vis_proxy::deny::DeciderKind;
    use vis_proxy::{DecidedBy, Lane, Verdict};

    fn decision() -> Decision {
        Decision {
            ts: 1_700_000_000_123,
            decision: Verdict::Deny,
            lane: Lane::Http,
            phase: "http".into(),
            method: Some("GET".into()),
            path: Some("/a \"quoted\" path?x=1".into()),
            host: "example.com".into(),
            port: 80,
            decided_by: DecidedBy {
                kind: DeciderKind::HostGate,
                rule_host: None,
                filter: None,
            },
            error_kind: Some("blocked-by-allowlist".into()),
            reason: Some("host not permitted: example.com".into()),
            bytes_up: 1,
            bytes_down: 0,
            duration_ms: 2,
            is_intercepted: false,
            provider: None,
        }
    }

    #[test]
    fn the_record_serializes_ts_first_so_the_fast_path_applies() {
        let json = serde_json::to_string(&decision()).expect("json");
        assert!(json.starts_with("{\"ts\":1700000000123,"), "{json}");
    }

    #[tokio::test]
    async fn a_decision_becomes_the_same_event_and_row_as_the_generic_envelope_would_make() {
        let (store, _dir) = crate::store::test_support::temp_store("sink");
        let bus = Arc::new(Bus::new(store.clone(), 100));
        bus.open("s", 0);
        let mut sub = bus
            .subscribe("s", 0, None, tokio_util::sync::CancellationToken::new())
            .await
            .expect("subscription");
        EgressSink { bus: bus.clone() }.record("s", decision());
        // Live streams get the event once the store has committed it.
        store.flush().await;

        let mut frames = Vec::new();
        let waker = futures::task::noop_waker();
        let polled = sub
            .live
            .poll_drain(&mut Context::from_waker(&waker), &mut |f| frames.push(f));
        assert_eq!(polled, Poll::Ready(Some(())));
        let text = String::from_utf8(frames[0].bytes.to_vec()).expect("utf-8");
        let data = text
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .expect("a data line");
        let event: Value = serde_json::from_str(data).expect("event JSON");

        // What the record is: the decision's fields plus an id.
        let mut expected = serde_json::to_value(decision()).expect("value");
        expected["id"] = event["id"].clone();
        assert!(
            event["id"].as_str().is_some_and(|s| s.len() == 36),
            "{event}"
        );
        // The event: the record under the envelope, whose `ts` is the publish time.
        let mut envelope = expected.clone();
        for (k, v) in [
            ("schema", json!(1)),
            ("seq", json!(1)),
            ("session_id", json!("s")),
            ("type", json!("egress.decision")),
            ("ts", event["ts"].clone()),
        ] {
            envelope[k] = v;
        }
        assert_eq!(event, envelope);
        assert!(event["ts"].as_u64().is_some_and(|t| t > 1_700_000_000_123));

        // The row: the record with the decision's own `ts` and the event's seq.
        let rows = store
            .call(|c| rows::egress_page(c, "s", None, 10))
            .await
            .expect("rows");
        let row: Value = serde_json::from_str(&rows[0].1).expect("row JSON");
        expected["seq"] = json!(1);
        assert_eq!(row, expected);
    }
}
