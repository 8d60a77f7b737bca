//! The deploy files use only flags, sub-commands and paths the binary really has.

use std::path::PathBuf;
use std::process::Command;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("VIS_GATEWAY_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace().join("target"));
    let bin = target.join("debug").join("vis-gateway");
    assert!(
        bin.exists(),
        "build it first: cargo build -p vis-gateway ({} missing)",
        bin.display()
    );
    bin
}

fn help(sub: &str) -> String {
    let out = Command::new(binary())
        .args([sub, "--help"])
        .output()
        .expect("run vis-gateway --help");
    assert!(out.status.success(), "`vis-gateway {sub} --help` failed");
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(workspace().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every `vis-gateway <sub> --flag …` invocation in a text, as (sub, flags).
fn invocations(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    // Shell-style lines.
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            if w.ends_with("vis-gateway") && !w.contains('.') {
                if let Some(sub) = words.get(i + 1).filter(|s| !s.starts_with('-')) {
                    let sub = sub.trim_matches(|c| c == '`' || c == '"' || c == ',');
                    // `docker build … -t vis-gateway .` names an image, not a sub-command.
                    if sub.is_empty() || !sub.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                        continue;
                    }
                    let flags = words[i + 2..]
                        .iter()
                        .take_while(|x| !x.starts_with('`'))
                        .filter(|x| x.starts_with("--"))
                        .map(|f| {
                            f.trim_matches(|c| c == '`' || c == '"' || c == ',')
                                .to_string()
                        })
                        .collect();
                    out.push((sub.to_string(), flags));
                }
            }
        }
    }
    // JSON-array commands: ["start", "--host", ...].
    for line in text.lines() {
        if let (Some(a), Some(b)) = (line.find('['), line.rfind(']')) {
            let items: Vec<String> = line[a + 1..b]
                .split(',')
                .map(|s| s.trim().trim_matches('"').to_string())
                .collect();
            if items.first().is_some_and(|s| s == "start") {
                out.push((
                    "start".into(),
                    items
                        .iter()
                        .filter(|s| s.starts_with("--"))
                        .cloned()
                        .collect(),
                ));
            }
        }
    }
    out
}

#[test]
fn every_deploy_file_invokes_real_subcommands_with_real_flags() {
    let mut checked = 0;
    let top = Command::new(binary())
        .arg("--help")
        .output()
        .expect("run vis-gateway --help");
    let top = String::from_utf8_lossy(&top.stdout).to_string();
    let is_subcommand = |w: &str| {
        top.lines()
            .any(|l| l.trim_start().starts_with(&format!("{w} ")))
    };
    for file in [
        "deploy/Dockerfile",
        "deploy/docker-compose.yml",
        "deploy/vis-gateway.service",
    ] {
        for (sub, flags) in invocations(&read(file)) {
            // Prose like "vis-gateway with its state" is not an invocation.
            if !is_subcommand(&sub) {
                continue;
            }
            let h = help(&sub);
            for f in flags {
                assert!(
                    h.contains(&f),
                    "{file}: `vis-gateway {sub}` has no flag {f}"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 8,
        "expected to check the start flags of every file, checked {checked}"
    );
}

#[test]
fn the_container_state_volume_is_the_vis_home() {
    let docker = read("deploy/Dockerfile");
    assert!(docker.contains("ENV VIS_HOME=/data") && docker.contains("VOLUME [\"/data\"]"));
    assert!(
        docker.contains("USER vis"),
        "the image must not run as root"
    );
    assert!(docker.contains("/healthz"));
    let compose = read("deploy/docker-compose.yml");
    assert!(compose.contains("vis-state:/data") && compose.contains("VIS_HOME: /data"));
    assert!(
        compose.contains("\"127.0.0.1:7890:7890\""),
        "compose must publish on loopback by default"
    );
}

#[test]
fn the_example_configuration_is_accepted_by_the_gateway() {
    let dir = std::env::temp_dir().join(format!("vis-deploy-{}", std::process::id()));
    let (home, root) = (dir.join("home"), dir.join("root"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(
        workspace().join("deploy/vis.yml.example"),
        root.join("vis.yml"),
    )
    .unwrap();
    let mut child = Command::new(binary())
        .args([
            "--home",
            home.to_str().unwrap(),
            "start",
            "--port",
            "0",
            "--root",
            root.to_str().unwrap(),
        ])
        .env_remove("OPENAI_API_KEY")
        .env("OPENAI_API_KEY", "example")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let registry = home.join("gateway.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !registry.exists() && std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("the gateway refused the example configuration ({status}): {err}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        registry.exists(),
        "the gateway did not start with the example configuration"
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_image_builds_from_sources_only_and_runs_under_an_init_with_python_for_the_sandbox() {
    let ignore = read(".dockerignore");
    for entry in ["target/", ".git/"] {
        assert!(
            ignore.lines().any(|l| l.trim() == entry),
            ".dockerignore must exclude {entry}"
        );
    }
    let docker = read("deploy/Dockerfile");
    assert!(
        docker.contains("ENTRYPOINT [\"/usr/bin/tini\", \"--\", \"vis-gateway\"]"),
        "an init as PID 1 reaps orphans"
    );
    let runtime_stage = docker.rsplit("FROM ").next().unwrap_or_default();
    assert!(
        runtime_stage.contains(" tini") && runtime_stage.contains(" python3 "),
        "tini and the sandbox's python3 are installed in the runtime image"
    );
}
