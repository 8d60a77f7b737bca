//! The `/v1/mcp/servers…` answers over the gateway: the phone's list, saved servers (add, replace, enable,
//! remove), runtime kills and starts, a test connection, and the OAuth sign-ins of HTTP
//! servers.

use crate::engine::Gateway;
use crate::mcp::conn::Conn;
use crate::mcp::oauth::AuthFailure;
use crate::mcp::reach::{reach, Reach};
use crate::mcp::{managed, spec, Entry};
use async_trait::async_trait;
use axum::http::StatusCode;
use std::sync::Arc;
use vis_companion_api::events::{Event, McpServersUpdated};
use vis_companion_api::mcp::{
    McpApi, McpAuthCancelled, McpAuthFlow, McpAuthStatus, McpServer, McpServerEdit, McpServerInput,
    McpServers, McpTestResult, McpToolInfo, McpTransport,
};
use vis_companion_api::{ApiError, ApiResult, CreateSession};

pub struct McpRoutes(pub Arc<Gateway>);

fn conflict_hand_written(name: &str) -> ApiError {
    ApiError::conflict(
        "mcp-server-not-managed",
        format!(
            "the MCP server {name:?} is written in a vis.yml; edit that file to change it \
             (kill and start still work)"
        ),
    )
}

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "mcp-server-not-found",
        format!("no MCP server named {name:?}"),
    )
}

fn invalid(e: String) -> ApiError {
    ApiError::bad_request("invalid-request", e)
}

/// A failed sign-in step on the wire.
fn auth_error(e: AuthFailure) -> ApiError {
    let message = e.to_string();
    let (status, code) = match e {
        AuthFailure::BadInput(_) => (StatusCode::BAD_REQUEST, "invalid-request"),
        AuthFailure::Denied(_) => (StatusCode::BAD_REQUEST, "mcp-auth-denied"),
        AuthFailure::StateMismatch => (StatusCode::BAD_REQUEST, "mcp-auth-state-mismatch"),
        AuthFailure::Rejected(_) => (StatusCode::BAD_REQUEST, "mcp-auth-code-rejected"),
        AuthFailure::UnknownFlow(_) => (StatusCode::NOT_FOUND, "mcp-auth-flow-not-found"),
        AuthFailure::Finished(_) => (StatusCode::CONFLICT, "mcp-auth-flow-finished"),
        AuthFailure::NotNeeded(_) => (StatusCode::CONFLICT, "mcp-auth-not-needed"),
        AuthFailure::Unsupported(_) => (StatusCode::BAD_GATEWAY, "mcp-auth-unsupported"),
        AuthFailure::Upstream(_) => (StatusCode::BAD_GATEWAY, "mcp-auth-upstream"),
        AuthFailure::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "engine-error"),
    };
    ApiError::new(status, code, message)
}

impl McpRoutes {
    /// The one place MCP server changes are published: a live-only `mcp.servers_updated`
    /// event on every session in memory, so every connected client re-reads the list.
    fn publish(&self, change: &str, server: &str) {
        self.0
            .sessions
            .broadcast(Event::McpServersUpdated(McpServersUpdated {
                change: change.to_string(),
                server: server.to_string(),
            }));
    }

    async fn config(&self) -> ApiResult<crate::config::Config> {
        self.0
            .configuration
            .project(&self.0.default_root)
            .await
            .map_err(|e| ApiError::bad_request("invalid-config", e))
    }

    async fn entry(&self, name: &str) -> ApiResult<Entry> {
        let cfg = self.config().await?;
        self.0
            .mcp
            .servers(&cfg)
            .into_iter()
            .find(|(n, _, _)| n == name)
            .ok_or_else(|| not_found(name))
    }

    /// Changes the saved servers and writes them (off the async workers).
    async fn edit_saved(&self, f: impl FnOnce(&mut managed::Servers)) -> ApiResult<()> {
        self.0.mcp.edit_saved(f).await.map_err(ApiError::engine)
    }

