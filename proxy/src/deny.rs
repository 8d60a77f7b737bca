//! Denial kinds and the ONE place that turns a denial into a wire answer
//! (an HTTP 400/403/407/502/503/504 response or a SOCKS5 reply code).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};

use crate::body::ProxyBody;

/// `X-Vis-Egress-Error` values (docs/decisions.md, P7).
pub mod kind {
    /// Host matched a specific `denied_domains` entry (or `denied: [*]`).
    pub const DENYLIST: &str = "blocked-by-denylist";
    /// Host not on a strict allowlist.
    pub const ALLOWLIST: &str = "blocked-by-allowlist";
    /// Rule method/path check failed.
    pub const METHOD_POLICY: &str = "blocked-by-method-policy";
    /// Rule port check failed.
    pub const PORT_POLICY: &str = "blocked-by-port-policy";
    /// SSRF floor or DNS failure.
    pub const SSRF: &str = "blocked-by-ssrf";
    /// A network filter blocked.
    pub const FILTER: &str = "blocked-by-filter";
    /// A network filter failed or timed out (fail closed).
    pub const FILTER_ERROR: &str = "filter-error";
    /// Missing or unknown proxy token.
    pub const AUTH: &str = "proxy-auth-required";
    /// The target name did not resolve (502, not a policy verdict).
    pub const UPSTREAM_DNS: &str = "upstream-dns-failure";

    // Kinds below appear only in decision records (an allowed request that failed), never
    // in the `X-Vis-Egress-Error` header.

    /// The upstream refused, was unreachable, or its TLS failed (502/504).
    pub const UPSTREAM_ERROR: &str = "upstream-error";
    /// The upstream accepted the request but sent no response.
    pub const UPSTREAM_NO_RESPONSE: &str = "upstream-no-response";
    /// The upstream's response ended before its body was complete.
    pub const UPSTREAM_INCOMPLETE: &str = "upstream-incomplete";
    /// The client did not accept the interception certificate.
    pub const CLIENT_TLS_REJECTED: &str = "client-tls-rejected";
    /// The client's request body stalled or crept below the minimum rate.
    pub const REQUEST_BODY_TIMEOUT: &str = "request-body-timeout";
    /// The client's chunked request body declared a chunk larger than the proxy takes.
    pub const REQUEST_CHUNK_TOO_LARGE: &str = "request-chunk-too-large";
}

/// Reason texts fixed by the spec.
pub mod reason {
    /// No `Proxy-Authorization` / SOCKS username.
    pub const MISSING_TOKEN: &str =
        "vis-agent: missing Proxy-Authorization (unattributable egress)";
    /// Token not registered.
    pub const UNKNOWN_TOKEN: &str = "vis-agent: no live session for this proxy token";
    /// The attribution backend failed.
    pub const POLICY_ERROR: &str = "vis-agent: session policy error";
    /// Malformed / hostless request.
    pub const MALFORMED: &str = "malformed proxy request";
}

/// Which step decided (`decided_by.kind` of a decision record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeciderKind {
    /// Token check.
    Auth,
    /// Host allow/deny lists.
    HostGate,
    /// A per-host rule (method/path/port).
    Rule,
    /// The SSRF floor.
    Ssrf,
    /// A network filter.
    Filter,
    /// Provider credentials: a phantom sent to a foreign host, or a provider route
    /// (allowed by the provider's configuration).
    Credential,
    /// No policy / nothing specific decided.
    Default,
}

/// What kind of refusal this is; decides the wire answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyClass {
    /// 407 / SOCKS `01 01` or REP `02`.
    Auth,
    /// 403 / REP `02` with an egress error kind.
    Policy(&'static str),
    /// 403 / REP `02` without an egress kind (session policy error; header
    /// `blocked-by-denylist` as the spec suggests).
    PolicyError,
    /// 400, no kind.
    BadRequest,
    /// 502 / REP `05` (refused) — upstream connect/TLS/IO failure.
    UpstreamRefused,
    /// 502 / REP `04` — upstream unreachable.
    UpstreamUnreachable,
    /// 504 / REP `04` — upstream connect timeout.
    UpstreamTimeout,
    /// 503 / REP `01` — a connection limit was hit.
    Overloaded,
    /// 431 — the request head exceeds the header cap.
    HeadTooLarge,
    /// 502 / REP `04` with kind `upstream-dns-failure` — the name did not resolve.
    Unresolvable,
    /// 408 — the request body stalled (reported with kind `request-body-timeout`).
    BodyTimeout,
    /// 400 at once, connection closed — the request body declared an absurd chunk size
    /// (reported with kind `request-chunk-too-large`).
    ChunkTooLarge,
}

