//! Requests about a session go to the node it is homed on (docs/decisions.md, C4).
//!
//! Everything under `/v1/sessions/{sid}` is answered by the session's home node, where its
//! workspace, sandbox, running turn and queue live: a request landing elsewhere is carried
//! there (same method, path, headers and streamed body; the client's credential goes
//! along, since the nodes of a cluster share one token) and the home's answer streamed
//! back. The event streams (`events`, `events-since`, `seq`, `egress`) are served by any
//! node from the shared journal. Every answer says which node gave it (`vis-node`).

use super::node::Cluster;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue, Method, Uri};
use axum::middleware::Next;
use axum::response::Response;

/// The node that answered (on every response of a cluster node).
pub const NODE_HEADER: &str = "vis-node";
/// Set on a request one node carries to another: it is never carried again.
const FORWARDED_BY: &str = "vis-forwarded-by";

/// Session routes any node serves from the shared journal.
const SERVED_ANYWHERE: &[&str] = &["events", "events-since", "seq", "egress"];

/// The session a request is about, unless any node may answer it.
fn homed_session(method: &Method, path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v1/sessions/")?;
    let (sid, tail) = rest.split_once('/').unwrap_or((rest, ""));
    if sid.is_empty() || sid == "actions" {
        return None;
    }
    if (method == Method::GET || method == Method::HEAD) && SERVED_ANYWHERE.contains(&tail) {
        return None;
    }
    Some(sid.to_string())
}

/// Why a request about a session could not be answered here or carried to its home.
#[derive(Debug)]
pub enum ForwardError {
    /// The shared database could not be read.
    Database(String),
    /// The session's home cannot answer now (its lease ran out, it cannot be reached, or
    /// the session moved while the request was on its way): a live node takes it over
    /// within the lease time, so the client should retry.
    Unavailable { sid: String, message: String },
}

/// Answers a request here, or carries it to the session's home node (the HTTP mapping of
/// [`ForwardError`] and the `vis-node` header are the adapter's).
pub async fn route(cluster: &Cluster, req: Request, next: Next) -> Result<Response, ForwardError> {
    let Some(sid) = homed_session(req.method(), req.uri().path()) else {
        return Ok(next.run(req).await);
    };
    let home = cluster.home(&sid).await.map_err(|e| {
        ForwardError::Database(format!("cannot read the home of session {sid}: {e}"))
    })?;
    let node = match home.and_then(|h| h.node) {
        Some(node) if &node != cluster.node() => node,
        // Here, unknown (404 from the routes), or owned by no node (claimed by the first
        // node that writes for it).
        _ => return Ok(next.run(req).await),
    };
    if req.headers().contains_key(FORWARDED_BY) {
        return Err(unavailable(
            &sid,
            format!("session {sid} moved to node {node} while the request was on its way"),
        ));
    }
    let Some(address) = cluster
        .live_address(&node)
        .await
        .map_err(|e| ForwardError::Database(format!("cannot read the cluster's leases: {e}")))?
    else {
        return Err(unavailable(
            &sid,
            format!(
                "session {sid} is homed on node {node}, whose lease ran out; \
                 a live node takes it over within the lease time"
            ),
        ));
    };
    carry(cluster, req, &address)
        .await
        .map_err(|why| unavailable(&sid, format!("node {node} at {address}: {why}")))
}

/// Sends `req` to the node at `address` and answers with its response, streamed.
async fn carry(cluster: &Cluster, req: Request, address: &str) -> Result<Response, String> {
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    parts.uri = format!("{}{path}", address.trim_end_matches('/'))
        .parse::<Uri>()
        .map_err(|e| format!("bad node address: {e}"))?;
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    parts.headers.remove(header::HOST);
    if let Ok(v) = HeaderValue::from_str(cluster.node().as_str()) {
        parts
            .headers
            .insert(HeaderName::from_static(FORWARDED_BY), v);
    }
    let resp = cluster
        .http()
        .request(Request::from_parts(parts, body))
        .await
        .map_err(|e| format!("cannot reach it: {e}"))?;
    let (mut parts, body) = resp.into_parts();
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    Ok(Response::from_parts(parts, Body::new(body)))
}

const HOP_BY_HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn unavailable(sid: &str, message: String) -> ForwardError {
    ForwardError::Unavailable {
        sid: sid.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_routes_belong_to_the_home_node_except_the_event_streams() {
        let sid = "0b7c1c9e-4a39-4c43-9d5e-0a3a3a7f6a10";
        for (m, p) in [
            (Method::POST, format!("/v1/sessions/{sid}/turns")),
            (Method::GET, format!("/v1/sessions/{sid}/turns")),
            (Method::PATCH, format!("/v1/sessions/{sid}")),
            (Method::DELETE, format!("/v1/sessions/{sid}")),
            (Method::POST, format!("/v1/sessions/{sid}/turns/t1/cancel")),
            (Method::GET, format!("/v1/sessions/{sid}/drafts")),
        ] {
            assert_eq!(homed_session(&m, &p).as_deref(), Some(sid), "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, format!("/v1/sessions/{sid}/events")),
            (Method::GET, format!("/v1/sessions/{sid}/events-since")),
            (Method::GET, format!("/v1/sessions/{sid}/seq")),
            (Method::GET, format!("/v1/sessions/{sid}/egress")),
            (Method::GET, "/v1/sessions".to_string()),
            (Method::POST, "/v1/sessions".to_string()),
            (Method::GET, "/v1/sessions/actions/search".to_string()),
            (Method::GET, "/v1/events".to_string()),
        ] {
            assert_eq!(homed_session(&m, &p), None, "{m} {p}");
        }
    }
}