    /// `edit` over the server saved from the phone under `name` (its secrets kept as the
    /// edit says); a hand-written server's name is refused for a save.
    async fn edited(&self, name: &str, edit: &McpServerEdit) -> ApiResult<McpServerInput> {
        let saved = self.0.mcp.saved(name);
        let input = spec::edited(edit, saved.as_ref()).map_err(invalid)?;
        spec::check(&input).map_err(invalid)?;
        Ok(input)
    }

    /// The URL of an HTTP server that may sign in with OAuth.
    async fn oauth_server(&self, name: &str) -> ApiResult<(McpServerInput, String)> {
        let (_, input, _) = self.entry(name).await?;
        match (input.transport, input.url.clone()) {
            (McpTransport::StreamableHttp, Some(url)) => Ok((input, url)),
            _ => Err(ApiError::bad_request(
                "mcp-auth-not-http",
                format!(
                    "the MCP server {name:?} runs over stdio; only streamable_http servers \
                     sign in with OAuth"
                ),
            )),
        }
    }

    /// How the probe session reaches servers (its proxy token, the CA bundle).
    async fn probe_reach(&self) -> ApiResult<Reach> {
        let sandbox = self.0.turns.sandbox.get().cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "sandbox-unavailable",
                "the egress proxy is not running",
            )
        })?;
        let sid = self.probe_session().await?;
        let cfg = self.config().await?;
        let root = self.0.default_root.clone();
        tokio::task::spawn_blocking(move || reach(&sandbox, &sid, &root, &cfg))
            .await
            .map_err(|e| ApiError::engine(e.to_string()))?
            .map_err(ApiError::engine)
    }

    /// The session MCP tests run in ("MCP server tests"), created on first use so their
    /// traffic is attributed and kept like any session's. It is on the gateway's internal
    /// channel, which the session list leaves out: it is not the user's.
    async fn probe_session(&self) -> ApiResult<String> {
        let known = self.0.mcp.probe_session();
        if let Some(sid) = known {
            if self.0.sessions.get(&sid).await.is_ok() {
                return Ok(sid);
            }
        }
        let created = self
            .0
            .turns
            .create_session(CreateSession {
                channel: Some(crate::engine::sessions::INTERNAL_CHANNEL.into()),
                title: Some("MCP server tests".into()),
                ..Default::default()
            })
            .await?;
        let sid = created.id;
        self.0.mcp.set_probe_session(&sid);
        Ok(sid)
    }
}

#[async_trait]
impl McpApi for McpRoutes {
    async fn list(&self) -> ApiResult<McpServers> {
        let cfg = self.config().await?;
        let mut servers = Vec::new();
        for e in self.0.mcp.servers(&cfg) {
            servers.push(self.0.mcp.view(&e).await);
        }
        Ok(McpServers { servers })
    }

    async fn save(&self, name: String, edit: McpServerEdit) -> ApiResult<McpServer> {
        self.0.mcp.check_name(&name).map_err(invalid)?;
        let cfg = self.config().await?;
        if cfg.mcp.servers.contains_key(&name) {
            return Err(conflict_hand_written(&name));
        }
        let input = self.edited(&name, &edit).await?;
        let (n, i) = (name.clone(), input.clone());
        self.edit_saved(move |m| {
            m.insert(n, i);
        })
        .await?;
        self.0.mcp.drop_server(&name).await;
        self.publish("saved", &name);
        Ok(self.0.mcp.view(&(name, input, true)).await)
    }

    async fn set_enabled(&self, name: &str, enabled: bool) -> ApiResult<McpServer> {
        let (n, mut input, is_managed) = self.entry(name).await?;
        if !is_managed {
            return Err(conflict_hand_written(name));
        }
        input.enabled = Some(enabled);
        let (key, saved) = (n.clone(), input.clone());
        self.edit_saved(move |m| {
            m.insert(key, saved);
        })
        .await?;
        if !enabled {
            self.0.mcp.drop_server(name).await;
        }
        self.publish(if enabled { "enabled" } else { "disabled" }, name);
        Ok(self.0.mcp.view(&(n, input, true)).await)
    }

