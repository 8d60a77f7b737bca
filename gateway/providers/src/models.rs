//! The models list (`GET <base>/models`), used as a live check of a provider's key: it
//! costs no tokens, and both dialects answer it with the same authentication as a turn.

use crate::error::{message_from_body, redact_error};
use crate::{limits, retry, Client, Dialect, ProviderError};
use tokio_util::sync::CancellationToken;

/// Largest models list read.
const MAX_MODELS_BODY: usize = 4 * 1024 * 1024;

impl Client {
    /// The model ids the provider lists. One attempt, no retries: an `Http` error with
    /// status 401/403 means the key was refused. Rate-limit headers of the answer are kept
    /// like a turn's ([`Client::last_rate_limits`]).
    pub async fn list_models(&self) -> Result<Vec<String>, ProviderError> {
        let url = format!("{}/models", self.cfg.base_url.trim().trim_end_matches('/'));
        let mut headers = self.headers()?;
        headers.insert(
            reqwest::header::ACCEPT,
            reqwest::header::HeaderValue::from_static("application/json"),
        );
        headers.remove(reqwest::header::CONTENT_TYPE);
        let sent = tokio::time::timeout(
            self.cfg.stall_timeout,
            self.http.get(&url).headers(headers).send(),
        )
        .await
        .map_err(|_| ProviderError::Stalled)?
        .map_err(|e| redact_error(ProviderError::Transport(retry::describe(&e)), &self.secrets))?;
        self.note_limits(sent.headers());
        let status = sent.status().as_u16();
        let cancel = CancellationToken::new();
        let ok = sent.status().is_success();
        let body = retry::read_body(sent, &cancel, self.cfg.stall_timeout, MAX_MODELS_BODY, !ok)
            .await
            .map_err(|e| redact_error(e, &self.secrets))?;
        if !ok {
            return Err(redact_error(
                ProviderError::Http {
                    status,
                    message: message_from_body(status, &body),
                    retryable: false,
                },
                &self.secrets,
            ));
        }
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| ProviderError::Protocol(format!("the models list is not JSON: {e}")))?;
        // OpenAI and Anthropic both answer `{data: [{id, …}]}`; ollama's native list uses
        // `models: [{name}]`.
        let rows = v
            .get("data")
            .or_else(|| v.get("models"))
            .and_then(|d| d.as_array())
            .ok_or_else(|| ProviderError::Protocol("the models list has no `data` array".into()))?;
        Ok(rows
            .iter()
            .filter_map(|m| m.get("id").or_else(|| m.get("name")))
            .filter_map(|id| id.as_str().map(str::to_string))
            .collect())
    }

    /// Keeps the rate-limit headers of an answer, when it has some.
    pub(crate) fn note_limits(&self, headers: &reqwest::header::HeaderMap) {
        if let Some(l) = limits::from_headers(headers) {
            if let Ok(mut slot) = self.last_limits.lock() {
                *slot = Some(l);
            }
        }
    }

    /// The rate-limit headers of the last answer that carried some (a turn or a models
    /// list), if any arrived since this client was built.
    pub fn last_rate_limits(&self) -> Option<limits::RateLimits> {
        self.last_limits.lock().ok().and_then(|l| l.clone())
    }

    /// The dialect's name for the header carrying the key (for messages).
    pub fn key_header(&self) -> &'static str {
        match self.cfg.dialect {
            Dialect::Anthropic => "x-api-key",
            Dialect::OpenAiChat => "Authorization",
        }
    }
}
