//! Node leases: a node registers with a lease row (id, address, epoch, expiry on the
//! database's clock) and renews it with heartbeats. A node whose lease expired is taken
//! over by a survivor: the dead lease's epoch moves on and its sessions are homed on the
//! survivor in the same transaction, so the lost node's appends are fenced off from then on
//! (docs/decisions.md, C1).

use crate::journal::{on_engine, Inner};
use crate::pg::ops;
use crate::sqlite::sql;
use crate::types::{Lease, NodeId};
use crate::{Journal, StoreResult};
use std::time::Duration;

/// Leases kept in a journal's database. Cheap to clone.
#[derive(Clone)]
pub struct Leases {
    journal: Journal,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

impl Leases {
    pub(crate) fn new(journal: Journal) -> Self {
        Leases { journal }
    }

    /// Registers `node` at `address` for `ttl`, at a new epoch. The node's sessions (those
    /// still homed on it) are adopted at the new epoch; a previous incarnation's writes are
    /// refused from then on.
    pub async fn acquire(&self, node: &NodeId, address: &str, ttl: Duration) -> StoreResult<Lease> {
        let (n, a, t) = (node.clone(), address.to_string(), ms(ttl));
        let this = &self.journal;
        on_engine!(this, c => sqlite sql::acquire(c, &n, &a, t),
            postgres ops::acquire(&mut c, &n, &a, t).await)
    }

    /// The heartbeat: extends the lease by `ttl` from now. [`crate::StoreError::LeaseLost`]
    /// once it has expired or been taken over (the node must acquire a new one).
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> StoreResult<Lease> {
        let (l, t) = (lease.clone(), ms(ttl));
        let this = &self.journal;
        on_engine!(this, c => sqlite sql::renew(c, &l, t), postgres ops::renew(&c, &l, t).await)
    }

    /// Leases whose time has passed, by node id.
    pub async fn expired(&self) -> StoreResult<Vec<Lease>> {
        let this = &self.journal;
        on_engine!(this, c => sqlite sql::leases(c, false), postgres ops::leases(&c, false).await)
    }

    /// Leases still running, by node id.
    pub async fn live(&self) -> StoreResult<Vec<Lease>> {
        let this = &self.journal;
        on_engine!(this, c => sqlite sql::leases(c, true), postgres ops::leases(&c, true).await)
    }

    /// `survivor` takes over the expired node `dead`: answers the sessions now homed on the
    /// survivor, or `None` if `dead`'s lease is running again (nothing was taken).
    /// [`crate::StoreError::LeaseLost`] if the survivor's own lease is not live.
    pub async fn take_over(
        &self,
        survivor: &Lease,
        dead: &NodeId,
    ) -> StoreResult<Option<Vec<String>>> {
        let (s, d) = (survivor.clone(), dead.clone());
        let this = &self.journal;
        on_engine!(this, c => sqlite sql::take_over(c, &s, &d),
            postgres ops::take_over(&mut c, &s, &d).await)
    }
}
