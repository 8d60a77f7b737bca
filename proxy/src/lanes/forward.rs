//! The per-request pipeline shared by plain HTTP and intercepted HTTPS:
//! decide → request filters → SSRF/validated address → pooled upstream →
//! response filters → streamed, metered response.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioIo;

use crate::body::{self, ProxyBody};
use crate::conn_pool::{ConnPool, Key};
use crate::deny::Denial;
use crate::engine::Shared;
use crate::filters::{header_map, run_filters};
use crate::listener::ConnGuard;
use crate::policy::{decide, DecideInput};
use crate::record::{emit_denial, AllowRecord, RecordBase};
use crate::traits::{FilterCtx, Phase, Principal};
use crate::upstream::{describe, TunnelTlsConnector};

/// Request bodies up to this size are shown to request filters.
pub const FILTER_BODY_LIMIT: u64 = 1024 * 1024;

/// The upstream side of one intercepted tunnel: the address validated at
/// CONNECT and the verified server name (in `key`).
pub(crate) struct TunnelUpstream {
    /// Connections driven in the tunnel's task (every request but upgrades).
    pub local: ConnPool,
    /// `Key::Tls(validated address, server name)`.
    pub key: Key,
    /// `host[:port]` for the upstream request.
    pub authority: String,
    /// Pooled client for upgrade requests (their connection outlives the
    /// request and is handed to the relay).
    pub client: Client<TunnelTlsConnector, ProxyBody>,
}

/// Where the request goes.
pub(crate) enum Upstream {
    /// Plain HTTP: validate the host now; send on the client connection's
    /// own upstream connections (`local`) or the shared pooled client.
    Plain { local: Option<Arc<ConnPool>> },
    /// Intercepted: the address validated at CONNECT.
    Tunnel(Arc<TunnelUpstream>),
    /// Plain HTTP inside a CONNECT tunnel: the address validated at CONNECT, sent on the
    /// tunnel's own upstream connections.
    PlainAt {
        local: Arc<ConnPool>,
        addr: SocketAddr,
    },
    /// Provider route to an `https://` base URL: validate the host now, then
    /// TLS (hostname verified) on a one-request client.
    Tls,
}

pub(crate) struct Job {
    pub principal: Principal,
    pub base: RecordBase,
    pub req_phase: Phase,
    pub resp_phase: Phase,
    /// Port used for the rule port check (`None` inside a tunnel).
    pub check_port: Option<u16>,
    pub upstream: Upstream,
    /// Provider route id: skips the session's host policy (the provider's
    /// configuration allows it), replaces `Host`, reports the provider.
    pub route: Option<String>,
    /// The client connection's place under the overall connection cap; an upgraded
    /// connection keeps it until its relay ends.
    pub conn: Option<ConnGuard>,
}

const HOP_COUNT: usize = 8;
/// Hop-by-hop headers, pre-parsed (removing by `&str` would parse each name per
/// request). `Connection` comes first: [`strip_hop_by_hop`] reads its slot.
const HOP_BY_HOP: [HeaderName; HOP_COUNT] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

fn is_upgrade(h: &HeaderMap) -> bool {
    h.contains_key(header::UPGRADE)
        && h.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str()
                .map(|s| s.to_ascii_lowercase().contains("upgrade"))
                .unwrap_or(false)
        })
}

