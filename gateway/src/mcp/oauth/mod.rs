//! OAuth for streamable-HTTP MCP servers that ask for it (a 401 with `WWW-Authenticate`),
//! through the official SDK's `rmcp::transport::auth`: protected-resource and
//! authorization-server metadata discovery, dynamic client registration, the authorization
//! code flow with PKCE, refresh of expired tokens.
//!
//! Headless: `start` hands out the authorization URL for the phone to open and keeps the
//! verifier and state here; `complete` takes the URL the browser ended on (or the code).
//! Every OAuth request goes through the egress proxy like the server's own traffic. The
//! tokens live in `<home>/mcp-tokens.json` (0600) and never leave the gateway.
//!
//! - [`store`]: the token file, and the SDK's credential store over it.
//! - [`flow`]: one sign-in in progress and its loopback redirect listener.
//! - [`http`]: the proxied HTTP client of the OAuth requests.

pub mod flow;
pub mod http;
mod redirect;
pub mod store;

use super::reach::Reach;
use flow::Flow;
use parking_lot::Mutex;
use rmcp::transport::auth::{AuthorizationManager, OAuthClientConfig};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use store::{Seed, ServerTokens, Tokens};
use vis_companion_api::mcp::{McpAuthCancelled, McpAuthFlow, McpAuthStatus};

/// How long a sign-in may take from `start` to `complete`.
pub const FLOW_TTL: Duration = Duration::from_secs(600);
/// The name the gateway registers under at the authorization server.
const CLIENT_NAME: &str = "Vis gateway";

