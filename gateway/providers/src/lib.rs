//! Native streaming clients for LLM provider wire dialects (docs/decisions.md, G6, G7).
//!
//! Two dialects are spoken: OpenAI chat completions (also used for every
//! OpenAI-compatible endpoint such as ollama, llama.cpp or vLLM) and Anthropic
//! messages. Both are normalised into one [`StreamEvent`] sequence.
//!
//! TLS: reqwest is built with `rustls-no-provider`, so a rustls crypto provider
//! must be installed process-wide. [`Client::new`] does this once through
//! [`init_crypto`] (ring); installing another provider earlier is also fine.

mod anthropic;
mod collect;
mod error;
pub mod limits;
mod models;
mod openai;
mod retry;
pub mod sse;

use std::fmt;
use std::str::FromStr;
use std::sync::Once;
use std::time::Duration;

use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use collect::{collect, Collected};
pub use error::ProviderError;
pub use models::listed_window;

/// Wire dialect of a provider endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Dialect {
    /// OpenAI chat completions (`POST {base}/chat/completions`), also every
    /// OpenAI-compatible server.
    OpenAiChat,
    /// Anthropic messages (`POST {base}/messages`).
    Anthropic,
}

impl Dialect {
    /// The canonical config name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Dialect::OpenAiChat => "openai",
            Dialect::Anthropic => "anthropic",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Dialect {
    type Err = String;

    /// Accepts `openai`, `openai-compatible` (also `openai_compatible`,
    /// `openai-chat`) and `anthropic`, case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" | "openai-compatible" | "openai_compatible" | "openai-chat" => {
                Ok(Dialect::OpenAiChat)
            }
            "anthropic" => Ok(Dialect::Anthropic),
            other => Err(format!(
                "unknown provider dialect {other:?} (expected \"openai\", \"openai-compatible\" or \"anthropic\")"
            )),
        }
    }
}

/// Everything needed to talk to one provider endpoint.
#[derive(Clone)]
pub struct ProviderConfig {
    pub id: String,
    pub dialect: Dialect,
    /// API root including the version segment, e.g. `https://api.openai.com/v1`,
    /// `https://api.anthropic.com/v1` or `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    /// Used when [`ChatRequest::model`] is empty.
    pub default_model: String,
    /// Retries before the first byte of a successful response (default 2).
    pub max_retries: u32,
    pub connect_timeout: Duration,
    /// No bytes for this long (waiting for headers or mid-stream) => [`ProviderError::Stalled`].
    pub stall_timeout: Duration,
    pub extra_headers: Vec<(String, String)>,
}

impl ProviderConfig {
    /// A config with the defaults: 2 retries, 10 s connect timeout, 120 s stall timeout.
    pub fn new(
        id: impl Into<String>,
        dialect: Dialect,
        base_url: impl Into<String>,
        default_model: impl Into<String>,
    ) -> Self {
        ProviderConfig {
            id: id.into(),
            dialect,
            base_url: base_url.into(),
            api_key: None,
            default_model: default_model.into(),
            max_retries: 2,
            connect_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(120),
            extra_headers: Vec::new(),
        }
    }
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig::new("", Dialect::OpenAiChat, "", "")
    }
}

/// Never prints the api key.
impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("id", &self.id)
            .field("dialect", &self.dialect)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("default_model", &self.default_model)
            .field("max_retries", &self.max_retries)
            .field("connect_timeout", &self.connect_timeout)
            .field("stall_timeout", &self.stall_timeout)
            .field(
                "extra_headers",
                &self
                    .extra_headers
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One model call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Empty => [`ProviderConfig::default_model`].
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    /// Anthropic requires a value; 8192 is sent when `None`.
    pub max_tokens: Option<u32>,
    /// How hard the model should think (`None`: the provider's default). OpenAI:
    /// `reasoning_effort`; Anthropic: extended thinking with a budget per level.
    #[serde(default)]
    pub reasoning: Option<Level>,
    /// How long the answer should be (`None`: the provider's default). OpenAI: `verbosity`;
    /// the Anthropic dialect has no such field and sends nothing.
    #[serde(default)]
    pub verbosity: Option<Level>,
    /// Ask for the provider's faster processing tier. OpenAI: `service_tier: "priority"`;
    /// the Anthropic dialect has no such field and sends nothing.
    #[serde(default)]
    pub fast: bool,
    /// Members added to the request body as they are (a turn's `extra_body`), except those
    /// the dialect itself sets for the conversation ([`RESERVED_MEMBERS`]).
    #[serde(default)]
    pub extra: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Request members an `extra` map cannot replace: they carry the conversation itself.
pub const RESERVED_MEMBERS: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "stream",
    "stream_options",
];

