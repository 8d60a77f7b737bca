//! HTTP requests (plain, intercepted and provider routes) as a lane of the flow's steps
//! ([`crate::phases`]): the filters' view of the request (with a small body), the
//! credential swap, sending upstream (on the client connection's own upstream
//! connections, or a pooled client), the response filters' view, and the streamed,
//! metered response (or an upgraded connection).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioIo;

use crate::attribution::authorize;
use crate::body::{self, ProxyBody};
use crate::conn_pool::{ConnPool, Key};
use crate::deny::{reason, Denial};
use crate::filters::header_map;
use crate::h1_watch::RequestWatch;
use crate::lanes::target::bracket;
use crate::phases::{self, Cleared, Framing, RequestView, ResponseView, Step, Target};
use crate::state::{ConnGuard, Shared};
use crate::traits::{Principal, ProviderCredential};
use crate::upstream::{describe, TunnelTlsConnector};

/// Request bodies up to this size are shown to request filters.
pub const FILTER_BODY_LIMIT: u64 = 1024 * 1024;

/// The upstream side of one intercepted tunnel: the address validated at
/// CONNECT and the verified server name (in `key`).
pub(crate) struct TunnelUpstream {
    /// Connections driven in the tunnel's task (every request but upgrades).
    pub local: ConnPool,
    /// The address validated at CONNECT.
    pub addr: SocketAddr,
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

const HOP_COUNT: usize = 8;
/// Hop-by-hop headers, pre-parsed (removing by `&str` would parse each name per
/// request). `Connection` comes first: [`strip_hop_by_hop`] reads its slot.
pub(crate) const HOP_BY_HOP: [HeaderName; HOP_COUNT] = [
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

/// Reads what is left of a request body that will not be forwarded, bounded in size and
/// time, so that the client sees a clean answer instead of a reset stream (HTTP/2) or a
/// closed socket it is still writing to (HTTP/1.1) racing the denial.
async fn settle_body(body: Incoming, wait: std::time::Duration, watch: Option<RequestWatch>) {
    // a body that declared an absurd chunk ends at once (its bytes will never come)
    let body = body::Paced::new(body, wait, watch);
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

/// Who sent a request.
pub(crate) enum Who {
    /// Attribute by this proxy token (`Proxy-Authorization`).
    Token(Option<String>),
    /// Known already (the tunnel's principal; the provider route's token).
    Known(Principal),
}

/// Run one HTTP request (plain, intercepted or provider route) through the flow's steps;
/// `watch` is the request's view of its connection's framing watch (HTTP/1 only).
pub(crate) async fn forward(
    shared: &Arc<Shared>,
    target: Target,
    who: Who,
    mut req: Request<Incoming>,
    upstream: Upstream,
    conn: Option<ConnGuard>,
    watch: Option<RequestWatch>,
) -> Response<ProxyBody> {
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = if upgrade {
        Some(hyper::upgrade::on(&mut req))
    } else {
        None
    };
    let (parts, body) = req.into_parts();
    let flow = HttpFlow {
        shared,
        who: Some(who),
        path: target.base.path.clone().unwrap_or_else(|| "/".into()),
        parts,
        body: Some(body),
        pre_read: None,
        upgrade,
        client_upgrade,
        upstream,
        conn,
        watch,
    };
    phases::run(shared, target, flow).await
}

/// One HTTP request: its head, its body (streamed, or read for the filters) and where
/// it goes.
struct HttpFlow<'a> {
    shared: &'a Shared,
    who: Option<Who>,
    /// Path + query sent upstream (the phantom in a `key=` parameter swapped).
    path: String,
    parts: http::request::Parts,
    /// The body still to stream (`None` once read for the filters).
    body: Option<Incoming>,
    /// The body read for the filters.
    pre_read: Option<Bytes>,
    upgrade: bool,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    upstream: Upstream,
    /// The client connection's place under the overall connection cap; an upgraded
    /// connection keeps it until its relay ends.
    conn: Option<ConnGuard>,
    /// What the connection's framing watch says of this request's body.
    watch: Option<RequestWatch>,
}

impl HttpFlow<'_> {
    /// Sent on the client connection's own upstream connections ([`ConnPool`], origin
    /// form) rather than a pooled client (absolute form). Upgrades keep the pooled
    /// clients: their upstream connection outlives the client connection's task.
    fn local(&self) -> bool {
        !self.upgrade
            && matches!(
                &self.upstream,
                Upstream::Plain { local: Some(_) } | Upstream::Tunnel(_) | Upstream::PlainAt { .. }
            )
    }
}

fn pooled(r: Result<Response<Incoming>, hyper_util::client::legacy::Error>) -> Sent {
    r.map_err(|e| {
        let (class, msg) = describe(&e);
        Denial::upstream(class, msg)
    })
}

type Sent = Result<Response<Incoming>, Denial>;

impl Framing for HttpFlow<'_> {
    type Answer = Response<ProxyBody>;
    type Upstream = Response<Incoming>;