/// One refusal: class, sentence and who decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// Wire class.
    pub class: DenyClass,
    /// The refusal sentence (without newline).
    pub reason: String,
    /// Which stage decided.
    pub decider: DeciderKind,
    /// The selected rule's host pattern, when a rule decided.
    pub rule_host: Option<String>,
    /// The filter (extension) name, when a filter decided.
    pub filter: Option<String>,
}

impl Denial {
    /// A denial with an egress error kind.
    pub fn policy(kind: &'static str, reason: impl Into<String>, decider: DeciderKind) -> Self {
        Denial {
            class: DenyClass::Policy(kind),
            reason: reason.into(),
            decider,
            rule_host: None,
            filter: None,
        }
    }
    /// 407 with the given reason.
    pub fn auth(reason: &str) -> Self {
        Denial {
            class: DenyClass::Auth,
            reason: reason.into(),
            decider: DeciderKind::Auth,
            rule_host: None,
            filter: None,
        }
    }
    /// 400 with the given reason.
    pub fn bad_request(reason: impl Into<String>) -> Self {
        Denial {
            class: DenyClass::BadRequest,
            reason: reason.into(),
            decider: DeciderKind::Default,
            rule_host: None,
            filter: None,
        }
    }
    /// Attribution backend failure.
    pub fn policy_error() -> Self {
        Denial {
            class: DenyClass::PolicyError,
            reason: reason::POLICY_ERROR.into(),
            decider: DeciderKind::Auth,
            rule_host: None,
            filter: None,
        }
    }
    /// Upstream failure of the given class.
    pub fn upstream(class: DenyClass, message: impl std::fmt::Display) -> Self {
        Denial {
            class,
            reason: match class {
                DenyClass::BodyTimeout => format!("request body timed out: {message}"),
                DenyClass::ChunkTooLarge => format!("malformed request body: {message}"),
                _ => format!("upstream error: {message}"),
            },
            decider: DeciderKind::Default,
            rule_host: None,
            filter: None,
        }
    }
    /// The request body declared a chunk of `size` bytes, above what the proxy takes.
    pub fn chunk_too_large(size: u64) -> Self {
        Denial::upstream(DenyClass::ChunkTooLarge, crate::body::ChunkTooLarge(size))
    }
    /// The target name did not resolve: 502 with its own kind (not an SSRF refusal).
    pub fn unresolvable(host: &str) -> Self {
        Denial {
            class: DenyClass::Unresolvable,
            reason: format!("cannot resolve host: {host}"),
            decider: DeciderKind::Default,
            rule_host: None,
            filter: None,
        }
    }
    /// Limit reached.
    pub fn overloaded(what: &str) -> Self {
        Denial {
            class: DenyClass::Overloaded,
            reason: format!("vis-agent: too many connections ({what})"),
            decider: DeciderKind::Default,
            rule_host: None,
            filter: None,
        }
    }
    /// The request head is larger than the cap.
    pub fn head_too_large() -> Self {
        Denial {
            class: DenyClass::HeadTooLarge,
            reason: "request header fields too large".into(),
            decider: DeciderKind::Default,
            rule_host: None,
            filter: None,
        }
    }
    /// Attach the rule host.
    pub fn with_rule(mut self, rule_host: Option<String>) -> Self {
        self.rule_host = rule_host;
        self
    }
    /// Attach the filter name.
    pub fn with_filter(mut self, filter: &str) -> Self {
        self.filter = Some(filter.to_string());
        self
    }

