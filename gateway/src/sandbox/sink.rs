//! Egress decisions into the session's stream and store (decision G4): each becomes a
//! live-only `egress.decision` event and a row served by `GET /v1/sessions/:sid/egress`.

use crate::bus::{payload, Bus, SeqRow};
use crate::store::rows;
use serde_json::json;
use std::sync::Arc;
use vis_proxy::{Decision, DecisionSink};

pub struct EgressSink {
    pub bus: Arc<Bus>,
}

impl DecisionSink for EgressSink {
    fn record(&self, session_id: &str, decision: Decision) {
        let Ok(mut record) = serde_json::to_value(&decision) else {
            return;
        };
        // A v4 UUID from the thread's generator (no `getrandom` system call per request).
        let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        record["id"] = json!(id.to_string());
        let event = payload(record.clone());
        let sid = session_id.to_string();
        // The egress row is written with the event, by one store job; its JSON is made
        // there too, off the proxy's thread.
        let row: SeqRow = Box::new(move |c, seq| {
            record["seq"] = json!(seq);
            rows::insert_egress(c, &sid, seq, &record.to_string())
        });
        self.bus
            .publish_with_row(session_id, "egress.decision", event, Some(row));
    }
}