    async fn delete(&self, name: &str) -> ApiResult<()> {
        let (_, _, is_managed) = self.entry(name).await?;
        if !is_managed {
            return Err(conflict_hand_written(name));
        }
        let key = name.to_string();
        self.edit_saved(move |m| {
            m.remove(&key);
        })
        .await?;
        self.0.mcp.drop_server(name).await;
        // Its sign-in goes with it.
        self.0
            .mcp
            .auth
            .forget(name)
            .await
            .map_err(ApiError::engine)?;
        self.publish("removed", name);
        Ok(())
    }

    async fn kill(&self, name: &str) -> ApiResult<McpServer> {
        let e = self.entry(name).await?;
        self.0.mcp.kill(name).await;
        self.publish("killed", name);
        Ok(self.0.mcp.view(&e).await)
    }

    async fn start(&self, name: &str) -> ApiResult<McpServer> {
        let e = self.entry(name).await?;
        self.0.mcp.start(name);
        self.publish("started", name);
        Ok(self.0.mcp.view(&e).await)
    }

    async fn test(&self, name: String, edit: McpServerEdit) -> ApiResult<McpTestResult> {
        self.0.mcp.check_name(&name).map_err(invalid)?;
        let input = self.edited(&name, &edit).await?;
        let reach = self.probe_reach().await?;
        let opened = Conn::open(&name, &input, &reach, &self.0.mcp.auth)
            .await
            .map_err(|e| e.message(&name));
        Ok(match opened {
            Ok(conn) => McpTestResult {
                name,
                is_connected: true,
                tools: conn
                    .tools
                    .iter()
                    .map(|t| McpToolInfo {
                        name: t.name.to_string(),
                        description: t.description.as_ref().map(|d| d.to_string()),
                    })
                    .collect(),
                error: None,
            },
            Err(e) => McpTestResult {
                name,
                is_connected: false,
                tools: Vec::new(),
                error: Some(e),
            },
        })
    }

    async fn auth_start(&self, name: &str) -> ApiResult<McpAuthFlow> {
        let (input, url) = self.oauth_server(name).await?;
        if input
            .headers
            .iter()
            .flatten()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        {
            return Err(ApiError::conflict(
                "mcp-auth-has-header",
                format!(
                    "the MCP server {name:?} sends its own Authorization header; remove it from \
                     the server's headers to sign in with OAuth instead"
                ),
            ));
        }
        let reach = self.probe_reach().await?;
        self.0
            .mcp
            .auth
            .start(name, &url, &reach)
            .await
            .map_err(auth_error)
    }

    async fn auth_complete(
        &self,
        name: &str,
        flow_id: &str,
        input: &str,
    ) -> ApiResult<McpAuthFlow> {
        self.oauth_server(name).await?;
        let flow = self
            .0
            .mcp
            .auth
            .complete(name, flow_id, input)
            .await
            .map_err(auth_error)?;
        self.publish("signed-in", name);
        Ok(flow)
    }

    async fn auth_poll(&self, name: &str, flow_id: &str) -> ApiResult<McpAuthFlow> {
        self.oauth_server(name).await?;
        self.0.mcp.auth.poll(name, flow_id).map_err(auth_error)
    }

    async fn auth_cancel(&self, name: &str, flow_id: &str) -> ApiResult<McpAuthCancelled> {
        self.oauth_server(name).await?;
        Ok(self.0.mcp.auth.cancel(name, flow_id))
    }

    async fn auth_logout(&self, name: &str) -> ApiResult<McpAuthStatus> {
        let (_, url) = self.oauth_server(name).await?;
        let had = self.0.mcp.auth.tokens.get(name, &url).is_some();
        let status = self
            .0
            .mcp
            .auth
            .logout(name, &url)
            .await
            .map_err(auth_error)?;
        if had {
            // Its connections carried the token; the server asked for one to hand it out.
            self.0.mcp.drop_server(name).await;
            self.0.mcp.note_needs_auth(name);
        }
        self.publish("signed-out", name);
        Ok(status)
    }
}