/// Remove hop-by-hop headers (and those named by `Connection`); keep
/// `Upgrade` + `Connection: upgrade` for an upgrade handshake.
pub(crate) fn strip_hop_by_hop(h: &mut HeaderMap) {
    // One pass over the names (no hashing) finds which of them are present;
    // most responses carry none, and a request usually only its credentials.
    let mut present = [false; HOP_COUNT];
    let mut has_upgrade = false;
    for k in h.keys() {
        if *k == header::UPGRADE {
            has_upgrade = true;
        } else if let Some(i) = HOP_BY_HOP.iter().position(|n| n == k) {
            present[i] = true;
        }
    }
    if !has_upgrade && !present.contains(&true) {
        return;
    }
    let upgrade = has_upgrade && is_upgrade(h);
    // `TE: trailers` is the one TE value h2/gRPC peers rely on; keep it.
    let te_trailers = h
        .get(header::TE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().eq_ignore_ascii_case("trailers"))
        .unwrap_or(false);
    let named: Vec<HeaderName> = if !present[0] {
        Vec::new()
    } else {
        h.get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|s| {
                s.split(',')
                    .map(|x| x.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .filter(|n| n != "upgrade")
            .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
            .collect()
    };
    for n in named {
        h.remove(n);
    }
    for (n, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, p)| *p) {
        h.remove(n);
    }
    if te_trailers {
        h.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else if has_upgrade {
        h.remove(header::UPGRADE);
    }
}

fn deny(shared: &Shared, job: &Job, d: Denial) -> Response<ProxyBody> {
    emit_denial(
        shared.svc.sink.as_ref(),
        &job.principal.session_id,
        &job.base,
        &d,
    );
    d.to_response()
}

/// Reads what is left of a request body that will not be forwarded, bounded in size and
/// time, so that the client sees a clean answer instead of a reset stream (HTTP/2) or a
/// closed socket it is still writing to (HTTP/1.1) racing the denial.
async fn settle_body(body: Incoming, _version: Version, wait: std::time::Duration) {
    let limited = http_body_util::Limited::new(body, FILTER_BODY_LIMIT as usize);
    let _ = tokio::time::timeout(wait, limited.collect()).await;
}

fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub(crate) async fn forward(
    shared: Arc<Shared>,
    job: Job,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let Some(slot) = shared.session_slot(&job.principal.session_id) else {
        return deny(&shared, &job, Denial::overloaded("per session"));
    };
    let base = &job.base;
    let verdict = match &job.route {
        // a provider route is allowed by the provider's configuration
        Some(_) => Ok(crate::policy::Allowed {
            decider: crate::deny::DeciderKind::Credential,
            rule_host: None,
        }),
        None => decide(
            &job.principal.policy,
            DecideInput {
                method: base.method.as_deref(),
                host: &base.host,
                path: base.path.as_deref(),
                port: job.check_port,
            },
        ),
    };
    let allowed = match verdict {
        Ok(a) => a,
        Err(d) => {
            let version = req.version();
            let response = deny(&shared, &job, d);
            settle_body(req.into_body(), version, shared.cfg.head_timeout).await;
            return response;
        }
    };

    // Request filters (body pre-read only when filters exist and the body is small).
    let filters = shared.filters(&job.principal);
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = if upgrade {
        Some(hyper::upgrade::on(&mut req))
    } else {
        None
    };
    let (mut parts, incoming) = req.into_parts();
    let mut pre_read: Option<Bytes> = None;
    let mut stream_body: Option<Incoming> = Some(incoming);
    if !filters.is_empty() {
        let mut body_text = None;
        if matches!(content_length(&parts.headers), Some(n) if n <= FILTER_BODY_LIMIT) {
            if let Some(incoming) = stream_body.take() {
                // the small body shown to filters must arrive within the head timeout
                let bytes = match tokio::time::timeout(shared.cfg.head_timeout, incoming.collect())
                    .await
                {
                    Ok(Ok(c)) => c.to_bytes(),
                    _ => {
                        return Denial::bad_request("request body could not be read").to_response()
                    }
                };
                body_text = Some(String::from_utf8_lossy(&bytes).into_owned());
                pre_read = Some(bytes);
            }
        }
        let ctx = FilterCtx {
            phase: job.req_phase,
            method: base.method.clone(),
            host: base.host.clone(),
            port: base.port,
            path: base.path.clone(),
            headers: header_map(&parts.headers),
            body: body_text,
            status: None,
        };
        if let Err(d) = run_filters(&filters, &ctx, shared.cfg.filter_timeout).await {
            let response = deny(&shared, &job, d.with_rule(allowed.rule_host.clone()));
            if let Some(body) = stream_body.take() {
                settle_body(body, parts.version, shared.cfg.head_timeout).await;
            }
            return response;
        }
    }

    // Provider credentials: after the filters (they saw the phantom), before the dial.
    let mut path = base.path.clone().unwrap_or_else(|| "/".into());
    let creds = shared.svc.credentials.credentials(&job.principal);
    let mut provider = None;
    if !creds.is_empty() {
        match crate::credentials::apply(
            &creds,
            &base.host,
            job.route.as_deref(),
            &mut parts.headers,
            &mut path,
        ) {
            Ok(p) => provider = p,
            Err(d) => return deny(&shared, &job, d.with_rule(allowed.rule_host.clone())),
        }
    }
    if job.route.is_some() {
        provider = job.route.clone();
    }
    let authority_of = |default_port: u16| {
        if base.port == default_port {
            bracket(&base.host)
        } else {
            format!("{}:{}", bracket(&base.host), base.port)
        }
    };
    let mut tls_client = None;
    let mut plain_addr = None;
    // Requests sent on the client connection's own upstream connections
    // (`ConnPool`) carry the origin form; the pooled clients want the
    // absolute form.
    let local = !upgrade
        && matches!(
            &job.upstream,
            Upstream::Plain { local: Some(_) } | Upstream::Tunnel(_) | Upstream::PlainAt { .. }
        );

    // SSRF floor and the upstream URI.
    let uri = match &job.upstream {
        Upstream::Plain { .. } => {
            let addr: SocketAddr =
                match crate::dial::validate(&shared, &job.principal, &base.host, base.port).await {
                    Ok(a) => a,
                    Err(d) => return deny(&shared, &job, d),
                };
            plain_addr = Some(addr);
            if local {
                origin_form(&path)
            } else {
                format!("http://{addr}{path}").parse::<Uri>().ok()
            }
        }
        Upstream::PlainAt { addr, .. } => {
            plain_addr = Some(*addr);
            if local {
                origin_form(&path)
            } else {
                format!("http://{addr}{path}").parse::<Uri>().ok()
            }
        }
        Upstream::Tls => {
            let addr: SocketAddr =
                match crate::dial::validate(&shared, &job.principal, &base.host, base.port).await {
                    Ok(a) => a,
                    Err(d) => return deny(&shared, &job, d),
                };
            let Ok(name) = rustls::pki_types::ServerName::try_from(base.host.clone()) else {
                return deny(
                    &shared,
                    &job,
                    Denial::bad_request(crate::deny::reason::MALFORMED),
                );
            };
            let connector = TunnelTlsConnector {
                dialer: shared.svc.dialer.clone(),
                timeout: shared.cfg.connect_timeout,
                addr,
                name,
                tls: shared.upstream_tls.clone(),
            };
            tls_client =
                Some(Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector));
            format!("https://{}{path}", authority_of(443))
                .parse::<Uri>()
                .ok()
        }
        Upstream::Tunnel(_) if local => origin_form(&path),
        Upstream::Tunnel(t) => format!("https://{}{path}", t.authority).parse::<Uri>().ok(),
    };
    let Some(uri) = uri else {
        return deny(
            &shared,
            &job,
            Denial::bad_request(crate::deny::reason::MALFORMED),
        );
    };
    if job.route.is_some() || !parts.headers.contains_key(header::HOST) {
        let host_value = match &job.upstream {
            Upstream::Plain { .. } | Upstream::PlainAt { .. } => authority_of(80),
            Upstream::Tls => authority_of(443),
            Upstream::Tunnel(t) => t.authority.clone(),
        };
        if let Ok(v) = HeaderValue::from_str(&host_value) {
            parts.headers.insert(header::HOST, v);
        }
    }

    let record = AllowRecord::new(
        shared.svc.sink.clone(),
        job.principal.session_id.clone(),
        base.clone(),
        allowed.decider,
        allowed.rule_host.clone(),
    );
    let record = record.with_provider(provider);
    record.keep(Box::new(slot));
    strip_hop_by_hop(&mut parts.headers);
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    let out_body = match (pre_read, stream_body) {
        (Some(b), _) => {
            record
                .up
                .fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
            body::full(b)
        }
        (None, Some(incoming)) => body::metered(
            body::Paced::new(incoming, shared.cfg.body_idle_timeout),
            record.up.clone(),
            None,
        ),
        (None, None) => body::empty(),
    };
    let out = Request::from_parts(parts, out_body);
    // Until the response head arrives, a record dropped (the client gave up) says the
    // upstream never answered.
    record.awaiting_response(true);
    let pooled = |r: Result<Response<Incoming>, hyper_util::client::legacy::Error>| {
        r.map_err(|e| {
            let (class, msg) = describe(&e);
            Denial::upstream(class, msg)
        })
    };
    // Upgrades keep the pooled clients: their upstream connection outlives
    // the client connection's task (it is handed to the relay).
    let send = async {
        match (&job.upstream, plain_addr) {
            (Upstream::Plain { local: Some(pool) }, Some(addr))
            | (Upstream::PlainAt { local: pool, .. }, Some(addr))
                if local =>
            {
                pool.send(&shared, &Key::Plain(addr), "", out).await
            }
            (Upstream::PlainAt { .. }, _) => pooled(shared.http_client.request(out).await),
            (Upstream::Plain { .. }, _) => pooled(shared.http_client.request(out).await),
            (Upstream::Tunnel(t), _) if local => {
                t.local.send(&shared, &t.key, &t.authority, out).await
            }
            (Upstream::Tunnel(t), _) => pooled(t.client.request(out).await),
            (Upstream::Tls, _) => match &tls_client {
                Some(c) => pooled(c.request(out).await),
                None => Err(Denial::bad_request(crate::deny::reason::MALFORMED)),
            },
        }
    };
    // No upstream read timeout (P9): an upstream that never answers holds the request
    // until the client gives up, and the record then says so (`upstream-no-response`).
    let sent = send.await;
    record.awaiting_response(false);
    let mut resp = match sent {
        Ok(r) => r,
        Err(d) => {
            // (a stalled request body comes back as a `BodyTimeout`: 408)
            record.fail_with(&d);
            return d.to_response();
        }
    };

    // Response filters see the status line and headers, never the body.
    if !filters.is_empty() {
        let ctx = FilterCtx {
            phase: job.resp_phase,
            method: base.method.clone(),
            host: base.host.clone(),
            port: base.port,
            path: base.path.clone(),
            headers: header_map(resp.headers()),
            body: None,
            status: Some(resp.status().as_u16()),
        };
        if let Err(d) = run_filters(&filters, &ctx, shared.cfg.filter_timeout).await {
            record.cancel();
            let mut rb = base.clone();
            rb.phase = job.resp_phase.as_str();
            emit_denial(shared.svc.sink.as_ref(), &job.principal.session_id, &rb, &d);
            return d.to_response();
        }
    }

    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_up) = client_upgrade {
            let upstream_up = hyper::upgrade::on(&mut resp);
            let idle = shared.cfg.idle_timeout;
            // an upgraded connection (WebSocket) is a long-lived flow: reported now, and
            // again with its bytes when it closes
            record.open();
            let conn = job.conn.clone();
            tokio::spawn(async move {
                let _conn = conn;
                if let (Ok(c), Ok(u)) = (client_up.await, upstream_up.await) {
                    let _ = crate::relay::relay(
                        TokioIo::new(c),
                        TokioIo::new(u),
                        idle,
                        &record.up,
                        &record.down,
                    )
                    .await;
                }
                drop(record);
            });
            let (mut parts, _) = resp.into_parts();
            parts.version = Version::HTTP_11;
            return Response::from_parts(parts, body::empty());
        }
    }
    let (mut parts, incoming) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.version = Version::HTTP_11;
    let down = record.down.clone();
    Response::from_parts(parts, body::metered(incoming, down, Some(record)))
}

