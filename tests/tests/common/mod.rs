//! Black-box harness: starts the real `vis-gateway` binary on a fresh home and project, and
//! drives it with a real HTTP client and an SSE frame reader.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::{json, Value};
use tempfile::TempDir;

#[allow(unused_imports)]
pub use vis_tests::{FixtureLlm, Script};

/// The bounded wait used for events and readiness.
pub const WAIT: Duration = Duration::from_secs(10);

/// The gateway binary: `$VIS_GATEWAY_BIN`, else `<target>/debug/vis-gateway`.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("VIS_GATEWAY_BIN") {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "VIS_GATEWAY_BIN={} does not exist; build it first: cargo build -p vis-gateway",
            p.display()
        );
        return p;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| {
            if t.is_absolute() {
                t
            } else {
                workspace.join(t)
            }
        })
        .unwrap_or_else(|| workspace.join("target"));
    let p = target.join("debug").join("vis-gateway");
    assert!(
        p.exists(),
        "{} is missing; build it first: cargo build -p vis-gateway",
        p.display()
    );
    p
}

/// Which LLM provider the gateway sees.
#[derive(Clone, Debug, Default)]
pub enum Provider {
    /// No provider at all.
    #[default]
    None,
    /// `OPENAI_API_KEY=test`, `OPENAI_BASE_URL=<url>`.
    OpenAi(String),
    /// `<root>/vis.yml` with an Anthropic-style provider at this base URL.
    Anthropic(String),
}

#[derive(Clone, Debug, Default)]
pub struct Opts {
    pub host: Option<String>,
    pub require_token: bool,
    pub provider: Provider,
    pub env: Vec<(String, String)>,
    pub extra_args: Vec<String>,
}

impl Opts {
    pub fn openai(fixture: &FixtureLlm) -> Opts {
        Opts {
            provider: Provider::OpenAi(fixture.openai_base_url()),
            ..Default::default()
        }
    }
    pub fn env(mut self, k: &str, v: &str) -> Opts {
        self.env.push((k.to_string(), v.to_string()));
        self
    }
    pub fn host(mut self, h: &str) -> Opts {
        self.host = Some(h.to_string());
        self
    }
    pub fn require_token(mut self) -> Opts {
        self.require_token = true;
        self
    }
}

/// The temp directories of one gateway "installation" (kept across restarts).
pub struct Dirs {
    pub base: TempDir,
}

impl Dirs {
    pub fn new() -> Arc<Dirs> {
        let base = tempfile::Builder::new()
            .prefix("vis-gw-test-")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir_all(base.path().join("home")).unwrap();
        std::fs::create_dir_all(base.path().join("root")).unwrap();
        Arc::new(Dirs { base })
    }
    pub fn home(&self) -> PathBuf {
        self.base.path().join("home")
    }
    pub fn root(&self) -> PathBuf {
        self.base.path().join("root")
    }
    pub fn registry(&self) -> PathBuf {
        self.home().join("gateway.json")
    }
}

/// A command line for the gateway binary with the test environment (no inherited provider
/// keys, no inherited `VIS_HOME`).
pub fn command(dirs: &Dirs, opts: &Opts) -> Command {
    let mut cmd = Command::new(binary());
    cmd.arg("--home").arg(dirs.home());
    for k in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "VIS_HOME",
        "VIS_GATEWAY_URL",
        "VIS_GATEWAY_TOKEN",
        "VIS_GATEWAY_EVENT_RING_MAX",
        "VIS_GATEWAY_MAX_BODY_BYTES",
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("VIS_LOG", "info");
    match &opts.provider {
        Provider::None => {}
        Provider::OpenAi(url) => {
            cmd.env("OPENAI_API_KEY", "test")
                .env("OPENAI_BASE_URL", url);
        }
        Provider::Anthropic(url) => {
            let yml = format!(
                "providers:\n  claude:\n    api_style: anthropic\n    base_url: {url}\n    api_key: k\n    model: m\n"
            );
            std::fs::write(dirs.root().join("vis.yml"), yml).unwrap();
        }
    }
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    cmd
}

pub struct Gateway {
    pub dirs: Arc<Dirs>,
    pub opts: Opts,
    pub child: Option<Child>,
    pub url: String,
    pub port: u16,
    pub token: String,
    pub registry: Value,
    pub http: reqwest::Client,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
}

