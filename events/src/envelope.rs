//! The typed envelope every session event is serialized in.

use crate::members::Members;
use bytes::Bytes;
use serde::ser::{Serialize, SerializeMap, Serializer};

/// The envelope's `schema`.
pub const SCHEMA: u32 = 1;

/// The envelope's own keys, in the order they are written. A payload member with one of
/// these names is left out: the envelope's value is the one on the wire.
pub const ENVELOPE_KEYS: [&str; 5] = ["schema", "seq", "ts", "session_id", "type"];

/// One event of a session stream: `{"schema":1,"seq":…,"ts":…,"session_id":…,"type":…}`
/// followed by the payload's members.
///
/// The payload is anything that serializes as a map or a struct (an absent payload, `()`
/// or `None`, adds no members). It is written straight into the envelope's object, so an
/// event is serialized once, with no intermediate `serde_json::Value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope<'a, P> {
    pub schema: u32,
    /// The event's per-session seq (the frame's `id`, a client's `Last-Event-ID`).
    pub seq: i64,
    /// When the event was published, epoch milliseconds.
    pub ts: i64,
    /// The stream the event sits in.
    pub session_id: &'a str,
    /// The event's `type` (the frame's `event:` line).
    pub kind: &'a str,
    pub payload: P,
}

impl<'a, P: Serialize> Envelope<'a, P> {
    /// An envelope of the current schema.
    pub fn new(seq: i64, ts: i64, session_id: &'a str, kind: &'a str, payload: P) -> Self {
        Envelope {
            schema: SCHEMA,
            seq,
            ts,
            session_id,
            kind,
            payload,
        }
    }

    /// The event's JSON (one line). A payload that does not serialize as an object (a
    /// programming error) is left out, so the envelope still carries the seq it consumed.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            let bare = Envelope::new(self.seq, self.ts, self.session_id, self.kind, ());
            serde_json::to_string(&bare).unwrap_or_default()
        })
    }

    /// The SSE frame carrying `json` (this envelope's [`Envelope::to_json`]).
    pub fn frame(&self, json: &str) -> Bytes {
        crate::format_frame(Some(self.seq), self.kind, json)
    }
}

impl<P: Serialize> Serialize for Envelope<'_, P> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        let [schema, seq, ts, session_id, kind] = ENVELOPE_KEYS;
        map.serialize_entry(schema, &self.schema)?;
        map.serialize_entry(seq, &self.seq)?;
        map.serialize_entry(ts, &self.ts)?;
        map.serialize_entry(session_id, self.session_id)?;
        map.serialize_entry(kind, self.kind)?;
        self.payload
            .serialize(Members::new(&mut map, &ENVELOPE_KEYS))?;
        map.end()
    }
}

#[cfg(test)]
mod tests;
