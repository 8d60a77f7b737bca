//! The modules of each crate import each other without cycles: read every source file (test
//! modules and comments left out), resolve each `crate::…` / `super::…` path to the
//! module file it names (re-exports of the crate root to where they come from), and look for
//! a cycle in that graph. Each crate is checked file by file; for the gateway binary the
//! subsystems (its top-level modules) are also checked as wholes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

fn modules(src: &Path, dir: &Path, out: &mut BTreeMap<Module, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            modules(src, &path, out);
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let rel = path.strip_prefix(src).unwrap().with_extension("");
        let mut m: Module = rel
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if m.last().map(String::as_str) == Some("mod") || m == ["lib"] || m == ["main"] {
            m.pop();
        }
        // code only: no test module (a `tests` file or folder, or one inline), no comments
        if m.iter().any(|s| s == "tests" || s.ends_with("_tests")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap()
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        out.insert(m, code);
    }
}

/// Every path written after `crate::` or `super::`, with `{a, b::c}` groups expanded.
fn paths(code: &str, prefix: &str) -> Vec<Vec<String>> {
    fn group(s: &str) -> (Vec<Vec<String>>, usize) {
        // `s` starts after `{`; returns the expanded paths and the bytes used
        let (mut out, mut cur, mut i) = (Vec::new(), String::new(), 0);
        let b = s.as_bytes();
        while i < b.len() {
            match b[i] {
                b'{' => {
                    let (inner, used) = group(&s[i + 1..]);
                    let head: Vec<String> = split(&cur);
                    out.extend(inner.into_iter().map(|t| [head.clone(), t].concat()));
                    cur.clear();
                    i += used + 1;
                }
                b'}' => {
                    if !cur.trim().is_empty() {
                        out.push(split(&cur));
                    }
                    return (out, i + 1);
                }
                b',' => {
                    if !cur.trim().is_empty() {
                        out.push(split(&cur));
                    }
                    cur.clear();
                }
                c => cur.push(c as char),
            }
            i += 1;
        }
        (out, i)
    }
    fn split(s: &str) -> Vec<String> {
        s.split("::")
            .map(|p| p.split_whitespace().next().unwrap_or("").to_string())
            .filter(|p| !p.is_empty())
            .collect()
    }
    let mut out = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let head = split(&rest[..end]);
        if rest[end..].starts_with('{') && rest[..end].ends_with("::") {
            let (inner, _) = group(&rest[end + 1..]);
            out.extend(inner.into_iter().map(|t| [head.clone(), t].concat()));
        } else {
            out.push(head);
        }
    }
    out
}

/// The import graph of the crate in `dir` (a folder of the workspace), with each module
/// cut to its first `depth` segments when `depth` is given.
fn graph(dir: &str, depth: Option<usize>) -> BTreeMap<Module, BTreeSet<Module>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(dir)
        .join("src");
    let mut files = BTreeMap::new();
    modules(&src, &src, &mut files);
    // `pub use module::{Name, …}` in lib.rs: Name → module
    let mut reexport: BTreeMap<String, Module> = BTreeMap::new();
    for p in paths(
        &files[&Vec::new()].replace("pub use ", "pub use crate::"),
        "crate::",
    ) {
        if let (Some(first), Some(last)) = (p.first(), p.last()) {
            reexport.insert(last.clone(), vec![first.clone()]);
        }
    }
    let resolve = |base: Module, segs: &[String]| -> Option<Module> {
        let full = [base, segs.to_vec()].concat();
        let found = (0..=full.len())
            .rev()
            .map(|n| full[..n].to_vec())
            .find(|m| files.contains_key(m))?;
        if found.is_empty() {
            let name = full.first()?;
            return reexport.get(name).cloned();
        }
        Some(found)
    };
    let mut g = BTreeMap::new();
    for (m, code) in &files {
        if m.is_empty() {
            continue; // lib.rs declares every module and re-exports a few names
        }
        let mut deps = BTreeSet::new();
        for p in paths(code, "crate::") {
            deps.extend(resolve(Vec::new(), &p));
        }
        // `super` of `a/b.rs` is `a`; a directory module's own file (`a/mod.rs`) is `a`
        let is_dir_module = files.keys().any(|k| k.len() > m.len() && k.starts_with(m));
        let parent = if is_dir_module {
            m[..m.len() - 1].to_vec()
        } else {
            m[..m.len().saturating_sub(1)].to_vec()
        };
        for p in paths(code, "super::") {
            deps.extend(resolve(parent.clone(), &p));
        }
        if is_dir_module {
            // a directory module's `pub use child::…` depends on the child
            for p in paths(&code.replace("pub use ", "pub use self::"), "self::") {
                deps.extend(resolve(m.clone(), &p));
            }
        }
        let cut = |m: &Module| m[..depth.unwrap_or(m.len()).min(m.len())].to_vec();
        let at = cut(m);
        let deps: BTreeSet<Module> = deps.iter().map(cut).filter(|d| *d != at).collect();
        g.entry(at).or_insert_with(BTreeSet::new).extend(deps);
    }
    g.remove(&Vec::new());
    for deps in g.values_mut() {
        deps.remove(&Vec::new());
    }
    g
}

