//! Egress decisions into the session's stream and store (docs/decisions.md, G4): each becomes a
//! live-only `egress.decision` event and a row served by `GET /v1/sessions/:sid/egress`.
//!
//! This runs once per proxied request on the proxy's threads. The record is a typed payload
//! (the proxy's [`Decision`] with its id and, for a folded bucket, the counts): the event
//! serializes it once inside its envelope on the publishing thread (no `serde_json::Value`
//! tree), and the stored row serializes it once on the store thread.

use crate::bus::{Bus, SeqRow};
use crate::sandbox::aggregate::{foldable, Buckets, Folded};
use crate::store::rows;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use vis_proxy::{Decision, DecisionSink, FlowState};

/// How often changed buckets of allowed requests are republished (and stored).
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

pub struct EgressSink {
    bus: Arc<Bus>,
    /// Allowed requests folded per session, lane, host, port and minute.
    buckets: Mutex<Buckets>,
    /// Open flows (tunnels, upgraded connections): proxy flow id → (record id, row seq).
    flows: Mutex<HashMap<u64, (String, i64)>>,
}

/// The totals of a folded bucket of allowed requests, beside its record's members.
#[derive(Debug, Clone, Copy, Serialize)]
struct Counts {
    count: u64,
    last_ts: u64,
}

/// One egress record as it is published and stored: the event's payload (the decision's own
/// `ts` gives way to the envelope's publish time) and the stored row (with the decision's
/// `ts` and the seq the row is kept under).
#[derive(Serialize)]
struct EgressRecord<'a> {
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<i64>,
    #[serde(flatten)]
    decision: &'a Decision,
    #[serde(flatten)]
    counts: Option<Counts>,
}

/// What a publication owns: shared by the event (serialized on the publishing thread) and
/// the row (serialized on the store thread).
struct Record {
    id: String,
    decision: Decision,
    counts: Option<Counts>,
}

impl Record {
    fn payload(&self, seq: Option<i64>) -> EgressRecord<'_> {
        EgressRecord {
            id: &self.id,
            seq,
            decision: &self.decision,
            counts: self.counts,
        }
    }
}

/// A v4 UUID from the thread's generator (no `getrandom` system call per record).
fn new_id() -> String {
    uuid::Builder::from_random_bytes(rand::random())
        .into_uuid()
        .to_string()
}

impl EgressSink {
    pub fn new(bus: Arc<Bus>) -> Arc<Self> {
        Arc::new(EgressSink {
            bus,
            buckets: Mutex::new(Buckets::default()),
            flows: Mutex::new(HashMap::new()),
        })
    }

    /// Republishes, every [`FLUSH_EVERY`], the buckets that changed; stops when the sink
    /// is dropped. Needs a tokio runtime.
    pub fn spawn_flusher(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(sink) = weak.upgrade() else { return };
                sink.flush();
            }
        });
    }

    /// Publishes every bucket that changed since the last flush: the same record id, the
    /// same stored row (under the bucket's first seq), the new totals.
    pub fn flush(&self) {
        let now_minute = vis_events::now_ms().max(0) as u64 / 60_000;
        let dirty = self.buckets.lock().take_dirty(now_minute);
        for (sid, b) in dirty {
            let counts = Counts {
                count: b.count,
                last_ts: b.last_ts,
            };
            let record = Record {
                id: b.id.clone(),
                decision: b.record(),
                counts: Some(counts),
            };
            if self.publish(&sid, record, Some(b.seq)) == 0 {
                self.buckets.lock().forget(&sid);
            }
        }
    }

    /// Publishes `record` as the live event and the stored row. `row_seq`: the row already
    /// stored for this record id (an update); `None` stores a new row under the event's seq.
    /// Returns the event's seq (0 when the session has no channel).
    fn publish(&self, session_id: &str, record: Record, row_seq: Option<i64>) -> i64 {
        let record = Arc::new(record);
        let (sid, stored) = (session_id.to_string(), record.clone());
        let row: SeqRow = Box::new(move |db, seq| {
            let kept = row_seq.unwrap_or(seq);
            let data = serde_json::to_string(&stored.payload(Some(kept)))
                .map_err(|e| crate::store::StoreError::Other(format!("egress record: {e}")))?;
            rows::insert_egress(db, &sid, kept, &data)?;
            if kept != seq {
                // the row keeps its first seq; the session's high-water still moves on
                rows::bump_high_water(db, &sid, seq)?;
            }
            Ok(())
        });
        self.bus
            .publish_egress(session_id, record.payload(None), Some(row))
    }

    /// [`EgressSink::publish`] of one decision as a record of its own.
    fn publish_one(
        &self,
        session_id: &str,
        decision: Decision,
        id: String,
        row_seq: Option<i64>,
    ) -> i64 {
        let record = Record {
            id,
            decision,
            counts: None,
        };
        self.publish(session_id, record, row_seq)
    }
}