/// `path` (path + query) as an origin-form URI.
fn origin_form(path: &str) -> Option<Uri> {
    if path.starts_with('/') {
        path.parse().ok()
    } else {
        format!("/{path}").parse().ok()
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_connection_named_ones_are_stripped() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("upgrade", HeaderValue::from_static("h2c"));
        h.insert("authorization", HeaderValue::from_static("Bearer mine"));
        strip_hop_by_hop(&mut h);
        let mut names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        names.sort();
        assert_eq!(names, vec!["authorization", "te"]);
    }

    #[test]
    fn each_hop_by_hop_header_alone_is_removed_and_the_others_are_kept() {
        for name in HOP_BY_HOP.iter().chain([&header::UPGRADE]) {
            let mut h = HeaderMap::new();
            h.insert(name.clone(), HeaderValue::from_static("x"));
            h.insert("content-type", HeaderValue::from_static("text/plain"));
            h.insert("x-custom", HeaderValue::from_static("1"));
            strip_hop_by_hop(&mut h);
            let mut names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
            names.sort();
            assert_eq!(names, vec!["content-type", "x-custom"], "{name}");
        }
    }

    #[test]
    fn a_message_without_hop_by_hop_headers_is_left_as_it_is() {
        let mut h = HeaderMap::new();
        h.insert("content-length", HeaderValue::from_static("3"));
        h.append("set-cookie", HeaderValue::from_static("a=1"));
        h.append("set-cookie", HeaderValue::from_static("b=2"));
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
    }

    #[test]
    fn websocket_upgrade_headers_survive() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("Upgrade"));
        h.insert("upgrade", HeaderValue::from_static("websocket"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h["connection"], "upgrade");
        assert_eq!(h["upgrade"], "websocket");
    }
}
