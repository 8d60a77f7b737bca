//! The OAuth tokens of HTTP MCP servers: `<home>/mcp-tokens.json`, mode 0600, one record per
//! server name, bound to the URL it was issued for (a server whose URL changes is signed out
//! rather than handed another server's token). Held in memory, written on every change.

use oauth2::TokenResponse;
use parking_lot::Mutex;
use rmcp::transport::auth::{
    AuthError, AuthorizationMetadata, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vis_companion_api::mcp::McpAuthStatus;

/// What a sign-in leaves behind for one server.
#[derive(Clone, Serialize, Deserialize)]
pub struct Record {
    /// The server URL the tokens were issued for.
    pub url: String,
    /// The authorization server's endpoints, so a restart refreshes without discovery.
    pub metadata: AuthorizationMetadata,
    pub redirect_uri: String,
    /// Set when dynamic registration made a confidential client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub credentials: StoredCredentials,
}

/// The client a sign-in registered, kept with its tokens when the exchange saves them.
#[derive(Clone)]
pub struct Seed {
    pub metadata: AuthorizationMetadata,
    pub redirect_uri: String,
    pub client_secret: Option<String>,
}

pub struct Tokens {
    path: PathBuf,
    records: Mutex<BTreeMap<String, Record>>,
    /// Bumped for a server at every change of its tokens.
    generation: Mutex<HashMap<String, u64>>,
    /// One writer of the file at a time, in the order of the changes.
    writer: tokio::sync::Mutex<()>,
    refreshing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn write_private(path: &Path, text: &[u8]) -> Result<(), String> {
    crate::home::write_private(path, text)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

impl Tokens {
    pub fn path(home: &Path) -> PathBuf {
        home.join("mcp-tokens.json")
    }

    /// The tokens saved in `home`; a missing file is none, a broken one an error naming it.
    pub fn load(home: &Path) -> Result<Tokens, String> {
        let path = Self::path(home);
        let records = match std::fs::read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{} is not a valid token file: {e}", path.display()))?,
        };
        Ok(Self::with(path, records))
    }

    /// No tokens, saved to `home` from the first change on.
    pub fn empty(home: &Path) -> Tokens {
        Self::with(Self::path(home), BTreeMap::new())
    }

    fn with(path: PathBuf, records: BTreeMap<String, Record>) -> Tokens {
        Tokens {
            path,
            records: Mutex::new(records),
            generation: Mutex::default(),
            writer: tokio::sync::Mutex::default(),
            refreshing: Mutex::default(),
        }
    }

    /// The record of `server` when it was issued for `url`.
    pub fn get(&self, server: &str, url: &str) -> Option<Record> {
        self.records
            .lock()
            .get(server)
            .filter(|r| r.url == url)
            .cloned()
    }

    pub fn generation(&self, server: &str) -> u64 {
        self.generation.lock().get(server).copied().unwrap_or(0)
    }

    /// Applies a change to the records, then writes the file (off the async workers).
    async fn change(
        &self,
        server: &str,
        f: impl FnOnce(&mut BTreeMap<String, Record>),
    ) -> Result<(), String> {
        let _writing = self.writer.lock().await;
        let snapshot = {
            let mut records = self.records.lock();
            f(&mut records);
            *self
                .generation
                .lock()
                .entry(server.to_string())
                .or_default() += 1;
            serde_json::to_vec_pretty(&*records).map_err(|e| e.to_string())?
        };
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || write_private(&path, &snapshot))
            .await
            .map_err(|e| e.to_string())?
    }

    pub async fn put(&self, server: &str, record: Record) -> Result<(), String> {
        self.change(server, |r| {
            r.insert(server.to_string(), record);
        })
        .await
    }

    /// Forgets the server's tokens; whether there were any.
    pub async fn remove(&self, server: &str) -> Result<bool, String> {
        let had = self.records.lock().contains_key(server);
        if had {
            self.change(server, |r| {
                r.remove(server);
            })
            .await?;
        }
        Ok(had)
    }

    /// The non-secret view of what is held for `server` at `url`.
    pub fn status(&self, server: &str, url: &str) -> McpAuthStatus {
        let record = self.get(server, url);
        let token = record
            .as_ref()
            .and_then(|r| r.credentials.token_response.as_ref());
        let expires_at_ms = record.as_ref().and_then(|r| {
            let received = r.credentials.token_received_at?;
            let lifetime = token?.expires_in()?;
            Some((received + lifetime.as_secs()) * 1000)
        });
        McpAuthStatus {
            server: server.to_string(),
            is_authorized: token.is_some(),
            is_expired: expires_at_ms.is_some_and(|at| at <= now_secs() * 1000),
            has_refresh_token: token.is_some_and(|t| t.refresh_token().is_some()),
            expires_at_ms,
            scope: record
                .filter(|r| !r.credentials.granted_scopes.is_empty())
                .map(|r| r.credentials.granted_scopes.join(" ")),
        }
    }

    fn refresh_lock(&self, server: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.refreshing
            .lock()
            .entry(server.to_string())
            .or_default()
            .clone()
    }
}

/// The SDK's view of one server's tokens: the record for `server` at `url`.
pub struct ServerTokens {
    pub tokens: Arc<Tokens>,
    pub server: String,
    pub url: String,
    /// The client of a sign-in in progress (saved with its first tokens).
    pub seed: Option<Seed>,
}

fn store_error(e: String) -> AuthError {
    AuthError::CredentialStoreError(e)
}

#[async_trait::async_trait]
impl CredentialStore for ServerTokens {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self
            .tokens
            .get(&self.server, &self.url)
            .map(|r| r.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let record = match (&self.seed, self.tokens.get(&self.server, &self.url)) {
            (Some(seed), _) => Record {
                url: self.url.clone(),
                metadata: seed.metadata.clone(),
                redirect_uri: seed.redirect_uri.clone(),
                client_secret: seed.client_secret.clone(),
                credentials,
            },
            (None, Some(old)) => Record { credentials, ..old },
            (None, None) => {
                return Err(store_error(format!(
                    "the sign-in of {} was removed while its token was being refreshed",
                    self.server
                )))
            }
        };
        self.tokens
            .put(&self.server, record)
            .await
            .map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        if self.tokens.get(&self.server, &self.url).is_some() {
            self.tokens
                .remove(&self.server)
                .await
                .map_err(store_error)?;
        }
        Ok(())
    }

    /// A refresh token the authorization server refused for good: the sign-in is over,
    /// unless a newer one replaced it meanwhile.
    async fn on_refresh_token_rejected(
        &self,
        credentials: &StoredCredentials,
    ) -> Result<(), AuthError> {
        let refresh = |c: &StoredCredentials| {
            c.token_response
                .as_ref()
                .and_then(|t| t.refresh_token().map(|r| r.secret().clone()))
        };
        let current = self.tokens.get(&self.server, &self.url);
        if current.is_some_and(|r| refresh(&r.credentials) == refresh(credentials)) {
            self.tokens
                .remove(&self.server)
                .await
                .map_err(store_error)?;
        }
        Ok(())
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let guard = self.tokens.refresh_lock(&self.server).lock_owned().await;
        Ok(Some(CredentialRefreshGuard::new(guard)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn token(access: &str, refresh: Option<&str>, expires_in: u64) -> StoredCredentials {
        let mut body = serde_json::json!({"access_token": access, "token_type": "Bearer",
            "expires_in": expires_in});
        if let Some(r) = refresh {
            body["refresh_token"] = r.into();
        }
        let response = serde_json::from_value(body).unwrap();
        StoredCredentials::new(
            "client-1".into(),
            Some(response),
            vec!["tools".into()],
            Some(now_secs()),
        )
    }

    fn seed() -> Seed {
        let mut metadata = AuthorizationMetadata::default();
        metadata.authorization_endpoint = "http://127.0.0.1:9/authorize".into();
        metadata.token_endpoint = "http://127.0.0.1:9/token".into();
        Seed {
            metadata,
            redirect_uri: "http://127.0.0.1:9/mcp-callback".into(),
            client_secret: None,
        }
    }

    #[tokio::test]
    async fn tokens_are_saved_privately_bound_to_their_url_and_survive_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Arc::new(Tokens::empty(dir.path()));
        let store = ServerTokens {
            tokens: tokens.clone(),
            server: "web".into(),
            url: "http://127.0.0.1:9/mcp".into(),
            seed: Some(seed()),
        };
        store.save(token("at-1", Some("rt-1"), 3600)).await.unwrap();
        let mode = std::fs::metadata(Tokens::path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        let reloaded = Tokens::load(dir.path()).unwrap();
        let status = reloaded.status("web", "http://127.0.0.1:9/mcp");
        assert!(status.is_authorized && status.has_refresh_token && !status.is_expired);
        assert_eq!(status.scope.as_deref(), Some("tools"));
        // Another URL under the same name holds nothing.
        assert!(
            !reloaded
                .status("web", "http://127.0.0.1:10/mcp")
                .is_authorized
        );
        assert!(reloaded.get("web", "http://127.0.0.1:10/mcp").is_none());
        // The status never carries the token.
        assert!(!serde_json::to_string(&status).unwrap().contains("at-1"));
    }

    #[tokio::test]
    async fn a_refresh_keeps_the_client_and_removal_forgets_everything() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Arc::new(Tokens::empty(dir.path()));
        let url = "http://127.0.0.1:9/mcp".to_string();
        let first = ServerTokens {
            tokens: tokens.clone(),
            server: "web".into(),
            url: url.clone(),
            seed: Some(seed()),
        };
        first.save(token("at-1", Some("rt-1"), 3600)).await.unwrap();
        let g = tokens.generation("web");
        let later = ServerTokens {
            tokens: tokens.clone(),
            server: "web".into(),
            url: url.clone(),
            seed: None,
        };
        later.save(token("at-2", None, 1)).await.unwrap();
        assert!(tokens.generation("web") > g);
        let r = tokens.get("web", &url).unwrap();
        assert_eq!(r.metadata.token_endpoint, "http://127.0.0.1:9/token");
        assert!(!tokens.status("web", &url).has_refresh_token);
        assert!(tokens.remove("web").await.unwrap());
        assert!(!tokens.remove("web").await.unwrap());
        assert!(later.load().await.unwrap().is_none());
        let text = std::fs::read_to_string(Tokens::path(dir.path())).unwrap();
        assert!(!text.contains("at-2"), "{text}");
        // With nothing to attach the tokens to, a save is refused rather than half-written.
        assert!(later.save(token("at-3", None, 60)).await.is_err());
    }

    #[test]
    fn a_broken_token_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(Tokens::path(dir.path()), "{not json").unwrap();
        assert!(Tokens::load(dir.path())
            .err()
            .unwrap()
            .contains("mcp-tokens.json"));
    }
}
