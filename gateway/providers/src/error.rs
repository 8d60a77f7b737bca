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

/// How providers word a request that does not fit the model's context window.
const OVERFLOW_WORDINGS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "exceeds the context",
    "input is too long",
];

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

    /// True when the provider refused the request for being larger than the model's context
    /// window (OpenAI `context_length_exceeded`, Anthropic "prompt is too long", and the
    /// wordings of the common compatible servers).
    pub fn is_context_overflow(&self) -> bool {
        let message = match self {
            ProviderError::Http {
                status: 400 | 413 | 422,
                message,
                ..
            } => message,
            ProviderError::Stream { message, .. } => message,
            _ => return false,
        };
        let m = message.to_ascii_lowercase();
        OVERFLOW_WORDINGS.iter().any(|w| m.contains(w))
    }

    /// The window a context-length refusal names ("maximum context length is 8192 tokens",
    /// "prompt is too long: 9000 tokens > 8192 maximum"), when it names one.
    pub fn overflow_window(&self) -> Option<u64> {
        if !self.is_context_overflow() {
            return None;
        }
        let (ProviderError::Http { message, .. } | ProviderError::Stream { message, .. }) = self
        else {
            return None;
        };
        let m = message.to_ascii_lowercase();
        let number_after = |key: &str| -> Option<u64> {
            let rest = &m[m.find(key)? + key.len()..];
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ',')
                .filter(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        };
        number_after("maximum context length is")
            .or_else(|| number_after("context window of"))
            .or_else(|| {
                // "… > 8192 maximum"
                let at = m.find(" maximum")?;
                let before = m[..at].trim_end();
                let digits: String = before
                    .chars()
                    .rev()
                    .take_while(char::is_ascii_digit)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                digits.parse().ok()
            })
            .filter(|w| *w > 0)
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

#[cfg(test)]
mod overflow_tests {
    use super::ProviderError;

    fn http(status: u16, message: &str) -> ProviderError {
        ProviderError::Http {
            status,
            message: message.into(),
            retryable: false,
        }
    }

    #[test]
    fn context_length_refusals_of_both_dialects_are_recognised_with_their_window() {
        let openai = http(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
        );
        assert!(openai.is_context_overflow());
        assert_eq!(openai.overflow_window(), Some(8192));
        let anthropic = http(400, "prompt is too long: 210000 tokens > 200000 maximum");
        assert!(anthropic.is_context_overflow());
        assert_eq!(anthropic.overflow_window(), Some(200000));
    }

    #[test]
    fn other_errors_are_not_context_overflows() {
        assert!(!http(400, "model: Field required").is_context_overflow());
        assert!(!http(500, "maximum context length is 10").is_context_overflow());
        assert!(!ProviderError::Stalled.is_context_overflow());
        assert_eq!(http(400, "context length exceeded").overflow_window(), None);
    }
}
