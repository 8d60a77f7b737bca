//! Sub-commands that talk to the running gateway of a home (found through its registry).

use super::http;
use crate::home::{pid_alive, Home, Registry};
use crate::pairing;
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The registry of a live gateway, or `None`: its pid is alive AND the home's lock is held
/// (so a pid reused by another process after the gateway died is never taken for it).
fn running(home: &Home) -> Option<Registry> {
    home.read_registry()
        .filter(|r| pid_alive(r.pid) && home.lock_held())
}

pub fn status(home: Option<PathBuf>) -> Result<ExitCode> {
    let home = Home::resolve(home)?;
    let Some(reg) = running(&home) else {
        println!("not running (home {})", home.dir.display());
        return Ok(ExitCode::from(3));
    };
    let body = healthz(&reg).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    println!(
        "running: pid {} at {} (home {})",
        reg.pid,
        reg.url,
        home.dir.display()
    );
    println!("{body}");
    Ok(ExitCode::SUCCESS)
}

/// `GET /healthz` of the running gateway: its body.
fn healthz(reg: &Registry) -> Result<String> {
    let headers = [("X-Vis-Gateway-Secret", reg.token.clone())];
    let (_, body) = http::call(reg, "GET", "/healthz", &headers, "", Duration::from_secs(5))?;
    Ok(body)
}

