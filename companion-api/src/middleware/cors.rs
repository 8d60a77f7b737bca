//! CORS on every response; `OPTIONS` preflight answered 204 before the other gates.
//!
//! A gateway that needs no token (bound to exactly 127.0.0.1) would otherwise let any web
//! page the user visits drive it — submit turns that run the shell tool. So on such a bind
//! only loopback origins (and those listed in `VIS_GATEWAY_CORS_ORIGINS`) get CORS, requests
//! from other origins are refused, and the `Host` header must name a loopback host (which
//! defeats DNS rebinding). What the guard cannot read it refuses: an `Origin` or `Host` that
//! is not ASCII, and an absolute-form request target naming a host that is not loopback.
//! With the token on, any origin is echoed as the spec says: the token is the protection.

use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

const ALLOW_METHODS: &str = "GET, POST, PUT, PATCH, DELETE, OPTIONS";
const DEFAULT_ALLOW_HEADERS: &str = "Authorization, Content-Type, X-Vis-Gateway-Secret";

fn host_part(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    authority
        .rsplit_once(':')
        .map(|(h, p)| {
            if p.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                authority
            }
        })
        .unwrap_or(authority)
}

fn is_loopback_host(host: &str) -> bool {
    let h = host.to_ascii_lowercase();
    h == "localhost"
        || h.ends_with(".localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `http(s)://<loopback host>[:port]`.
pub fn is_loopback_origin(origin: &str) -> bool {
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    is_loopback_host(host_part(rest.trim_end_matches('/')))
}

fn origin_allowed(state: &AppState, origin: &str) -> bool {
    state.cfg.require_token
        || is_loopback_origin(origin)
        || state
            .cfg
            .cors_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
}

pub async fn layer(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let origin = req.headers().get(header::ORIGIN).cloned();
    let requested = req
        .headers()
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned();
    if !state.cfg.require_token {
        if let Some(refusal) = foreign_host(&req) {
            return refusal;
        }
    }
    // An origin that is not ASCII cannot be checked (nor echoed): foreign unless the token
    // is on (then it is simply not echoed).
    let origin = origin.filter(|o| o.to_str().is_ok() || !state.cfg.require_token);
    let foreign = origin
        .as_ref()
        .is_some_and(|o| o.to_str().map_or(true, |o| !origin_allowed(&state, o)));
    if foreign {
        // No CORS headers: the browser blocks the page; the request itself is refused too.
        if req.method() == Method::OPTIONS {
            return StatusCode::NO_CONTENT.into_response();
        }
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "origin-not-allowed",
            "this gateway has no token, so only loopback origins may use it; start it with --require-token or list the origin in VIS_GATEWAY_CORS_ORIGINS",
        )
        .into_response();
    }
    let mut resp = if req.method() == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(req).await
    };
    decorate(resp.headers_mut(), origin, requested);
    resp
}

/// On a token-less bind: a 421 unless both the `Host` header and an absolute-form target
/// name a loopback host (a `Host` that is not ASCII names nothing the guard can vouch for).
fn foreign_host(req: &Request) -> Option<Response> {
    let refuse = |what: String| {
        ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host-not-allowed",
            format!("this gateway answers loopback names only, not {what}"),
        )
        .into_response()
    };
    if let Some(h) = req.headers().get(header::HOST) {
        match h.to_str() {
            Ok(h) if is_loopback_host(host_part(h)) => {}
            Ok(h) => return Some(refuse(h.to_string())),
            Err(_) => return Some(refuse("a Host header that is not ASCII".into())),
        }
    }
    match req.uri().host() {
        Some(h) if !is_loopback_host(h.trim_start_matches('[').trim_end_matches(']')) => {
            Some(refuse(format!("{h} (the request target)")))
        }
        _ => None,
    }
}

fn decorate(h: &mut HeaderMap, origin: Option<HeaderValue>, requested: Option<HeaderValue>) {
    match origin {
        Some(o) => {
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
            h.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        None => {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
        }
    }
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOW_METHODS),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        requested.unwrap_or_else(|| HeaderValue::from_static(DEFAULT_ALLOW_HEADERS)),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("ETag"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    h.append(header::VARY, HeaderValue::from_static("Origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_are_recognised_and_others_are_not() {
        for o in [
            "http://localhost:3000",
            "http://127.0.0.1:7890",
            "http://[::1]:8080",
            "https://app.localhost",
        ] {
            assert!(is_loopback_origin(o), "{o}");
        }
        for o in [
            "http://evil.example",
            "http://127.0.0.1.evil.example",
            "null",
            "http://10.0.0.1",
        ] {
            assert!(!is_loopback_origin(o), "{o}");
        }
    }

    #[test]
    fn the_host_part_drops_the_port() {
        assert_eq!(host_part("127.0.0.1:7890"), "127.0.0.1");
        assert_eq!(host_part("[::1]:80"), "::1");
        assert_eq!(host_part("localhost"), "localhost");
    }
}
