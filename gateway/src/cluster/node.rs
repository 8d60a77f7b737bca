//! [`Cluster`]: this node's membership (its lease), the shared database's view of homes and
//! leases, the NATS connection, and the HTTP client requests are carried to other nodes with.

use axum::body::Body;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use vis_store::nats::Nats;
use vis_store::{Home, Journal, JournalOptions, Lease, NodeId, PgOptions, StoreResult, Writer};

/// The HTTP client a node carries requests to other nodes with.
pub(super) type Client = hyper_util::client::legacy::Client<HttpConnector, Body>;

fn client() -> Client {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(Duration::from_secs(3)));
    http.set_nodelay(true);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(http)
}

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
    pub(super) opts: NodeOptions,
    pub(super) journal: Journal,
    pub(super) lease: Mutex<Lease>,
    nats: Option<Nats>,
    http: Client,
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
            http: client(),
        }))
    }

    /// The client requests are carried to other nodes with.
    pub(super) fn http(&self) -> &Client {
        &self.http
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