    async fn attribute(&mut self) -> Result<Principal, Denial> {
        match self.who.take() {
            Some(Who::Known(p)) => Ok(p),
            Some(Who::Token(token)) => {
                authorize(self.shared.svc.attribution.as_ref(), token.as_deref()).await
            }
            None => Err(Denial::auth(reason::MISSING_TOKEN)),
        }
    }

    /// Headers, and the body when it is small: it must arrive within the head timeout.
    async fn request_view(&mut self) -> Result<RequestView, Denial> {
        let mut body = None;
        if matches!(content_length(&self.parts.headers), Some(n) if n <= FILTER_BODY_LIMIT) {
            if let Some(incoming) = self.body.take() {
                let wait = self.shared.cfg.head_timeout;
                let bytes = match tokio::time::timeout(wait, incoming.collect()).await {
                    Ok(Ok(c)) => c.to_bytes(),
                    _ => return Err(Denial::bad_request("request body could not be read")),
                };
                body = Some(String::from_utf8_lossy(&bytes).into_owned());
                self.pre_read = Some(bytes);
            }
        }
        Ok(RequestView {
            headers: header_map(&self.parts.headers),
            body,
        })
    }

    fn credentials(
        &mut self,
        creds: &[ProviderCredential],
        target: &Target,
    ) -> Result<Option<String>, Denial> {
        crate::credentials::apply(
            creds,
            &target.base.host,
            target.route.as_deref(),
            &mut self.parts.headers,
            &mut self.path,
        )
    }

    fn validated(&self) -> Option<SocketAddr> {
        match &self.upstream {
            Upstream::Tunnel(t) => Some(t.addr),
            Upstream::PlainAt { addr, .. } => Some(*addr),
            Upstream::Plain { .. } | Upstream::Tls => None,
        }
    }

