//! Black-box harness: starts the real `vis-gateway` binary on a fresh home and project, and
//! drives it with a real HTTP client and an SSE frame reader.
#![allow(dead_code)]

pub mod routes;

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
    /// The product's default tool mode (`python_execution`). Without it the gateway runs
    /// with `VIS_MODEL_TOOLS=functions`, the mode the older tool-call tests speak.
    pub sandbox: bool,
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
    /// The default tool mode: one `python_execution` tool.
    pub fn sandbox(mut self) -> Opts {
        self.sandbox = true;
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
        "VIS_MODEL_TOOLS",
    ] {
        cmd.env_remove(k);
    }
    if !opts.sandbox {
        cmd.env("VIS_MODEL_TOOLS", "functions");
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
    /// The `/metrics` answer as text.
    pub async fn metrics_text(&self) -> String {
        self.req(Method::GET, "/metrics")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// One unlabelled series of `/metrics`, if present.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        self.metrics_text()
            .await
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

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

// ---------------------------------------------------------------------------------------------
// Egress proxy helpers (sandbox children, local origins, Python servers).
// ---------------------------------------------------------------------------------------------

/// What a finished child process printed.
#[derive(Debug, Clone)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Writes `<root>/vis.yml` with `jail.network` = `network`, then starts a gateway on it.
pub async fn start_with_network(network: Value, opts: Opts) -> Gateway {
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &network);
    Gateway::start_in(dirs, opts).await
}

/// `<root>/vis.yml` = `jail: {network: <json>}` (JSON is a YAML flow mapping).
pub fn write_network_policy(root: &Path, network: &Value) {
    std::fs::write(
        root.join("vis.yml"),
        format!("jail: {{network: {network}}}\n"),
    )
    .unwrap();
}

/// The usual local policy: only loopback names are allowed.
pub fn loopback_policy() -> Value {
    json!({"allowed_domains": ["127.0.0.1", "localhost"]})
}

impl Gateway {
    /// `POST /v1/sessions {root}` → the new sid.
    pub async fn create_session_at(&self, root: &Path) -> String {
        let (s, v) = self
            .post("/v1/sessions", json!({"channel": "web", "root": root}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v["id"].as_str().expect("id").to_string()
    }

    /// `POST /v1/sandbox/env {session_id}` → the JSON answer (`env`, `proxy_port`, `cwd`).
    pub async fn sandbox_env(&self, sid: &str) -> Value {
        let (s, v) = self
            .post("/v1/sandbox/env", json!({"session_id": sid}))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    }

    /// The egress proxy's port (from the sandbox env endpoint).
    pub async fn proxy_port(&self, sid: &str) -> u16 {
        self.sandbox_env(sid).await["proxy_port"]
            .as_u64()
            .expect("proxy_port") as u16
    }

    /// `vis-gateway exec --session SID -- argv…` (bounded, 20 s).
    ///
    /// Diagnostic: with `VIS_TEST_PROXY_USERINFO_WORKAROUND=1` the child's HTTP proxy URLs are
    /// rewritten from `http://<token>@…` to `http://<token>:@…` first (Python requests, pip and
    /// git send no proxy credentials for a userinfo without a `:`).
    pub async fn exec(&self, sid: &str, argv: &[&str]) -> Ran {
        let mut args = vec!["exec", "--session", sid, "--"];
        if std::env::var_os("VIS_TEST_PROXY_USERINFO_WORKAROUND").is_some() {
            args.extend_from_slice(&["sh", "-c", "for v in http_proxy https_proxy HTTP_PROXY HTTPS_PROXY; do eval \"export $v=\\$(printf %s \\\"\\$$v\\\" | sed s/@/:@/)\"; done; exec \"$@\"", "sh"]);
        }
        args.extend_from_slice(argv);
        self.run_exec(&args).await
    }

    /// `vis-gateway exec --root <root> -- argv…` (a new session per call).
    pub async fn exec_in_root(&self, argv: &[&str]) -> Ran {
        let root = self.dirs.root().to_string_lossy().to_string();
        let mut args = vec!["exec", "--root", root.as_str(), "--"];
        args.extend_from_slice(argv);
        self.run_exec(&args).await
    }

    async fn run_exec(&self, args: &[&str]) -> Ran {
        let mut cmd = tokio::process::Command::from(command(&self.dirs, &Opts::default()));
        cmd.args(args).stdin(Stdio::null()).kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(20), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("exec {args:?} did not finish within 20 s"))
            .expect("run vis-gateway exec");
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).to_string(),
        }
    }

    /// `GET /v1/sessions/:sid/egress` → the decisions (newest first).
    pub async fn egress(&self, sid: &str) -> Vec<Value> {
        let (s, v) = self.get(format!("/v1/sessions/{sid}/egress")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["decisions"].as_array().cloned().unwrap_or_default()
    }

    /// Polls `…/egress` until at least `n` decisions are stored (bounded).
    pub async fn wait_egress(&self, sid: &str, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let d = self.egress(sid).await;
            if d.len() >= n {
                return d;
            }
            assert!(
                Instant::now() < deadline,
                "fewer than {n} egress decisions within {WAIT:?}: {d:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Submits a turn and waits (SSE, bounded) for its terminal event.
    pub async fn run_turn(&self, sid: &str, request: &str) -> (Vec<Event>, Event) {
        let mut sse = self.events(sid, -1).await;
        let (s, v) = self.submit(sid, request).await;
        assert!(s.is_success(), "{s} {v}");
        let evs = sse
            .collect_until_any(TERMINALS, Duration::from_secs(15))
            .await;
        let last = evs.last().cloned().unwrap();
        (evs, last)
    }

    /// Pushes one `python_execution` block then a closing answer, runs the turn (it must
    /// complete), and returns its events and what the model was sent back for the block.
    pub async fn run_block(&self, llm: &FixtureLlm, sid: &str, code: &str) -> (Vec<Event>, String) {
        let before = llm.request_count();
        llm.push(Script::tool_call("python_execution", json!({"code": code})));
        llm.push(Script::text(&["done"]));
        let (evs, last) = self.run_turn(sid, "go").await;
        assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
        let reqs = llm.requests();
        (evs, tool_result(&reqs[before + 1].body))
    }
}

/// The tool result the model received, in either dialect.
pub fn tool_result(body: &Value) -> String {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    for m in msgs.iter().rev() {
        if m["role"] == "tool" {
            return m["content"].as_str().unwrap_or_default().to_string();
        }
        if let Some(parts) = m["content"].as_array() {
            for p in parts {
                if p["type"] == "tool_result" {
                    return match &p["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                }
            }
        }
    }
    panic!("no tool result in {body}")
}

/// One request as a local origin saw it.
#[derive(Debug, Clone)]
pub struct OriginRequest {
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    /// The request body as received (decoded from chunked framing).
    pub body: Vec<u8>,
}

impl OriginRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A plain-HTTP origin on 127.0.0.1 that answers every request with
/// `200 origin-ok <METHOD> <path>` and records what it received (body included).
pub struct Origin {
    pub port: u16,
    seen: Arc<std::sync::Mutex<Vec<OriginRequest>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Origin {
    pub async fn start() -> Origin {
        use axum::extract::{Request, State};
        type Seen = Arc<std::sync::Mutex<Vec<OriginRequest>>>;
        async fn any(State(seen): State<Seen>, req: Request) -> String {
            let path = req
                .uri()
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default();
            let method = req.method().to_string();
            let headers = req
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_string(),
                        v.to_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            let body = axum::body::to_bytes(req.into_body(), 64 << 20)
                .await
                .map(|b| b.to_vec())
                .unwrap_or_default();
            seen.lock().unwrap().push(OriginRequest {
                method: method.clone(),
                path: path.clone(),
                headers,
                body,
            });
            format!("origin-ok {method} {path}\n")
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Seen = Arc::default();
        let app = axum::Router::new().fallback(any).with_state(seen.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Origin { port, seen, task }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<OriginRequest> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The absolute path of the Python interpreter the tests run (resolved once).
pub fn python() -> String {
    static P: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 is required for the egress tests");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    })
    .clone()
}

/// A minimal pure-Python wheel, built with the standard library only.
pub const BUILD_WHEEL_PY: &str = r#"
import base64, hashlib, sys, zipfile
out = sys.argv[1]
name, ver = 'vis_egress_probe', '0.1'
files = {
    'vis_egress_probe/__init__.py': 'VALUE = "installed through the egress proxy"\n',
    f'{name}-{ver}.dist-info/METADATA': f'Metadata-Version: 2.1\nName: vis-egress-probe\nVersion: {ver}\n',
    f'{name}-{ver}.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
record = []
with zipfile.ZipFile(out, 'w') as z:
    for path, text in files.items():
        data = text.encode()
        z.writestr(path, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
        record.append(f'{path},sha256={digest},{len(data)}')
    record.append(f'{name}-{ver}.dist-info/RECORD,,')
    z.writestr(f'{name}-{ver}.dist-info/RECORD', '\n'.join(record) + '\n')
"#;

/// A tiny Python server: `static DIR` (files), `tls CERT KEY` (a fixed answer over TLS),
/// `git ROOT` (`git http-backend` as CGI). Prints its port on the first line.
pub const SERVE_PY: &str = r#"
import functools, http.server, os, socketserver, ssl, subprocess, sys

mode = sys.argv[1]

class Quiet:
    def log_message(self, *a):
        pass

class Static(Quiet, http.server.SimpleHTTPRequestHandler):
    pass

class Hello(Quiet, http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def answer(self):
        n = int(self.headers.get('Content-Length') or 0)
        if n:
            self.rfile.read(n)
        body = ('tls-origin-ok %s %s\n' % (self.command, self.path)).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = answer

class Git(Quiet, http.server.BaseHTTPRequestHandler):
    def cgi(self):
        path, _, query = self.path.partition('?')
        n = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(n) if n else b''
        env = dict(os.environ, GIT_PROJECT_ROOT=sys.argv[2], GIT_HTTP_EXPORT_ALL='1',
                   REQUEST_METHOD=self.command, PATH_INFO=path, QUERY_STRING=query,
                   CONTENT_TYPE=self.headers.get('Content-Type', ''),
                   CONTENT_LENGTH=str(len(body)), REMOTE_ADDR='127.0.0.1')
        if self.headers.get('Content-Encoding'):
            env['HTTP_CONTENT_ENCODING'] = self.headers['Content-Encoding']
        if self.headers.get('Git-Protocol'):
            env['GIT_PROTOCOL'] = self.headers['Git-Protocol']
        out = subprocess.run(['git', 'http-backend'], input=body, env=env,
                             capture_output=True).stdout
        sep = b'\r\n\r\n' if b'\r\n\r\n' in out else b'\n\n'
        head, _, rest = out.partition(sep)
        status, headers = 200, []
        for line in head.decode().splitlines():
            k, _, v = line.partition(':')
            if k.lower() == 'status':
                status = int(v.strip().split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)
    do_GET = do_POST = cgi

class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

if mode == 'static':
    handler = functools.partial(Static, directory=sys.argv[2])
elif mode == 'tls':
    handler = Hello
else:
    handler = Git
srv = Server(('127.0.0.1', 0), handler)
if mode == 'tls':
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

/// A running `SERVE_PY` server; killed on drop.
pub struct PyServer {
    pub port: u16,
    child: Child,
    _script: TempDir,
}

impl PyServer {
    pub fn start(args: &[&str]) -> PyServer {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("serve.py");
        std::fs::write(&script, SERVE_PY).unwrap();
        let mut child = Command::new(python())
            .arg(&script)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn python server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("python server {args:?} did not start"));
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("python server {args:?} printed {line:?}"));
        PyServer {
            port,
            child,
            _script: dir,
        }
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a command to completion and panics unless it succeeds.
pub fn run_ok(program: &str, args: &[&str], cwd: &Path) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A test CA and a leaf for `localhost` / `127.0.0.1` signed by it (openssl CLI).
/// Returns (ca.pem, leaf.pem, leaf.key).
pub fn test_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    test_pki_for(dir, "DNS:localhost,IP:127.0.0.1")
}

/// Like [`test_pki`], with the leaf's `subjectAltName` value given.
pub fn test_pki_for(dir: &Path, san: &str) -> (PathBuf, PathBuf, PathBuf) {
    let p = |n: &str| dir.join(n).to_string_lossy().to_string();
    run_ok(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &p("ca.key"),
            "-out",
            &p("ca.pem"),
            "-days",
            "2",
            "-subj",
            "/CN=vis egress test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        dir,
    );
    run_ok(
        "openssl",
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &p("leaf.key"),
            "-out",
            &p("leaf.csr"),
            "-subj",
            "/CN=localhost",
        ],
        dir,
    );
    std::fs::write(
        dir.join("leaf.ext"),
        format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName={san}\n"),
    )
    .unwrap();
    run_ok(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &p("leaf.csr"),
            "-CA",
            &p("ca.pem"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-out",
            &p("leaf.pem"),
            "-days",
            "2",
            "-extfile",
            &p("leaf.ext"),
        ],
        dir,
    );
    (
        dir.join("ca.pem"),
        dir.join("leaf.pem"),
        dir.join("leaf.key"),
    )
}

/// `base64(<token>:)` for `Proxy-Authorization: Basic …`.
pub fn basic_token(token: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let data = format!("{token}:").into_bytes();
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Sends raw bytes to the proxy on 127.0.0.1:`port` and returns the answer's head and its
/// `Content-Length` body (bounded: 10 s).
pub async fn raw_proxy(port: u16, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to the proxy");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    buf.truncate(end + 4 + len);
                    break;
                }
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        String::from_utf8_lossy(&buf).to_string()
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("the proxy did not answer within 10 s")
}

/// The proxy token of a session (the user part of its `HTTP_PROXY`).
pub async fn session_token(gw: &Gateway, sid: &str) -> String {
    let v = gw.sandbox_env(sid).await;
    let url = v["env"]["HTTP_PROXY"]
        .as_str()
        .expect("HTTP_PROXY")
        .to_string();
    url.strip_prefix("http://")
        .and_then(|r| r.split(['@', ':']).next())
        .expect("a token in HTTP_PROXY")
        .to_string()
}
