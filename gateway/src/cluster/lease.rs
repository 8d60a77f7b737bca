//! The node's lease kept alive, and lost nodes taken over.

use super::node::Cluster;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::task::JoinHandle;
use vis_store::{NodeId, StoreError};

/// What the engine does with sessions re-homed on this node from a lost one: settle their
/// running turns as interrupted and take up their queues.
#[async_trait::async_trait]
pub trait Adopt: Send + Sync {
    async fn adopt(&self, sids: Vec<String>);
}

impl Cluster {
    /// Renews the lease every third of its time. When it is lost (taken over, or not
    /// renewed before it ran out), `lost` gets why: the node must stop, since the store
    /// refuses its writes from then on.
    pub fn spawn_heartbeat(
        self: &Arc<Self>,
        lost: impl FnOnce(String) + Send + 'static,
    ) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let ttl = this.opts.ttl;
            let mut renewed = Instant::now();
            loop {
                tokio::time::sleep(ttl / 3).await;
                let current = this.lease.lock().clone();
                match this.journal.leases().renew(&current, ttl).await {
                    Ok(lease) => {
                        *this.lease.lock() = lease;
                        renewed = Instant::now();
                    }
                    Err(StoreError::LeaseLost { node, epoch }) => {
                        return lost(format!(
                            "the lease of node {node} at epoch {epoch} was taken over"
                        ));
                    }
                    Err(e) if renewed.elapsed() >= ttl => {
                        return lost(format!("the lease could not be renewed in time: {e}"));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "lease renewal failed; retrying");
                    }
                }
            }
        })
    }

    /// Every half lease time, takes over each node whose lease ran out and hands the
    /// sessions it re-homed here to `adopt`. Several survivors may try at once; the
    /// database lets one of them have each lost node.
    pub fn spawn_watch(self: &Arc<Self>, adopt: Arc<dyn Adopt>) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            // The epoch each lost node was left at after a take-over seen here: not retried.
            let mut handled: HashMap<NodeId, i64> = HashMap::new();
            loop {
                tokio::time::sleep(this.opts.ttl / 2).await;
                match this.take_over_lost(&mut handled).await {
                    Ok(sids) if !sids.is_empty() => adopt.adopt(sids).await,
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "looking for lost nodes failed"),
                }
            }
        })
    }

    async fn take_over_lost(
        &self,
        handled: &mut HashMap<NodeId, i64>,
    ) -> vis_store::StoreResult<Vec<String>> {
        let leases = self.journal.leases();
        let mut adopted = Vec::new();
        for dead in leases.expired().await? {
            if dead.node == self.opts.node || handled.get(&dead.node) >= Some(&dead.epoch) {
                continue;
            }
            let me = self.lease.lock().clone();
            if let Some(sids) = leases.take_over(&me, &dead.node).await? {
                tracing::warn!(
                    node = %dead.node,
                    sessions = sids.len(),
                    "a node's lease ran out; its sessions are homed here now"
                );
                adopted.extend(sids);
            }
            handled.insert(dead.node.clone(), dead.epoch + 1);
        }
        Ok(adopted)
    }
}
