//! Provider routes (docs/decisions.md, P8): `/_vis/provider/<provider>/<token>/<rest>`
//! on the proxy's own address forwards to the provider's configured base URL
//! (+ `<rest>` + query) with its credential swapped in. Accepted in origin
//! form (a child calling `OPENAI_BASE_URL` directly) and in absolute form
//! through the proxy (a child whose `no_proxy` is empty).

use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;

use crate::attribution::authorize;
use crate::body::ProxyBody;
use crate::deny::Denial;
use crate::h1_watch::RequestWatch;
use crate::lanes::forward::{forward, Upstream, Who};
use crate::phases::Target;
use crate::policy::normalize_host;
use crate::record::RecordBase;
use crate::state::{ConnGuard, Shared};
use crate::traits::{Lane, Phase};

/// The route prefix.
pub const PREFIX: &str = "/_vis/provider/";

/// A parsed provider route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Provider id.
    pub provider: String,
    /// Proxy token.
    pub token: String,
    /// Remaining path (starts with `/`, may be just `/`) + `?query`.
    pub rest: String,
}

/// Parse `/_vis/provider/<provider>/<token>[/<rest>][?query]` (pure).
pub fn parse_route(path_and_query: &str) -> Option<Route> {
    let tail = path_and_query.strip_prefix(PREFIX)?;
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    let mut it = path.splitn(3, '/');
    let provider = it.next().filter(|s| !s.is_empty())?.to_string();
    let token = it.next().filter(|s| !s.is_empty())?.to_string();
    let mut rest = format!("/{}", it.next().unwrap_or(""));
    if let Some(q) = query {
        rest.push('?');
        rest.push_str(q);
    }
    Some(Route {
        provider,
        token,
        rest,
    })
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    route: Route,
    conn: ConnGuard,
    watch: RequestWatch,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let principal = match authorize(shared.svc.attribution.as_ref(), Some(&route.token)).await {
        Ok(p) => p,
        Err(d) => return d.to_response(),
    };
    let creds = shared.svc.credentials.credentials(&principal);
    let Some(base_url) = creds
        .iter()
        .find(|c| c.provider == route.provider)
        .and_then(|c| c.base_url.clone())
    else {
        return Denial::bad_request(format!("unknown provider route: {}", route.provider))
            .to_response();
    };
    let Ok(base) = base_url.parse::<http::Uri>() else {
        return Denial::bad_request(format!("bad base URL for provider {}", route.provider))
            .to_response();
    };
    let https = match base.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => {
            return Denial::bad_request(format!("bad base URL for provider {}", route.provider))
                .to_response()
        }
    };
    let Some(host) = base.host().map(normalize_host) else {
        return Denial::bad_request(format!("bad base URL for provider {}", route.provider))
            .to_response();
    };
    let port = base.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path = format!("{}{}", base.path().trim_end_matches('/'), route.rest);
    let target = Target {
        base: Arc::new(RecordBase {
            lane: Lane::Provider,
            phase: if https { "https" } else { "http" },
            method: Some(req.method().as_str().to_string()),
            path: Some(path),
            host,
            port,
            is_intercepted: false,
        }),
        check_port: Some(port),
        route: Some(route.provider),
        request_phase: Some(if https { Phase::Https } else { Phase::Http }),
        response_phase: Some(if https {
            Phase::HttpsResponse
        } else {
            Phase::HttpResponse
        }),
    };
    let upstream = if https {
        Upstream::Tls
    } else {
        Upstream::Plain { local: None }
    };
    // the token in the path attributed the request already
    let who = Who::Known(principal);
    forward(&shared, target, who, req, upstream, Some(conn), Some(watch)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse_provider_token_and_rest() {
        let r = parse_route("/_vis/provider/openai/tok-1/chat/completions?x=1").unwrap();
        assert_eq!(
            (r.provider.as_str(), r.token.as_str(), r.rest.as_str()),
            ("openai", "tok-1", "/chat/completions?x=1")
        );
        assert_eq!(
            parse_route("/_vis/provider/openai/tok-1").unwrap().rest,
            "/"
        );
        assert_eq!(parse_route("/_vis/provider/openai/").map(|r| r.token), None);
        assert_eq!(parse_route("/other"), None);
    }
}
