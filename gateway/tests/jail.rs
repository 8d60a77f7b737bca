//! The kernel wall (docs/decisions.md, P10) end to end: the real gateway, `vis-gateway exec` children
//! and a local HTTP origin. With `jail.enabled: true` a direct connection to the origin fails
//! and the proxied one works; without it the same direct connection works (so the test
//! proves the wall, not a broken network). Needs `pasta` and `bwrap` (`scripts/install-deps`).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vis-gateway");

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Gateway(Child);
impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A tiny HTTP origin on 127.0.0.1 answering `hello-origin` to every request.
fn origin() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\nhello-origin",
                );
            });
        }
    });
    port
}

fn start_gateway(home: &Path, root: &Path) -> Gateway {
    start_gateway_with_path(
        home,
        root,
        Path::new(&std::env::var_os("PATH").unwrap_or_default()),
    )
}

fn start_gateway_with_path(home: &Path, root: &Path, path: &Path) -> Gateway {
    let child = Command::new(BIN)
        .env("PATH", path)
        .arg("--home")
        .arg(home)
        .args(["start", "--port", "0", "--root"])
        .arg(root)
        .env_remove("VIS_HOME")
        .env("VIS_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(home.join("stderr.log")).unwrap())
        .spawn()
        .expect("spawn vis-gateway");
    let gw = Gateway(child);
    let pid = gw.0.id() as u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let up = std::fs::read_to_string(home.join("gateway.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|r| r["pid"].as_u64() == Some(pid));
        if up {
            return gw;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not start: {}",
            std::fs::read_to_string(home.join("stderr.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn exec(home: &Path, root: &Path, script: &str) -> Output {
    Command::new(BIN)
        .arg("--home")
        .arg(home)
        .arg("exec")
        .arg("--root")
        .arg(root)
        .args(["--", "sh", "-c", script])
        .env_remove("VIS_HOME")
        .stdin(Stdio::null())
        .output()
        .expect("run vis-gateway exec")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn jailed_children_reach_only_the_proxy() {
    for tool in ["curl", "pasta", "bwrap"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
            .any(|d| d.join(tool).is_file());
        assert!(found, "`{tool}` is not installed: run scripts/install-deps");
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let base =
        Dir(std::env::temp_dir().join(format!("vis-jail-test-{}-{nanos}", std::process::id())));
    let (home, jailed, open) = (
        base.0.join("home"),
        base.0.join("jailed"),
        base.0.join("open"),
    );
    for d in [&home, &jailed, &open] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        jailed.join("vis.yml"),
        "jail: {enabled: true, network: {allowed_domains: [\"127.0.0.1\"]}}\n",
    )
    .unwrap();
    std::fs::write(
        open.join("vis.yml"),
        "jail: {network: {allowed_domains: [\"127.0.0.1\"]}}\n",
    )
    .unwrap();
    let port = origin();
    let _gw = start_gateway(&home, &open);

    // curl sends the proxy URL's userinfo only with a password (empty here): add the `:` when
    // the URL has none.
    let proxied = format!(
        "curl -sS -m 10 -x \"$(printf %s \"$http_proxy\" | sed 's/\\([^:]\\)@/\\1:@/')\" http://127.0.0.1:{port}/"
    );
    let direct = format!("curl -sS -m 10 --noproxy '*' http://127.0.0.1:{port}/");

    // Without the jail the direct connection works: the network itself is fine.
    let o = exec(&home, &open, &direct);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout) == "hello-origin",
        "{}",
        text(&o)
    );

    // Jailed: the direct connection is refused inside the namespace ...
    let o = exec(&home, &jailed, &direct);
    assert_eq!(
        o.status.code(),
        Some(7),
        "curl: couldn't connect; {}",
        text(&o)
    );
    // ... a name does not even resolve (no route: nothing leaves the namespace) ...
    let o = exec(
        &home,
        &jailed,
        "curl -sS -m 10 --noproxy '*' http://example.com/",
    );
    assert!(
        matches!(o.status.code(), Some(6) | Some(7)),
        "resolution or connection must fail; {}",
        text(&o)
    );
    // ... and the proxied one reaches the allowed origin through the proxy.
    let o = exec(&home, &jailed, &proxied);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout) == "hello-origin",
        "{}",
        text(&o)
    );
    // The workspace is writable, the host root is not, the exit status comes through.
    let o = exec(
        &home,
        &jailed,
        "touch ./written && ! touch /usr/vis-jail-probe 2>/dev/null && pwd; exit 3",
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(jailed.join("written").exists(), "{}", text(&o));
    assert_eq!(
        Path::new(String::from_utf8_lossy(&o.stdout).trim()),
        jailed.canonicalize().unwrap()
    );
    // The gateway's home (its registry and token) is hidden; the CA bundle is not.
    let reg = home.join("gateway.json");
    let o = exec(
        &home,
        &jailed,
        &format!(
            "test ! -e '{}' && test -s \"$SSL_CERT_FILE\"",
            reg.display()
        ),
    );
    assert!(o.status.success(), "{}", text(&o));
    // Package-manager caches are writable although the host's HOME is not.
    let o = exec(
        &home,
        &jailed,
        "mkdir -p \"$npm_config_cache\" \"$XDG_CACHE_HOME/pip\" && touch \"$npm_config_cache/x\" \"$XDG_CACHE_HOME/pip/x\"",
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// `jail.enabled: true` on a host that cannot enforce it: the command is refused, not run
/// unjailed, and the error names what is missing.
#[test]
fn an_unenforceable_jail_fails_closed() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let base =
        Dir(std::env::temp_dir().join(format!("vis-jail-closed-{}-{nanos}", std::process::id())));
    let (home, jailed, bin) = (
        base.0.join("home"),
        base.0.join("jailed"),
        base.0.join("bin"),
    );
    for d in [&home, &jailed, &bin] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(jailed.join("vis.yml"), "jail: {enabled: true}\n").unwrap();
    // A gateway whose PATH has neither pasta nor bwrap.
    let _gw = start_gateway_with_path(&home, &jailed, &bin);
    let marker = jailed.join("ran");
    let o = exec(&home, &jailed, &format!("touch '{}'", marker.display()));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(!marker.exists(), "the command must not run unjailed");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot enforce the jail") && err.contains("pasta") && err.contains("bwrap"),
        "{}",
        text(&o)
    );
}

/// The shipped systemd unit once ran the gateway with its home as the workspace: a jailed
/// child then saw the home through the workspace bind (its token, and the `vis.yml` read
/// back as config). Such a workspace is refused, and nothing in the home is touched.
#[test]
fn a_jailed_child_whose_workspace_is_the_gateway_home_is_not_run() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let base =
        Dir(std::env::temp_dir().join(format!("vis-jail-home-{}-{nanos}", std::process::id())));
    let home = base.0.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let config = "jail: {enabled: true}\n";
    std::fs::write(home.join("vis.yml"), config).unwrap();
    let _gw = start_gateway(&home, &home);
    let o = exec(
        &home,
        &home,
        "cat gateway.token; echo 'jail: {enabled: false}' >> vis.yml",
    );
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is the gateway's home"), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).trim().is_empty(),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(home.join("vis.yml")).unwrap(),
        config
    );
}
