//! Real clients (curl, Python requests/httpx, git, pip) run as sandbox children through
//! `vis-gateway exec`: their traffic goes through the session's egress proxy.

mod common;

use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_reaches_a_local_origin_and_gets_403_with_the_error_kind_for_a_denied_host() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;

    let url = format!("{}/hello?x=1", origin.url());
    let ok = gw.exec(&sid, &["curl", "-sS", "-i", &url]).await;
    assert!(ok.ok(), "{ok:?}");
    assert!(ok.stdout.starts_with("HTTP/1.1 200"), "{ok:?}");
    assert!(ok.stdout.contains("origin-ok GET /hello?x=1"), "{ok:?}");
    let seen = origin.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].header("proxy-authorization").is_none(),
        "the proxy token leaked to the origin: {seen:?}"
    );

    let denied = gw
        .exec(&sid, &["curl", "-sS", "-i", "http://example.com/"])
        .await;
    assert!(denied.ok(), "{denied:?}");
    let head = denied.stdout.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 403"), "{denied:?}");
    assert!(
        head.contains("x-vis-egress-error: blocked-by-allowlist"),
        "{denied:?}"
    );
    assert!(
        denied.stdout.contains("host not permitted: example.com"),
        "{denied:?}"
    );
    assert_eq!(origin.requests().len(), 1);
}

