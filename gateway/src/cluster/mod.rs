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

pub use forward::forward;
pub use lease::Adopt;

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use vis_store::nats::Nats;
use vis_store::{Home, Journal, JournalOptions, Lease, NodeId, PgOptions, StoreResult, Writer};

/// How a node joins the cluster.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    pub node: NodeId,
    /// Where the other nodes reach this one (`http://host:port`).
    pub address: String,
    /// How long a lease lasts without a heartbeat.
    pub ttl: Duration,
}

/// This node's membership: its lease, the database's view of homes and leases, and the
/// NATS connection other nodes' events arrive on.
pub struct Cluster {
    opts: NodeOptions,
    journal: Journal,
    lease: Mutex<Lease>,
    nats: Option<Nats>,
    http: forward::Client,
}

impl Cluster {
    /// Registers this node: a new lease epoch, which also adopts the sessions still homed
    /// on the node (a restart keeps them; its previous incarnation is fenced off).
    pub async fn join(
        pg: &PgOptions,
        opts: NodeOptions,
        nats: Option<Nats>,
    ) -> StoreResult<Arc<Cluster>> {
        let journal = Journal::open_postgres(pg, JournalOptions::default()).await?;
        let lease = journal
            .leases()
            .acquire(&opts.node, &opts.address, opts.ttl)
            .await?;
        Ok(Arc::new(Cluster {
            opts,
            journal,
            lease: Mutex::new(lease),
            nats,
            http: forward::client(),
        }))
    }

    pub fn node(&self) -> &NodeId {
        &self.opts.node
    }

    /// The identity this node's writes are fenced with (fixed for the process's life: a
    /// lost lease ends the process).
    pub fn writer(&self) -> Writer {
        self.lease.lock().writer()
    }

    /// The journal over the shared database (replays for streams of other nodes' sessions).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    pub fn nats(&self) -> Option<&Nats> {
        self.nats.as_ref()
    }

    /// A session's home, `None` for an unknown session.
    pub async fn home(&self, sid: &str) -> StoreResult<Option<Home>> {
        self.journal.home(sid).await
    }

    /// The address of `node` while its lease runs.
    pub async fn live_address(&self, node: &NodeId) -> StoreResult<Option<String>> {
        let live = self.journal.leases().live().await?;
        Ok(live
            .into_iter()
            .find(|l| &l.node == node)
            .map(|l| l.address))
    }
}

#[cfg(test)]
mod tests;
