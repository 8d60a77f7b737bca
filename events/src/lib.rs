//! The session stream's event envelope, its SSE frame and the clock: what the event bus
//! (which stamps and publishes events) and the Companion HTTP crate (which streams them)
//! both need, in a crate that depends on neither.
//!
//! An event is serialized once, by [`Envelope::to_json`]: the envelope's keys (`schema`,
//! `seq`, `ts`, `session_id`, `type`) first, then the payload's members beside them. The
//! text it returns is what the live frame carries and what the journal stores.

mod envelope;
mod frame;
mod members;

pub use envelope::{Envelope, ENVELOPE_KEYS, SCHEMA};
pub use frame::format_frame;

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in epoch milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
