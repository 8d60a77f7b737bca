//! The system prompt, assembled per turn in a fixed order (docs/decisions.md, T3): the
//! core prompt (or the project's replacement), the project's instructions, the appended
//! parts, then the facts of this turn, then the extensions' prompts. The parts that change
//! least come first, so providers' prompt caches keep hitting.

use std::path::{Path, PathBuf};

const CORE: &str = include_str!("core_prompt.md");
const CORE_FUNCTIONS: &str = include_str!("core_prompt_functions.md");
/// The most of one instructions file that is included.
const MAX_FILE: usize = 64 * 1024;

/// What a turn's prompt is built from (the files are read by [`assemble`]).
#[derive(Debug, Clone, Default)]
pub struct PromptInputs {
    pub home: PathBuf,
    /// The session's real folder (the project).
    pub project: PathBuf,
    /// Where the session works now (a draft's folder while it is in one).
    pub work: PathBuf,
    /// The current draft's label.
    pub draft: Option<String>,
    /// The default tool mode (`python_execution`) rather than one tool per function.
    pub sandbox: bool,
    /// `system_prompt` and `append_system_prompt` from `vis.yml`.
    pub system_prompt: Option<String>,
    pub append_system_prompt: Option<String>,
    /// Extension namespaces the model can call: (name, one line).
    pub namespaces: Vec<(String, String)>,
    /// MCP servers: (name, one line with its state).
    pub mcp: Vec<(String, String)>,
    /// The network policy in one line.
    pub network: String,
    /// The extensions' prompt parts: (extension, text).
    pub extensions: Vec<(String, String)>,
}

/// The assembled prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemPrompt {
    pub text: String,
    /// Bytes at the start of `text` that stay the same from turn to turn.
    pub stable_len: usize,
    /// The files it includes, in order.
    pub sources: Vec<PathBuf>,
}

fn read_capped(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text.len() <= MAX_FILE {
        return Some(text.to_string());
    }
    let mut end = MAX_FILE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!(
        "{}\n\n[… the rest of this file ({} bytes) is not included]",
        &text[..end],
        text.len() - end
    ))
}

/// The repository root above `dir` (the folder holding `.git`), if any.
fn repo_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

/// `AGENTS.md`, else `CLAUDE.md`, in one folder.
fn instructions_in(dir: &Path) -> Option<(PathBuf, String)> {
    ["AGENTS.md", "CLAUDE.md"].iter().find_map(|name| {
        let p = dir.join(name);
        read_capped(&p).map(|t| (p, t))
    })
}

/// The instruction files in the order they apply: the home's, then from the repository
/// root down to the working folder (without a repository: the working folder only).
pub fn instruction_files(home: &Path, work: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    out.extend(instructions_in(home));
    let dirs: Vec<&Path> = match repo_root(work) {
        Some(root) => {
            let mut v: Vec<&Path> = work
                .ancestors()
                .take_while(|d| d.starts_with(&root))
                .collect();
            v.reverse();
            v
        }
        None => vec![work],
    };
    for d in dirs {
        if d == home {
            continue;
        }
        out.extend(instructions_in(d));
    }
    out
}

/// The branch and whether the tree has uncommitted changes, by asking git.
fn git_facts(work: &Path) -> Option<String> {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(work)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    // `symbolic-ref` also names the branch of a repository without commits yet.
    let branch = match run(&["symbolic-ref", "--short", "-q", "HEAD"]) {
        Some(b) if !b.is_empty() => format!("branch `{b}`"),
        _ => format!(
            "a detached HEAD at {}",
            run(&["rev-parse", "--short", "HEAD"])?
        ),
    };
    let changed = run(&["status", "--porcelain"])
        .map(|s| s.lines().count())
        .unwrap_or(0);
    Some(match changed {
        0 => format!("{branch}, no uncommitted changes"),
        n => format!("{branch}, {n} changed or untracked files not committed"),
    })
}