/// A Python HTTP client module (`requests`, `httpx`) run as a sandbox child reaches the local
/// origin through the proxy named by the environment and gets the proxy's 403 elsewhere.
async fn python_client_uses_the_proxy_from_the_environment(module: &str) {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let code = format!(
        "import {module}\n\
         r = {module}.get('{}/from-{module}', timeout=10)\n\
         print(r.status_code, r.text.strip())\n\
         d = {module}.get('http://example.com/', timeout=10)\n\
         print(d.status_code, d.headers.get('X-Vis-Egress-Error'))\n",
        origin.url()
    );
    let py = python();
    let out = gw.exec(&sid, &[&py, "-c", &code]).await;
    assert!(out.ok(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    let ok = format!("200 origin-ok GET /from-{module}");
    assert_eq!(lines, [ok.as_str(), "403 blocked-by-allowlist"], "{out:?}");
    assert_eq!(origin.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_uses_the_proxy_from_the_environment() {
    python_client_uses_the_proxy_from_the_environment("requests").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_httpx_uses_the_proxy_from_the_environment() {
    python_client_uses_the_proxy_from_the_environment("httpx").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_is_intercepted_and_verified_upstream_against_the_operator_ca() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, leaf, key) = test_pki(pki.path());
    let tls = PyServer::start(&["tls", leaf.to_str().unwrap(), key.to_str().unwrap()]);
    // A read-only rule makes the proxy look inside TLS (docs/decisions.md, P5).
    let policy = json!({"allowed_domains": ["127.0.0.1", "localhost"],
                        "rules": [{"host": "localhost", "access": "read-only"}]});
    let gw = start_with_network(
        policy,
        Opts::default().env("VIS_SYSTEM_CA_CERT", ca.to_str().unwrap()),
    )
    .await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let url = format!("https://localhost:{}/secure?q=1", tls.port);

    let get = gw.exec(&sid, &["curl", "-sS", "-i", &url]).await;
    assert!(get.ok(), "{get:?}");
    assert!(
        get.stdout.contains("tls-origin-ok GET /secure?q=1"),
        "{get:?}"
    );

    let post = gw
        .exec(
            &sid,
            &[
                "curl",
                "-sS",
                "-i",
                "--http1.1",
                "-X",
                "POST",
                "-d",
                "x",
                &url,
            ],
        )
        .await;
    assert!(post.ok(), "{post:?}");
    let lower = post.stdout.to_ascii_lowercase();
    assert!(lower.contains("\r\nhttp/1.1 403 forbidden"), "{post:?}");
    assert!(
        lower.contains("x-vis-egress-error: blocked-by-method-policy"),
        "{post:?}"
    );
    assert!(!post.stdout.contains("tls-origin-ok"), "{post:?}");

    // httpx trusts the gateway CA through SSL_CERT_FILE.
    let code = format!(
        "import httpx\nr = httpx.get('{url}', timeout=10)\nprint(r.status_code, r.text.strip())\n"
    );
    let py = python();
    let out = gw.exec(&sid, &[&py, "-c", &code]).await;
    assert!(out.ok(), "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        "200 tls-origin-ok GET /secure?q=1",
        "{out:?}"
    );

    let decisions = gw.wait_egress(&sid, 3).await;
    let inner: Vec<_> = decisions
        .iter()
        .filter(|d| d["is_intercepted"] == json!(true))
        .collect();
    assert!(
        inner
            .iter()
            .any(|d| d["decision"] == "allow" && d["method"] == "GET"),
        "{decisions:?}"
    );
    assert!(
        inner.iter().any(|d| d["decision"] == "deny"
            && d["method"] == "POST"
            && d["error_kind"] == "blocked-by-method-policy"),
        "{decisions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_trusts_the_gateway_ca_for_intercepted_https() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, leaf, key) = test_pki(pki.path());
    let tls = PyServer::start(&["tls", leaf.to_str().unwrap(), key.to_str().unwrap()]);
    let policy = json!({"allowed_domains": ["127.0.0.1", "localhost"],
                        "rules": [{"host": "localhost", "access": "read-only"}]});
    let gw = start_with_network(
        policy,
        Opts::default().env("VIS_SYSTEM_CA_CERT", ca.to_str().unwrap()),
    )
    .await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let url = format!("https://localhost:{}/secure?q=1", tls.port);
    // Python requests trusts the gateway CA through REQUESTS_CA_BUNDLE.
    let code = format!(
        "import requests\nr = requests.get('{url}', timeout=10)\nprint(r.status_code, r.text.strip())\n"
    );
    let py = python();
    let out = gw.exec(&sid, &[&py, "-c", &code]).await;
    assert!(out.ok(), "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        "200 tls-origin-ok GET /secure?q=1",
        "{out:?}"
    );
}

/// Sends 12 denied 64 KiB POSTs with curl `--<version>` to `url` from a child of `sid`;
/// returns curl's `%{http_version} %{http_code}` lines (and its error lines).
async fn denied_posts(gw: &Gateway, sid: &str, url: &str, version: &str) -> Vec<String> {
    let out = gw
        .exec(
            sid,
            &[
                "sh",
                "-c",
                "for i in $(seq 12); do head -c 65536 /dev/zero | curl -sS --$2 -o /dev/null -w '%{http_version} %{http_code}\\n' -X POST --data-binary @- \"$1\" 2>&1; done",
                "sh",
                url,
                version,
            ],
        )
        .await;
    out.stdout.lines().map(str::to_string).collect()
}

/// The same, to an intercepted read-only HTTPS host.
async fn denied_posts_inside_interception(version: &str) -> Vec<String> {
    let pki = tempfile::tempdir().unwrap();
    let (ca, leaf, key) = test_pki(pki.path());
    let tls = PyServer::start(&["tls", leaf.to_str().unwrap(), key.to_str().unwrap()]);
    let policy = json!({"allowed_domains": ["127.0.0.1", "localhost"],
                        "rules": [{"host": "localhost", "access": "read-only"}]});
    let gw = start_with_network(
        policy,
        Opts::default().env("VIS_SYSTEM_CA_CERT", ca.to_str().unwrap()),
    )
    .await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let url = format!("https://localhost:{}/upload", tls.port);
    denied_posts(&gw, &sid, &url, version).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_plain_http_posts_with_a_body_always_get_a_clean_403() {
    let origin = Origin::start().await;
    let policy = json!({"allowed_domains": ["127.0.0.1"],
                        "rules": [{"host": "127.0.0.1", "access": "read-only"}]});
    let gw = start_with_network(policy, Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let lines = denied_posts(&gw, &sid, &format!("{}/upload", origin.url()), "http1.1").await;
    assert_eq!(lines, vec!["1.1 403".to_string(); 12]);
    assert!(origin.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_http1_posts_with_a_body_inside_interception_always_get_a_clean_403() {
    let lines = denied_posts_inside_interception("http1.1").await;
    assert_eq!(lines, vec!["1.1 403".to_string(); 12]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_http2_posts_with_a_body_inside_interception_always_get_a_clean_403() {
    let lines = denied_posts_inside_interception("http2").await;
    assert_eq!(lines, vec!["2 403".to_string(); 12]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_origin_whose_ca_the_gateway_does_not_trust_is_refused() {
    let pki = tempfile::tempdir().unwrap();
    let (_ca, leaf, key) = test_pki(pki.path());
    let tls = PyServer::start(&["tls", leaf.to_str().unwrap(), key.to_str().unwrap()]);
    let policy = json!({"allowed_domains": ["127.0.0.1", "localhost"],
                        "rules": [{"host": "localhost", "access": "read-only"}]});
    // No VIS_SYSTEM_CA_CERT: upstream verification must fail.
    let gw = start_with_network(policy, Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let url = format!("https://localhost:{}/secure", tls.port);
    let out = gw.exec(&sid, &["curl", "-sS", "-i", &url]).await;
    assert!(!out.stdout.contains("tls-origin-ok"), "{out:?}");
    assert!(out.stdout.contains("upstream error: "), "{out:?}");
    assert!(out.stdout.contains("UnknownIssuer"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_origin_whose_certificate_names_another_host_is_refused() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, leaf, key) = test_pki_for(pki.path(), "DNS:localhost");
    let tls = PyServer::start(&["tls", leaf.to_str().unwrap(), key.to_str().unwrap()]);
    let policy = json!({"allowed_domains": ["127.0.0.1", "localhost"],
                        "rules": [{"host": "127.0.0.1", "access": "read-only"},
                                  {"host": "localhost", "access": "read-only"}]});
    let gw = start_with_network(
        policy,
        Opts::default().env("VIS_SYSTEM_CA_CERT", ca.to_str().unwrap()),
    )
    .await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    // The leaf names only `localhost`: by that name it verifies, by the address it does not.
    let good = format!("https://localhost:{}/named", tls.port);
    let ok = gw.exec(&sid, &["curl", "-sS", &good]).await;
    assert_eq!(ok.stdout, "tls-origin-ok GET /named\n", "{ok:?}");
    let bad = format!("https://127.0.0.1:{}/address", tls.port);
    let out = gw.exec(&sid, &["curl", "-sS", "-i", &bad]).await;
    assert!(!out.stdout.contains("tls-origin-ok"), "{out:?}");
    assert!(out.stdout.contains("upstream error: "), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_clones_over_http_from_a_local_http_backend() {
    let work = tempfile::tempdir().unwrap();
    let srv_root = work.path().join("srv");
    std::fs::create_dir_all(&srv_root).unwrap();
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let git = |args: &[&str], cwd: &std::path::Path| run_ok("git", args, cwd);
    git(&["init", "-q", "-b", "main", "."], &src);
    std::fs::write(src.join("README.md"), "cloned through the egress proxy\n").unwrap();
    git(&["add", "README.md"], &src);
    git(
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "commit",
            "-q",
            "-m",
            "first",
        ],
        &src,
    );
    git(
        &["clone", "-q", "--bare", src.to_str().unwrap(), "repo.git"],
        &srv_root,
    );
    let server = PyServer::start(&["git", srv_root.to_str().unwrap()]);

    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let dest = work.path().join("clone");
    let url = format!("http://127.0.0.1:{}/repo.git", server.port);
    let out = gw
        .exec(&sid, &["git", "clone", "-q", &url, dest.to_str().unwrap()])
        .await;
    assert!(out.ok(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dest.join("README.md")).unwrap(),
        "cloned through the egress proxy\n"
    );
    let decisions = gw.wait_egress(&sid, 2).await;
    assert!(
        decisions.iter().all(|d| d["decision"] == "allow"),
        "{decisions:?}"
    );
    assert!(
        decisions
            .iter()
            .any(|d| d["path"].as_str().unwrap_or("").contains("git-upload-pack")),
        "{decisions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_installs_a_package_from_a_local_index() {
    let work = tempfile::tempdir().unwrap();
    let index = work.path().join("index");
    let pkg_dir = index.join("simple").join("vis-egress-probe");
    std::fs::create_dir_all(&pkg_dir).unwrap();
    let wheel_name = "vis_egress_probe-0.1-py3-none-any.whl";
    let script = work.path().join("build_wheel.py");
    std::fs::write(&script, BUILD_WHEEL_PY).unwrap();
    run_ok(
        &python(),
        &[
            script.to_str().unwrap(),
            pkg_dir.join(wheel_name).to_str().unwrap(),
        ],
        work.path(),
    );
    std::fs::write(
        index.join("simple").join("index.html"),
        "<html><body><a href=\"vis-egress-probe/\">vis-egress-probe</a></body></html>\n",
    )
    .unwrap();
    std::fs::write(
        pkg_dir.join("index.html"),
        format!("<html><body><a href=\"{wheel_name}\">{wheel_name}</a></body></html>\n"),
    )
    .unwrap();
    let server = PyServer::start(&["static", index.to_str().unwrap()]);

    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let target = work.path().join("site");
    let index_url = format!("http://127.0.0.1:{}/simple/", server.port);
    let py = python();
    let out = gw
        .exec(
            &sid,
            &[
                &py,
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-cache-dir",
                "--no-input",
                "--index-url",
                &index_url,
                "--no-deps",
                "--target",
                target.to_str().unwrap(),
                "vis-egress-probe",
            ],
        )
        .await;
    assert!(out.ok(), "{out:?}");
    let installed =
        std::fs::read_to_string(target.join("vis_egress_probe").join("__init__.py")).unwrap();
    assert!(installed.contains("installed through the egress proxy"));
    let decisions = gw.wait_egress(&sid, 2).await;
    assert!(
        decisions
            .iter()
            .any(|d| d["decision"] == "allow"
                && d["path"].as_str().unwrap_or("").ends_with(".whl")),
        "{decisions:?}"
    );
}

/// Names of the gateway's threads (`/proc/<pid>/task/*/comm`).
fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|n| n.trim().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vis_proxy_io_threads_sets_the_proxys_own_threads_and_zero_serves_on_the_runtime() {
    let origin = Origin::start().await;
    for (n, expected) in [("3", 3usize), ("0", 0)] {
        let gw = start_with_network(
            loopback_policy(),
            Opts::default().env("VIS_PROXY_IO_THREADS", n),
        )
        .await;
        let names = thread_names(gw.pid());
        let io: Vec<_> = names
            .iter()
            .filter(|t| t.starts_with("vis-proxy-io-"))
            .collect();
        assert_eq!(io.len(), expected, "VIS_PROXY_IO_THREADS={n}: {names:?}");
        let sid = gw.create_session_at(&gw.dirs.root()).await;
        let url = format!("{}/threads-{n}", origin.url());
        let ok = gw.exec(&sid, &["curl", "-sS", "-i", &url]).await;
        assert!(ok.stdout.starts_with("HTTP/1.1 200"), "{ok:?}");
        assert!(ok.stdout.contains(&format!("GET /threads-{n}")), "{ok:?}");
    }
}

/// Python's `urllib` sends proxy credentials only when the proxy URL has a user AND a
/// password; the child's proxy URL has both, so urllib is attributed (no 407).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_urllib_is_attributed_through_the_environment_proxy() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let code = format!(
        "import urllib.request\n\
         r = urllib.request.urlopen('{}/from-urllib', timeout=10)\n\
         print(r.status, r.read().decode().strip())\n",
        origin.url()
    );
    let out = gw.exec(&sid, &[&python(), "-c", &code]).await;
    assert!(out.ok(), "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        "200 origin-ok GET /from-urllib",
        "{out:?}"
    );
}

/// httpx (and so the official OpenAI and Anthropic SDKs) refuses to build a client when the
/// environment names a SOCKS proxy and `socksio` is missing; the child's environment names
/// none, so httpx without socksio works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httpx_without_socksio_works_in_a_child() {
    let origin = Origin::start().await;
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let code = format!(
        "import sys\n\
         sys.modules['socksio'] = None  # as if the package were not installed\n\
         import httpx\n\
         r = httpx.Client().get('{}/from-httpx', timeout=10)\n\
         print(r.status_code)\n",
        origin.url()
    );
    let out = gw.exec(&sid, &[&python(), "-c", &code]).await;
    assert!(out.ok(), "{out:?}");
    assert_eq!(out.stdout.trim(), "200", "{out:?}");
}

/// npm under interception with a `cafile` of its own (a project `.npmrc` naming another CA)
/// completes the TLS handshake with the interception certificate: the child's
/// `NPM_CONFIG_CAFILE` names the gateway's bundle, and npm's environment configuration sits
/// above a `.npmrc`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_with_its_own_cafile_trusts_the_interception_certificate() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, leaf, key) = test_pki(pki.path());
    let tls = PyServer::start(&["tls", leaf.to_str().unwrap(), key.to_str().unwrap()]);
    let policy = json!({"allowed_domains": ["127.0.0.1", "localhost"],
                        "rules": [{"host": "localhost", "access": "read-only"}]});
    let gw = start_with_network(
        policy,
        Opts::default().env("VIS_SYSTEM_CA_CERT", ca.to_str().unwrap()),
    )
    .await;
    // The project's npm config trusts only the operator CA, not the gateway's.
    std::fs::write(
        gw.dirs.root().join(".npmrc"),
        format!("cafile={}\nupdate-notifier=false\n", ca.display()),
    )
    .unwrap();
    std::fs::write(
        gw.dirs.root().join("package.json"),
        "{\"name\": \"p\", \"version\": \"1.0.0\"}\n",
    )
    .unwrap();
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let registry = format!("https://localhost:{}/", tls.port);
    let ran = gw
        .exec(
            &sid,
            &[
                "npm",
                "view",
                "some-package",
                "--registry",
                &registry,
                "--json",
                "--fetch-retries=0",
            ],
        )
        .await;
    let all = format!("{}{}", ran.stdout, ran.stderr);
    assert!(
        !all.contains("SELF_SIGNED_CERT_IN_CHAIN") && !all.contains("UNABLE_TO_VERIFY"),
        "{ran:?}"
    );
    let decisions = gw.wait_egress(&sid, 1).await;
    assert!(
        decisions.iter().any(|d| d["is_intercepted"] == json!(true)
            && d["decision"] == "allow"
            && d["method"] == "GET"),
        "npm's request went through the interception: {decisions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wget_trusts_the_gateway_ca_for_intercepted_https_and_node_is_told_to_use_the_proxy() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, leaf, key) = test_pki(pki.path());
    let tls = PyServer::start(&["tls", leaf.to_str().unwrap(), key.to_str().unwrap()]);
    let policy = json!({"allowed_domains": ["127.0.0.1", "localhost"],
                        "rules": [{"host": "localhost", "access": "read-only"}]});
    let gw = start_with_network(
        policy,
        Opts::default().env("VIS_SYSTEM_CA_CERT", ca.to_str().unwrap()),
    )
    .await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let url = format!("https://localhost:{}/secure?q=1", tls.port);
    // wget reads no CA variable: it trusts the gateway CA through the generated WGETRC.
    let out = gw.exec(&sid, &["wget", "-q", "-O", "-", &url]).await;
    assert!(out.ok(), "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        "tls-origin-ok GET /secure?q=1",
        "{out:?}"
    );
    let decisions = gw.wait_egress(&sid, 1).await;
    assert!(
        decisions
            .iter()
            .any(|d| d["is_intercepted"] == json!(true) && d["decision"] == "allow"),
        "{decisions:?}"
    );
    // Node versions that honour it route fetch() through the proxy variables.
    let node = gw
        .exec(&sid, &["sh", "-c", "printf %s \"$NODE_USE_ENV_PROXY\""])
        .await;
    assert_eq!(node.stdout, "1", "{node:?}");
}
