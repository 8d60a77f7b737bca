//! `start --database-url`: this gateway as a node of a cluster on that database
//! (docs/decisions.md, C4): its id, the address other nodes reach it at, and its lease.

use crate::cluster::{Cluster, NodeOptions};
use anyhow::{Context, Result};
use std::sync::Arc;
use std::time::Duration;
use vis_store::nats::Nats;
use vis_store::NodeId;

/// A node id: 1 to 64 letters, digits, `.`, `-` or `_`.
pub(super) fn node_id(v: &str) -> Result<String, String> {
    let fine = !v.is_empty()
        && v.len() <= 64
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    fine.then(|| v.to_string())
        .ok_or_else(|| "a node id is 1 to 64 letters, digits, '.', '-' or '_'".into())
}

/// The URL other nodes reach this one at: `http://host:port`, nothing after the port.
pub(super) fn advertise_url(v: &str) -> Result<String, String> {
    let rest = v
        .strip_prefix("http://")
        .ok_or("expected the node's own URL, such as http://10.0.0.5:7890")?;
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
        return Err("the URL is http://host:port with nothing after the port".into());
    }
    Ok(format!("http://{authority}"))
}

/// The machine's host name (the default node id), or `vis-node`.
pub(super) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .and_then(|h| node_id(&h).ok())
        .unwrap_or_else(|| "vis-node".into())
}

/// Where other nodes reach a node that listens on `host:port`, unless given.
pub(super) fn default_address(host: &str, port: u16) -> String {
    match host {
        "0.0.0.0" | "::" => format!("http://{}:{port}", host_name()),
        h if h.contains(':') => format!("http://[{h}]:{port}"),
        h => format!("http://{h}:{port}"),
    }
}

/// Registers this node on the database (a new lease epoch), bounded in time.
pub(super) async fn join(
    pg: &vis_store::PgOptions,
    node: &str,
    address: String,
    ttl_ms: u64,
    nats: Option<Nats>,
) -> Result<Arc<Cluster>> {
    let opts = NodeOptions {
        node: NodeId::new(node),
        address,
        ttl: Duration::from_millis(ttl_ms.max(1000)),
    };
    let shown = opts.address.clone();
    let mut pg = pg.clone();
    pg.pool_size = 4;
    let cluster = tokio::time::timeout(Duration::from_secs(15), Cluster::join(&pg, opts, nats))
        .await
        .map_err(|_| anyhow::anyhow!("no answer within 15 s"))
        .and_then(|r| r.map_err(anyhow::Error::from))
        .with_context(|| {
            format!(
                "cannot open the PostgreSQL store at {} (registering node {node})",
                super::database::redacted(&pg.url)
            )
        })?;
    tracing::info!(
        node,
        address = %shown,
        epoch = cluster.writer().epoch,
        "joined the cluster"
    );
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_id_is_a_short_plain_name() {
        for good in ["node-a", "gw_1", "host.example"] {
            assert_eq!(node_id(good).as_deref(), Ok(good));
        }
        for bad in ["", "a b", "a/b", &"x".repeat(65), "nöde"] {
            assert!(node_id(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn an_advertised_url_is_plain_http_to_a_host_and_port() {
        assert_eq!(
            advertise_url("http://10.0.0.5:7890/").as_deref(),
            Ok("http://10.0.0.5:7890")
        );
        for bad in [
            "10.0.0.5:7890",
            "https://a:1",
            "http://a:1/v1",
            "http://u@a:1",
            "http://",
        ] {
            assert!(advertise_url(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(default_address("127.0.0.1", 7890), "http://127.0.0.1:7890");
        assert_eq!(default_address("::1", 7890), "http://[::1]:7890");
    }
}
