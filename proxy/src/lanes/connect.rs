//! CONNECT: the flow's steps decide host + port and validate the address (no request
//! filters here: the tunnel's inner requests are filtered); then an opaque tunnel, or
//! interception when the host's traffic must be inspected (a rule that can deny some
//! method or path, a registered filter, or a provider host; never an excluded host).

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::attribution::{authorize, token_from_headers};
use crate::body::{self, ProxyBody};
use crate::deny::{reason, Denial};
use crate::h1_watch::Watched;
use crate::phases::{self, Cleared, Framing, Step, Target};
use crate::prefixed::Prefixed;
use crate::record::{open_when_long, RecordBase};
use crate::state::{ConnGuard, Shared};
use crate::traits::{Lane, Principal};

pub use crate::lanes::target::parse_authority;

fn established() -> Response<ProxyBody> {
    let mut r = Response::new(body::empty());
    *r.status_mut() = StatusCode::OK;
    r.extensions_mut()
        .insert(hyper::ext::ReasonPhrase::from_static(
            b"Connection Established",
        ));
    r
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    conn: ConnGuard,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let Some((host, port)) = req
        .uri()
        .authority()
        .and_then(|a| parse_authority(a.as_str()))
    else {
        return Denial::bad_request(reason::MALFORMED).to_response();
    };
    let target = Target {
        base: Arc::new(RecordBase {
            lane: Lane::Connect,
            phase: "connect",
            method: None,
            path: None,
            host,
            port,
            is_intercepted: false,
        }),
        check_port: Some(port),
        route: None,
        request_phase: None,
        response_phase: None,
    };
    let flow = ConnectFlow {
        token: token_from_headers(req.headers()),
        shared: shared.clone(),
        conn,
        req,
    };
    phases::run(&shared, target, flow).await
}

/// One CONNECT request.
struct ConnectFlow {
    shared: Arc<Shared>,
    token: Option<String>,
    conn: ConnGuard,
    req: Request<Incoming>,
}

/// What the tunnel becomes.
enum Tunnel {
    /// Bytes relayed as they are, to this upstream socket.
    Opaque(TcpStream),
    /// TLS (or plain HTTP) served here, every inner request decided on its own, for this
    /// host and port.
    Intercept(Intercepted),
}

/// What an intercepted tunnel is for.
struct Intercepted {
    host: String,
    port: u16,
    /// Its upstream may be dialled before the first inner request is decided.
    dial_early: bool,
}

impl Framing for ConnectFlow {
    type Answer = Response<ProxyBody>;
    type Upstream = Tunnel;

    async fn attribute(&mut self) -> Result<Principal, Denial> {
        authorize(self.shared.svc.attribution.as_ref(), self.token.as_deref()).await
    }

    async fn connect(&mut self, target: &Target, c: &Cleared) -> Result<Tunnel, Denial> {
        let host = target.base.host.as_str();
        let policy = &c.principal.policy;
        let rule = policy.select_rule(host);
        let rule_restricts = rule.map(|r| r.restricts_requests()).unwrap_or(false);
        let provider_host = c.credentials.iter().any(|cr| cr.covers(host));
        // learn mode looks inside too: a proposal needs the methods and paths (L1)
        let intercept = !policy.is_excluded(host)
            && (rule_restricts || !c.filters.is_empty() || provider_host || policy.is_learning());
        if intercept {
            // Dialling the upstream before the first inner request is decided only opens a
            // connection a request the policy allows would open anyway. Not when a filter
            // may refuse every request to the host, nor when its rule is `access: none`
            // (which may allow nothing): the connections themselves would then carry a
            // signal no request may carry.
            let dial_early = c.filters.is_empty() && !rule.is_some_and(|r| r.closed);
            return Ok(Tunnel::Intercept(Intercepted {
                host: host.to_string(),
                port: target.base.port,
                dial_early,
            }));
        }
        let up = &self.shared.up;
        crate::dial::connect(up.dialer.as_ref(), up.connect_timeout, c.addr)
            .await
            .map(Tunnel::Opaque)
    }

    async fn relay(mut self, up: Tunnel, c: Cleared) -> Response<ProxyBody> {
        let on_upgrade = hyper::upgrade::on(&mut self.req);
        let shared = self.shared;
        let conn = self.conn;
        let upstream = match up {
            Tunnel::Opaque(s) => s,
            Tunnel::Intercept(Intercepted {
                host,
                port,
                dial_early,
            }) => {
                // the inner requests are recorded one by one, not the tunnel
                c.record.cancel();
                let tunnel = crate::lanes::intercept::Tunnel {
                    principal: c.principal,
                    host,
                    port,
                    addr: c.addr,
                    dial_early,
                    conn,
                    allowed: c.allowed,
                    hold: c.record,
                };
                tokio::spawn(async move {
                    use crate::lanes::intercept::run;
                    match on_upgrade.await {
                        // The client side is the accepted TCP socket (plus any bytes hyper
                        // read past the CONNECT head), read without hyper's upgrade layers.
                        Ok(up) => match up.downcast::<TokioIo<Watched<TcpStream>>>() {
                            Ok(parts) => {
                                let tcp = parts.io.into_inner().into_inner();
                                let io = Prefixed::new(parts.read_buf.to_vec(), tcp);
                                run(shared, tunnel, io).await
                            }
                            Err(up) => run(shared, tunnel, TokioIo::new(up)).await,
                        },
                        Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
                    }
                });
                return established();
            }
        };
        let record = c.record;
        let idle = shared.cfg.idle_timeout;
        tokio::spawn(async move {
            // The tunnel counts against the overall connection cap until it ends.
            let _conn = conn;
            match on_upgrade.await {
                Ok(up) => {
                    // The client side is the accepted TCP socket (plus any bytes
                    // hyper read past the CONNECT head): relay TCP to TCP.
                    // The tunnel may run for hours: once it has lasted a second the phone
                    // learns of it, and of its bytes at the end.
                    let r = match up.downcast::<TokioIo<Watched<TcpStream>>>() {
                        Ok(parts) => {
                            let relay = crate::relay::relay_tcp(
                                parts.io.into_inner().into_inner(),
                                &parts.read_buf,
                                upstream,
                                idle,
                                &record.up,
                                &record.down,
                            );
                            open_when_long(&record, relay).await
                        }
                        Err(up) => {
                            let relay = crate::relay::relay(
                                TokioIo::new(up),
                                upstream,
                                idle,
                                &record.up,
                                &record.down,
                            );
                            open_when_long(&record, relay).await
                        }
                    };
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "tunnel ended with an error");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
            }
            drop(record);
        });
        established()
    }

    async fn refuse(self, _: Step, d: Denial) -> Response<ProxyBody> {
        d.to_response()
    }
}