pub fn client() -> reqwest::Client {
    vis_tests::init_crypto();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("reqwest client")
}

/// A client without a total timeout (for SSE streams).
pub fn stream_client() -> reqwest::Client {
    vis_tests::init_crypto();
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .expect("reqwest client")
}

impl Gateway {
    pub async fn start(opts: Opts) -> Gateway {
        Self::start_in(Dirs::new(), opts).await
    }

    /// Starts a gateway on an existing home (for restarts).
    pub async fn start_in(dirs: Arc<Dirs>, opts: Opts) -> Gateway {
        let n = std::fs::read_dir(dirs.base.path())
            .map(|d| d.count())
            .unwrap_or(0);
        let stdout_path = dirs.base.path().join(format!("stdout-{n}.log"));
        let stderr_path = dirs.base.path().join(format!("stderr-{n}.log"));
        let mut cmd = command(&dirs, &opts);
        cmd.arg("start").arg("--port").arg("0");
        cmd.arg("--root").arg(dirs.root());
        if let Some(h) = &opts.host {
            cmd.arg("--host").arg(h);
        }
        if opts.require_token {
            cmd.arg("--require-token");
        }
        cmd.args(&opts.extra_args);
        cmd.stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).unwrap())
            .stderr(std::fs::File::create(&stderr_path).unwrap());
        let mut child = cmd.spawn().expect("spawn vis-gateway");
        let pid = child.id();
        let http = client();
        let deadline = Instant::now() + Duration::from_secs(20);
        let registry = loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "vis-gateway exited early with {status}: {}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
            if let Some(r) = std::fs::read_to_string(dirs.registry())
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .filter(|r| r["pid"].as_u64() == Some(pid as u64))
            {
                break r;
            }
            assert!(
                Instant::now() < deadline,
                "vis-gateway did not write its registry: {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let port = registry["port"].as_u64().expect("port") as u16;
        // The registry's local URL (127.0.0.1 for wildcard binds, `[::1]` for an IPv6 one).
        let url = registry["url"]
            .as_str()
            .map(|u| u.trim_end_matches('/').to_string())
            .unwrap_or_else(|| format!("http://127.0.0.1:{port}"));
        let token = registry["token"].as_str().unwrap_or_default().to_string();
        loop {
            if let Ok(r) = http.get(format!("{url}/healthz")).send().await {
                if r.status() == StatusCode::OK {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "/healthz never answered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Gateway {
            dirs,
            opts,
            child: Some(child),
            url,
            port,
            token,
            registry,
            http,
            stdout_path,
            stderr_path,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait (bounded) for a clean exit; returns the exit status.
    pub async fn stop(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("gateway already stopped");
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("gateway did not stop within 15 s after SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills this process (SIGKILL) and starts a new one on the same home.
    pub async fn restart_after_kill(mut self) -> Gateway {
        self.kill9();
        let (dirs, opts) = (self.dirs.clone(), self.opts.clone());
        drop(self);
        Gateway::start_in(dirs, opts).await
    }

    pub fn u(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    /// A request with the Companion's protocol headers (and the token when auth is on).
    pub fn req(&self, method: Method, path: &str) -> RequestBuilder {
        let mut b = self
            .http
            .request(method, self.u(path))
            .header("X-Vis-Protocol", "2")
            .header("X-Vis-Min-Gateway-Protocol", "2")
            .header("X-Vis-Client", "vis-companion")
            .header("X-Vis-Client-Version", "test");
        if self.registry["require_token"].as_bool() == Some(true) {
            b = b.bearer_auth(&self.token);
        }
        b
    }

    /// A request with nothing added.
    pub fn raw(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, self.u(path))
    }

    pub async fn get(&self, path: impl AsRef<str>) -> (StatusCode, Value) {
        into_json(
            self.req(Method::GET, path.as_ref())
                .send()
                .await
                .expect("GET"),
        )
        .await
    }
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        into_json(
            self.req(Method::POST, path)
                .json(&body)
                .send()
                .await
                .expect("POST"),
        )
        .await
    }
    pub async fn post_empty(&self, path: &str) -> (StatusCode, Value) {
        into_json(self.req(Method::POST, path).send().await.expect("POST")).await
    }
    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        into_json(
            self.req(Method::PATCH, path)
                .json(&body)
                .send()
                .await
                .expect("PATCH"),
        )
        .await
    }
    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        into_json(self.req(Method::DELETE, path).send().await.expect("DELETE")).await
    }

    /// `POST /v1/sessions {"channel":"web"}` → the new sid.
    pub async fn create_session(&self) -> String {
        let (s, v) = self.post("/v1/sessions", json!({"channel": "web"})).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v["id"].as_str().expect("id").to_string()
    }

    /// `POST …/turns {request, idempotency_key}` → (status, TurnRecord).
    pub async fn submit(&self, sid: &str, request: &str) -> (StatusCode, Value) {
        self.post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": request, "idempotency_key": format!("companion:{}", uuid::Uuid::new_v4())}),
        )
        .await
    }

    pub async fn submit_keyed(&self, sid: &str, request: &str, key: &str) -> (StatusCode, Value) {
        self.post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": request, "idempotency_key": key}),
        )
        .await
    }

    /// Opens `GET /v1/sessions/:sid/events` with `?cursor=`.
    pub async fn events(&self, sid: &str, cursor: i64) -> Sse {
        self.sse(&format!("/v1/sessions/{sid}/events?cursor={cursor}"), &[])
            .await
    }

    /// Opens `GET /v1/events?sids=…`.
    pub async fn events_multi(&self, sids: &str) -> Sse {
        self.sse(&format!("/v1/events?sids={sids}"), &[]).await
    }

    /// Opens an SSE stream; panics unless 200.
    pub async fn sse(&self, path: &str, headers: &[(&str, &str)]) -> Sse {
        let resp = self.sse_response(path, headers).await;
        assert_eq!(resp.status(), StatusCode::OK, "SSE {path}");
        Sse::new(resp)
    }

    pub async fn sse_response(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        let sc = stream_client();
        let mut b = sc
            .get(self.u(path))
            .header("Accept", "text/event-stream")
            .header("X-Vis-Protocol", "2")
            .header("X-Vis-Min-Gateway-Protocol", "2")
            .header("X-Vis-Client", "vis-companion");
        if self.registry["require_token"].as_bool() == Some(true) {
            b = b.bearer_auth(&self.token);
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        tokio::time::timeout(WAIT, b.send())
            .await
            .expect("SSE connect timed out")
            .expect("SSE connect")
    }

    /// `GET …/events-since?cursor=` → the events.
    pub async fn events_since(&self, sid: &str, cursor: i64) -> Vec<Value> {
        let (s, v) = self
            .get(&format!("/v1/sessions/{sid}/events-since?cursor={cursor}"))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["events"].as_array().cloned().unwrap_or_default()
    }

    /// Polls `events-since` until an event of `kind` exists (bounded); returns all events.
    pub async fn wait_stored(&self, sid: &str, kind: &str) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let evs = self.events_since(sid, 0).await;
            if evs.iter().any(|e| e["type"] == kind) {
                return evs;
            }
            assert!(
                Instant::now() < deadline,
                "no stored {kind} within {WAIT:?}: {}",
                types(&evs).join(", ")
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits until the session has no running turn (bounded).
    pub async fn wait_idle(&self, sid: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let (_, v) = self.get(&format!("/v1/sessions/{sid}")).await;
            if v["live"] == json!(false) && v["current_turn_id"].is_null() {
                return;
            }
            assert!(Instant::now() < deadline, "session never went idle: {v}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub async fn into_json(r: Response) -> (StatusCode, Value) {
    let s = r.status();
    let text = r.text().await.unwrap_or_default();
    let v = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (s, v)
}

/// Asserts the uniform error body `{"error":{"type","message"}}` and returns `type`.
pub fn error_type(body: &Value) -> String {
    let e = &body["error"];
    assert!(e.is_object(), "not an error body: {body}");
    assert!(e["message"].is_string(), "error without message: {body}");
    e["type"].as_str().expect("error.type").to_string()
}

pub fn types(evs: &[Value]) -> Vec<String> {
    evs.iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// One parsed SSE frame.
#[derive(Debug, Clone)]
pub struct Event {
    /// The `id:` line value (`Some("")` for an empty id line, `None` if absent).
    pub id: Option<String>,
    pub event: String,
    pub data: Value,
}

impl Event {
    pub fn seq(&self) -> Option<i64> {
        self.id.as_deref().and_then(|s| s.parse().ok())
    }
    pub fn ty(&self) -> &str {
        &self.event
    }
}

/// An SSE reader over a streaming response.
pub struct Sse {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
    /// Comment lines seen (without the leading ':').
    pub comments: Vec<String>,
    /// Raw bytes seen so far (first 64 KiB).
    pub raw_head: Vec<u8>,
    pub ended: bool,
}

impl Sse {
    pub fn new(resp: Response) -> Sse {
        Sse {
            status: resp.status(),
            headers: resp.headers().clone(),
            stream: resp.bytes_stream().boxed(),
            buf: Vec::new(),
            comments: Vec::new(),
            raw_head: Vec::new(),
            ended: false,
        }
    }

    fn take_frame(&mut self) -> Option<Option<Event>> {
        let pos = self.buf.windows(2).position(|w| w == b"\n\n")?;
        let frame: Vec<u8> = self.buf.drain(..pos + 2).collect();
        let text = String::from_utf8_lossy(&frame[..pos]).to_string();
        let (mut id, mut event, mut data) = (None, String::new(), String::new());
        let mut any = false;
        for line in text.split('\n') {
            if let Some(c) = line.strip_prefix(':') {
                self.comments.push(c.to_string());
            } else if let Some(v) = line.strip_prefix("id:") {
                id = Some(v.strip_prefix(' ').unwrap_or(v).to_string());
                any = true;
            } else if let Some(v) = line.strip_prefix("event:") {
                event = v.strip_prefix(' ').unwrap_or(v).to_string();
                any = true;
            } else if let Some(v) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
                any = true;
            }
        }
        if !any {
            return Some(None);
        }
        let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
        Some(Some(Event { id, event, data }))
    }

    /// The next frame, or `None` on timeout or end of stream.
    pub async fn next_event(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            while let Some(f) = self.take_frame() {
                if let Some(e) = f {
                    return Some(e);
                }
            }
            if self.ended {
                return None;
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Err(_) => return None,
                Ok(None) | Ok(Some(Err(_))) => {
                    self.ended = true;
                }
                Ok(Some(Ok(b))) => {
                    if self.raw_head.len() < 65536 {
                        self.raw_head.extend_from_slice(&b);
                    }
                    self.buf.extend_from_slice(&b);
                }
            }
        }
    }

    /// Frames up to and including the first of type `ty`; panics on timeout/end.
    pub async fn collect_until(&mut self, ty: &str, timeout: Duration) -> Vec<Event> {
        self.collect_until_any(&[ty], timeout).await
    }

    pub async fn collect_until_any(&mut self, tys: &[&str], timeout: Duration) -> Vec<Event> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_event(left).await {
                Some(e) => {
                    let hit = tys.contains(&e.event.as_str());
                    out.push(e);
                    if hit {
                        return out;
                    }
                }
                None => panic!(
                    "no {tys:?} within {timeout:?} (ended: {}); got: {:?}",
                    self.ended,
                    out.iter().map(|e| e.event.clone()).collect::<Vec<_>>()
                ),
            }
        }
    }

    /// Every frame that arrives within `d` (stops early at end of stream).
    pub async fn drain_for(&mut self, d: Duration) -> Vec<Event> {
        let deadline = Instant::now() + d;
        let mut out = Vec::new();
        while let Some(e) = self
            .next_event(deadline.saturating_duration_since(Instant::now()))
            .await
        {
            out.push(e);
        }
        out
    }
}

pub fn ev_types(evs: &[Event]) -> Vec<&str> {
    evs.iter().map(|e| e.event.as_str()).collect()
}

pub const TERMINALS: &[&str] = &["turn.completed", "turn.failed", "turn.cancelled"];

/// Runs `vis-gateway --home <home> <args>` to completion (bounded) and returns
/// (exit code, stdout, stderr).
pub async fn run_cli(dirs: &Dirs, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = command(dirs, &Opts::default());
    cmd.args(args);
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::from(cmd).output(),
    )
    .await
    .expect("CLI timed out")
    .expect("run CLI");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}
