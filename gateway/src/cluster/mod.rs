//! A gateway node among several on one PostgreSQL database (docs/decisions.md, C4).
//!
//! - **Lease** (`lease.rs`): the node registers under its id and address with a lease on
//!   the database's clock, renews it with heartbeats, and stops the process when it loses
//!   it (another incarnation started, or it could not renew in time): from then on the
//!   store's fence refuses its writes anyway.
//! - **Take-over** (`lease.rs`): every node watches for expired leases; the first survivor
//!   to take one over re-homes that node's sessions on itself and the engine settles their
//!   running turns as interrupted.
//! - **Forwarding** (`forward.rs`): a request about a session homed on another live node is
//!   carried to that node; event streams are served on any node (`bus/relay.rs`).

mod forward;
mod lease;
mod node;

pub use forward::{route, ForwardError, NODE_HEADER};
pub use lease::Adopt;
pub use node::{Cluster, NodeOptions};

#[cfg(test)]
mod tests;
