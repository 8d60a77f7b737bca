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
    let mut cluster_flags = Vec::new();
    for file in [
        "deploy/Dockerfile",
        "deploy/docker-compose.yml",
        "deploy/docker-compose.cluster.yml",
        "deploy/vis-gateway.service",
    ] {
        let before = checked;
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
                if file.ends_with("cluster.yml") {
                    cluster_flags.push(f);
                }
            }
        }
        assert!(
            checked > before,
            "{file}: no `vis-gateway <sub> --flag` invocation was found to check"
        );
    }
    for f in ["--node-id", "--advertise-url", "--token-file"] {
        assert!(
            cluster_flags.iter().filter(|c| *c == f).count() == 3,
            "deploy/docker-compose.cluster.yml: every node's command passes {f}"
        );
    }
    assert!(
        checked >= 29,
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

/// `docker-compose -f <file> config` run from the workspace (the normalized file), with the
/// variables the compose files read unset; `None` (the test is skipped) when docker-compose is
/// not installed, except under `CI`, where that fails.
fn compose_config(file: &str) -> Option<String> {
    let mut cmd = Command::new("docker-compose");
    cmd.current_dir(workspace()).args(["-f", file, "config"]);
    for var in [
        "VIS_TOKEN_FILE",
        "VIS_POSTGRES_PASSWORD",
        "VIS_LEASE_TTL_MS",
        "VIS_WORKSPACE",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "COMPOSE_FILE",
        "COMPOSE_PROJECT_NAME",
    ] {
        cmd.env_remove(var);
    }
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var_os("CI").is_none(),
                "docker-compose is not installed: run scripts/install-deps ({e})"
            );
            eprintln!(
                "skipped: docker-compose is not installed (scripts/install-deps installs it)"
            );
            return None;
        }
        Err(e) => panic!("cannot run docker-compose: {e}"),
    };
    assert!(
        out.status.success(),
        "`docker-compose -f {file} config` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).to_string())
}

/// The lines under `a:` → `b:` → … of YAML as docker-compose prints it (two spaces a level, a
/// list's items at their key's own indent), each level's indent removed.
fn section(yaml: &str, path: &[&str]) -> Option<Vec<String>> {
    let mut lines: Vec<String> = yaml.lines().map(str::to_string).collect();
    for key in path {
        let head = format!("{key}:");
        let start = lines.iter().position(|l| *l == head)?;
        lines = lines[start + 1..]
            .iter()
            .take_while(|l| l.starts_with(' ') || l.starts_with("- "))
            .map(|l| l.strip_prefix("  ").unwrap_or(l).to_string())
            .collect();
    }
    Some(lines)
}

/// The items of a list section, unquoted.
fn items(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|s| s.trim_matches('\'').to_string())
        .collect()
}

/// The value of `key: value` among a section's lines, unquoted.
fn scalar(lines: &[String], key: &str) -> Option<String> {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .map(|s| s.trim_matches('\'').to_string())
}

/// The item after `flag` in a command list.
fn flag_value(command: &[String], flag: &str) -> Option<String> {
    let i = command.iter().position(|c| c == flag)?;
    command.get(i + 1).cloned()
}

