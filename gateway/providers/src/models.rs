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
        let mut ids = Vec::with_capacity(rows.len());
        for m in rows {
            let Some(id) = m
                .get("id")
                .or_else(|| m.get("name"))
                .and_then(|v| v.as_str())
            else {
                continue;
            };
            if let Some(window) = listed_window_of(m) {
                remember_window(&self.cfg.base_url, id, window);
            }
            ids.push(id.to_string());
        }
        Ok(ids)
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

/// The members a models listing may carry a context window in: OpenRouter and LM Studio
/// (`context_length`), vLLM (`max_model_len`), others (`context_window`,
/// `max_context_length`, `max_input_tokens`).
const WINDOW_MEMBERS: &[&str] = &[
    "context_window",
    "context_length",
    "max_model_len",
    "max_context_length",
    "max_input_tokens",
];

fn listed_window_of(model: &serde_json::Value) -> Option<u64> {
    WINDOW_MEMBERS
        .iter()
        .find_map(|k| model.get(k).and_then(serde_json::Value::as_u64))
        .filter(|w| *w > 0)
}

type Windows = std::sync::Mutex<std::collections::HashMap<(String, String), u64>>;

fn windows() -> &'static Windows {
    static W: std::sync::OnceLock<Windows> = std::sync::OnceLock::new();
    W.get_or_init(Default::default)
}

fn remember_window(base_url: &str, model: &str, window: u64) {
    if let Ok(mut w) = windows().lock() {
        let key = (
            base_url.trim_end_matches('/').to_string(),
            model.to_string(),
        );
        w.insert(key, window);
    }
}

/// The context window a provider's models listing gave for `model`, if the gateway has
/// listed that provider's models since it started (a status check, adding the provider).
pub fn listed_window(base_url: &str, model: &str) -> Option<u64> {
    let key = (
        base_url.trim_end_matches('/').to_string(),
        model.to_string(),
    );
    windows().lock().ok()?.get(&key).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_names_its_window_under_any_of_the_known_members() {
        let v = serde_json::json!({"id": "m", "max_model_len": 32768});
        assert_eq!(listed_window_of(&v), Some(32768));
        let v = serde_json::json!({"id": "m", "context_length": 8192});
        assert_eq!(listed_window_of(&v), Some(8192));
        assert_eq!(listed_window_of(&serde_json::json!({"id": "m"})), None);
        remember_window("http://h/v1/", "m", 4096);
        assert_eq!(listed_window("http://h/v1", "m"), Some(4096));
        assert_eq!(listed_window("http://h/v1", "other"), None);
    }
}
