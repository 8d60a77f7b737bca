//! A scripted LLM server speaking the real OpenAI chat-completions and
//! Anthropic messages streaming wire formats, on one loopback port.
//!
//! `POST /v1/chat/completions` answers in the OpenAI dialect and
//! `POST /v1/messages` in the Anthropic one. Responses come from a FIFO of
//! [`Script`]s shared by both routes; with an empty queue the server echoes
//! `You said: <last user text>`. Every request is recorded.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What the next request is answered with.
#[derive(Debug, Clone, PartialEq)]
pub enum Script {
    /// Streamed as these text chunks.
    Text(Vec<String>),
    /// Reasoning chunks (OpenAI `reasoning_content`, Anthropic `thinking` block), then text.
    Reasoning {
        reasoning: Vec<String>,
        text: Vec<String>,
    },
    /// One tool call, its arguments streamed in 2+ pieces, optionally after some text.
    ToolCall {
        name: String,
        arguments: Value,
        text_before: Option<String>,
    },
    /// Parallel tool calls `(name, arguments)`.
    ToolCalls(Vec<(String, Value)>),
    /// Non-2xx with the dialect's error JSON body.
    Error { status: u16, message: String },
    /// Like [`Script::Error`], plus a `Retry-After` header with this value.
    ErrorWithRetryAfter {
        status: u16,
        message: String,
        retry_after: String,
    },
    /// Sends the stream start and these text chunks, then holds the connection
    /// open without sending anything until the client goes away.
    Stall { chunks: Vec<String> },
    /// A text stream with `delay_ms` between consecutive SSE events.
    Slow { chunks: Vec<String>, delay_ms: u64 },
    /// A text stream that stops with the "output limit reached" stop reason.
    MaxTokens(Vec<String>),
    /// The inner script's stream re-cut into writes of `bytes_per_write`
    /// bytes (splitting lines, CRLFs and UTF-8 sequences), ~1 ms apart.
    Chunked {
        script: Box<Script>,
        bytes_per_write: usize,
    },
    /// The inner script answered as one JSON body, as a server that ignores
    /// `stream: true` does.
    NoStream(Box<Script>),
    /// Exactly this response (for malformed-stream tests).
    Raw {
        status: u16,
        content_type: String,
        body: String,
    },
}

impl Script {
    /// `Script::Text` from string slices.
    pub fn text<S: AsRef<str>>(chunks: &[S]) -> Script {
        Script::Text(chunks.iter().map(|c| c.as_ref().to_string()).collect())
    }

    /// `Script::ToolCall` without leading text.
    pub fn tool_call(name: &str, arguments: Value) -> Script {
        Script::ToolCall {
            name: name.to_string(),
            arguments,
            text_before: None,
        }
    }

    /// `Script::Error`.
    pub fn error(status: u16, message: &str) -> Script {
        Script::Error {
            status,
            message: message.to_string(),
        }
    }
}

/// Words of the gateway's summariser instructions that mark a compaction request.
pub const SUMMARY_REQUEST_MARK: &str = "working memory of Vis";

