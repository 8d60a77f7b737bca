//! The durable store of a gateway node, on one of two engines (docs/decisions.md, C1):
//! embedded SQLite (one node, nothing to install) or PostgreSQL (several nodes sharing one
//! database), with the same typed API and the same behaviour.
//!
//! - [`Journal`]: a session's event journal. [`Journal::append`] assigns the event's seq
//!   inside the transaction that stores it, checked against the session's home node and
//!   lease epoch (the fence) in that same transaction; pending appends are batched into one
//!   transaction per batch on both engines. Range reads, the high-water mark, egress records
//!   and the session's home.
//! - [`Leases`]: node leases with heartbeats; a survivor takes over an expired node's
//!   sessions, which bumps the epochs so the lost node can no longer write for them.
//! - [`nats`]: every committed event published on `<prefix>.<sid>` in one JetStream stream,
//!   and [`nats::Nats::follow`], which replays a session from the journal and then follows
//!   the stream live, joined at the high-water mark with no gap and no duplicate.
//!
//! No call blocks a tokio worker: SQLite runs on a dedicated thread, PostgreSQL through
//! `tokio-postgres`.

mod error;
mod journal;
mod leases;
pub mod nats;
mod pending;
mod pg;
mod sqlite;
pub mod testing;
mod types;

pub use error::{Engine, StoreError, StoreResult};
pub use journal::{Appending, Journal, JournalOptions};
pub use leases::Leases;
pub use pg::migrations::{apply as migrate_postgres, apply_list as apply_postgres_migrations};
pub use pg::PgOptions;
pub use types::{
    Appended, CommitSink, Committed, EgressRecord, Event, Home, Keep, Lease, NodeId, Range, Writer,
};
