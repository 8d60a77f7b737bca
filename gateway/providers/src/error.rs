//! Provider errors. Every message is safe to show to a user: the api key is
//! never part of it (messages are additionally scrubbed with [`redact`]).

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// Non-2xx answer; `message` is the provider's own error text when it sent one.
    #[error("provider returned HTTP {status}: {message}")]
    Http {
        status: u16,
        message: String,
        retryable: bool,
    },
    /// Connection-level failure (connect, reset, TLS, body read).
    #[error("provider connection failed: {0}")]
    Transport(String),
    /// No bytes arrived for `stall_timeout`.
    #[error("provider stream stalled (no data within the stall timeout)")]
    Stalled,
    /// The provider spoke something we could not understand, or the stream ended early.
    #[error("provider protocol error: {0}")]
    Protocol(String),
    /// An `error` event inside a successful (2xx) stream, e.g. Anthropic `overloaded_error`.
    #[error("provider error ({kind}): {message}")]
    Stream { kind: String, message: String },
    #[error("cancelled")]
    Cancelled,
}

impl ProviderError {
    /// True for errors that the opening phase retries (408/409/429/5xx, connect errors).
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { retryable, .. } => *retryable,
            ProviderError::Transport(_) => true,
            _ => false,
        }
    }

    /// HTTP status when the provider answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Short machine class, handy for `error_data.type` / `cause_class`.
    pub fn class(&self) -> &'static str {
        match self {
            ProviderError::Http { .. } => "http",
            ProviderError::Transport(_) => "transport",
            ProviderError::Stalled => "stalled",
            ProviderError::Protocol(_) => "protocol",
            ProviderError::Stream { .. } => "stream",
            ProviderError::Cancelled => "cancelled",
        }
    }
}

/// 408/409/429 and every 5xx are worth retrying.
pub(crate) fn status_is_retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

/// Secret strings of one provider (api key, extra header values) that must
/// never appear in an error message.
#[derive(Debug, Clone, Default)]
pub(crate) struct Secrets(std::sync::Arc<Vec<String>>);

impl Secrets {
    pub(crate) fn of(cfg: &crate::ProviderConfig) -> Secrets {
        let mut v: Vec<String> = cfg.api_key.iter().cloned().collect();
        // Header values are secret-ish (custom auth); short ones would over-redact.
        v.extend(
            cfg.extra_headers
                .iter()
                .map(|(_, value)| value.clone())
                .filter(|value| value.len() >= 8),
        );
        v.retain(|s| s.len() >= 4);
        // Longest first, so a secret containing another is replaced whole.
        v.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Secrets(std::sync::Arc::new(v))
    }
}

/// Replaces every occurrence of a secret in `text`.
pub(crate) fn redact(mut text: String, secrets: &Secrets) -> String {
    for s in secrets.0.iter() {
        if text.contains(s.as_str()) {
            text = text.replace(s.as_str(), "<redacted>");
        }
    }
    text
}

/// Scrubs the secrets out of every message an error carries.
pub(crate) fn redact_error(err: ProviderError, key: &Secrets) -> ProviderError {
    match err {
        ProviderError::Http {
            status,
            message,
            retryable,
        } => ProviderError::Http {
            status,
            message: redact(message, key),
            retryable,
        },
        ProviderError::Transport(m) => ProviderError::Transport(redact(m, key)),
        ProviderError::Protocol(m) => ProviderError::Protocol(redact(m, key)),
        ProviderError::Stream { kind, message } => ProviderError::Stream {
            kind: redact(kind, key),
            message: redact(message, key),
        },
        other => other,
    }
}

/// Pulls `error.message` (OpenAI and Anthropic shape) or a bare `message`
/// out of an error body; falls back to a trimmed prefix of the body text.
pub(crate) fn message_from_body(status: u16, body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let msg = v
            .pointer("/error/message")
            .and_then(|m| m.as_str())
            .or_else(|| v.get("error").and_then(|e| e.as_str()))
            .or_else(|| v.get("message").and_then(|m| m.as_str()))
            .or_else(|| v.get("detail").and_then(|m| m.as_str()));
        if let Some(m) = msg {
            return truncate(m.trim(), 2000);
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        match reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
        {
            Some(reason) => reason.to_string(),
            None => "no error message".to_string(),
        }
    } else {
        truncate(text, 500)
    }
}

pub(crate) fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_and_anthropic_error_bodies_yield_their_message_text() {
        let openai = br#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
        assert_eq!(message_from_body(401, openai), "Incorrect API key provided");
        let anthropic =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(message_from_body(529, anthropic), "Overloaded");
    }

    #[test]
    fn an_empty_or_non_json_error_body_falls_back_to_text_or_reason() {
        assert_eq!(message_from_body(502, b""), "Bad Gateway");
        assert_eq!(
            message_from_body(500, b"  upstream died \n"),
            "upstream died"
        );
    }

    #[test]
    fn the_api_key_is_scrubbed_from_error_messages() {
        let cfg = crate::ProviderConfig {
            api_key: Some("sk-abcdef".into()),
            extra_headers: vec![("x-auth".into(), "tok-0123456789".into())],
            ..Default::default()
        };
        let e = redact_error(
            ProviderError::Http {
                status: 401,
                message: "bad key sk-abcdef, bad token tok-0123456789".into(),
                retryable: false,
            },
            &Secrets::of(&cfg),
        );
        assert!(!e.to_string().contains("sk-abcdef"));
        assert!(!e.to_string().contains("tok-0123456789"));
    }

    #[test]
    fn retryable_statuses_are_408_409_429_and_5xx() {
        for s in [408, 409, 429, 500, 502, 503, 529] {
            assert!(status_is_retryable(s), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422] {
            assert!(!status_is_retryable(s), "{s}");
        }
    }
}