pub fn stop(home: Option<PathBuf>) -> Result<ExitCode> {
    let home = Home::resolve(home)?;
    let Some(reg) = running(&home) else {
        println!("not running");
        return Ok(ExitCode::SUCCESS);
    };
    // SAFETY: sending SIGTERM to the pid the gateway itself recorded.
    if unsafe { libc::kill(reg.pid as libc::pid_t, libc::SIGTERM) } != 0 {
        bail!(
            "cannot signal pid {}: {}",
            reg.pid,
            std::io::Error::last_os_error()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while pid_alive(reg.pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if pid_alive(reg.pid) {
        bail!("pid {} did not stop within 15 s", reg.pid);
    }
    println!("stopped (pid {})", reg.pid);
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub struct PairArgs {
    /// The URL the phone should use (e.g. behind a reverse proxy, NAT or a container's port
    /// mapping), instead of the addresses of this machine's interfaces. Loopback binds are
    /// allowed with it.
    #[arg(long, env = "VIS_PUBLIC_URL")]
    pub public_url: Option<String>,
}

pub fn pair(home: Option<PathBuf>, args: PairArgs) -> Result<ExitCode> {
    let home = Home::resolve(home)?;
    let Some(reg) = running(&home) else {
        bail!("no gateway is running for {}", home.dir.display())
    };
    let urls = match args.public_url.as_deref().map(str::trim) {
        Some(u) if !u.is_empty() => {
            let parsed = u
                .parse::<axum::http::Uri>()
                .ok()
                .filter(|p| matches!(p.scheme_str(), Some("http" | "https")) && p.host().is_some());
            if parsed.is_none() {
                bail!("--public-url must be an http:// or https:// URL with a host, got {u:?}");
            }
            vec![u.trim_end_matches('/').to_string()]
        }
        _ => {
            if pairing::is_loopback_host(&reg.host) {
                eprintln!("{}", pairing::LOOPBACK_REFUSAL);
                return Ok(ExitCode::from(2));
            }
            pairing::urls(&reg.host, reg.port)
        }
    };
    // The token is always in the link when a public URL is given: whatever is in front of
    // the gateway, the phone is not on its loopback.
    let token = (reg.require_token || args.public_url.is_some()).then_some(reg.token.as_str());
    let Some(link) = pairing::link(&urls, token) else {
        bail!("no reachable address found for {}", reg.host);
    };
    println!("{link}");
    if let Some(qr) = pairing::qr(&link) {
        println!("{qr}");
    }
    Ok(ExitCode::SUCCESS)
}

/// One API request to the local gateway as the CLI client; returns `(status, body)`.
fn request(reg: &Registry, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    let headers = [
        ("Authorization", format!("Bearer {}", reg.token)),
        ("X-Vis-Protocol", "2".to_string()),
        ("X-Vis-Min-Gateway-Protocol", "2".to_string()),
        ("X-Vis-Client", "vis-cli".to_string()),
    ];
    http::call(reg, method, path, &headers, body, Duration::from_secs(30))
}

#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    /// Run as a child of this session (in the current directory if it is inside the
    /// session's workspace root, else in the root).
    #[arg(long, conflicts_with = "root")]
    pub session: Option<String>,
    /// Create a session with this workspace root (default: the current directory), titled
    /// "$ PROGRAM …" so the Companion lists it; pass --session to reuse one across commands.
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// The command and its arguments (after `--`).
    #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// The title of a session made by `exec`: `$ ` and the program's file name, then ` …` when
/// it has arguments. The arguments stay out: a title is stored and shown on the phone, and
/// an argument can be a secret the shell expanded (`-H "Authorization: Bearer $TOKEN"`).
fn exec_title(command: &[String]) -> String {
    let program = command.first().map_or("", |p| {
        p.rsplit('/').find(|s| !s.is_empty()).unwrap_or(p.as_str())
    });
    let program: String = program
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(80)
        .collect();
    let more = if command.len() > 1 { " …" } else { "" };
    format!("$ {program}{more}")
}

/// The name a command's egress decisions carry: the program's file name, and for
/// `python -m MODULE` the module too (never other arguments, which can hold secrets).
fn program_label(command: &[String]) -> Option<String> {
    let program = command.first()?;
    let name = program.rsplit('/').find(|s| !s.is_empty())?;
    let mut label = name.to_string();
    if name.starts_with("python") && command.get(1).map(String::as_str) == Some("-m") {
        if let Some(m) = command.get(2) {
            label = format!("{name} -m {m}");
        }
    }
    Some(label.chars().take(64).collect())
}

/// `vis-gateway exec`: runs a command as a sandbox child of a session of the running gateway.
pub fn exec(home: Option<PathBuf>, args: ExecArgs) -> Result<ExitCode> {
    let home = Home::resolve(home)?;
    let Some(reg) = running(&home) else {
        bail!(
            "no gateway is running for {}; start one with `vis-gateway start`",
            home.dir.display()
        )
    };
    let root = match (&args.session, &args.root) {
        (Some(_), _) => None,
        (None, Some(r)) => Some(
            r.canonicalize()
                .map_err(|e| anyhow::anyhow!("--root {}: {e}", r.display()))?,
        ),
        (None, None) => Some(std::env::current_dir()?),
    };
    // A session made for this command is titled after it, which lists it in the Companion
    // (where its egress decisions can be read).
    let title = args.session.is_none().then(|| exec_title(&args.command));
    let command = program_label(&args.command);
    let body = serde_json::json!({"session_id": args.session, "root": root, "title": title,
        "command": command})
    .to_string();
    let (status, text) = request(&reg, "POST", "/v1/sandbox/env", &body)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|_| anyhow::anyhow!("unexpected answer ({status}): {text}"))?;
    if status != 200 {
        bail!("{}", v["error"]["message"].as_str().unwrap_or(&text));
    }
    let env: std::collections::BTreeMap<String, String> = serde_json::from_value(v["env"].clone())?;
    let session_root = v["cwd"]
        .as_str()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let cwd = exec_dir(std::env::current_dir().ok(), &session_root);
    // `jail.enabled: true`: the gateway hands back the jail's argv prefix (the kernel wall, docs/decisions.md P10).
    let mut jail: Vec<String> = match v.get("jail").filter(|j| !j.is_null()) {
        Some(j) => serde_json::from_value(j["argv_prefix"].clone())?,
        None => Vec::new(),
    };
    crate::sandbox::jail::set_workdir(&mut jail, &cwd);
    let jailed = !jail.is_empty();
    let argv: Vec<String> = jail
        .into_iter()
        .chain(args.command.iter().cloned())
        .collect();
    let (program, rest) = argv
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no command given"))?;
    let mut cmd = std::process::Command::new(program);
    // PWD names the child's own directory, not the directory the environment came from.
    cmd.args(rest)
        .env_clear()
        .envs(&env)
        .env("PWD", &cwd)
        .current_dir(&cwd);
    if jailed {
        // pasta's start-up lines are removed from the head of the child's stderr.
        cmd.stderr(std::process::Stdio::piped());
    }
    let spawned = cmd.spawn().map(|mut child| {
        let relay = child.stderr.take().map(relay_stderr);
        let status = child.wait();
        if let Some(done) = relay {
            // Bounded: a daemon the command left behind may hold the pipe open.
            let _ = done.recv_timeout(Duration::from_secs(2));
        }
        status
    });
    let status = match spawned.and_then(|s| s) {
        Ok(s) => s,
        Err(e) => {
            // As a shell does: 127 when the program is not there, 126 when it cannot run.
            eprintln!("vis-gateway exec: cannot run {program}: {e}");
            return Ok(ExitCode::from(match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                std::io::ErrorKind::PermissionDenied => 126,
                _ => 1,
            }));
        }
    };
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Where `exec` runs its command: the current directory when it is inside the session's
/// workspace root (as a user who `cd`s into a subfolder expects), otherwise the root.
fn exec_dir(here: Option<PathBuf>, root: &std::path::Path) -> PathBuf {
    let canon = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let root = canon(root);
    match here.map(|h| canon(&h)) {
        Some(h) if h.starts_with(&root) => h,
        _ => root,
    }
}

/// Copies a jailed child's stderr to ours as it comes, without pasta's start-up lines;
/// the receiver hears when the pipe is closed.
fn relay_stderr(mut from: std::process::ChildStderr) -> std::sync::mpsc::Receiver<()> {
    use std::io::{Read, Write};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut filter = crate::sandbox::jail::NoiseFilter::new();
        let mut err = std::io::stderr();
        let mut buf = [0u8; 8192];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let _ = err.write_all(&filter.feed(&buf[..n]));
                    let _ = err.flush();
                }
            }
        }
        let _ = err.write_all(&filter.finish());
        let _ = tx.send(());
    });
    rx
}

