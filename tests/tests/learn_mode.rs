//! Learn mode (docs/decisions.md, L1) end to end, with real clients as sandbox children: pip
//! downloads from a local index, git clones over http, curl POSTs to a local origin while
//! the project learns; the proposal, reviewed on the "phone" (the human-input form) and
//! written into `vis.yml`, lets the same commands pass in enforce mode, while a host not seen
//! is denied. The SSRF floor never learns.

mod common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// A pip index with one wheel under `/simple/`, served on 127.0.0.1.
fn pip_index(work: &Path) -> PyServer {
    let index = work.join("index");
    let pkg_dir = index.join("simple").join("vis-egress-probe");
    std::fs::create_dir_all(&pkg_dir).unwrap();
    let wheel = "vis_egress_probe-0.1-py3-none-any.whl";
    let script = work.join("build_wheel.py");
    std::fs::write(&script, BUILD_WHEEL_PY).unwrap();
    run_ok(
        &python(),
        &[
            script.to_str().unwrap(),
            pkg_dir.join(wheel).to_str().unwrap(),
        ],
        work,
    );
    std::fs::write(
        pkg_dir.join("index.html"),
        format!("<html><body><a href=\"{wheel}\">{wheel}</a></body></html>\n"),
    )
    .unwrap();
    PyServer::start(&["static", index.to_str().unwrap()])
}

/// A bare repository served by `git http-backend`.
fn git_server(work: &Path) -> PyServer {
    let (srv, src) = (work.join("srv"), work.join("src"));
    std::fs::create_dir_all(&srv).unwrap();
    std::fs::create_dir_all(&src).unwrap();
    run_ok("git", &["init", "-q", "-b", "main", "."], &src);
    std::fs::write(src.join("README.md"), "learned\n").unwrap();
    run_ok("git", &["add", "README.md"], &src);
    run_ok(
        "git",
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "commit",
            "-q",
            "-m",
            "1",
        ],
        &src,
    );
    run_ok(
        "git",
        &["clone", "-q", "--bare", src.to_str().unwrap(), "repo.git"],
        &srv,
    );
    PyServer::start(&["git", srv.to_str().unwrap()])
}

