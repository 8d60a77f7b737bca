//! The typed values that cross the store's API.

use serde::Serialize;

/// A gateway node's id (unique in a cluster; the single-node default uses one fixed id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub String);

impl NodeId {
    pub fn new(id: impl Into<String>) -> Self {
        NodeId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A node's lease: held until `expires_at_ms` (the database's clock), renewed by heartbeats.
/// `epoch` grows by one each time the node acquires its lease and each time a survivor takes
/// it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub node: NodeId,
    pub address: String,
    pub epoch: i64,
    pub expires_at_ms: i64,
}

impl Lease {
    /// The identity this lease writes with: appends for sessions homed elsewhere, or at
    /// another epoch, are refused.
    pub fn writer(&self) -> Writer {
        Writer {
            node: self.node.clone(),
            epoch: self.epoch,
        }
    }
}

/// Who writes: a node at one lease epoch. An append carries it and the store checks it
/// against the session's [`Home`] in the append's own transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Writer {
    pub node: NodeId,
    pub epoch: i64,
}

/// A session's home: the node that writes its events, at the lease epoch it was homed with.
/// `node` is `None` for a session that no node owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    pub node: Option<NodeId>,
    pub epoch: i64,
}

/// A stored (or live) event of one session: its seq, type and envelope JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub seq: i64,
    pub kind: String,
    pub data: String,
}

/// An egress decision record (JSON), stored under the seq of the event published with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRecord(String);

impl EgressRecord {
    pub fn new(record: &impl Serialize) -> Result<Self, serde_json::Error> {
        serde_json::to_string(record).map(EgressRecord)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A record read back from the store (written by [`EgressRecord::new`]).
    pub(crate) fn from_stored(text: String) -> Self {
        EgressRecord(text)
    }
}

/// What an appended event leaves behind besides its seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// A journal row (replayed to clients that reconnect).
    Journal,
    /// Nothing but the high-water mark: a live-only event.
    LiveOnly,
    /// An egress row under the event's seq; the event itself is live-only.
    Egress(EgressRecord),
    /// The egress row stored under the earlier seq `row` is replaced by `record` (a long
    /// flow's row completed in place: it keeps its first seq); the event itself is
    /// live-only and takes a seq of its own, so the high-water still advances.
    EgressUpdate { row: i64, record: EgressRecord },
}

/// A committed append: its seq and the envelope JSON the journal stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub seq: i64,
    pub data: String,
}

/// Stored events of a session after some seq, and how far retention has trimmed its
/// journal (events at or below `trimmed_through` are gone).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Range {
    pub trimmed_through: i64,
    pub events: Vec<Event>,
}

/// An event whose append committed, handed to a [`CommitSink`] (the NATS publisher) in
/// commit order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub sid: String,
    pub event: Event,
}

/// Where a journal hands its committed events. Bounded: when it is full the event is not
/// published (it is durable; a follower refills it from the journal).
pub type CommitSink = tokio::sync::mpsc::Sender<Committed>;