/// Adds `extra`'s members to a request body (reserved ones are left out).
pub(crate) fn merge_extra(
    body: &mut serde_json::Map<String, serde_json::Value>,
    req: &ChatRequest,
) {
    for (k, v) in req.extra.iter().flatten() {
        if !RESERVED_MEMBERS.contains(&k.as_str()) {
            body.insert(k.clone(), v.clone());
        }
    }
}

/// A low / medium / high dial (reasoning effort, verbosity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Low,
    Medium,
    High,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Low => "low",
            Level::Medium => "medium",
            Level::High => "high",
        }
    }

    /// `low`, `medium` or `high` (case-insensitive); anything else is `None`.
    pub fn parse(s: &str) -> Option<Level> {
        match s.trim().to_ascii_lowercase().as_str() {
            "low" => Some(Level::Low),
            "medium" => Some(Level::Medium),
            "high" => Some(Level::High),
            _ => None,
        }
    }
}

/// An image sent to the model, as base64 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: String,
    pub base64: String,
}

/// Conversation history entry, dialect-neutral.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ChatMessage {
    User {
        text: String,
    },
    /// A user message carrying images (OpenAI `image_url` parts, Anthropic `image` blocks).
    UserImages {
        text: String,
        images: Vec<Image>,
    },
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema object.
    pub parameters: serde_json::Value,
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text as streamed.
    pub arguments: String,
}

/// Normalised streaming event.
///
/// Tool call `index` is the 0-based position of the call among the tool calls
/// of this response (not the provider's content-block index).
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    TextDelta(String),
    ReasoningDelta(String),
    ToolCallStarted {
        index: usize,
        id: String,
        name: String,
    },
    ToolCallDelta {
        index: usize,
        arguments_delta: String,
    },
    /// Always the last event of a successful stream.
    Completed {
        stop_reason: StopReason,
        usage: Usage,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Other(String),
}

/// Token usage. `input_tokens` counts ALL prompt tokens, cached ones included
/// (Anthropic's `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`);
/// `cached_input_tokens` is the cache-read part of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
    pub reasoning_tokens: u64,
    /// The part of `input_tokens` written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`; 0 where the dialect does not report it).
    #[serde(default)]
    pub cache_write_tokens: u64,
}

/// Passed to the `on_retry` callback before each retry sleep
/// (maps onto the `provider.retry` event, the Companion's event vocabulary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryInfo {
    /// 1-based number of the retry about to happen.
    pub attempt: u32,
    pub max_retries: u32,
    pub delay_ms: u64,
    pub error: String,
}

/// Installs ring as the process-wide rustls crypto provider, once. Harmless
/// if a provider is already installed.
pub fn init_crypto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first; that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Streaming client for one provider endpoint. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    cfg: ProviderConfig,
    http: reqwest::Client,
    backoff: retry::Backoff,
    secrets: error::Secrets,
    /// Rate-limit headers of the last answer that carried some (shared by clones).
    last_limits: std::sync::Arc<std::sync::Mutex<Option<limits::RateLimits>>>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("cfg", &self.cfg).finish()
    }
}