/// The system prompt of a request in either dialect.
pub fn system_text(body: &Value) -> String {
    if let Some(s) = body.get("system") {
        return match s {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    body["messages"]
        .as_array()
        .and_then(|m| m.first())
        .filter(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// True for the gateway's summarising requests.
pub fn is_summary_request(body: &Value) -> bool {
    system_text(body).contains(SUMMARY_REQUEST_MARK)
}

/// One request as received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub path: String,
    /// Lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Value::Null` if it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// First value of a header (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Shared {
    scripts: Mutex<VecDeque<Script>>,
    requests: Mutex<Vec<RecordedRequest>>,
    required_key: Mutex<Option<String>>,
    /// Headers added to every answer (rate-limit headers, say).
    extra_headers: Mutex<Vec<(String, String)>>,
    /// The model's context window: a larger request is refused as the real APIs do.
    context_window: Mutex<Option<u64>>,
    /// The answer to the gateway's summarising requests (compactions), which then leave
    /// the script queue alone.
    summary_reply: Mutex<Option<String>>,
    counter: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The running fixture server; stops when dropped.
pub struct FixtureLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl FixtureLlm {
    /// Starts on `127.0.0.1:0`. Panics if loopback cannot be bound.
    pub async fn start() -> FixtureLlm {
        match Self::start_on(0).await {
            Ok(f) => f,
            Err(e) => panic!("fixture LLM: cannot bind 127.0.0.1:0: {e}"),
        }
    }

    /// Starts on `127.0.0.1:port` (0 = any free port).
    pub async fn start_on(port: u16) -> std::io::Result<FixtureLlm> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(openai_route))
            .route("/v1/messages", post(anthropic_route))
            .route("/v1/models", get(models_route))
            .fallback(not_found)
            .layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                add_extra_headers,
            ))
            .layer(DefaultBodyLimit::max(64 * 1024 * 1024))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("fixture LLM server stopped: {e}");
            }
        });
        Ok(FixtureLlm { addr, shared, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1` (the route decides the dialect).
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues the answer for a future request (FIFO, both dialects).
    pub fn push(&self, script: Script) {
        lock(&self.shared.scripts).push_back(script);
    }

    /// Scripts not consumed yet.
    pub fn pending_scripts(&self) -> usize {
        lock(&self.shared.scripts).len()
    }

    /// With `Some(key)`, requests without that key (`Authorization: Bearer` or
    /// `x-api-key`) get the dialect's 401 (without consuming a script).
    pub fn require_api_key(&self, key: Option<&str>) {
        *lock(&self.shared.required_key) = key.map(str::to_string);
    }

    /// Headers every later answer carries (e.g. `x-ratelimit-remaining-requests`).
    pub fn set_response_headers(&self, headers: &[(&str, &str)]) {
        *lock(&self.shared.extra_headers) = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    /// Refuses requests whose prompt (counted at four characters a token) plus the answer
    /// cap they ask for exceeds `window`, with the dialect's context-length error.
    pub fn set_context_window(&self, window: Option<u64>) {
        *lock(&self.shared.context_window) = window;
    }

    /// Answers every summarising request (a compaction: the system prompt holds
    /// [`SUMMARY_REQUEST_MARK`]) with `reply`, outside the script queue.
    pub fn set_summary_reply(&self, reply: Option<&str>) {
        *lock(&self.shared.summary_reply) = reply.map(str::to_string);
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }
}

impl Drop for FixtureLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dialect {
    OpenAi,
    Anthropic,
}

/// Dialect-neutral content of one response.
enum Part {
    Reasoning(Vec<String>),
    Text(Vec<String>),
    Tool { name: String, pieces: Vec<String> },
}

struct Plan {
    parts: Vec<Part>,
    delay: Duration,
    stall: bool,
    max_tokens: bool,
}

impl Plan {
    fn new(parts: Vec<Part>) -> Plan {
        Plan {
            parts,
            delay: Duration::ZERO,
            stall: false,
            max_tokens: false,
        }
    }

    fn has_tools(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Tool { .. }))
    }

    fn output_chars(&self, reasoning_only: bool) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Reasoning(r) => r.iter().map(String::len).sum(),
                Part::Text(t) if !reasoning_only => t.iter().map(String::len).sum(),
                Part::Tool { name, pieces } if !reasoning_only => {
                    name.len() + pieces.iter().map(String::len).sum::<usize>()
                }
                _ => 0,
            })
            .sum()
    }
}

fn tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}

/// Splits serialized JSON into 2+ pieces (when it has 2+ chars) on char boundaries.
fn split_arguments(args: &Value) -> Vec<String> {
    let s = args.to_string();
    let chars: Vec<char> = s.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Splits text into word-ish chunks, whitespace kept.
fn word_chunks(text: &str) -> Vec<String> {
    text.split_inclusive(' ').map(str::to_string).collect()
}

fn last_user_text(dialect: Dialect, body: &Value) -> String {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return String::new();
    };
    for m in messages.iter().rev() {
        if m.get("role").and_then(Value::as_str) != Some("user") {
            continue;
        }
        match m.get("content") {
            Some(Value::String(s)) => return s.clone(),
            Some(Value::Array(parts)) => {
                let text: Vec<&str> = parts
                    .iter()
                    .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                if !text.is_empty() {
                    return text.join("\n");
                }
                // Anthropic: a user turn with only tool_result blocks; look further back.
                if dialect == Dialect::OpenAi {
                    return String::new();
                }
            }
            _ => {}
        }
    }
    String::new()
}

fn status_error_type(dialect: Dialect, status: u16) -> &'static str {
    match (dialect, status) {
        (Dialect::OpenAi, 401) => "invalid_request_error",
        (Dialect::OpenAi, 429) => "requests",
        (Dialect::OpenAi, s) if s >= 500 => "server_error",
        (Dialect::OpenAi, _) => "invalid_request_error",
        (Dialect::Anthropic, 401) => "authentication_error",
        (Dialect::Anthropic, 403) => "permission_error",
        (Dialect::Anthropic, 404) => "not_found_error",
        (Dialect::Anthropic, 413) => "request_too_large",
        (Dialect::Anthropic, 429) => "rate_limit_error",
        (Dialect::Anthropic, 529) => "overloaded_error",
        (Dialect::Anthropic, s) if s >= 500 => "api_error",
        (Dialect::Anthropic, _) => "invalid_request_error",
    }
}

fn error_response(
    dialect: Dialect,
    status: u16,
    message: &str,
    retry_after: Option<&str>,
) -> Response {
    let kind = status_error_type(dialect, status);
    let body = match dialect {
        Dialect::OpenAi => {
            let code = match status {
                401 => json!("invalid_api_key"),
                429 => json!("rate_limit_exceeded"),
                _ => Value::Null,
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
        Dialect::Anthropic => json!({
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": "req_fixture",
        }),
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, axum::Json(body)).into_response();
    if let Some(v) = retry_after.and_then(|v| HeaderValue::from_str(v).ok()) {
        resp.headers_mut().insert("retry-after", v);
    }
    resp
}

async fn not_found(uri: Uri) -> Response {
    error_response(
        Dialect::OpenAi,
        404,
        &format!("fixture LLM: no route for {}", uri.path()),
        None,
    )
}

async fn add_extra_headers(
    State(shared): State<Arc<Shared>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut resp = next.run(req).await;
    let extra = lock(&shared.extra_headers).clone();
    for (k, v) in extra {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(&v),
        ) {
            resp.headers_mut().insert(name, value);
        }
    }
    resp
}

/// Keeps a request for the test to inspect (path, headers, JSON body).
fn record(shared: &Shared, uri: &Uri, headers: &HeaderMap, body: Value) {
    lock(&shared.requests).push(RecordedRequest {
        path: uri.path().to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    });
}

/// The models list; recorded, and behind the required key like the model routes (the
/// dialect read from the headers: `x-api-key` or `anthropic-version` mean Anthropic).
async fn models_route(State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    record(&shared, &uri, &headers, Value::Null);
    let dialect = if headers.contains_key("x-api-key") || headers.contains_key("anthropic-version")
    {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    };
    let required = lock(&shared.required_key).clone();
    if let Some(required) = required {
        if presented_key(dialect, &headers).as_deref() != Some(required.as_str()) {
            let msg = match dialect {
                Dialect::OpenAi => "Incorrect API key provided.",
                Dialect::Anthropic => "invalid x-api-key",
            };
            return error_response(dialect, 401, msg, None);
        }
    }
    axum::Json(json!({
        "object": "list",
        "data": [{"id": "fixture-model", "object": "model", "created": 0, "owned_by": "vis-tests"}],
    }))
    .into_response()
}

async fn openai_route(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(Dialect::OpenAi, shared, uri, headers, body).await
}

async fn anthropic_route(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(Dialect::Anthropic, shared, uri, headers, body).await
}

fn presented_key(dialect: Dialect, headers: &HeaderMap) -> Option<String> {
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    match dialect {
        Dialect::OpenAi => h("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string),
        Dialect::Anthropic => h("x-api-key").map(str::to_string).or_else(|| {
            h("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_string)
        }),
    }
}

/// Mirrors the real servers' most common 400s, so a broken client notices here.
fn validate(dialect: Dialect, body: &Value) -> Result<(), String> {
    if !body.is_object() {
        return Err("request body must be a JSON object".into());
    }
    if body
        .get("model")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err("model: Field required".into());
    }
    if !body.get("messages").is_some_and(Value::is_array) {
        return Err("messages: Field required".into());
    }
    if dialect == Dialect::Anthropic && !body.get("max_tokens").is_some_and(Value::is_u64) {
        return Err("max_tokens: Field required".into());
    }
    Ok(())
}

/// The prompt's tokens at four characters a token (messages, system prompt, tools).
fn prompt_tokens(body: &Value) -> u64 {
    tokens(
        body.get("messages").map_or(0, |m| m.to_string().len())
            + body.get("system").map_or(0, |s| s.to_string().len())
            + body.get("tools").map_or(0, |t| t.to_string().len()),
    )
}

/// Refuses the malformed tool sequences the real APIs refuse: a call without its result
/// right after it, a result without its call, and (Anthropic) a first message that is not
/// the user's or an empty message.
fn validate_sequence(dialect: Dialect, body: &Value) -> Result<(), String> {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    match dialect {
        Dialect::OpenAi => {
            let mut open: Vec<String> = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                let role = m["role"].as_str().unwrap_or("");
                if role == "tool" {
                    let id = m["tool_call_id"].as_str().unwrap_or("");
                    let Some(at) = open.iter().position(|o| o == id) else {
                        return Err(format!("Invalid parameter: messages[{i}]: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (tool_call_id {id:?})."));
                    };
                    open.remove(at);
                    continue;
                }
                if !open.is_empty() {
                    return Err(format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", open.join(", ")));
                }
                if role == "assistant" {
                    if let Some(calls) = m["tool_calls"].as_array() {
                        open = calls
                            .iter()
                            .filter_map(|c| c["id"].as_str().map(str::to_string))
                            .collect();
                    }
                }
            }
            if !open.is_empty() {
                return Err(format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", open.join(", ")));
            }
        }
        Dialect::Anthropic => {
            if msgs.first().and_then(|m| m["role"].as_str()) != Some("user") {
                return Err("messages: the first message must use the \"user\" role".into());
            }
            let blocks = |m: &Value| -> Vec<Value> {
                match &m["content"] {
                    Value::Array(a) => a.clone(),
                    Value::String(s) => vec![json!({"type": "text", "text": s})],
                    _ => vec![],
                }
            };
            let mut pending: Vec<String> = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                let content = blocks(m);
                let last = i + 1 == msgs.len();
                if content.is_empty() && !(last && m["role"] == "assistant") {
                    return Err(format!("messages.{i}: all messages must have non-empty content except for the optional final assistant message"));
                }
                for b in &content {
                    if b["type"] == "text" && b["text"].as_str().is_some_and(str::is_empty) {
                        return Err(format!(
                            "messages.{i}: text content blocks must be non-empty"
                        ));
                    }
                }
                let results: Vec<String> = content
                    .iter()
                    .filter(|b| b["type"] == "tool_result")
                    .filter_map(|b| b["tool_use_id"].as_str().map(str::to_string))
                    .collect();
                if !pending.is_empty() {
                    let missing: Vec<&String> =
                        pending.iter().filter(|p| !results.contains(p)).collect();
                    if m["role"] != "user" || !missing.is_empty() {
                        return Err(format!("messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i - 1, missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")));
                    }
                }
                if let Some(stray) = results.iter().find(|r| !pending.contains(r)) {
                    return Err(format!("messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {stray}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."));
                }
                pending = if m["role"] == "assistant" {
                    content
                        .iter()
                        .filter(|b| b["type"] == "tool_use")
                        .filter_map(|b| b["id"].as_str().map(str::to_string))
                        .collect()
                } else {
                    Vec::new()
                };
            }
            if !pending.is_empty() {
                return Err(format!("messages: `tool_use` ids were found without `tool_result` blocks immediately after: {}", pending.join(", ")));
            }
        }
    }
    Ok(())
}

async fn handle(
    dialect: Dialect,
    shared: Arc<Shared>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json_body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&shared, &uri, &headers, json_body.clone());
    let required = lock(&shared.required_key).clone();
    if let Some(required) = required {
        if presented_key(dialect, &headers).as_deref() != Some(required.as_str()) {
            let msg = match dialect {
                Dialect::OpenAi => "Incorrect API key provided.",
                Dialect::Anthropic => "invalid x-api-key",
            };
            return error_response(dialect, 401, msg, None);
        }
    }
    if let Err(msg) = validate(dialect, &json_body) {
        return error_response(dialect, 400, &msg, None);
    }
    if let Err(msg) = validate_sequence(dialect, &json_body) {
        return error_response(dialect, 400, &msg, None);
    }
    let window = *lock(&shared.context_window);
    if let Some(window) = window {
        let prompt = prompt_tokens(&json_body);
        let answer = json_body
            .get("max_tokens")
            .or_else(|| json_body.get("max_completion_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if prompt + answer > window {
            let msg = match dialect {
                Dialect::OpenAi => format!(
                    "This model's maximum context length is {window} tokens. However, you requested {} tokens ({prompt} in the messages, {answer} in the completion). Please reduce the length of the messages or completion.",
                    prompt + answer
                ),
                Dialect::Anthropic => format!(
                    "prompt is too long: {} tokens > {window} maximum",
                    prompt + answer
                ),
            };
            return error_response(dialect, 400, &msg, None);
        }
    }
    let summary = lock(&shared.summary_reply).clone();
    let mut script = match summary {
        Some(reply) if is_summary_request(&json_body) => Some(Script::Text(vec![reply])),
        _ => lock(&shared.scripts).pop_front(),
    };
    let mut force_whole = false;
    let mut rechunk = None;
    loop {
        match script {
            Some(Script::NoStream(inner)) => {
                force_whole = true;
                script = Some(*inner);
            }
            Some(Script::Chunked {
                script: inner,
                bytes_per_write,
            }) => {
                rechunk = Some(bytes_per_write.max(1));
                script = Some(*inner);
            }
            _ => break,
        }
    }
    let plan = match script {
        Some(Script::NoStream(_) | Script::Chunked { .. }) => unreachable!("unwrapped above"),
        None => Plan::new(vec![Part::Text(word_chunks(&format!(
            "You said: {}",
            last_user_text(dialect, &json_body)
        )))]),
        Some(Script::Text(chunks)) => Plan::new(vec![Part::Text(chunks)]),
        Some(Script::Reasoning { reasoning, text }) => {
            Plan::new(vec![Part::Reasoning(reasoning), Part::Text(text)])
        }
        Some(Script::ToolCall {
            name,
            arguments,
            text_before,
        }) => {
            let mut parts = Vec::new();
            if let Some(t) = text_before {
                parts.push(Part::Text(vec![t]));
            }
            parts.push(Part::Tool {
                name,
                pieces: split_arguments(&arguments),
            });
            Plan::new(parts)
        }
        Some(Script::ToolCalls(calls)) => Plan::new(
            calls
                .into_iter()
                .map(|(name, args)| Part::Tool {
                    name,
                    pieces: split_arguments(&args),
                })
                .collect(),
        ),
        Some(Script::Error { status, message }) => {
            return error_response(dialect, status, &message, None)
        }
        Some(Script::ErrorWithRetryAfter {
            status,
            message,
            retry_after,
        }) => return error_response(dialect, status, &message, Some(&retry_after)),
        Some(Script::Stall { chunks }) => Plan {
            stall: true,
            ..Plan::new(vec![Part::Text(chunks)])
        },
        Some(Script::Slow { chunks, delay_ms }) => Plan {
            delay: Duration::from_millis(delay_ms),
            ..Plan::new(vec![Part::Text(chunks)])
        },
        Some(Script::MaxTokens(chunks)) => Plan {
            max_tokens: true,
            ..Plan::new(vec![Part::Text(chunks)])
        },
        Some(Script::Raw {
            status,
            content_type,
            body,
        }) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            let mut resp = (status, body).into_response();
            if let Ok(v) = HeaderValue::from_str(&content_type) {
                resp.headers_mut().insert("content-type", v);
            }
            return resp;
        }
    };
    let n = shared.counter.fetch_add(1, Ordering::Relaxed) + 1;
    let input_tokens = prompt_tokens(&json_body);
    let model = json_body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fixture-model")
        .to_string();
    let streaming = json_body.get("stream").and_then(Value::as_bool) == Some(true);
    let ctx = Ctx {
        n,
        model,
        input_tokens,
        include_usage: json_body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            == Some(true),
    };
    if !streaming || force_whole {
        let body = match dialect {
            Dialect::OpenAi => openai_whole(&plan, &ctx),
            Dialect::Anthropic => anthropic_whole(&plan, &ctx),
        };
        return axum::Json(body).into_response();
    }
    let frames = match dialect {
        Dialect::OpenAi => openai_frames(&plan, &ctx),
        Dialect::Anthropic => anthropic_frames(&plan, &ctx),
    };
    let writes: Vec<Bytes> = match rechunk {
        None => frames.into_iter().map(Bytes::from).collect(),
        Some(n) => {
            let all = frames.concat().into_bytes();
            all.chunks(n).map(Bytes::copy_from_slice).collect()
        }
    };
    let delay = match rechunk {
        Some(_) if plan.delay.is_zero() => Duration::from_millis(1),
        _ => plan.delay,
    };
    stream_response(dialect, writes, delay, plan.stall)
}

struct Ctx {
    n: u64,
    model: String,
    input_tokens: u64,
    include_usage: bool,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn stream_response(dialect: Dialect, frames: Vec<Bytes>, delay: Duration, stall: bool) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        for (i, frame) in frames.into_iter().enumerate() {
            if i > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if tx.send(frame).await.is_err() {
                return; // client went away
            }
        }
        if stall {
            tx.closed().await;
        }
    });
    let body =
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>));
    let content_type = match dialect {
        Dialect::OpenAi => "text/event-stream; charset=utf-8",
        Dialect::Anthropic => "text/event-stream",
    };
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", content_type)
        .header("cache-control", "no-cache")
        .header("x-fixture-llm", "1")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

// ---------------------------------------------------------------- OpenAI

fn openai_frames(plan: &Plan, ctx: &Ctx) -> Vec<String> {
    let id = format!("chatcmpl-fixture{}", ctx.n);
    let created = now_secs();
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": ctx.model,
            "system_fingerprint": "fp_fixture",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if ctx.include_usage {
            c["usage"] = Value::Null;
        }
        format!("data: {c}\n\n")
    };
    let mut frames = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        Value::Null,
    )];
    let mut tool_index = 0usize;
    for part in &plan.parts {
        match part {
            Part::Reasoning(r) => {
                for piece in r {
                    frames.push(chunk(json!({"reasoning_content": piece}), Value::Null));
                }
            }
            Part::Text(t) => {
                for piece in t {
                    frames.push(chunk(json!({"content": piece}), Value::Null));
                }
            }
            Part::Tool { name, pieces } => {
                frames.push(chunk(
                    json!({"tool_calls": [{
                        "index": tool_index,
                        "id": format!("call_fixture{}_{}", ctx.n, tool_index),
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }]}),
                    Value::Null,
                ));
                for piece in pieces {
                    frames.push(chunk(
                        json!({"tool_calls": [{"index": tool_index, "function": {"arguments": piece}}]}),
                        Value::Null,
                    ));
                }
                tool_index += 1;
            }
        }
    }
    if plan.stall {
        return frames;
    }
    frames.push(chunk(json!({}), json!(openai_finish(plan))));
    if ctx.include_usage {
        let usage = openai_usage(plan, ctx);
        let c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": ctx.model,
            "system_fingerprint": "fp_fixture",
            "choices": [],
            "usage": usage,
        });
        frames.push(format!("data: {c}\n\n"));
    }
    frames.push("data: [DONE]\n\n".to_string());
    frames
}

fn openai_finish(plan: &Plan) -> &'static str {
    if plan.max_tokens {
        "length"
    } else if plan.has_tools() {
        "tool_calls"
    } else {
        "stop"
    }
}

fn openai_usage(plan: &Plan, ctx: &Ctx) -> Value {
    let out = tokens(plan.output_chars(false));
    let reasoning = if plan.output_chars(true) > 0 {
        tokens(plan.output_chars(true))
    } else {
        0
    };
    json!({
        "prompt_tokens": ctx.input_tokens,
        "completion_tokens": out,
        "total_tokens": ctx.input_tokens + out,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    })
}

fn openai_whole(plan: &Plan, ctx: &Ctx) -> Value {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for part in &plan.parts {
        match part {
            Part::Reasoning(r) => reasoning.extend(r.iter().map(String::as_str)),
            Part::Text(t) => text.extend(t.iter().map(String::as_str)),
            Part::Tool { name, pieces } => calls.push(json!({
                "id": format!("call_fixture{}_{}", ctx.n, calls.len()),
                "type": "function",
                "function": {"name": name, "arguments": pieces.concat()},
            })),
        }
    }
    let mut message = json!({"role": "assistant", "content": text, "refusal": null});
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": format!("chatcmpl-fixture{}", ctx.n),
        "object": "chat.completion",
        "created": now_secs(),
        "model": ctx.model,
        "system_fingerprint": "fp_fixture",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": openai_finish(plan)}],
        "usage": openai_usage(plan, ctx),
    })
}

// ---------------------------------------------------------------- Anthropic

fn anthropic_stop(plan: &Plan) -> &'static str {
    if plan.max_tokens {
        "max_tokens"
    } else if plan.has_tools() {
        "tool_use"
    } else {
        "end_turn"
    }
}

fn anthropic_frames(plan: &Plan, ctx: &Ctx) -> Vec<String> {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut frames = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": format!("msg_fixture{}", ctx.n),
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": ctx.model,
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {
                    "input_tokens": ctx.input_tokens,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 1,
                },
            }}),
        ),
        ev("ping", json!({"type": "ping"})),
    ];
    let mut tool_index = 0usize;
    for (index, part) in plan.parts.iter().enumerate() {
        let last = index + 1 == plan.parts.len();
        match part {
            Part::Reasoning(r) => {
                frames.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}}),
                ));
                for piece in r {
                    frames.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": piece}}),
                    ));
                }
                frames.push(ev(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": "Zml4dHVyZS1zaWduYXR1cmU="}}),
                ));
            }
            Part::Text(t) => {
                frames.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
                ));
                for piece in t {
                    frames.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
                    ));
                }
            }
            Part::Tool { name, pieces } => {
                frames.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": {
                        "type": "tool_use",
                        "id": format!("toolu_fixture{}_{}", ctx.n, tool_index),
                        "name": name,
                        "input": {},
                    }}),
                ));
                frames.push(ev(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": ""}}),
                ));
                for piece in pieces {
                    frames.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                    ));
                }
                tool_index += 1;
            }
        }
        if plan.stall && last {
            return frames; // hold the block open
        }
        frames.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    if plan.stall {
        return frames;
    }
    frames.push(ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": anthropic_stop(plan), "stop_sequence": null},
               "usage": {"output_tokens": tokens(plan.output_chars(false))}}),
    ));
    frames.push(ev("message_stop", json!({"type": "message_stop"})));
    frames
}

fn anthropic_whole(plan: &Plan, ctx: &Ctx) -> Value {
    let mut content = Vec::new();
    let mut tool_index = 0usize;
    for part in &plan.parts {
        match part {
            Part::Reasoning(r) => content.push(json!({
                "type": "thinking", "thinking": r.concat(), "signature": "Zml4dHVyZS1zaWduYXR1cmU=",
            })),
            Part::Text(t) => content.push(json!({"type": "text", "text": t.concat()})),
            Part::Tool { name, pieces } => {
                let input: Value = serde_json::from_str(&pieces.concat()).unwrap_or(json!({}));
                content.push(json!({
                    "type": "tool_use",
                    "id": format!("toolu_fixture{}_{}", ctx.n, tool_index),
                    "name": name,
                    "input": input,
                }));
                tool_index += 1;
            }
        }
    }
    json!({
        "id": format!("msg_fixture{}", ctx.n),
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": ctx.model,
        "stop_reason": anthropic_stop(plan),
        "stop_sequence": null,
        "usage": {
            "input_tokens": ctx.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": tokens(plan.output_chars(false)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_arguments_are_split_into_at_least_two_pieces_that_rejoin() {
        for args in [
            json!({}),
            json!({"path": "a/ü/b", "n": 3}),
            json!({"x": [1, 2, 3]}),
        ] {
            let pieces = split_arguments(&args);
            assert!(pieces.len() >= 2, "{pieces:?}");
            let back: Value = serde_json::from_str(&pieces.concat()).unwrap();
            assert_eq!(back, args);
        }
    }

    #[test]
    fn the_echo_finds_the_last_user_text_behind_anthropic_tool_results() {
        let body = json!({"messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
        ]});
        assert_eq!(last_user_text(Dialect::Anthropic, &body), "first");
        let body = json!({"messages": [
            {"role": "user", "content": "hi there"},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "tool", "tool_call_id": "c", "content": "r"},
        ]});
        assert_eq!(last_user_text(Dialect::OpenAi, &body), "hi there");
    }

    #[test]
    fn openai_frames_end_with_finish_usage_and_done() {
        let plan = Plan::new(vec![Part::Text(vec!["a".into(), "b".into()])]);
        let ctx = Ctx {
            n: 1,
            model: "m".into(),
            input_tokens: 3,
            include_usage: true,
        };
        let frames = openai_frames(&plan, &ctx);
        assert_eq!(frames.last().map(String::as_str), Some("data: [DONE]\n\n"));
        assert!(frames[frames.len() - 2].contains("\"prompt_tokens\":3"));
        assert!(frames[frames.len() - 3].contains("\"finish_reason\":\"stop\""));
        assert!(frames
            .iter()
            .all(|f| f.starts_with("data: ") && f.ends_with("\n\n")));
    }

    #[test]
    fn anthropic_frames_follow_the_message_event_order() {
        let plan = Plan::new(vec![
            Part::Text(vec!["a".into()]),
            Part::Tool {
                name: "f".into(),
                pieces: vec!["{".into(), "}".into()],
            },
        ]);
        let ctx = Ctx {
            n: 1,
            model: "m".into(),
            input_tokens: 3,
            include_usage: false,
        };
        let names: Vec<String> = anthropic_frames(&plan, &ctx)
            .iter()
            .map(|f| {
                f.lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("event: ")
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
    }
}