impl DecisionSink for EgressSink {
    fn record(&self, session_id: &str, decision: Decision) {
        // A flow is counted once, when it ends (with its byte totals).
        if decision.state != Some(FlowState::Open) {
            crate::metrics::egress_decision(session_id, &decision);
        }
        match decision.state {
            Some(FlowState::Open) => {
                let (id, flow) = (new_id(), decision.flow);
                let seq = self.publish_one(session_id, decision, id.clone(), None);
                if seq > 0 {
                    self.flows.lock().insert(flow, (id, seq));
                }
            }
            Some(FlowState::Closed) => {
                let open = self.flows.lock().remove(&decision.flow);
                match open {
                    Some((id, seq)) => {
                        self.publish_one(session_id, decision, id, Some(seq));
                    }
                    None => {
                        self.publish_one(session_id, decision, new_id(), None);
                    }
                }
            }
            None if foldable(&decision) => {
                let mut buckets = self.buckets.lock();
                match buckets.fold(session_id, decision) {
                    Folded::Added => {}
                    Folded::Single(d) => {
                        drop(buckets);
                        self.publish_one(session_id, d, new_id(), None);
                    }
                    Folded::New(first, key) => {
                        // the folded record is shown as soon as it starts
                        let record = Record {
                            id: new_id(),
                            counts: Some(Counts {
                                count: 1,
                                last_ts: first.ts,
                            }),
                            decision: first,
                        };
                        let (id, first) = (record.id.clone(), record.decision.clone());
                        let seq = self.publish(session_id, record, None);
                        if seq > 0 {
                            buckets.started(session_id, key, id, seq, first);
                        }
                    }
                }
            }
            None => {
                self.publish_one(session_id, decision, new_id(), None);
            }
        }
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
            phase: "http",
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
            state: None,
            flow: 0,
            would_deny: None,
            command: None,
        }
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
        EgressSink::new(bus.clone()).record("s", decision());
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
            .with(|db| rows::egress_page(db, "s", None, 10))
            .await
            .expect("rows");
        let row: Value = serde_json::from_str(&rows[0].1).expect("row JSON");
        expected["seq"] = json!(1);
        assert_eq!(row, expected);
    }

    fn allowed(ts: u64, state: Option<FlowState>, flow: u64, down: u64) -> Decision {
        let mut d = decision();
        d.ts = ts;
        d.decision = Verdict::Allow;
        d.decided_by.kind = DeciderKind::Default;
        d.error_kind = None;
        d.reason = None;
        d.bytes_down = down;
        d.state = state;
        d.flow = flow;
        d
    }

    async fn rows_of(store: &crate::store::Store) -> Vec<Value> {
        store
            .with(|db| rows::egress_page(db, "s", None, 100))
            .await
            .expect("rows")
            .into_iter()
            .map(|(_, d)| serde_json::from_str(&d).expect("row JSON"))
            .collect()
    }

    #[tokio::test]
    async fn a_thousand_allowed_requests_to_one_host_in_a_minute_are_one_row_with_exact_totals() {
        let (store, _dir) = crate::store::test_support::temp_store("sink-fold");
        let bus = Arc::new(Bus::new(store.clone(), 100));
        bus.open("s", 0);
        let sink = EgressSink::new(bus.clone());
        let t0 = (vis_events::now_ms() as u64 / 60_000) * 60_000;
        let single = crate::sandbox::aggregate::KEEP_SINGLE as u64;
        for i in 0..1000 + single {
            sink.record("s", allowed(t0 + i, None, 0, 3));
        }
        // a denial is never folded
        sink.record("s", decision());
        sink.flush();
        store.flush().await;
        let rows = rows_of(&store).await;
        assert_eq!(rows.len(), single as usize + 2, "{rows:?}");
        let folded: Vec<&Value> = rows.iter().filter(|r| r.get("count").is_some()).collect();
        assert_eq!(folded.len(), 1);
        let allow = folded[0];
        assert_eq!(allow["count"], 1000);
        assert_eq!(allow["bytes_down"], 3000);
        assert_eq!(allow["last_ts"], t0 + 999 + single);
        assert_eq!(allow["ts"], t0 + single);
        // the row keeps the seq of its first publication
        assert_eq!(allow["seq"], single + 1);
    }

    #[tokio::test]
    async fn a_tunnel_is_published_when_it_opens_and_its_row_is_completed_when_it_closes() {
        let (store, _dir) = crate::store::test_support::temp_store("sink-flow");
        let bus = Arc::new(Bus::new(store.clone(), 100));
        bus.open("s", 0);
        let mut sub = bus
            .subscribe("s", 0, None, tokio_util::sync::CancellationToken::new())
            .await
            .expect("subscription");
        let sink = EgressSink::new(bus.clone());
        sink.record("s", allowed(1, Some(FlowState::Open), 42, 0));
        store.flush().await;
        let rows = rows_of(&store).await;
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["state"], "open");
        sink.record("s", allowed(1, Some(FlowState::Closed), 42, 5000));
        store.flush().await;
        let rows = rows_of(&store).await;
        assert_eq!(rows.len(), 1, "the close updates the open row");
        assert_eq!(rows[0]["state"], "closed");
        assert_eq!(rows[0]["bytes_down"], 5000);
        assert_eq!(rows[0]["seq"], 1);

        let mut frames = Vec::new();
        let waker = futures::task::noop_waker();
        let _ = sub
            .live
            .poll_drain(&mut Context::from_waker(&waker), &mut |f| frames.push(f));
        let events: Vec<Value> = frames
            .iter()
            .filter_map(|f| {
                let text = String::from_utf8(f.bytes.to_vec()).ok()?;
                let data = text.lines().find_map(|l| l.strip_prefix("data: "))?;
                serde_json::from_str(data).ok()
            })
            .collect();
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0]["id"], events[1]["id"], "one record, two states");
        assert_eq!(events[0]["state"], "open");
        assert_eq!(events[1]["state"], "closed");
        assert_eq!(events[1]["seq"], 2);
    }
}