const POST_ORIGIN_PY: &str = r#"
import http.server as h
class H(h.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_POST(self):
        n = int(self.headers.get('Content-Length') or 0)
        self.rfile.read(n)
        b = b'posted ' + self.path.encode() + b'\n'
        self.send_response(201)
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)
s = h.ThreadingHTTPServer(('127.0.0.2', 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

/// An origin on 127.0.0.2 (another loopback host) that answers POSTs.
struct PostOrigin {
    port: u16,
    child: std::process::Child,
}

impl PostOrigin {
    fn start() -> PostOrigin {
        use std::io::BufRead;
        let mut child = std::process::Command::new(python())
            .args(["-c", POST_ORIGIN_PY])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        PostOrigin {
            port: line.trim().parse().expect("port"),
            child,
        }
    }
}

impl Drop for PostOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Commands {
    pip_url: String,
    git_url: String,
    post_url: String,
    work: std::path::PathBuf,
}

impl Commands {
    /// pip download, git clone, curl POST; each must succeed.
    async fn run_all(&self, gw: &Gateway, sid: &str, round: &str) {
        let dest = self.work.join(format!("dl-{round}"));
        let py = python();
        let out = gw
            .exec(
                sid,
                &[
                    &py,
                    "-m",
                    "pip",
                    "download",
                    "--disable-pip-version-check",
                    "--no-cache-dir",
                    "--no-input",
                    "--no-deps",
                    "--index-url",
                    &self.pip_url,
                    "-d",
                    dest.to_str().unwrap(),
                    "vis-egress-probe",
                ],
            )
            .await;
        assert!(out.ok(), "pip download ({round}): {out:?}");
        assert!(dest.join("vis_egress_probe-0.1-py3-none-any.whl").exists());
        let clone = self.work.join(format!("clone-{round}"));
        let out = gw
            .exec(
                sid,
                &["git", "clone", "-q", &self.git_url, clone.to_str().unwrap()],
            )
            .await;
        assert!(out.ok(), "git clone ({round}): {out:?}");
        assert_eq!(
            std::fs::read_to_string(clone.join("README.md")).unwrap(),
            "learned\n"
        );
        let out = gw
            .exec(
                sid,
                &[
                    "curl",
                    "-sS",
                    "-f",
                    "-X",
                    "POST",
                    "-d",
                    "x=1",
                    &self.post_url,
                ],
            )
            .await;
        assert!(
            out.ok() && out.stdout.contains("posted /api/items"),
            "curl POST ({round}): {out:?}"
        );
    }
}

/// `curl` status and `X-Vis-Egress-Error` of a request from the session.
async fn status_and_kind(gw: &Gateway, sid: &str, args: &[&str]) -> String {
    let mut argv = vec![
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-w",
        "status=%{http_code}",
    ];
    argv.extend_from_slice(args);
    let out = gw.exec(sid, &argv).await;
    let kind = out
        .stdout
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("x-vis-egress-error:")
                .map(|k| k.trim().to_string())
        })
        .unwrap_or_default();
    let status = out
        .stdout
        .rsplit("status=")
        .next()
        .unwrap_or("")
        .to_string();
    format!("{status} {kind}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_policy_lets_the_same_commands_pass_in_enforce_mode_and_denies_hosts_not_seen() {
    let work = tempfile::tempdir().unwrap();
    let (pip, git, origin) = (
        pip_index(work.path()),
        git_server(work.path()),
        PostOrigin::start(),
    );
    let cmds = Commands {
        pip_url: format!("http://127.0.0.1:{}/simple/", pip.port),
        git_url: format!("http://localhost:{}/repo.git", git.port),
        post_url: format!("http://127.0.0.2:{}/api/items", origin.port),
        work: work.path().to_path_buf(),
    };
    let dirs = Dirs::new();
    let original = "# the project's own settings\nenvironment: {GREETING: hi}   # kept\n\njail:\n  network:\n    mode: learn   # watching first\n    allowed_domains:\n      - localhost   # git\n";
    std::fs::write(dirs.root().join("vis.yml"), original).unwrap();
    let gw = Gateway::start_in(dirs, Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;

    // Learn: everything passes; what the allowlist would deny is recorded as such.
    cmds.run_all(&gw, &sid, "learn").await;
    // The SSRF floor does not learn: the metadata address stays denied.
    assert_eq!(
        status_and_kind(&gw, &sid, &["http://169.254.169.254/latest/meta-data/"]).await,
        "403 blocked-by-ssrf"
    );
    let rows = gw.wait_egress(&sid, 6).await;
    let pip_row = rows
        .iter()
        .find(|r| r["port"] == json!(pip.port) && r["decision"] == "allow")
        .expect("a pip record");
    assert_eq!(
        pip_row["would_deny"]["error_kind"], "blocked-by-allowlist",
        "{pip_row}"
    );
    let git_row = rows
        .iter()
        .find(|r| r["host"] == "localhost")
        .expect("a git record");
    assert!(
        git_row.get("would_deny").is_none(),
        "allowed by the policy itself: {git_row}"
    );
    let meta = rows
        .iter()
        .find(|r| r["host"] == "169.254.169.254")
        .expect("metadata record");
    assert_eq!(meta["decision"], "deny", "{meta}");

    // The proposal: one rule per host, stable.
    let (s, p) = gw.get(format!("/v1/sessions/{sid}/egress/proposal")).await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(p["mode"], "learn");
    let (_, again) = gw.get(format!("/v1/sessions/{sid}/egress/proposal")).await;
    assert_eq!(p["yaml"], again["yaml"], "same traffic, same YAML");
    let rule = |host: &str| -> Value {
        p["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["host"] == host)
            .cloned()
            .unwrap_or_else(|| panic!("no rule for {host}: {p}"))
    };
    let (pip_rule, git_rule, post_rule) = (rule("127.0.0.1"), rule("localhost"), rule("127.0.0.2"));
    assert_eq!(pip_rule["read_only"], true, "{pip_rule}");
    assert_eq!(pip_rule["ports"], json!([pip.port]));
    assert_eq!(
        pip_rule["path_prefix"], "/simple/vis-egress-probe",
        "{pip_rule}"
    );
    assert_eq!(git_rule["methods"], json!(["GET", "POST"]), "{git_rule}");
    assert_eq!(git_rule["path_prefix"], "/repo.git", "{git_rule}");
    assert_eq!(git_rule["already_allowed"], true);
    assert_eq!(post_rule["methods"], json!(["POST"]), "{post_rule}");
    // evidence: which programs made the requests
    assert_eq!(
        post_rule["evidence"]["commands"],
        json!(["curl"]),
        "{post_rule}"
    );
    assert_eq!(
        git_rule["evidence"]["commands"],
        json!(["git"]),
        "{git_rule}"
    );
    let pip_cmds = pip_rule["evidence"]["commands"].as_array().unwrap();
    assert!(
        pip_cmds.len() == 1 && pip_cmds[0].as_str().unwrap().ends_with(" -m pip"),
        "{pip_rule}"
    );
    assert!(post_rule["evidence"]["requests"].as_u64().unwrap() >= 1);
    assert!(p["rules"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["host"] != "169.254.169.254"));
    let (_, project) = gw
        .get(format!("/v1/sessions/{sid}/egress/proposal?scope=project"))
        .await;
    assert_eq!(project["scope"], "project");
    assert_eq!(
        project["rules"].as_array().map(Vec::len),
        p["rules"].as_array().map(Vec::len)
    );

    // Review on the phone: the form lists every rule; tick them all and switch to enforce.
    let (s, opened) = gw
        .post_empty(&format!("/v1/sessions/{sid}/egress/proposal/review"))
        .await;
    assert_eq!(s, 200, "{opened}");
    let rid = opened["request_id"].as_str().unwrap().to_string();
    let (_, listed) = gw.get(format!("/v1/sessions/{sid}/human-input")).await;
    let form = &listed["requests"][0];
    assert_eq!(form["id"], rid.as_str(), "{listed}");
    let ids: Vec<Value> = p["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].clone())
        .collect();
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/human-input/{rid}/actions/submit"),
            json!({"values": {"rules": ids, "enforce": true}}),
        )
        .await;
    assert_eq!(
        (s.as_u16(), v["is_accepted"].clone()),
        (200, json!(true)),
        "{v}"
    );
    let root = gw.dirs.root().to_string_lossy().to_string();
    let mut changes = Value::Null;
    for _ in 0..200 {
        let (_, c) = gw
            .get(format!("/v1/egress/policy-changes?root={root}"))
            .await;
        if c["changes"].as_array().is_some_and(|a| !a.is_empty()) {
            changes = c;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let change = &changes["changes"][0];
    assert_eq!(change["mode"], "enforce", "{changes}");
    assert_eq!(
        change["applied_by"],
        format!("the review form of session {sid}")
    );
    assert_eq!(change["rules"].as_array().map(Vec::len), Some(ids.len()));

    // The edit kept the file's own text and comments byte for byte.
    let edited = std::fs::read_to_string(gw.dirs.root().join("vis.yml")).unwrap();
    assert!(edited.starts_with("# the project's own settings\nenvironment: {GREETING: hi}   # kept\n\njail:\n  network:\n    mode: enforce   # watching first\n    allowed_domains:\n      - localhost   # git\n"), "{edited}");
    let (_, mode) = gw.get(format!("/v1/sessions/{sid}/egress/mode")).await;
    assert_eq!(mode["mode"], "enforce", "{mode}");

    // Enforce: the same commands pass, in this session and in a new one ...
    cmds.run_all(&gw, &sid, "enforce").await;
    let fresh = gw.create_session_at(&gw.dirs.root()).await;
    cmds.run_all(&gw, &fresh, "fresh").await;
    // ... a host not seen is denied, and so is what the learned rules do not allow.
    let unseen = format!("http://127.0.0.3:{}/api/items", origin.port);
    assert_eq!(
        status_and_kind(&gw, &sid, &[&unseen]).await,
        "403 blocked-by-allowlist"
    );
    assert_eq!(
        status_and_kind(&gw, &sid, &["-X", "POST", &cmds.pip_url]).await,
        "403 blocked-by-method-policy"
    );
    assert_eq!(
        status_and_kind(&gw, &sid, &["http://169.254.169.254/"]).await,
        "403 blocked-by-allowlist"
    );

    // Drift: enforce-mode denials a proposal would allow, grouped by rule.
    let (s, sug) = gw.get(format!("/v1/sessions/{sid}/egress/suggested")).await;
    assert_eq!(s, 200, "{sug}");
    let hosts: Vec<&str> = sug["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["host"].as_str())
        .collect();
    assert!(
        hosts.contains(&"127.0.0.3") && hosts.contains(&"127.0.0.1"),
        "{sug}"
    );
    assert_eq!(
        sug["denials"], 2,
        "the metadata denial is not a suggestion: {sug}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_phone_switches_one_session_to_learn_mode_and_bad_input_is_refused() {
    let gw = start_with_network(loopback_policy(), Opts::default()).await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let origin = PostOrigin::start();
    let url = format!("http://127.0.0.2:{}/x/y", origin.port);
    assert_eq!(
        status_and_kind(&gw, &sid, &["-X", "POST", &url]).await,
        "403 blocked-by-allowlist"
    );

    let put = |body: Value| {
        let req = gw
            .req(Method::PUT, &format!("/v1/sessions/{sid}/egress/mode"))
            .json(&body);
        async move { into_json(req.send().await.unwrap()).await }
    };
    let (s, m) = put(json!({"mode": "learn"})).await;
    assert_eq!(s, 200, "{m}");
    assert_eq!(
        (m["mode"].as_str(), m["project_mode"].as_str()),
        (Some("learn"), Some("enforce"))
    );
    assert_eq!(
        status_and_kind(&gw, &sid, &["-X", "POST", &url]).await,
        "201 "
    );
    let other = gw.create_session_at(&gw.dirs.root()).await;
    assert_eq!(
        status_and_kind(&gw, &other, &["-X", "POST", &url]).await,
        "403 blocked-by-allowlist",
        "only the switched session learns"
    );
    let (s, m) = put(json!({"mode": null})).await;
    assert_eq!(
        (s.as_u16(), m["mode"].as_str()),
        (200, Some("enforce")),
        "{m}"
    );
    assert_eq!(
        status_and_kind(&gw, &sid, &["-X", "POST", &url]).await,
        "403 blocked-by-allowlist"
    );

    let (s, e) = put(json!({"mode": "watch"})).await;
    assert_eq!(s, 400, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"watch\""),
        "{e}"
    );
    let (s, e) = put(json!({})).await;
    assert_eq!(s, 400, "{e}");
    let (s, e) = gw
        .post(
            &format!("/v1/sessions/{sid}/egress/proposal/apply"),
            json!({"rules": ["nope.test"]}),
        )
        .await;
    assert_eq!(
        (s.as_u16(), error_type(&e)),
        (400, "unknown-rule".to_string()),
        "{e}"
    );
    let (s, e) = gw
        .post(
            &format!("/v1/sessions/{sid}/egress/proposal/apply"),
            json!({"rules": []}),
        )
        .await;
    assert_eq!(s, 400, "{e}");
    let (s, e) = gw
        .get(format!("/v1/sessions/{sid}/egress/proposal?scope=galaxy"))
        .await;
    assert_eq!(s, 400, "{e}");

    // `/net propose` answers the same proposal in the chat.
    let (_, done) = gw.run_turn(&sid, "/net propose").await;
    let md = done.data["content"][0]["markdown"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(md.contains("```yaml\njail:\n"), "{md}");
    assert!(md.contains("127.0.0.2"), "{md}");
}
