//! The kernel wall (docs/decisions.md, P10): with `jail.enabled: true` a sandbox child runs in its own
//! network namespace whose only reachable address is the egress proxy's port on loopback, so
//! a client that ignores the proxy variables gets no network at all.
//!
//! The jail is `pasta` (Debian `passt`) spawning `bwrap` (Debian `bubblewrap`):
//!
//! - `pasta` creates the network namespace and forwards exactly one port from the namespace's
//!   loopback to the host's loopback: `-T <proxy-port>`, with `-t none -u none -U none` (no
//!   other forwarding in either direction) and `--no-map-gw`. It is run without
//!   `--config-net`, so its tap interface stays down with no address and no route: every
//!   non-loopback destination fails locally with "network unreachable" (DNS included), and no
//!   packet leaves the namespace. When the gateway runs as root, `--runas 0:0 --netns-only`
//!   keep pasta from switching to `nobody` (which cannot map a user namespace) and from
//!   creating a user namespace of its own; bwrap creates it instead.
//! - `bwrap` (no `--unshare-net`: the namespace is pasta's) runs the command in a new user,
//!   PID and IPC namespace with every capability dropped and nested user namespaces disabled,
//!   so the child can neither bring the interface up nor re-enter the host's namespaces.
//!   Filesystem: the host root read-only, the workspace root read-write, a private `/tmp`,
//!   `/run` masked (host daemons' UNIX sockets, which a network namespace does not cut),
//!   fresh `/dev` and `/proc`, the gateway's home hidden except for the CA bundle children
//!   need.
//!
//! If the host cannot enforce the jail (a binary missing, user namespaces disabled, a trial
//! run failing) the child is NOT run: `jail.enabled: true` is a security request, so it
//! fails closed with an error naming what is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The two programs the jail needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    pub pasta: PathBuf,
    pub bwrap: PathBuf,
}