impl Client {
    pub fn new(cfg: ProviderConfig) -> Result<Self, ProviderError> {
        init_crypto();
        let base = cfg.base_url.trim();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ProviderError::Protocol(format!(
                "provider {:?}: base_url must start with http:// or https://",
                cfg.id
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .tcp_nodelay(true)
            .user_agent(concat!("vis-gateway/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderError::Transport(format!("building HTTP client: {e}")))?;
        Ok(Client {
            secrets: error::Secrets::of(&cfg),
            cfg,
            http,
            backoff: retry::Backoff::default(),
            last_limits: Default::default(),
        })
    }

    /// Overrides the exponential backoff (defaults: 500 ms base, 8 s cap) and
    /// the longest `Retry-After` that is honoured (default 30 s; a longer one
    /// ends the retries). Mostly for tests.
    pub fn with_backoff(
        mut self,
        base: Duration,
        max: Duration,
        max_retry_after: Duration,
    ) -> Self {
        self.backoff = retry::Backoff {
            base,
            max,
            max_retry_after,
        };
        self
    }

    pub fn config(&self) -> &ProviderConfig {
        &self.cfg
    }

    /// Opens the stream. Retries (exponential backoff, jitter, honour Retry-After) only BEFORE
    /// the first byte of a successful response: connect errors, 408/409/429/5xx. Calls
    /// `on_retry` before each retry sleep. Cancellation aborts promptly with
    /// [`ProviderError::Cancelled`], also while the returned stream is being read.
    pub async fn stream(
        &self,
        req: &ChatRequest,
        cancel: CancellationToken,
        on_retry: &(dyn Fn(RetryInfo) + Send + Sync),
    ) -> Result<BoxStream<'static, Result<StreamEvent, ProviderError>>, ProviderError> {
        let (url, body) = match self.cfg.dialect {
            Dialect::OpenAiChat => (
                join_url(&self.cfg.base_url, "chat/completions"),
                openai::request_body(&self.cfg, req),
            ),
            Dialect::Anthropic => (
                join_url(&self.cfg.base_url, "messages"),
                anthropic::request_body(&self.cfg, req),
            ),
        };
        let body = serde_json::to_vec(&body)
            .map_err(|e| ProviderError::Protocol(format!("encoding request: {e}")))?;
        let headers = self.headers()?;
        tracing::debug!(provider = %self.cfg.id, dialect = %self.cfg.dialect, %url, "opening provider stream");
        let resp = retry::send_with_retry(
            &self.http,
            &url,
            headers,
            bytes::Bytes::from(body),
            &self.cfg,
            &self.secrets,
            &self.backoff,
            &cancel,
            on_retry,
        )
        .await?;
        self.note_limits(resp.headers());
        let is_json = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.trim_start().starts_with("application/json"));
        if is_json {
            // The server ignored `stream: true` (some compatible servers do):
            // replay the whole completion as events.
            return self.replay_whole(resp, &cancel).await;
        }
        let parser: Box<dyn sse::EventParser> = match self.cfg.dialect {
            Dialect::OpenAiChat => Box::new(openai::Parser::default()),
            Dialect::Anthropic => Box::new(anthropic::Parser::default()),
        };
        Ok(sse::event_stream(
            resp,
            parser,
            cancel,
            self.cfg.stall_timeout,
            self.secrets.clone(),
        ))
    }

    async fn replay_whole(
        &self,
        resp: reqwest::Response,
        cancel: &CancellationToken,
    ) -> Result<BoxStream<'static, Result<StreamEvent, ProviderError>>, ProviderError> {
        use futures::StreamExt;
        let key = &self.secrets;
        let body = retry::read_body(resp, cancel, self.cfg.stall_timeout, MAX_WHOLE_BODY, false)
            .await
            .map_err(|e| error::redact_error(e, key))?;
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| ProviderError::Protocol(format!("invalid JSON response body: {e}")))?;
        let events = match self.cfg.dialect {
            Dialect::OpenAiChat => openai::events_from_whole(&v),
            Dialect::Anthropic => anthropic::events_from_whole(&v),
        }
        .map_err(|e| error::redact_error(e, key))?;
        Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed())
    }

    fn headers(&self) -> Result<reqwest::header::HeaderMap, ProviderError> {
        use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
        let mut h = HeaderMap::new();
        let bad = |what: &str| ProviderError::Protocol(format!("invalid header value for {what}"));
        h.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        match self.cfg.dialect {
            Dialect::OpenAiChat => {
                if let Some(key) = self.cfg.api_key.as_deref().filter(|k| !k.is_empty()) {
                    let mut v = HeaderValue::from_str(&format!("Bearer {key}"))
                        .map_err(|_| bad("the api key"))?;
                    v.set_sensitive(true);
                    h.insert(reqwest::header::AUTHORIZATION, v);
                }
            }
            Dialect::Anthropic => {
                if let Some(key) = self.cfg.api_key.as_deref().filter(|k| !k.is_empty()) {
                    let mut v = HeaderValue::from_str(key).map_err(|_| bad("the api key"))?;
                    v.set_sensitive(true);
                    h.insert(HeaderName::from_static("x-api-key"), v);
                }
                h.insert(
                    HeaderName::from_static("anthropic-version"),
                    HeaderValue::from_static(anthropic::API_VERSION),
                );
            }
        }
        for (k, v) in &self.cfg.extra_headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| ProviderError::Protocol(format!("invalid header name {k:?}")))?;
            let value = HeaderValue::from_str(v).map_err(|_| bad(k))?;
            h.insert(name, value);
        }
        Ok(h)
    }
}