    /// The `X-Vis-Egress-Error` kind, if any.
    pub fn error_kind(&self) -> Option<&'static str> {
        match self.class {
            DenyClass::Auth => Some(kind::AUTH),
            DenyClass::Policy(k) => Some(k),
            DenyClass::PolicyError => Some(kind::DENYLIST),
            DenyClass::Unresolvable => Some(kind::UPSTREAM_DNS),
            _ => None,
        }
    }

    /// The kind a decision record carries: the header's kind, or for a failure after the
    /// policy allowed the request, what failed.
    pub fn record_kind(&self) -> Option<&'static str> {
        self.error_kind().or(match self.class {
            DenyClass::UpstreamRefused
            | DenyClass::UpstreamUnreachable
            | DenyClass::UpstreamTimeout => Some(kind::UPSTREAM_ERROR),
            DenyClass::BodyTimeout => Some(kind::REQUEST_BODY_TIMEOUT),
            DenyClass::ChunkTooLarge => Some(kind::REQUEST_CHUNK_TOO_LARGE),
            _ => None,
        })
    }

    /// The policy allowed the request and something past it failed (DNS, the upstream, the
    /// client's body): recorded as `allow` with [`Denial::record_kind`] and the reason.
    pub fn is_failure(&self) -> bool {
        matches!(
            self.class,
            DenyClass::UpstreamRefused
                | DenyClass::UpstreamUnreachable
                | DenyClass::UpstreamTimeout
                | DenyClass::Unresolvable
                | DenyClass::BodyTimeout
                | DenyClass::ChunkTooLarge
        )
    }

    /// HTTP status for this denial.
    pub fn status(&self) -> StatusCode {
        match self.class {
            DenyClass::Auth => StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            DenyClass::Policy(_) | DenyClass::PolicyError => StatusCode::FORBIDDEN,
            DenyClass::BadRequest | DenyClass::ChunkTooLarge => StatusCode::BAD_REQUEST,
            DenyClass::UpstreamRefused
            | DenyClass::UpstreamUnreachable
            | DenyClass::Unresolvable => StatusCode::BAD_GATEWAY,
            DenyClass::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            DenyClass::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            DenyClass::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            DenyClass::HeadTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        }
    }

    /// SOCKS5 REP code for this denial.
    pub fn socks_reply(&self) -> u8 {
        match self.class {
            DenyClass::Auth
            | DenyClass::Policy(_)
            | DenyClass::PolicyError
            | DenyClass::BadRequest => 0x02,
            DenyClass::UpstreamRefused => 0x05,
            DenyClass::UpstreamUnreachable
            | DenyClass::UpstreamTimeout
            | DenyClass::Unresolvable => 0x04,
            DenyClass::Overloaded
            | DenyClass::HeadTooLarge
            | DenyClass::BodyTimeout
            | DenyClass::ChunkTooLarge => 0x01,
        }
    }

    /// The HTTP response: `text/plain`, body = reason + newline.
    pub fn to_response(&self) -> Response<ProxyBody> {
        let body = format!("{}\n", self.reason);
        let len = body.len();
        let mut resp = Response::new(crate::body::full(Bytes::from(body)));
        *resp.status_mut() = self.status();
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        if self.class == DenyClass::Auth {
            h.insert(
                header::PROXY_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"vis-session\""),
            );
        }
        if let Some(k) = self.error_kind() {
            h.insert("x-vis-egress-error", HeaderValue::from_static(k));
        }
        if self.class == DenyClass::ChunkTooLarge {
            // the rest of the body cannot be skipped: nothing after it can be read as a request
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// The SOCKS5 reply frame `05 REP 00 01 0.0.0.0:0`.
pub fn socks_reply_frame(rep: u8) -> [u8; 10] {
    [0x05, rep, 0x00, 0x01, 0, 0, 0, 0, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_denial_is_a_407_with_the_realm_and_kind() {
        let r = Denial::auth(reason::MISSING_TOKEN).to_response();
        assert_eq!(r.status(), 407);
        assert_eq!(
            r.headers()["proxy-authenticate"],
            "Basic realm=\"vis-session\""
        );
        assert_eq!(r.headers()["x-vis-egress-error"], "proxy-auth-required");
        assert_eq!(
            r.headers()["content-length"],
            (reason::MISSING_TOKEN.len() + 1).to_string().as_str()
        );
    }

    #[test]
    fn bad_request_has_no_egress_kind() {
        let r = Denial::bad_request(reason::MALFORMED).to_response();
        assert_eq!(r.status(), 400);
        assert!(r.headers().get("x-vis-egress-error").is_none());
    }

    #[test]
    fn socks_codes_follow_p7() {
        assert_eq!(
            Denial::policy(kind::SSRF, "x", DeciderKind::Ssrf).socks_reply(),
            2
        );
        assert_eq!(
            Denial::upstream(DenyClass::UpstreamRefused, "x").socks_reply(),
            5
        );
        assert_eq!(
            Denial::upstream(DenyClass::UpstreamTimeout, "x").socks_reply(),
            4
        );
        assert_eq!(Denial::unresolvable("x.test").socks_reply(), 4);
    }

    #[test]
    fn a_name_that_does_not_resolve_is_a_502_with_its_own_kind_not_an_ssrf_refusal() {
        let d = Denial::unresolvable("nxdomain.test");
        let r = d.to_response();
        assert_eq!(r.status(), 502);
        assert_eq!(r.headers()["x-vis-egress-error"], "upstream-dns-failure");
        assert!(d.is_failure());
        assert_eq!(d.record_kind(), Some("upstream-dns-failure"));
        let up = Denial::upstream(DenyClass::UpstreamRefused, "refused");
        assert!(up
            .to_response()
            .headers()
            .get("x-vis-egress-error")
            .is_none());
        assert_eq!(up.record_kind(), Some("upstream-error"));
    }
}