    async fn connect(&mut self, target: &Target, c: &Cleared) -> Sent {
        let shared = self.shared;
        // a body that declared an absurd chunk (usually read with the head) is not sent
        if let Some(size) = self.watch.as_ref().and_then(RequestWatch::too_large) {
            return Err(Denial::chunk_too_large(size));
        }
        let base = &target.base;
        let authority_of = |default_port: u16| {
            if base.port == default_port {
                bracket(&base.host)
            } else {
                format!("{}:{}", bracket(&base.host), base.port)
            }
        };
        let local = self.local();
        let path = &self.path;
        let absolute_plain = || format!("http://{}{path}", c.addr).parse::<Uri>().ok();
        let mut tls_client = None;
        let uri = match &self.upstream {
            Upstream::Plain { .. } | Upstream::PlainAt { .. } if local => {
                origin_form(&self.parts.uri, path)
            }
            Upstream::Plain { .. } | Upstream::PlainAt { .. } => absolute_plain(),
            Upstream::Tls => {
                let Ok(name) = rustls::pki_types::ServerName::try_from(base.host.clone()) else {
                    return Err(Denial::bad_request(reason::MALFORMED));
                };
                let connector = TunnelTlsConnector {
                    dialer: shared.svc.dialer.clone(),
                    timeout: shared.cfg.connect_timeout,
                    addr: c.addr,
                    name,
                    tls: shared.up.tls.clone(),
                };
                tls_client =
                    Some(Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector));
                format!("https://{}{path}", authority_of(443))
                    .parse::<Uri>()
                    .ok()
            }
            Upstream::Tunnel(_) if local => origin_form(&self.parts.uri, path),
            Upstream::Tunnel(t) => format!("https://{}{path}", t.authority).parse::<Uri>().ok(),
        };
        let Some(uri) = uri else {
            return Err(Denial::bad_request(reason::MALFORMED));
        };
        let mut parts = std::mem::replace(&mut self.parts, Request::new(()).into_parts().0);
        if target.route.is_some() || !parts.headers.contains_key(header::HOST) {
            let host_value = match &self.upstream {
                Upstream::Plain { .. } | Upstream::PlainAt { .. } => authority_of(80),
                Upstream::Tls => authority_of(443),
                Upstream::Tunnel(t) => t.authority.clone(),
            };
            if let Ok(v) = HeaderValue::from_str(&host_value) {
                parts.headers.insert(header::HOST, v);
            }
        }
        strip_hop_by_hop(&mut parts.headers);
        parts.uri = uri;
        parts.version = Version::HTTP_11;
        let record = &c.record;
        let out_body = match (self.pre_read.take(), self.body.take()) {
            (Some(b), _) => {
                record
                    .up
                    .fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
                body::full(b)
            }
            (None, Some(incoming)) => crate::metered::metered(
                body::Paced::new(incoming, shared.cfg.body_idle_timeout, self.watch.take()),
                record.up.clone(),
                None,
            ),
            (None, None) => body::empty(),
        };
        let out = Request::from_parts(parts, out_body);
        // Until the response head arrives, a record dropped (the client gave up) says the
        // upstream never answered.
        record.awaiting_response(true);
        let sent = match &self.upstream {
            Upstream::Plain { local: Some(pool) } | Upstream::PlainAt { local: pool, .. }
                if local =>
            {
                pool.send(&shared.up, &Key::Plain(c.addr), "", out).await
            }
            Upstream::Plain { .. } | Upstream::PlainAt { .. } => {
                pooled(shared.http_client.request(out).await)
            }
            Upstream::Tunnel(t) if local => {
                t.local.send(&shared.up, &t.key, &t.authority, out).await
            }
            Upstream::Tunnel(t) => pooled(t.client.request(out).await),
            Upstream::Tls => match &tls_client {
                Some(client) => pooled(client.request(out).await),
                None => Err(Denial::bad_request(reason::MALFORMED)),
            },
        };
        // No upstream read timeout: an upstream that never answers holds the request
        // until the client gives up, and the record then says so (`upstream-no-response`).
        // A stalled request body comes back as a `BodyTimeout`: 408; an absurd chunk size
        // as a `ChunkTooLarge`: 400.
        record.awaiting_response(false);
        sent
    }

    /// Response filters see the status line and headers, never the body.
    fn response_view(&self, resp: &Response<Incoming>) -> Option<ResponseView> {
        Some(ResponseView {
            status: resp.status().as_u16(),
            headers: header_map(resp.headers()),
        })
    }

    async fn relay(self, mut resp: Response<Incoming>, c: Cleared) -> Response<ProxyBody> {
        let record = c.record;
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            if let Some(client_up) = self.client_upgrade {
                let upstream_up = hyper::upgrade::on(&mut resp);
                let idle = self.shared.cfg.idle_timeout;
                // an upgraded connection (WebSocket) may be long-lived: reported once it has
                // lasted a second, and again with its bytes when it closes
                let conn = self.conn;
                tokio::spawn(async move {
                    let _conn = conn;
                    if let (Ok(c), Ok(u)) = (client_up.await, upstream_up.await) {
                        let relay = crate::relay::relay(
                            TokioIo::new(c),
                            TokioIo::new(u),
                            idle,
                            &record.up,
                            &record.down,
                        );
                        let _ = crate::record::open_when_long(&record, relay).await;
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
        Response::from_parts(parts, crate::metered::metered(incoming, down, Some(record)))
    }

    /// A request refused by its verdict (the policy or a request filter) has the rest of
    /// its body read first, so that the client sees the answer.
    async fn refuse(self, step: Step, d: Denial) -> Response<ProxyBody> {
        let response = d.to_response();
        if matches!(step, Step::Decide | Step::RequestFilters) {
            if let Some(body) = self.body {
                settle_body(body, self.shared.cfg.head_timeout, self.watch).await;
            }
        }
        response
    }
}

/// `path` (path + query) as an origin-form URI: the request's own URI when it is that
/// already (an intercepted HTTP/1 request whose path nothing changed), else parsed.
fn origin_form(given: &Uri, path: &str) -> Option<Uri> {
    if given.scheme().is_none() && given.path_and_query().map(|p| p.as_str()) == Some(path) {
        return Some(given.clone());
    }
    if path.starts_with('/') {
        path.parse().ok()
    } else {
        format!("/{path}").parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_uri_is_the_path_sent_whether_or_not_the_request_uri_already_was_it() {
        let given = Uri::from_static("/v1/models?key=phantom");
        let same = origin_form(&given, "/v1/models?key=phantom");
        assert_eq!(
            same.as_ref().map(Uri::to_string).as_deref(),
            Some("/v1/models?key=phantom")
        );
        // the credential swap changed the query: what is sent is the new path, not the URI
        let swapped = origin_form(&given, "/v1/models?key=secret");
        assert_eq!(
            swapped.map(|u| u.to_string()).as_deref(),
            Some("/v1/models?key=secret")
        );
        // an absolute-form request (plain HTTP through the proxy) goes out in origin form
        let absolute = Uri::from_static("http://example.com/a?b");
        assert_eq!(
            origin_form(&absolute, "/a?b")
                .map(|u| u.to_string())
                .as_deref(),
            Some("/a?b")
        );
        assert_eq!(
            origin_form(&absolute, "a")
                .map(|u| u.to_string())
                .as_deref(),
            Some("/a")
        );
    }

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