fn os_line() -> String {
    let pretty = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    format!(
        "{pretty} ({} {})",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

fn today() -> String {
    let ms = vis_companion_api::sse::now_ms();
    let (y, m, d) = crate::extensions::logfile::civil_from_days(ms.div_euclid(86_400_000));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Builds the prompt. Reads files and runs git: call it off the async workers.
pub fn assemble(i: &PromptInputs) -> SystemPrompt {
    let mut sources = Vec::new();
    let mut text = String::new();
    // 1. The core prompt, or what replaces it.
    let project_system = i.project.join(".vis").join("SYSTEM.md");
    let home_system = i.home.join("SYSTEM.md");
    if let Some(t) = read_capped(&project_system) {
        sources.push(project_system);
        text.push_str(&t);
    } else if let Some(t) = i.system_prompt.as_deref().filter(|t| !t.trim().is_empty()) {
        text.push_str(t.trim());
    } else if let Some(t) = read_capped(&home_system) {
        sources.push(home_system);
        text.push_str(&t);
    } else {
        text.push_str((if i.sandbox { CORE } else { CORE_FUNCTIONS }).trim());
    }
    // 2. The project's instructions.
    let files = instruction_files(&i.home, &i.work);
    if !files.is_empty() {
        text.push_str(
            "\n\n# Project instructions\n\nInstructions from the user and the project. Follow \
             them; where they differ, the later (more specific) file wins.",
        );
        for (path, body) in files {
            text.push_str(&format!("\n\n## {}\n\n{body}", path.display()));
            sources.push(path);
        }
    }
    // 3. Appended parts.
    for path in [
        i.home.join("APPEND_SYSTEM.md"),
        i.project.join(".vis").join("APPEND_SYSTEM.md"),
    ] {
        if let Some(t) = read_capped(&path) {
            text.push_str("\n\n");
            text.push_str(&t);
            sources.push(path);
        }
    }
    if let Some(t) = i
        .append_system_prompt
        .as_deref()
        .filter(|t| !t.trim().is_empty())
    {
        text.push_str("\n\n");
        text.push_str(t.trim());
    }
    let stable_len = text.len();
    // 4. This turn's facts.
    text.push_str("\n\n# Environment\n");
    text.push_str(&format!("\n- Workspace: {}", i.project.display()));
    match &i.draft {
        Some(label) => text.push_str(&format!(
            "\n- Current folder: {} (the draft `{label}`; the user's files are untouched until it is applied)",
            i.work.display()
        )),
        None => text.push_str(&format!("\n- Current folder: {}", i.work.display())),
    }
    text.push_str(&format!("\n- OS: {}", os_line()));
    text.push_str(&format!("\n- Date: {} (UTC)", today()));
    match git_facts(&i.work) {
        Some(g) => text.push_str(&format!("\n- Git: {g}")),
        None => text.push_str("\n- Git: not a git repository"),
    }
    text.push_str(&format!("\n- Network: {}", i.network));
    if !i.namespaces.is_empty() {
        text.push_str("\n- Extension namespaces:");
        for (name, line) in &i.namespaces {
            text.push_str(&format!("\n  - `{name}`: {line}"));
        }
    }
    if !i.mcp.is_empty() {
        text.push_str("\n- MCP servers:");
        for (name, line) in &i.mcp {
            text.push_str(&format!("\n  - `{name}`: {line}"));
        }
    }
    // 5. The extensions' parts, labelled.
    for (ext, part) in &i.extensions {
        text.push_str(&format!(
            "\n\n# From the extension `{ext}`\n\n{}",
            part.trim()
        ));
    }
    SystemPrompt {
        text,
        stable_len,
        sources,
    }
}

/// The network policy of `jail` in one line.
pub fn network_line(jail_enabled: bool, network: Option<&serde_json::Value>) -> String {
    let jail = if jail_enabled {
        "the kernel jail is on, so the egress proxy is the only way out"
    } else {
        "programs that honour the proxy variables go through the egress proxy"
    };
    let Some(n) = network.and_then(|v| v.as_object()) else {
        return format!("no project network policy (`jail.network` unset); {jail}");
    };
    let list = |k: &str| -> Vec<String> {
        n.get(k)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let allowed = list("allowed_domains");
    let mut parts = Vec::new();
    if !allowed.is_empty() {
        let shown: Vec<String> = allowed.iter().take(8).cloned().collect();
        let more = allowed.len().saturating_sub(shown.len());
        parts.push(format!(
            "allowed hosts {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    let denied = list("denied_domains");
    if !denied.is_empty() {
        parts.push(format!("{} denied hosts", denied.len()));
    }
    if let Some(r) = n.get("rules").and_then(|v| v.as_array()) {
        parts.push(format!("{} rules", r.len()));
    }
    if n.get("allow_private").and_then(|v| v.as_bool()) == Some(true) {
        parts.push("private addresses allowed".into());
    }
    if parts.is_empty() {
        parts.push("a project policy is set".into());
    }
    if n.get("mode").and_then(|v| v.as_str()) == Some("learn") {
        return format!(
            "{}; learn mode: requests outside the allowlist are let through and recorded for a \
             proposed policy (private and metadata addresses stay refused); {jail}",
            parts.join("; ")
        );
    }
    format!(
        "{}; other hosts are refused by the egress proxy; {jail}",
        parts.join("; ")
    )
}

#[cfg(test)]
#[path = "prompt_tests.rs"]
mod tests;