/// What one jail needs to know.
#[derive(Debug, Clone)]
pub struct JailSpec {
    /// The egress proxy's loopback port: the only address reachable inside.
    pub proxy_port: u16,
    /// The workspace root: bound read-write, and the working directory.
    pub root: PathBuf,
    /// Host directories masked with an empty tmpfs (the gateway's home).
    pub hide: Vec<PathBuf>,
    /// Host files re-exposed read-only after masking (the children's CA bundle).
    pub expose_ro: Vec<PathBuf>,
    /// The gateway runs as root (pasta then needs `--runas 0:0 --netns-only`).
    pub as_root: bool,
    /// pasta's own log (else it tries syslog and reports each failure on the child's stderr).
    pub log_file: Option<PathBuf>,
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The argv that runs a command inside the jail: append the command's argv to it.
pub fn argv_prefix(bins: &Binaries, spec: &JailSpec) -> Vec<String> {
    let port = spec.proxy_port.to_string();
    let mut a: Vec<String> = vec![s(&bins.pasta), "--quiet".into()];
    if let Some(log) = &spec.log_file {
        a.extend(["--log-file".into(), s(log)]);
    }
    if spec.as_root {
        a.extend(["--runas", "0:0", "--netns-only"].map(String::from));
    }
    a.extend(
        [
            "--no-map-gw",
            "-T",
            &port,
            "-t",
            "none",
            "-u",
            "none",
            "-U",
            "none",
            "--",
        ]
        .map(String::from),
    );
    a.push(s(&bins.bwrap));
    a.extend(
        [
            "--unshare-user",
            "--disable-userns",
            "--unshare-pid",
            "--unshare-ipc",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            // The host's HOME is read-only inside: caches go to the private /tmp (npm
            // otherwise fails with EROFS on ~/.npm, pip warns on ~/.cache).
            "--setenv",
            "XDG_CACHE_HOME",
            "/tmp/.cache",
            "--setenv",
            "npm_config_cache",
            "/tmp/.npm",
        ]
        .map(String::from),
    );
    // Mounts apply in order, so an ancestor must come before what is under it: sort by depth
    // (stable, so at equal depth masking comes before binding).
    enum Op<'a> {
        Tmpfs(&'a Path),
        Rw(&'a Path),
        Ro(&'a Path),
    }
    let (tmp, run) = (Path::new("/tmp"), Path::new("/run"));
    let mut ops: Vec<Op> = vec![Op::Tmpfs(tmp), Op::Tmpfs(run)];
    ops.extend(spec.hide.iter().map(|p| Op::Tmpfs(p)));
    ops.push(Op::Rw(&spec.root));
    ops.extend(spec.expose_ro.iter().map(|p| Op::Ro(p)));
    let depth = |o: &Op| match o {
        Op::Tmpfs(p) | Op::Rw(p) | Op::Ro(p) => p.components().count(),
    };
    ops.sort_by_key(depth);
    for op in ops {
        match op {
            Op::Tmpfs(p) => a.extend(["--tmpfs".into(), s(p)]),
            Op::Rw(p) => a.extend(["--bind".into(), s(p), s(p)]),
            Op::Ro(p) => a.extend(["--ro-bind".into(), s(p), s(p)]),
        }
    }
    a.extend(["--chdir".into(), s(&spec.root), "--".into()]);
    a
}

/// `name` in one of `dirs`.
fn find_in(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    dirs.iter().map(|d| d.join(name)).find(|p| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// Finds `pasta` and `bwrap` in `dirs`, naming every missing one.
pub fn find_binaries_in(dirs: &[PathBuf]) -> Result<Binaries, String> {
    match (find_in(dirs, "pasta"), find_in(dirs, "bwrap")) {
        (Some(pasta), Some(bwrap)) => Ok(Binaries { pasta, bwrap }),
        (p, b) => {
            let mut missing = Vec::new();
            if p.is_none() {
                missing.push("`pasta` (Debian package `passt`)");
            }
            if b.is_none() {
                missing.push("`bwrap` (Debian package `bubblewrap`)");
            }
            Err(format!("{} not found on PATH", missing.join(" and ")))
        }
    }
}

/// Finds `pasta` and `bwrap` on the gateway's `PATH` (the usual system directories when
/// `PATH` is unset).
pub fn find_binaries() -> Result<Binaries, String> {
    let dirs: Vec<PathBuf> = match std::env::var_os("PATH") {
        Some(p) => std::env::split_paths(&p).collect(),
        None => ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
            .map(PathBuf::from)
            .to_vec(),
    };
    find_binaries_in(&dirs)
}

fn read_sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Why this kernel refuses the user namespaces the jail needs, if it visibly does.
pub fn userns_problem(as_root: bool) -> Option<String> {
    if read_sysctl("/proc/sys/user/max_user_namespaces") == Some(0) {
        return Some("user namespaces are disabled (user.max_user_namespaces = 0)".into());
    }
    if !as_root && read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return Some(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)"
                .into(),
        );
    }
    None
}

/// Runs `argv` with a deadline; Ok when it exits 0, else its stderr.
fn trial(argv: &[String], deadline: Duration) -> Result<(), String> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if t0.elapsed() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => break None,
        }
    };
    let Some(status) = status else {
        // SAFETY: signalling the process group created for the trial.
        unsafe {
            libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = child.wait();
        return Err(format!("a trial run did not finish within {deadline:?}"));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    if status.success() {
        Ok(())
    } else {
        let err = strip_pasta_noise(&err);
        let err = err.trim();
        Err(format!(
            "a trial run failed ({status}){}",
            if err.is_empty() {
                String::new()
            } else {
                format!(": {}", err.chars().take(400).collect::<String>())
            }
        ))
    }
}

static TRIED_OK: AtomicBool = AtomicBool::new(false);

/// Why `spec`'s workspace cannot be jailed safely: a workspace that IS a hidden directory
/// (the gateway's home) would be bound read-write over its own mask, handing the child the
/// gateway's token and letting it rewrite the config the gateway reads back. A workspace
/// inside the home, or one that contains it, is fine (the deeper mount wins).
pub fn workspace_problem(spec: &JailSpec) -> Option<String> {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let root = canon(&spec.root);
    spec.hide.iter().find(|h| canon(h) == root).map(|h| {
        format!(
            "the workspace {} is the gateway's home, which holds its token and config; \
             start the gateway with a workspace outside {} (--root DIR, or another working directory)",
            spec.root.display(),
            h.display()
        )
    })
}

/// The argv prefix for `spec`, or why this host cannot enforce the jail. The first success
/// is remembered (one trial run per gateway process); failures are re-checked each time so
/// installing the packages does not need a restart.
pub fn prepare(spec: &JailSpec) -> Result<Vec<String>, String> {
    let fail = |why: String| {
        format!(
            "jail.enabled is true but this host cannot enforce the jail, so the command was not run: {why}"
        )
    };
    if let Some(why) = workspace_problem(spec) {
        return Err(format!(
            "jail.enabled is true but the command was not run: {why}"
        ));
    }
    let bins = find_binaries().map_err(fail)?;
    if let Some(why) = userns_problem(spec.as_root) {
        return Err(fail(why));
    }
    let prefix = argv_prefix(&bins, spec);
    if !TRIED_OK.load(Ordering::Relaxed) {
        let mut argv = prefix.clone();
        argv.push("/bin/true".into());
        trial(&argv, Duration::from_secs(15)).map_err(fail)?;
        TRIED_OK.store(true, Ordering::Relaxed);
    }
    Ok(prefix)
}

/// The process runs as root.
pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// pasta started by root with `--netns-only` cannot (and need not) write the uid map of the
/// initial user namespace and says so on stderr before the command starts (with "Failed to
/// send … to syslog" lines when it has no log file); those lines are noise for the child's
/// output and are removed from its start.
pub fn strip_pasta_noise(stderr: &str) -> String {
    const NOISE: [&str; 2] = [
        "Couldn't write to /proc/self/uid_map: Operation not permitted",
        "Couldn't configure user mappings",
    ];
    let mut rest = stderr;
    loop {
        let line = rest.split_inclusive('\n').next().unwrap_or("");
        let text = line.trim_end_matches('\n');
        let noise = NOISE.contains(&text)
            || (text.starts_with("Failed to send ") && text.ends_with(" bytes to syslog"));
        let trimmed = (noise && !line.is_empty()).then(|| &rest[line.len()..]);
        match trimmed {
            Some(r) => rest = r,
            None => return rest.to_string(),
        }
    }
}

/// Whether `line` (without its newline) is one of pasta's start-up lines.
fn is_noise(line: &[u8]) -> bool {
    const NOISE: [&[u8]; 2] = [
        b"Couldn't write to /proc/self/uid_map: Operation not permitted",
        b"Couldn't configure user mappings",
    ];
    NOISE.contains(&line)
        || (line.starts_with(b"Failed to send ") && line.ends_with(b" bytes to syslog"))
}

/// Whether an unfinished line could still become one of pasta's lines.
fn may_be_noise(partial: &[u8]) -> bool {
    const STARTS: [&[u8]; 3] = [
        b"Couldn't write to /proc/self/uid_map: Operation not permitted",
        b"Couldn't configure user mappings",
        b"Failed to send ",
    ];
    STARTS
        .iter()
        .any(|s| s.starts_with(partial) || partial.starts_with(b"Failed to send "))
}

/// [`strip_pasta_noise`] for a stream (a jailed child's stderr passed through as it comes):
/// pasta's lines are dropped from its head; the first other byte ends the filtering, so an
/// unfinished line that cannot be pasta's (a prompt) is passed on at once.
#[derive(Debug, Default)]
pub struct NoiseFilter {
    /// What is held back while the stream is still at its head; `None` once past it.
    head: Option<Vec<u8>>,
    passed: bool,
}

impl NoiseFilter {
    pub fn new() -> NoiseFilter {
        NoiseFilter {
            head: Some(Vec::new()),
            passed: false,
        }
    }

    /// The bytes of `chunk` (and any held before it) to pass on.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.passed {
            return chunk.to_vec();
        }
        let buf = self.head.get_or_insert_with(Vec::new);
        buf.extend_from_slice(chunk);
        loop {
            match buf.iter().position(|b| *b == b'\n') {
                Some(i) if is_noise(&buf[..i]) => {
                    buf.drain(..=i);
                }
                None if may_be_noise(buf) => return Vec::new(),
                _ => {
                    self.passed = true;
                    return self.head.take().unwrap_or_default();
                }
            }
        }
    }

