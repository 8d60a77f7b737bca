//! Egress decisions into the session's stream and store (decision G4): each becomes a
//! live-only `egress.decision` event and a row served by `GET /v1/sessions/:sid/egress`.

use crate::bus::{payload, Bus};
use crate::store::{rows, Store};
use serde_json::json;
use std::sync::Arc;
use vis_proxy::{Decision, DecisionSink};

pub struct EgressSink {
    pub bus: Arc<Bus>,
    pub store: Store,
}

impl DecisionSink for EgressSink {
    fn record(&self, session_id: &str, decision: Decision) {
        let Ok(mut record) = serde_json::to_value(&decision) else {
            return;
        };
        let id = uuid::Uuid::new_v4().to_string();
        record["id"] = json!(id);
        let seq = self
            .bus
            .publish(session_id, "egress.decision", payload(record.clone()));
        if seq == 0 {
            return; // the session is gone
        }
        record["seq"] = json!(seq);
        let (sid, data) = (session_id.to_string(), record.to_string());
        self.store
            .submit("egress", move |c| rows::insert_egress(c, &sid, seq, &data));
    }
}
