//! One sign-in in progress: the authorization URL handed out, the state it must come back
//! with, the SDK's manager holding the PKCE verifier, and a one-shot loopback listener at the
//! redirect URI (a browser on the gateway's own machine finishes the flow by itself; from
//! anywhere else the user pastes the URL the browser ended on into `auth/complete`).

use super::AuthFailure;
use parking_lot::Mutex;
use rmcp::transport::auth::{AuthError, AuthorizationManager};
use tokio_util::sync::CancellationToken;
use vis_companion_api::mcp::{McpAuthFlow, McpAuthFlowStatus, McpAuthKind};

/// What the browser was sent back with.
#[derive(Debug, PartialEq, Eq)]
pub struct Callback {
    pub code: String,
    /// `None` for a bare code (nothing to compare); a redirect URL must carry it.
    pub state: Option<String>,
    pub issuer: Option<String>,
}

/// Reads `auth/complete`'s input: the redirect URL (or just its query), or the bare code.
pub fn parse_input(input: &str) -> Result<Callback, AuthFailure> {
    let s = input.trim();
    if s.is_empty() {
        return Err(AuthFailure::BadInput(
            "`input` is empty; give the URL the browser ended on, or the code".into(),
        ));
    }
    let query = match s.split_once('?') {
        Some((_, q)) => Some(q),
        None if s.contains('=') => Some(s),
        None => None,
    };
    let Some(query) = query else {
        if s.chars().any(char::is_whitespace) {
            return Err(AuthFailure::BadInput(
                "`input` is neither a redirect URL nor an authorization code".into(),
            ));
        }
        return Ok(Callback {
            code: s.to_string(),
            state: None,
            issuer: None,
        });
    };
    let query = query.split('#').next().unwrap_or_default();
    let (mut code, mut state, mut issuer, mut error, mut detail) = (None, None, None, None, None);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let v = Some(v.into_owned());
        match k.as_ref() {
            "code" => code = v,
            "state" => state = v,
            "iss" => issuer = v,
            "error" => error = v,
            "error_description" => detail = v,
            _ => {}
        }
    }
    if let Some(error) = error {
        return Err(AuthFailure::Denied(match detail {
            Some(d) => format!("{error}: {d}"),
            None => error,
        }));
    }
    let code = code.filter(|c| !c.is_empty()).ok_or_else(|| {
        AuthFailure::BadInput("the redirect URL carries no `code` parameter".into())
    })?;
    let state = state.filter(|c| !c.is_empty()).ok_or_else(|| {
        AuthFailure::BadInput(
            "the redirect URL carries no `state` parameter; give the whole URL the browser \
             ended on, or only the code"
                .into(),
        )
    })?;
    Ok(Callback {
        code,
        state: Some(state),
        issuer,
    })
}

#[derive(Debug, Clone)]
enum Outcome {
    Pending,
    Ok,
    Failed(String),
}

pub struct Flow {
    pub id: String,
    pub server: String,
    pub auth_url: String,
    pub redirect_uri: String,
    /// The `state` the authorization URL carries.
    pub state: String,
    pub expires_at_ms: u64,
    manager: AuthorizationManager,
    outcome: Mutex<Outcome>,
    finishing: tokio::sync::Mutex<()>,
    /// Ends the loopback listener.
    pub stop: CancellationToken,
}

impl Flow {
    pub fn new(
        id: String,
        server: String,
        auth_url: String,
        redirect_uri: String,
        state: String,
        expires_at_ms: u64,
        manager: AuthorizationManager,
    ) -> Flow {
        Flow {
            id,
            server,
            auth_url,
            redirect_uri,
            state,
            expires_at_ms,
            manager,
            outcome: Mutex::new(Outcome::Pending),
            finishing: tokio::sync::Mutex::default(),
            stop: CancellationToken::new(),
        }
    }