    /// The end of the stream: a held unfinished line, unless it is pasta's.
    pub fn finish(&mut self) -> Vec<u8> {
        match self.head.take() {
            Some(rest) if !is_noise(&rest) => rest,
            _ => Vec::new(),
        }
    }
}

/// Replaces the working directory of a jail argv prefix (`--chdir <dir>`): `dir` must be
/// the workspace root or inside it (the root is bound at the same path).
pub fn set_workdir(prefix: &mut [String], dir: &Path) {
    if let Some(i) = prefix.iter().rposition(|a| a == "--chdir") {
        if let Some(d) = prefix.get_mut(i + 1) {
            *d = s(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_filter_drops_pastas_lines_in_any_cut_and_nothing_else() {
        let text = b"Couldn't write to /proc/self/uid_map: Operation not permitted\nCouldn't configure user mappings\nerr one\nCouldn't configure user mappings\n";
        for cut in 1..text.len() {
            let mut f = NoiseFilter::new();
            let mut out = f.feed(&text[..cut]);
            out.extend(f.feed(&text[cut..]));
            out.extend(f.finish());
            assert_eq!(
                String::from_utf8_lossy(&out),
                "err one\nCouldn't configure user mappings\n",
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_prompt_without_a_newline_is_passed_on_at_once() {
        let mut f = NoiseFilter::new();
        assert_eq!(f.feed(b"Password: "), b"Password: ");
        let mut g = NoiseFilter::new();
        assert_eq!(g.feed(b"Couldn't "), b"", "could still be pasta's");
        assert_eq!(g.feed(b"open x\n"), b"Couldn't open x\n");
        let mut h = NoiseFilter::new();
        assert_eq!(h.feed(b"Couldn't configure user mappings"), b"");
        assert_eq!(h.finish(), b"", "pasta's line without its newline");
    }

    #[test]
    fn the_workdir_of_a_jail_prefix_can_be_moved_inside_the_root() {
        let mut p = argv_prefix(&bins(), &spec(true));
        set_workdir(&mut p, Path::new("/tmp/w/proj/sub"));
        let i = p.iter().position(|a| a == "--chdir").unwrap();
        assert_eq!(p[i + 1], "/tmp/w/proj/sub");
        assert_eq!(p.last().map(String::as_str), Some("--"));
    }

    fn bins() -> Binaries {
        Binaries {
            pasta: "/usr/bin/pasta".into(),
            bwrap: "/usr/bin/bwrap".into(),
        }
    }

    fn spec(as_root: bool) -> JailSpec {
        JailSpec {
            proxy_port: 40123,
            root: "/tmp/w/proj".into(),
            hide: vec!["/home/op/.vis".into()],
            expose_ro: vec!["/home/op/.vis/ca/bundle-1.pem".into()],
            as_root,
            log_file: Some("/home/op/.vis/logs/pasta.log".into()),
        }
    }

    fn window(a: &[String], at: &str, n: usize) -> Vec<String> {
        let i = a.iter().position(|x| x == at).unwrap();
        a[i..i + n].to_vec()
    }

    #[test]
    fn pasta_forwards_only_the_proxy_port_and_configures_no_interface() {
        let a = argv_prefix(&bins(), &spec(false));
        assert_eq!(a[0], "/usr/bin/pasta");
        let dash = a.iter().position(|x| x == "--").unwrap();
        let pasta = &a[..dash];
        assert_eq!(
            window(pasta, "-T", 8),
            ["-T", "40123", "-t", "none", "-u", "none", "-U", "none"]
        );
        assert!(pasta.contains(&"--no-map-gw".to_string()));
        assert_eq!(
            window(pasta, "--log-file", 2),
            ["--log-file", "/home/op/.vis/logs/pasta.log"]
        );
        assert!(!pasta.iter().any(|x| x == "--config-net"));
        assert!(!pasta.iter().any(|x| x == "--runas" || x == "--netns-only"));
        assert_eq!(a[dash + 1], "/usr/bin/bwrap");
        assert_eq!(a.last().unwrap(), "--");
    }

    #[test]
    fn as_root_pasta_keeps_root_and_only_makes_the_network_namespace() {
        let a = argv_prefix(&bins(), &spec(true));
        assert_eq!(window(&a, "--runas", 3), ["--runas", "0:0", "--netns-only"]);
    }

    #[test]
    fn bwrap_leaves_the_network_to_pasta_and_drops_privilege() {
        let a = argv_prefix(&bins(), &spec(true));
        let b = a.iter().position(|x| x == "/usr/bin/bwrap").unwrap();
        let bw = &a[b..];
        assert!(!bw
            .iter()
            .any(|x| x == "--unshare-net" || x == "--unshare-all"));
        for f in [
            "--unshare-user",
            "--disable-userns",
            "--unshare-pid",
            "--die-with-parent",
        ] {
            assert!(bw.iter().any(|x| x == f), "{f}");
        }
        assert!(!bw.iter().any(|x| x == "--cap-add"));
    }

    #[test]
    fn mounts_are_ordered_ancestors_first() {
        let a = argv_prefix(&bins(), &spec(false));
        let pos = |w: &[&str]| {
            a.windows(w.len())
                .position(|x| x.iter().zip(w).all(|(a, b)| a == b))
                .unwrap_or_else(|| panic!("{w:?} in {a:?}"))
        };
        let root_ro = pos(&["--ro-bind", "/", "/"]);
        let tmp = pos(&["--tmpfs", "/tmp"]);
        let run = pos(&["--tmpfs", "/run"]);
        let home = pos(&["--tmpfs", "/home/op/.vis"]);
        let ws = pos(&["--bind", "/tmp/w/proj", "/tmp/w/proj"]);
        let ca = pos(&[
            "--ro-bind",
            "/home/op/.vis/ca/bundle-1.pem",
            "/home/op/.vis/ca/bundle-1.pem",
        ]);
        assert!(
            root_ro < tmp && tmp < ws,
            "the workspace under /tmp survives"
        );
        assert!(run < ws && home < ca);
        assert_eq!(window(&a, "--chdir", 2), ["--chdir", "/tmp/w/proj"]);

        // A workspace that contains the gateway home: the home is masked after the bind.
        let mut sp = spec(false);
        sp.root = "/home/op".into();
        let a = argv_prefix(&bins(), &sp);
        let ws = a.iter().position(|x| x == "--bind").unwrap();
        let home = a.windows(2).position(|w| w[1] == "/home/op/.vis").unwrap();
        assert!(ws < home);
    }

    #[test]
    fn a_workspace_that_is_the_gateway_home_is_refused_and_others_are_not() {
        let mut sp = spec(false);
        sp.root = "/home/op/.vis".into();
        let why = workspace_problem(&sp).expect("the home as workspace must be refused");
        assert!(why.contains("is the gateway's home"), "{why}");
        assert!(why.contains("--root"), "{why}");
        sp.root = "/home/op/.vis/".into();
        assert!(
            workspace_problem(&sp).is_some(),
            "a trailing slash is the same directory"
        );
        sp.root = "/home/op".into();
        assert_eq!(workspace_problem(&sp), None);
        sp.root = "/home/op/.vis/work".into();
        assert_eq!(workspace_problem(&sp), None);
    }

    #[test]
    fn missing_binaries_are_named() {
        let empty = std::env::temp_dir().join(format!("vis-jail-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let e = find_binaries_in(std::slice::from_ref(&empty)).unwrap_err();
        let _ = std::fs::remove_dir(&empty);
        assert!(e.contains("`pasta` (Debian package `passt`)"), "{e}");
        assert!(e.contains("`bwrap` (Debian package `bubblewrap`)"), "{e}");
    }

    #[test]
    fn pasta_root_noise_is_stripped_and_nothing_else() {
        let e = "Couldn't write to /proc/self/uid_map: Operation not permitted\nCouldn't configure user mappings\nreal error\n";
        assert_eq!(strip_pasta_noise(e), "real error\n");
        assert_eq!(
            strip_pasta_noise("x\nCouldn't configure user mappings\n"),
            "x\nCouldn't configure user mappings\n"
        );
        assert_eq!(strip_pasta_noise(""), "");
        assert_eq!(
            strip_pasta_noise(
                "Failed to send 68 bytes to syslog\nCouldn't configure user mappings\nout"
            ),
            "out"
        );
    }
}
