//! The HTTP client of every OAuth request (discovery, registration, token exchange and
//! refresh): the same egress proxy and CA bundle as the server's MCP traffic, so the
//! network policy decides these requests too.

use super::super::reach::{http_builder, Reach};
use futures::StreamExt;
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest,
};
use std::sync::Arc;
use std::time::Duration;

/// One OAuth request may take this long.
const TIMEOUT: Duration = Duration::from_secs(30);
/// An OAuth answer (metadata, a token) is small; more than this is refused.
const MAX_BODY: usize = 1024 * 1024;
/// Discovery may follow this many redirects.
const MAX_REDIRECTS: usize = 10;

/// Two clients through the proxy: one follows redirects (discovery), one never does
/// (token requests, where a redirect would carry the code elsewhere).
pub struct ProxiedOAuthHttp {
    follow: reqwest::Client,
    stop: reqwest::Client,
}

#[derive(Debug, thiserror::Error)]
#[error("the OAuth answer is larger than {MAX_BODY} bytes")]
struct TooLarge;

impl ProxiedOAuthHttp {
    pub async fn new(reach: &Reach) -> Result<Arc<ProxiedOAuthHttp>, String> {
        let follow = http_builder(reach)
            .await?
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS))
            .build()
            .map_err(|e| e.to_string())?;
        let stop = http_builder(reach)
            .await?
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(ProxiedOAuthHttp { follow, stop }))
    }
}

impl OAuthHttpClient for ProxiedOAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let request = reqwest::Request::try_from(request.request)
                .map_err(|e| Box::new(e) as OAuthHttpClientError)?;
            let response = client
                .execute(request)
                .await
                .map_err(|e| Box::new(e) as OAuthHttpClientError)?;
            let mut out = axum::http::Response::builder()
                .status(response.status())
                .version(response.version());
            for (name, value) in response.headers() {
                out = out.header(name, value);
            }
            let mut body = Vec::new();
            let mut chunks = response.bytes_stream();
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(|e| Box::new(e) as OAuthHttpClientError)?;
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(Box::new(TooLarge) as OAuthHttpClientError);
                }
                body.extend_from_slice(&chunk);
            }
            out.body(body)
                .map_err(|e| Box::new(e) as OAuthHttpClientError)
        })
    }
}