    pub fn view(&self) -> McpAuthFlow {
        let (status, error) = match self.outcome.lock().clone() {
            Outcome::Pending => (McpAuthFlowStatus::Pending, None),
            Outcome::Ok => (McpAuthFlowStatus::Ok, None),
            Outcome::Failed(e) => (McpAuthFlowStatus::Error, Some(e)),
        };
        McpAuthFlow {
            flow_id: self.id.clone(),
            server: self.server.clone(),
            kind: McpAuthKind::Pkce,
            url: self.auth_url.clone(),
            redirect_uri: Some(self.redirect_uri.clone()),
            expires_at_ms: Some(self.expires_at_ms),
            status,
            error,
        }
    }

    /// Spends the code at the token endpoint; the tokens land in the token file. A state
    /// that is not this flow's is refused and leaves the flow waiting for the right one.
    pub async fn finish(&self, cb: Callback) -> Result<(), AuthFailure> {
        let Ok(_one) = self.finishing.try_lock() else {
            return Err(AuthFailure::Finished(
                "this sign-in is being completed already".into(),
            ));
        };
        match self.outcome.lock().clone() {
            Outcome::Pending => {}
            Outcome::Ok => {
                return Err(AuthFailure::Finished(
                    "this sign-in succeeded already".into(),
                ))
            }
            Outcome::Failed(e) => {
                return Err(AuthFailure::Finished(format!(
                    "this sign-in failed already ({e}); start a new one"
                )))
            }
        }
        if cb.state.as_ref().is_some_and(|s| *s != self.state) {
            return Err(AuthFailure::StateMismatch);
        }
        let r = self
            .manager
            .exchange_code_for_token_with_issuer(&cb.code, &self.state, cb.issuer.as_deref())
            .await;
        self.stop.cancel();
        match r {
            Ok(_) => {
                *self.outcome.lock() = Outcome::Ok;
                Ok(())
            }
            Err(e) => {
                let failure = exchange_failure(e);
                *self.outcome.lock() = Outcome::Failed(failure.to_string());
                Err(failure)
            }
        }
    }

    /// Marks a flow that ended without a code (cancelled, expired).
    pub fn abandon(&self, why: &str) {
        let mut o = self.outcome.lock();
        if matches!(*o, Outcome::Pending) {
            *o = Outcome::Failed(why.to_string());
        }
        self.stop.cancel();
    }
}

fn exchange_failure(e: AuthError) -> AuthFailure {
    match e {
        AuthError::TokenExchangeFailed(m) if m.starts_with("Server returned error response") => {
            AuthFailure::Rejected(m)
        }
        AuthError::CredentialStoreError(m) => AuthFailure::Internal(m),
        AuthError::AuthorizationServerMismatch { .. }
        | AuthError::AuthorizationServerMissingIssuer { .. } => {
            AuthFailure::Rejected(e.to_string())
        }
        other => AuthFailure::Upstream(format!("the token request failed: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redirect_url_or_the_bare_code_is_accepted() {
        let cb =
            parse_input(" http://127.0.0.1:5/mcp-callback?code=abc&state=xyz&iss=http%3A%2F%2Fas ")
                .unwrap();
        assert_eq!(cb.code, "abc");
        assert_eq!(cb.state.as_deref(), Some("xyz"));
        assert_eq!(cb.issuer.as_deref(), Some("http://as"));
        let cb = parse_input("code=abc&state=xyz").unwrap();
        assert_eq!(
            (cb.code.as_str(), cb.state.as_deref()),
            ("abc", Some("xyz"))
        );
        let cb = parse_input("abc-123").unwrap();
        assert_eq!((cb.code.as_str(), cb.state), ("abc-123", None));
    }

    #[test]
    fn unusable_input_says_what_is_wrong() {
        let msg = |i: &str| parse_input(i).err().unwrap().to_string();
        assert!(msg("").contains("empty"));
        assert!(msg("two words").contains("neither"));
        assert!(msg("http://h/cb?state=xyz").contains("`code`"));
        assert!(msg("http://h/cb?code=abc").contains("`state`"));
        let denied = parse_input("http://h/cb?error=access_denied&error_description=no+thanks")
            .err()
            .unwrap();
        assert!(matches!(denied, AuthFailure::Denied(_)));
        assert!(denied.to_string().contains("access_denied: no thanks"));
    }
}