/// A cycle through `start`, if any (depth-first).
fn cycle_from(g: &BTreeMap<Module, BTreeSet<Module>>, start: &Module) -> Option<Vec<Module>> {
    fn walk(
        g: &BTreeMap<Module, BTreeSet<Module>>,
        start: &Module,
        at: &Module,
        path: &mut Vec<Module>,
        seen: &mut BTreeSet<Module>,
    ) -> bool {
        for next in g.get(at).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(g, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.clone()];
    walk(g, start, start, &mut path, &mut BTreeSet::new()).then_some(path)
}

fn cycles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    g.keys()
        .filter_map(|m| cycle_from(g, m))
        .map(|c| {
            c.iter()
                .map(|m| m.join("/"))
                .collect::<Vec<_>>()
                .join(" → ")
        })
        .collect()
}

fn module(path: &str) -> Module {
    path.split('/').map(str::to_string).collect()
}

#[test]
fn the_modules_of_the_proxy_import_each_other_without_a_cycle() {
    let g = graph("proxy", None);
    assert!(g.len() > 20, "the crate's modules were not found: {g:?}");
    assert!(
        g[&module("lanes/forward")].contains(&module("phases")),
        "the graph misses a known import"
    );
    let found = cycles(&g);
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_modules_of_the_companion_api_import_each_other_without_a_cycle() {
    let g = graph("companion-api", None);
    assert!(g.len() > 10, "the crate's modules were not found: {g:?}");
    let found = cycles(&g);
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_modules_of_the_gateway_import_each_other_without_a_cycle() {
    let g = graph("gateway", None);
    assert!(g.len() > 100, "the crate's modules were not found: {g:?}");
    assert!(
        g[&module("engine/workspace/hooks")].contains(&module("extensions")),
        "the graph misses a known import"
    );
    let found = cycles(&g);
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_subsystems_of_the_gateway_import_each_other_without_a_cycle() {
    let g = graph("gateway", Some(1));
    assert!(g.len() > 12, "the crate's modules were not found: {g:?}");
    assert!(
        g[&module("engine")].contains(&module("extensions")),
        "the graph misses a known import"
    );
    let found = cycles(&g);
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn only_the_binarys_start_reaches_into_the_turn_engine() {
    // The jobs beside the engine (Companion areas, human input, MCP, drafts, …) are handed
    // what they need (a session reader, a roster, a configuration), never the engine.
    let g = graph("gateway", Some(1));
    let engine = module("engine");
    let reaching: Vec<String> = g
        .iter()
        .filter(|(m, deps)| **m != engine && deps.contains(&engine))
        .map(|(m, _)| m.join("/"))
        .collect();
    assert_eq!(reaching, ["cli"], "subsystems importing the turn engine");
    for beside in ["companion", "human_input", "records"] {
        assert!(
            g.contains_key(&module(beside)),
            "{beside} is not a subsystem of its own"
        );
    }
}

#[test]
fn the_turns_state_machine_does_no_io_and_reads_no_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/src");
    let mut files = BTreeMap::new();
    modules(&src, &src.join("engine/turn_machine"), &mut files);
    assert!(
        files.len() >= 2,
        "the machine's files were not found: {:?}",
        files.keys()
    );
    // What a transition may not reach: the bus, the store's thread, the sandbox, the
    // extension host, the shell, the runtime, a clock, a random id.
    let forbidden = [
        "crate::bus",
        "crate::sandbox",
        "crate::extensions",
        "crate::store::Store",
        "lifecycle",
        "tokio::spawn",
        "tokio::time",
        "Instant::now",
        "SystemTime",
        "now_ms",
        "uuid::",
        ".submit(",
        ".publish(",
    ];
    let mut found = Vec::new();
    for (m, code) in &files {
        for f in forbidden {
            if code.contains(f) {
                found.push(format!("{}: {f}", m.join("/")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the state machine reaches out:\n{}",
        found.join("\n")
    );
}

/// Where the gateway's code may speak HTTP errors: the adapters between the subsystems and the
/// Companion API (each area's trait implementations and the gateway-side route modules).
const ADAPTERS: &[&str] = &["engine/areas", "engine/routes", "engine/workspace/area"];

/// The browser's page of an MCP sign-in is an HTTP surface of its own: it may pick a status,
/// never build a Companion API error.
const PAGE_SURFACES: &[&str] = &["mcp/oauth/redirect"];

/// Each whole-word use of `word` in `code` (an HTTP client's `reqwest::StatusCode`, which
/// reads a server's answer, is not one).
fn uses(code: &str, word: &str) -> usize {
    code.match_indices(word)
        .filter(|(at, _)| {
            let before = code[..*at].chars().last();
            let after = code[at + word.len()..].chars().next();
            let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            !ident(before) && !ident(after) && !code[..*at].ends_with("reqwest::")
        })
        .count()
}

/// The modules of the gateway (code only) that name an HTTP status or the Companion API's
/// error outside where they may.
fn http_errors_outside_adapters(files: &BTreeMap<Module, String>) -> Vec<String> {
    let under = |m: &Module, list: &[&str]| {
        list.iter().any(|p| {
            let p = module(p);
            m.starts_with(&p)
        })
    };
    let mut found = Vec::new();
    for (m, code) in files {
        if under(m, ADAPTERS) {
            continue;
        }
        for word in ["StatusCode", "ApiError", "ApiResult"] {
            if word == "StatusCode" && under(m, PAGE_SURFACES) {
                continue;
            }
            let n = uses(code, word);
            if n > 0 {
                found.push(format!("{}: {word} ({n}x)", m.join("/")));
            }
        }
    }
    found
}

#[test]
fn no_gateway_subsystem_names_an_http_status_or_an_api_error_outside_the_adapters() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/src");
    let mut files = BTreeMap::new();
    modules(&src, &src, &mut files);
    assert!(files.len() > 100, "the crate's modules were not found");
    for adapter in ADAPTERS.iter().chain(PAGE_SURFACES) {
        let m = module(adapter);
        assert!(
            files.keys().any(|k| k.starts_with(&m)),
            "the adapter {adapter} is gone: update the list"
        );
    }
    let found = http_errors_outside_adapters(&files);
    assert!(
        found.is_empty(),
        "map the subsystem's own error to the wire in its area's adapter instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_http_error_check_sees_a_status_in_a_subsystem_and_not_in_an_adapter_or_an_http_client() {
    let mut files = BTreeMap::new();
    let code = "use axum::http::StatusCode;\nfn f() -> vis_companion_api::ApiResult<()> { Ok(()) }";
    files.insert(module("drafts/service"), code.to_string());
    files.insert(module("engine/areas/sessions"), code.to_string());
    files.insert(
        module("mcp/oauth/redirect"),
        "use axum::http::StatusCode;".into(),
    );
    files.insert(
        module("mcp/oauth"),
        "if s != reqwest::StatusCode::OK {}".into(),
    );
    files.insert(module("engine/meta"), "fn f() -> MyApiErrorish {}".into());
    let found = http_errors_outside_adapters(&files);
    assert_eq!(
        found,
        [
            "drafts/service: StatusCode (1x)",
            "drafts/service: ApiResult (1x)"
        ]
    );
}
