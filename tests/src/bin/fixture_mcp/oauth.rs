//! The fixture's OAuth side (`fixture-mcp http-oauth <port-file> [token-ttl-secs]`): the MCP
//! endpoint `/mcp` behind a bearer token (401 with `WWW-Authenticate` and a
//! `resource_metadata` pointer otherwise), protected-resource and authorization-server
//! metadata, dynamic client registration, an authorize endpoint that approves at once
//! (redirecting to the client with a code and its state), and a token endpoint
//! (authorization code with PKCE S256, refresh with rotation).
//!
//! `GET /issued` lists every token handed out and the counts, so a test can look for them
//! where they must never appear.

use axum::extract::{Form, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Grant {
    client_id: String,
    redirect_uri: String,
    challenge: String,
}

#[derive(Default)]
struct Books {
    clients: HashMap<String, Vec<String>>,
    codes: HashMap<String, Grant>,
    access: HashMap<String, Instant>,
    refresh: HashMap<String, String>,
    issued: Vec<String>,
    refreshes: u32,
    next: u64,
}

#[derive(Clone)]
pub struct As {
    base: String,
    ttl: Duration,
    books: Arc<Mutex<Books>>,
}

impl As {
    pub fn new(port: u16, ttl: Duration) -> As {
        As {
            base: format!("http://127.0.0.1:{port}"),
            ttl,
            books: Arc::default(),
        }
    }

    fn fresh(&self, prefix: &str, b: &mut Books) -> String {
        b.next += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{prefix}-{}-{nanos:x}{:x}", b.next, std::process::id())
    }

    fn issue(&self, client_id: &str, b: &mut Books) -> Value {
        let access = self.fresh("at", b);
        let refresh = self.fresh("rt", b);
        b.access.insert(access.clone(), Instant::now() + self.ttl);
        b.refresh.insert(refresh.clone(), client_id.to_string());
        b.issued.push(access.clone());
        b.issued.push(refresh.clone());
        json!({"access_token": access, "token_type": "Bearer", "expires_in": self.ttl.as_secs(),
               "refresh_token": refresh, "scope": "tools"})
    }

    /// The routes of the authorization server and the resource metadata.
    pub fn router(&self) -> axum::Router {
        use axum::routing::{get, post};
        axum::Router::new()
            .route("/.well-known/oauth-protected-resource", get(resource_meta))
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                get(resource_meta),
            )
            .route("/.well-known/oauth-authorization-server", get(server_meta))
            .route("/register", post(register))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .route("/issued", get(issued))
            .with_state(self.clone())
    }
}

/// Lets a request through to the MCP service only with a live access token.
pub async fn require_token(State(a): State<As>, req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let live = token.as_ref().is_some_and(|t| {
        a.books
            .lock()
            .unwrap()
            .access
            .get(t)
            .is_some_and(|until| *until > Instant::now())
    });
    if live {
        return next.run(req).await;
    }
    let mut challenge = format!(
        "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource\"",
        a.base
    );
    if token.is_some() {
        challenge.push_str(", error=\"invalid_token\"");
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        "sign in first",
    )
        .into_response()
}

async fn resource_meta(State(a): State<As>) -> Json<Value> {
    Json(
        json!({"resource": format!("{}/mcp", a.base), "authorization_servers": [a.base],
                "scopes_supported": ["tools"], "bearer_methods_supported": ["header"]}),
    )
}

async fn server_meta(State(a): State<As>) -> Json<Value> {
    let b = &a.base;
    Json(
        json!({"issuer": b, "authorization_endpoint": format!("{b}/authorize"),
        "token_endpoint": format!("{b}/token"), "registration_endpoint": format!("{b}/register"),
        "response_types_supported": ["code"], "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"], "token_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": ["tools", "offline_access"]}),
    )
}

async fn register(State(a): State<As>, Json(body): Json<Value>) -> Response {
    let uris: Vec<String> = body["redirect_uris"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u.as_str().map(str::to_string))
        .collect();
    if uris.is_empty() {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_redirect_uri",
            "no redirect_uris",
        );
    }
    let mut b = a.books.lock().unwrap();
    let id = a.fresh("client", &mut b);
    b.clients.insert(id.clone(), uris.clone());
    (
        StatusCode::CREATED,
        Json(json!({"client_id": id, "redirect_uris": uris, "token_endpoint_auth_method": "none",
                    "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]})),
    )
        .into_response()
}

#[derive(Deserialize)]
struct AuthorizeQuery {
    response_type: String,
    client_id: String,
    redirect_uri: String,
    state: String,
    code_challenge: String,
    code_challenge_method: String,
}

async fn authorize(State(a): State<As>, Query(q): Query<AuthorizeQuery>) -> Response {
    let mut b = a.books.lock().unwrap();
    let known = b
        .clients
        .get(&q.client_id)
        .is_some_and(|uris| uris.contains(&q.redirect_uri));
    if q.response_type != "code" || q.code_challenge_method != "S256" || !known {
        return (StatusCode::BAD_REQUEST, "bad authorization request").into_response();
    }
    let code = a.fresh("code", &mut b);
    b.codes.insert(
        code.clone(),
        Grant {
            client_id: q.client_id,
            redirect_uri: q.redirect_uri.clone(),
            challenge: q.code_challenge,
        },
    );
    let to = url_with_query(&q.redirect_uri, &[("code", &code), ("state", &q.state)]);
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

fn url_with_query(base: &str, pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|c| match c {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (c as char).to_string()
                }
                _ => format!("%{c:02X}"),
            })
            .collect::<String>()
    };
    let q: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect();
    format!("{base}?{}", q.join("&"))
}

fn oauth_error(status: StatusCode, error: &str, detail: &str) -> Response {
    (
        status,
        Json(json!({"error": error, "error_description": detail})),
    )
        .into_response()
}

fn pkce_s256(verifier: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier))
}

async fn token(State(a): State<As>, Form(f): Form<HashMap<String, String>>) -> Response {
    let get = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    let mut b = a.books.lock().unwrap();
    match get("grant_type") {
        "authorization_code" => {
            let Some(g) = b.codes.remove(get("code")) else {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "unknown or used code",
                );
            };
            if g.client_id != get("client_id") || g.redirect_uri != get("redirect_uri") {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "client or redirect_uri differs",
                );
            }
            if pkce_s256(get("code_verifier")) != g.challenge {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "PKCE verifier does not match",
                );
            }
            Json(a.issue(&g.client_id, &mut b)).into_response()
        }
        "refresh_token" => {
            let Some(client) = b.refresh.remove(get("refresh_token")) else {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_grant",
                    "unknown refresh token",
                );
            };
            b.refreshes += 1;
            Json(a.issue(&client, &mut b)).into_response()
        }
        other => oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            &format!("grant_type {other:?}"),
        ),
    }
}

async fn issued(State(a): State<As>) -> Json<Value> {
    let b = a.books.lock().unwrap();
    Json(json!({"tokens": b.issued, "refreshes": b.refreshes, "clients": b.clients.len()}))
}
