//! A release `vis-gateway` process for the benchmarks that drive one with the fixture LLM:
//! started on a free loopback port with the OpenAI provider pointed at the fixture, found
//! through its `gateway.json`, killed when dropped; and a work folder removed when dropped.

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vis_tests::FixtureLlm;

pub struct Work(pub PathBuf);
impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Gw {
    pub child: Child,
    pub url: String,
    pub token: String,
    pub http: reqwest::Client,
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gw {
    /// Makes a session from `body` (the create request) and answers its id.
    pub async fn create_session(&self, body: Value) -> Result<String> {
        let v: Value = self
            .req(reqwest::Method::POST, "/v1/sessions")
            .json(&body)
            .send()
            .await?
            .json()
            .await?;
        Ok(v["id"].as_str().context("a session id")?.to_string())
    }

    pub fn req(&self, m: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(m, format!("{}{path}", self.url))
            .header("X-Vis-Protocol", "2")
            .header("X-Vis-Min-Gateway-Protocol", "2")
            .bearer_auth(&self.token)
    }
}

/// Starts the gateway with `extra` arguments after `start` (say, `--database-url …`).
pub fn start(
    bin: &Path,
    home: &Path,
    root: &Path,
    llm: &FixtureLlm,
    extra: &[String],
) -> Result<Gw> {
    let child = Command::new(bin)
        .arg("--home")
        .arg(home)
        .args(["start", "--port", "0", "--root"])
        .arg(root)
        .args(extra)
        .env_remove("VIS_MODEL_TOOLS")
        .env_remove("ANTHROPIC_API_KEY")
        .env("OPENAI_API_KEY", "bench")
        .env("OPENAI_BASE_URL", llm.openai_base_url())
        .env("VIS_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("spawn vis-gateway")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let reg = loop {
        let r = std::fs::read_to_string(home.join("gateway.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .filter(|r| r["pid"].as_u64() == Some(child.id() as u64));
        if let Some(r) = r {
            break r;
        }
        if Instant::now() > deadline {
            bail!("the gateway did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Gw {
        child,
        url: format!("http://127.0.0.1:{}", reg["port"]),
        token: reg["token"].as_str().unwrap_or_default().to_string(),
        http: reqwest::Client::new(),
    })
}