#[test]
fn the_cluster_compose_file_is_valid_for_docker_compose() {
    let Some(single) = compose_config("deploy/docker-compose.yml") else {
        return;
    };
    assert!(
        single.contains("127.0.0.1:7890:7890"),
        "the single-node file still publishes on loopback:\n{single}"
    );
    let Some(config) = compose_config("deploy/docker-compose.cluster.yml") else {
        return;
    };
    let service = |name: &str, key: &str| section(&config, &["services", name, key]);
    let names: Vec<String> = section(&config, &["services"])
        .expect("services")
        .iter()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('-'))
        .filter_map(|l| l.strip_suffix(':').map(str::to_string))
        .collect();
    let volumes = items(
        &section(&config, &["volumes"])
            .expect("named volumes")
            .iter()
            .map(|l| format!("- {}", l.trim_end_matches(" {}").trim_end_matches(':')))
            .collect::<Vec<_>>(),
    );
    let gateways: Vec<&String> = names
        .iter()
        .filter(|n| {
            service(n, "command").is_some_and(|c| items(&c).first().is_some_and(|s| s == "start"))
        })
        .collect();
    assert_eq!(
        gateways.len(),
        3,
        "three gateway nodes, got {gateways:?}:\n{config}"
    );
    let (mut ids, mut states) = (Vec::new(), Vec::new());
    let (mut databases, mut tokens, mut workspaces) = (Vec::new(), Vec::new(), Vec::new());
    for name in &gateways {
        let command = items(&service(name, "command").unwrap());
        let env = service(name, "environment").unwrap_or_default();
        let id = flag_value(&command, "--node-id")
            .or_else(|| scalar(&env, "VIS_NODE_ID"))
            .unwrap_or_else(|| panic!("{name} has no --node-id / VIS_NODE_ID"));
        let advertise = flag_value(&command, "--advertise-url")
            .or_else(|| scalar(&env, "VIS_ADVERTISE_URL"))
            .unwrap_or_else(|| panic!("{name} has no --advertise-url / VIS_ADVERTISE_URL"));
        assert_eq!(
            advertise,
            format!("http://{name}:7890"),
            "{name} is reached by the others at its compose name"
        );
        assert_eq!(
            scalar(&env, "VIS_HOME").as_deref(),
            Some("/data"),
            "{name}: VIS_HOME is its /data volume"
        );
        assert_eq!(
            scalar(&env, "VIS_NATS_URL").as_deref(),
            Some("nats://nats:4222"),
            "{name}: the shared NATS server"
        );
        databases.push(
            scalar(&env, "VIS_DATABASE_URL")
                .or_else(|| flag_value(&command, "--database-url"))
                .unwrap_or_else(|| panic!("{name} has no database URL")),
        );
        let token = flag_value(&command, "--token-file")
            .unwrap_or_else(|| panic!("{name} has no --token-file"));
        let secrets = service(name, "secrets").unwrap_or_default();
        assert!(
            secrets.iter().any(|s| s == "- source: gateway-token")
                && token == "/run/secrets/gateway-token",
            "{name}: the token file is the shared secret, got {token} and {secrets:?}"
        );
        tokens.push(token);
        let mounts = items(&service(name, "volumes").unwrap());
        let source = |target: &str| {
            mounts
                .iter()
                .find_map(|m| {
                    let (src, rest) = m.split_once(':')?;
                    (rest == target || rest.starts_with(&format!("{target}:")))
                        .then(|| src.to_string())
                })
                .unwrap_or_else(|| panic!("{name} mounts nothing at {target}: {mounts:?}"))
        };
        states.push(source("/data"));
        workspaces.push(source("/workspace"));
        let depends = service(name, "depends_on").unwrap_or_default();
        assert!(
            section(&depends.join("\n"), &["postgres"])
                .is_some_and(|d| d.iter().any(|l| l == "condition: service_healthy")),
            "{name} waits for a healthy PostgreSQL: {depends:?}"
        );
        let own = section(&config, &["services", name]).unwrap();
        assert_eq!(
            scalar(&own, "restart").as_deref(),
            Some("unless-stopped"),
            "{name} is restarted when it exits (status 3 after losing its lease)"
        );
        ids.push(id);
    }
    let distinct = |v: &[String]| v.iter().collect::<std::collections::BTreeSet<_>>().len();
    assert_eq!(distinct(&ids), 3, "distinct node ids: {ids:?}");
    assert_eq!(distinct(&states), 3, "a state volume per node: {states:?}");
    assert_eq!(distinct(&databases), 1, "one database: {databases:?}");
    assert_eq!(distinct(&tokens), 1, "one token file: {tokens:?}");
    assert_eq!(
        distinct(&workspaces),
        1,
        "one workspace volume: {workspaces:?}"
    );
    for v in states.iter().chain(&workspaces) {
        assert!(volumes.contains(v), "{v} is a named volume: {volumes:?}");
    }
    assert!(
        section(&config, &["secrets", "gateway-token"])
            .is_some_and(|s| s.iter().any(|l| l.starts_with("file: "))),
        "the token is one file shared by the nodes"
    );
    let lb_ports = items(&service("lb", "ports").expect("lb publishes a port"));
    assert!(
        lb_ports
            .iter()
            .any(|p| p.starts_with("127.0.0.1:7890:7890")),
        "the load balancer publishes on loopback by default: {lb_ports:?}"
    );
    for (name, port) in gateways.iter().map(|n| (n, service(n, "ports"))) {
        assert!(
            port.is_none(),
            "{name} is reached through the load balancer only"
        );
    }
    let pg_check = items(
        &service("postgres", "healthcheck").map_or_else(Vec::new, |h| {
            section(&h.join("\n"), &["test"]).unwrap_or_default()
        }),
    );
    assert!(
        pg_check.iter().any(|t| t == "pg_isready"),
        "PostgreSQL has a pg_isready healthcheck: {pg_check:?}"
    );
}

#[test]
fn the_cluster_load_balancer_checks_healthz_and_spreads_over_all_three_nodes() {
    let cfg = read("deploy/haproxy.cluster.cfg");
    let lines: Vec<&str> = cfg
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let has = |l: &str| lines.contains(&l);
    assert!(
        has("option httpchk GET /healthz"),
        "HAProxy checks /healthz"
    );
    assert!(has("balance leastconn"));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("default-server ") && l.split_whitespace().any(|w| w == "check")),
        "every server is health-checked"
    );
    let compose = read("deploy/docker-compose.cluster.yml");
    for node in ["node-a", "node-b", "node-c"] {
        assert!(
            has(&format!("server {node} {node}:7890")),
            "HAProxy names {node}"
        );
        assert!(
            compose.contains(&format!("\"--advertise-url\", \"http://{node}:7890\"")),
            "the compose file runs {node} where HAProxy looks for it"
        );
    }
    for t in ["client", "server", "tunnel"] {
        assert!(
            has(&format!("timeout {t} 1h")),
            "event streams need an hour of `timeout {t}`"
        );
    }
    for l in [
        "option http-server-close",
        "option httpclose",
        "compression",
    ] {
        assert!(
            !lines.iter().any(|x| x.starts_with(l)),
            "{l}: the event streams go through as they are"
        );
    }
    assert!(
        compose.contains("./haproxy.cluster.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"),
        "the lb service runs this configuration"
    );
}