#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// The policy file (YAML: `tokens`, `network`, optional `listen` and `reserved_ports`).
    #[arg(long)]
    pub policy: PathBuf,
    /// Listen address (overrides `listen:` in the file), e.g. 127.0.0.1:8899.
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
}

/// `vis-gateway proxy`: just the egress proxy, stand-alone (docs/decisions.md, A5).
pub fn proxy(args: ProxyArgs) -> Result<ExitCode> {
    super::logging::init(false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut cfg = vis_proxy::standalone::StandaloneConfig::new(args.policy);
        cfg.listen = args.listen;
        vis_proxy::standalone::run_standalone(cfg).await
    })?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Subcommand, Debug)]
pub enum ExtensionCmd {
    /// List loaded extensions (with symbols, slash commands, hooks, filters, providers) and load failures.
    List {
        /// Include this project's extensions (default: the current directory).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Print the raw JSON answer of `GET /v1/extensions`.
        #[arg(long)]
        json: bool,
    },
}

/// `vis-gateway extension list`.
pub fn extension(home: Option<PathBuf>, cmd: ExtensionCmd) -> Result<ExitCode> {
    let ExtensionCmd::List { root, json } = cmd;
    let home = Home::resolve(home)?;
    let Some(reg) = running(&home) else {
        bail!("no gateway is running for {}", home.dir.display())
    };
    let root = match root {
        Some(r) => r,
        None => std::env::current_dir()?,
    };
    let q: String = form_urlencoded::byte_serialize(root.to_string_lossy().as_bytes()).collect();
    let (status, text) = request(&reg, "GET", &format!("/v1/extensions?root={q}"), "")?;
    if status != 200 {
        bail!("GET /v1/extensions answered {status}: {text}");
    }
    if json {
        println!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let empty = vec![];
    let exts = v["extensions"].as_array().unwrap_or(&empty);
    let failures = v["failures"].as_array().unwrap_or(&empty);
    if exts.is_empty() && failures.is_empty() {
        println!(
            "no extensions (global: {}/extensions, project: {}/.vis/extensions)",
            home.dir.display(),
            root.display()
        );
    }
    for e in exts {
        println!(
            "{} ({}, {}){}",
            e["name"].as_str().unwrap_or("?"),
            e["scope"].as_str().unwrap_or("?"),
            e["file"].as_str().unwrap_or("?"),
            if e["is_stale"].as_bool() == Some(true) {
                " [stale: last good version]"
            } else {
                ""
            }
        );
        let list = |key: &str, field: &str| -> String {
            e[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x[field].as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        let hooks = e["op_hooks"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|h| {
                        let ops: Vec<&str> = h["ops"]
                            .as_array()
                            .map(|o| o.iter().filter_map(|x| x.as_str()).collect())
                            .unwrap_or_default();
                        format!("{} {}", h["phase"].as_str().unwrap_or("?"), ops.join("|"))
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let filters = e["network_filters"].as_u64().unwrap_or(0);
        for (label, text) in [
            ("symbols", list("symbols", "name")),
            ("slash commands", list("slash_commands", "name")),
            ("hooks", hooks),
            (
                "network filters",
                if filters > 0 {
                    filters.to_string()
                } else {
                    String::new()
                },
            ),
            ("providers", list("providers", "id")),
        ] {
            if !text.is_empty() {
                println!("  {label}: {text}");
            }
        }
    }
    for f in failures {
        println!(
            "FAILED {}: {}",
            f["file"].as_str().unwrap_or("?"),
            f["error"]
                .as_str()
                .or(f["error"]["message"].as_str())
                .unwrap_or("?")
        );
        if let Some(tb) = f["traceback"].as_str().or(f["error"]["traceback"].as_str()) {
            println!("{}", tb.trim_end());
        }
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::exec_title;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_program_label_is_its_file_name_and_a_python_module_never_other_arguments() {
        use super::program_label;
        assert_eq!(
            program_label(&argv(&["/usr/bin/curl", "-H", "X: sk"])).as_deref(),
            Some("curl")
        );
        assert_eq!(
            program_label(&argv(&[
                "/usr/bin/python3",
                "-m",
                "pip",
                "download",
                "secret"
            ]))
            .as_deref(),
            Some("python3 -m pip")
        );
        assert_eq!(program_label(&argv(&[])), None);
    }

    #[test]
    fn an_exec_title_names_the_program_and_never_its_arguments() {
        assert_eq!(
            exec_title(&argv(&["curl", "-H", "Authorization: Bearer sk-secret"])),
            "$ curl …"
        );
        assert_eq!(exec_title(&argv(&["/usr/bin/env"])), "$ env");
        assert_eq!(exec_title(&argv(&["./run me\nnow", "x"])), "$ run me now …");
        let long = exec_title(&argv(&[&"é".repeat(200)]));
        assert_eq!(long.chars().count(), 82, "{long}");
    }
}