/// Largest non-streamed (JSON) completion accepted.
const MAX_WHOLE_BODY: usize = 32 * 1024 * 1024;

fn join_url(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim().trim_end_matches('/'), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialect_names_parse_including_openai_compatible() {
        assert_eq!("openai".parse::<Dialect>(), Ok(Dialect::OpenAiChat));
        assert_eq!(
            "openai-compatible".parse::<Dialect>(),
            Ok(Dialect::OpenAiChat)
        );
        assert_eq!("Anthropic".parse::<Dialect>(), Ok(Dialect::Anthropic));
        assert!("gemini".parse::<Dialect>().is_err());
    }

    #[test]
    fn debug_output_of_a_config_never_contains_the_api_key() {
        let mut cfg = ProviderConfig::new("p", Dialect::Anthropic, "http://x/v1", "m");
        cfg.api_key = Some("sk-secret-123".into());
        cfg.extra_headers
            .push(("x-other".into(), "sk-secret-456".into()));
        let s = format!("{cfg:?}");
        assert!(!s.contains("sk-secret"), "{s}");
    }

    #[test]
    fn urls_join_with_or_without_a_trailing_slash() {
        assert_eq!(join_url("http://h/v1/", "messages"), "http://h/v1/messages");
        assert_eq!(
            join_url("http://h/v1", "chat/completions"),
            "http://h/v1/chat/completions"
        );
    }
}

#[cfg(test)]
mod extra_tests {
    use super::*;

    #[test]
    fn extra_members_reach_openai_requests_but_never_replace_the_conversation() {
        let mut extra = serde_json::Map::new();
        extra.insert("service_tier".into(), serde_json::json!("flex"));
        extra.insert("messages".into(), serde_json::json!([]));
        extra.insert("made_up".into(), serde_json::json!(1));
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::User { text: "hi".into() }],
            extra: Some(extra),
            ..Default::default()
        };
        let cfg = ProviderConfig::new("p", Dialect::OpenAiChat, "http://h/v1", "m");
        let body = openai::request_body(&cfg, &req);
        assert_eq!(body["service_tier"], "flex");
        assert_eq!(body["made_up"], 1);
        assert_eq!(body["messages"].as_array().map(Vec::len), Some(1));
        let cfg = ProviderConfig::new("p", Dialect::Anthropic, "http://h/v1", "m");
        let body = anthropic::request_body(&cfg, &req);
        assert_eq!(body["service_tier"], "flex");
        assert!(body.get("made_up").is_none());
    }
}
