//! CONNECT (§6.2): decide host + port, SSRF, then an opaque tunnel or
//! interception (decision P5).

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use crate::attribution::{authorize, token_from_headers};
use crate::body::{self, ProxyBody};
use crate::deny::{reason, Denial};
use crate::engine::Shared;
use crate::listener::ConnGuard;
use crate::policy::{decide, normalize_host, DecideInput};
use crate::record::{emit_denial, AllowRecord, RecordBase};
use crate::traits::Lane;

/// Parse a CONNECT target `host[:port]` / `[v6]:port` (port defaults to
/// 443). Pure; `None` when malformed.
pub fn parse_authority(s: &str) -> Option<(String, u16)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &rest[..end];
        let tail = &rest[end + 1..];
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse::<u16>().ok()?,
            None if tail.is_empty() => 443,
            None => return None,
        };
        (host.to_string(), port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h.to_string(), p.parse::<u16>().ok()?),
            Some(_) => return None,
            None => (s.to_string(), 443),
        }
    };
    if host.is_empty()
        || port == 0
        || host
            .chars()
            .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        return None;
    }
    Some((normalize_host(&host), port))
}

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
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let Some((host, port)) = req
        .uri()
        .authority()
        .and_then(|a| parse_authority(a.as_str()))
    else {
        return Denial::bad_request(reason::MALFORMED).to_response();
    };
    let principal = match authorize(
        shared.svc.attribution.as_ref(),
        token_from_headers(req.headers()).as_deref(),
    )
    .await
    {
        Ok(p) => p,
        Err(d) => return d.to_response(),
    };
    let base = RecordBase {
        lane: Lane::Connect,
        phase: "connect",
        method: None,
        path: None,
        host: host.clone(),
        port,
        is_intercepted: false,
    };
    let sink = shared.svc.sink.clone();
    let sid = principal.session_id.clone();
    let refuse = |d: Denial| {
        emit_denial(sink.as_ref(), &sid, &base, &d);
        d.to_response()
    };
    let Some(slot) = shared.session_slot(&sid) else {
        return refuse(Denial::overloaded("per session"));
    };
    let allowed = match decide(
        &principal.policy,
        DecideInput {
            method: None,
            host: &host,
            path: None,
            port: Some(port),
        },
    ) {
        Ok(a) => a,
        Err(d) => return refuse(d),
    };
    let addr = match crate::dial::validate(&shared, &principal, &host, port).await {
        Ok(a) => a,
        Err(d) => return refuse(d),
    };
    let filters = shared.filters(&principal);
    let rule_restricts = principal
        .policy
        .select_rule(&host)
        .map(|r| r.restricts_requests())
        .unwrap_or(false);
    let provider_host = shared
        .svc
        .credentials
        .credentials(&principal)
        .iter()
        .any(|c| c.covers(&host));
    let intercept = !principal.policy.is_excluded(&host)
        && (rule_restricts || !filters.is_empty() || provider_host);
    let on_upgrade = hyper::upgrade::on(&mut req);

    if intercept {
        let shared2 = shared.clone();
        let tunnel = crate::lanes::intercept::Target {
            principal,
            host,
            port,
            addr,
            conn,
            allowed,
        };
        tokio::spawn(async move {
            let _slot = slot;
            match on_upgrade.await {
                Ok(up) => crate::lanes::intercept::run(shared2, tunnel, TokioIo::new(up)).await,
                Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
            }
        });
        return established();
    }

    let upstream = match crate::dial::connect(&shared, addr).await {
        Ok(s) => s,
        Err(d) => {
            let rec = AllowRecord::new(
                sink.clone(),
                sid.clone(),
                base.clone(),
                allowed.decider,
                allowed.rule_host.clone(),
            );
            rec.fail_with(&d);
            return d.to_response();
        }
    };
    let record = AllowRecord::new(
        sink.clone(),
        sid.clone(),
        base.clone(),
        allowed.decider,
        allowed.rule_host,
    );
    // The tunnel may run for hours: the phone learns of it now, and of its bytes at the end.
    record.open();
    let idle = shared.cfg.idle_timeout;
    tokio::spawn(async move {
        // The tunnel counts against the overall connection cap until it ends.
        let _conn = conn;
        let _slot = slot;
        match on_upgrade.await {
            Ok(up) => {
                // The client side is the accepted TCP socket (plus any bytes
                // hyper read past the CONNECT head): relay TCP to TCP.
                let r = match up.downcast::<TokioIo<tokio::net::TcpStream>>() {
                    Ok(parts) => {
                        crate::relay::relay_tcp(
                            parts.io.into_inner(),
                            &parts.read_buf,
                            upstream,
                            idle,
                            &record.up,
                            &record.down,
                        )
                        .await
                    }
                    Err(up) => {
                        crate::relay::relay(
                            TokioIo::new(up),
                            upstream,
                            idle,
                            &record.up,
                            &record.down,
                        )
                        .await
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

#[cfg(test)]
mod tests {
    use super::parse_authority;

    #[test]
    fn connect_targets_parse_including_bracketed_ipv6() {
        assert_eq!(
            parse_authority("example.com:8443"),
            Some(("example.com".into(), 8443))
        );
        assert_eq!(
            parse_authority("Example.com"),
            Some(("example.com".into(), 443))
        );
        assert_eq!(parse_authority("[::1]:443"), Some(("::1".into(), 443)));
        assert_eq!(
            parse_authority("[0:0:0:0:0:0:0:1]:80"),
            Some(("::1".into(), 80))
        );
        assert_eq!(
            parse_authority("2130706433:80"),
            Some(("127.0.0.1".into(), 80))
        );
        assert_eq!(parse_authority("::1:443"), None);
        assert_eq!(parse_authority("x:99999"), None);
        assert_eq!(parse_authority(":80"), None);
        assert_eq!(parse_authority(""), None);
    }
}