/// Why a sign-in step failed (the MCP routes map each to a status and an error code).
#[derive(Debug, thiserror::Error)]
pub enum AuthFailure {
    #[error("{0}")]
    BadInput(String),
    #[error("the authorization server refused the sign-in: {0}")]
    Denied(String),
    #[error("the `state` of the redirect URL is not this sign-in's; give the URL of the browser tab this sign-in opened")]
    StateMismatch,
    #[error("the authorization server did not accept the code: {0}")]
    Rejected(String),
    #[error("no sign-in {0:?} is running for this server (it finished, expired or was cancelled)")]
    UnknownFlow(String),
    #[error("{0}")]
    Finished(String),
    #[error("{0}")]
    NotNeeded(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Upstream(String),
    #[error("{0}")]
    Internal(String),
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The gateway's MCP sign-ins: the token file and the flows in progress.
pub struct Auth {
    pub tokens: Arc<Tokens>,
    flows: Mutex<HashMap<String, Arc<Flow>>>,
}

impl Auth {
    /// The sign-ins of a home; a broken token file is reported and treated as empty (the
    /// servers then ask for a new sign-in).
    pub fn new(home: &Path) -> Auth {
        let tokens = Tokens::load(home).unwrap_or_else(|e| {
            tracing::error!(target: "vis::mcp", "{e}");
            Tokens::empty(home)
        });
        Auth {
            tokens: Arc::new(tokens),
            flows: Mutex::default(),
        }
    }

    /// Drops the flows past their time.
    fn sweep(&self) {
        let now = now_ms();
        self.flows.lock().retain(|_, f| {
            let live = f.expires_at_ms > now;
            if !live {
                f.abandon("the sign-in expired");
            }
            live
        });
    }

    fn flow(&self, server: &str, id: &str) -> Result<Arc<Flow>, AuthFailure> {
        self.sweep();
        self.flows
            .lock()
            .get(id)
            .filter(|f| f.server == server)
            .cloned()
            .ok_or_else(|| AuthFailure::UnknownFlow(id.to_string()))
    }

    /// A manager holding the server's saved sign-in, for its connections (no network:
    /// the endpoints were saved with the tokens). `None` when nothing is saved for `url`.
    pub async fn manager(
        &self,
        server: &str,
        url: &str,
        reach: &Reach,
    ) -> Result<Option<AuthorizationManager>, String> {
        let Some(record) = self.tokens.get(server, url) else {
            return Ok(None);
        };
        let http = http::ProxiedOAuthHttp::new(reach).await?;
        let mut m = AuthorizationManager::new_with_oauth_http_client(url, http)
            .await
            .map_err(|e| e.to_string())?;
        m.set_metadata(record.metadata);
        let mut client = OAuthClientConfig::new(record.credentials.client_id, record.redirect_uri);
        if let Some(secret) = record.client_secret {
            client = client.with_client_secret(secret);
        }
        m.configure_client(client).map_err(|e| e.to_string())?;
        m.set_credential_store(ServerTokens {
            tokens: self.tokens.clone(),
            server: server.to_string(),
            url: url.to_string(),
            seed: None,
        });
        Ok(Some(m))
    }

    /// Starts a sign-in: discovery, registration, the authorization URL (with the PKCE
    /// challenge and state) and the loopback listener at the redirect URI.
    pub async fn start(
        &self,
        server: &str,
        url: &str,
        reach: &Reach,
    ) -> Result<McpAuthFlow, AuthFailure> {
        self.sweep();
        let challenge = probe(url, reach).await?;
        let http = http::ProxiedOAuthHttp::new(reach)
            .await
            .map_err(AuthFailure::Internal)?;
        let mut manager = AuthorizationManager::new_with_oauth_http_client(url, http)
            .await
            .map_err(|e| AuthFailure::BadInput(format!("the server URL {url:?}: {e}")))?;
        let found = manager
            .resolve_metadata_from_challenge(challenge.as_deref())
            .await
            .map_err(|e| {
                AuthFailure::Upstream(format!("discovering the OAuth endpoints failed: {e}"))
            })?;
        if !found.source.is_discovered() && challenge.is_none() {
            return Err(AuthFailure::NotNeeded(format!(
                "the MCP server {server} answers without asking for a sign-in and publishes \
                 no OAuth metadata"
            )));
        }
        let metadata = found.metadata;
        manager.set_metadata(metadata.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| {
                AuthFailure::Internal(format!("cannot open the redirect listener: {e}"))
            })?;
        let port = listener
            .local_addr()
            .map_err(|e| AuthFailure::Internal(e.to_string()))?
            .port();
        let redirect_uri = format!("http://127.0.0.1:{port}/mcp-callback");
        if metadata.registration_endpoint.is_none() {
            return Err(AuthFailure::Unsupported(format!(
                "the authorization server of {server} offers no dynamic client registration, \
                 which this gateway needs to sign in"
            )));
        }
        let scopes = manager.select_initial_scopes(&[]).await;
        let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        let client = manager
            .register_client(CLIENT_NAME, &redirect_uri, &scope_refs)
            .await
            .map_err(|e| AuthFailure::Upstream(format!("registering the client failed: {e}")))?;
        let auth_url = manager
            .get_authorization_url(&scope_refs)
            .await
            .map_err(|e| AuthFailure::Unsupported(format!("cannot build the sign-in URL: {e}")))?;
        let state = reqwest::Url::parse(&auth_url)
            .ok()
            .and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == "state")
                    .map(|(_, v)| v.into_owned())
            })
            .ok_or_else(|| AuthFailure::Internal("the sign-in URL carries no state".into()))?;
        manager.set_credential_store(ServerTokens {
            tokens: self.tokens.clone(),
            server: server.to_string(),
            url: url.to_string(),
            seed: Some(Seed {
                metadata,
                redirect_uri: redirect_uri.clone(),
                client_secret: client.client_secret,
            }),
        });
        let id = hex::encode(rand::random::<[u8; 16]>());
        let flow = Arc::new(Flow::new(
            id.clone(),
            server.to_string(),
            auth_url,
            redirect_uri,
            state,
            now_ms() + FLOW_TTL.as_millis() as u64,
            manager,
        ));
        redirect::serve(flow.clone(), listener, FLOW_TTL);
        // One sign-in per server at a time: a new start replaces the old one.
        let mut flows = self.flows.lock();
        flows.retain(|_, f| {
            let other = f.server == server;
            if other {
                f.abandon("a newer sign-in replaced this one");
            }
            !other
        });
        flows.insert(id, flow.clone());
        drop(flows);
        tracing::info!(target: "vis::mcp", server, "OAuth sign-in started");
        Ok(flow.view())
    }

    pub async fn complete(
        &self,
        server: &str,
        id: &str,
        input: &str,
    ) -> Result<McpAuthFlow, AuthFailure> {
        let flow = self.flow(server, id)?;
        flow.finish(flow::parse_input(input)?).await?;
        tracing::info!(target: "vis::mcp", server, "OAuth sign-in completed");
        Ok(flow.view())
    }

    pub fn poll(&self, server: &str, id: &str) -> Result<McpAuthFlow, AuthFailure> {
        Ok(self.flow(server, id)?.view())
    }

    pub fn cancel(&self, server: &str, id: &str) -> McpAuthCancelled {
        self.sweep();
        let mut flows = self.flows.lock();
        let found = flows.get(id).is_some_and(|f| f.server == server);
        if found {
            if let Some(f) = flows.remove(id) {
                f.abandon("the sign-in was cancelled");
            }
        }
        McpAuthCancelled {
            flow_id: id.to_string(),
            is_cancelled: found,
        }
    }

    /// Forgets the server's tokens and cancels its sign-ins.
    pub async fn logout(&self, server: &str, url: &str) -> Result<McpAuthStatus, AuthFailure> {
        self.forget(server).await.map_err(AuthFailure::Internal)?;
        Ok(self.tokens.status(server, url))
    }

    /// Everything held for `server` (a sign-out, or the server was removed).
    pub async fn forget(&self, server: &str) -> Result<(), String> {
        self.flows.lock().retain(|_, f| {
            let other = f.server == server;
            if other {
                f.abandon("the server was signed out");
            }
            !other
        });
        self.tokens.remove(server).await.map(|_| ())
    }
}

/// Asks the server, unauthenticated, whether it wants a sign-in: the `WWW-Authenticate`
/// challenge of its 401 (an empty challenge when the header is missing), `None` otherwise.
async fn probe(url: &str, reach: &Reach) -> Result<Option<String>, AuthFailure> {
    let client = super::reach::http_builder(reach)
        .await
        .and_then(|b| {
            b.timeout(Duration::from_secs(30))
                .build()
                .map_err(|e| e.to_string())
        })
        .map_err(AuthFailure::Internal)?;
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION")}}});
    let r = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .map_err(|e| AuthFailure::Upstream(format!("cannot reach {url}: {e}")))?;
    if r.status() != reqwest::StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(Some(
        r.headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
    ))
}
