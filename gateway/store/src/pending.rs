//! An append waiting for its engine's writer: everything but the seq, which the writer
//! assigns inside the transaction; the envelope is serialized once the seq is known.

use crate::types::{Appended, CommitSink, Committed, Event, Keep, Writer};
use crate::StoreResult;
use serde::Serialize;
use tokio::sync::oneshot;
use vis_events::Envelope;

/// Serializes the event's envelope for a seq.
type Render = Box<dyn FnOnce(i64) -> String + Send>;

pub(crate) struct Pending {
    pub sid: String,
    pub kind: String,
    pub writer: Writer,
    pub keep: Keep,
    render: Render,
    reply: oneshot::Sender<StoreResult<Appended>>,
}

impl Pending {
    pub fn new<P: Serialize + Send + 'static>(
        writer: &Writer,
        sid: &str,
        kind: &str,
        payload: P,
        keep: Keep,
    ) -> (Pending, oneshot::Receiver<StoreResult<Appended>>) {
        let ts = vis_events::now_ms();
        let (sid_owned, kind_owned) = (sid.to_string(), kind.to_string());
        let render: Render =
            Box::new(move |seq| Envelope::new(seq, ts, &sid_owned, &kind_owned, payload).to_json());
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            sid: sid.to_string(),
            kind: kind.to_string(),
            writer: writer.clone(),
            keep,
            render,
            reply: tx,
        };
        (pending, rx)
    }

    /// The envelope JSON for the seq the writer assigned.
    pub fn stamp(self, seq: i64) -> Stamped {
        let data = (self.render)(seq);
        Stamped {
            sid: self.sid,
            kind: self.kind,
            keep: self.keep,
            seq,
            data,
            reply: self.reply,
        }
    }

    /// Answers an append that was refused (nothing of it was stored).
    pub fn refuse(self, e: crate::StoreError) {
        let _ = self.reply.send(Err(e));
    }
}

/// An append with its seq and envelope, written in the open transaction and answered once
/// that transaction's fate is known.
pub(crate) struct Stamped {
    pub sid: String,
    pub kind: String,
    pub keep: Keep,
    pub seq: i64,
    pub data: String,
    reply: oneshot::Sender<StoreResult<Appended>>,
}

impl Stamped {
    /// Answers the append: committed (and handed to `sink`), or lost with `error`.
    pub fn settle(self, outcome: Result<(), crate::StoreError>, sink: Option<&CommitSink>) {
        match outcome {
            Ok(()) => {
                if let Some(sink) = sink {
                    let committed = Committed {
                        sid: self.sid,
                        event: Event {
                            seq: self.seq,
                            kind: self.kind,
                            data: self.data.clone(),
                        },
                    };
                    if sink.try_send(committed).is_err() {
                        tracing::warn!(
                            "event publisher full or gone; followers refill from the journal"
                        );
                    }
                }
                let _ = self.reply.send(Ok(Appended {
                    seq: self.seq,
                    data: self.data,
                }));
            }
            Err(e) => {
                let _ = self.reply.send(Err(e));
            }
        }
    }
}
