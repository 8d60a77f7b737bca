//! The design record lives in the repository: code, tests, scripts and docs cite decisions as
//! `(docs/decisions.md, P6)` and never point at specification files the repository does not
//! hold. This walks the repository's own text files and fails on a reference to such a file,
//! on a section sign (the outside specs' numbered sections), and on a decision code that
//! `docs/decisions.md` has no heading for.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Specification files that are not in the repository.
const OUTSIDE_SPECS: &[&str] = &["companion-api.md", "egress-proxy.md", "DECISIONS.md"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the repository")
        .to_path_buf()
}

/// The decision codes `docs/decisions.md` defines (its `### X9` headings).
fn defined_codes(decisions: &str) -> BTreeSet<String> {
    decisions
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| h.trim().to_string())
        .filter(|h| is_code(h))
        .collect()
}

/// `A1` … `M99`: one of the decision letters and one or two digits.
fn is_code(word: &str) -> bool {
    let mut chars = word.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    let digits: String = chars.collect();
    "AGPESWM".contains(first)
        && (1..=2).contains(&digits.len())
        && digits.chars().all(|c| c.is_ascii_digit())
}

/// The words of a line that look like decision codes (whole words only).
fn codes_in(line: &str) -> Vec<String> {
    line.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .filter(|w| is_code(w))
        .map(str::to_string)
        .collect()
}

/// What is wrong with one file's text (`path` is relative to the repository).
fn problems(path: &str, text: &str, codes: &BTreeSet<String>) -> Vec<String> {
    let in_docs = path.starts_with("docs/");
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("{path}:{}", i + 1);
        for spec in OUTSIDE_SPECS {
            if line.contains(spec) {
                out.push(format!(
                    "{at}: cites `{spec}`, which is not in the repository"
                ));
            }
        }
        // The Extension API reference is in the repository, as docs/extension-api.md.
        let bare_ext_api = line
            .match_indices("extension-api.md")
            .any(|(j, _)| !in_docs && !line[..j].ends_with("docs/"));
        if bare_ext_api {
            out.push(format!(
                "{at}: cites `extension-api.md`; the repository's is `docs/extension-api.md`"
            ));
        }
        if line.contains('§') {
            out.push(format!(
                "{at}: cites a numbered section of a specification outside the repository"
            ));
        }
        for code in codes_in(line) {
            if !codes.contains(&code) {
                out.push(format!("{at}: decision {code} is not in docs/decisions.md"));
            }
        }
    }
    out
}

fn is_checked(path: &str) -> bool {
    let text_kind = [".rs", ".py", ".md", ".sh"]
        .iter()
        .any(|e| path.ends_with(e))
        || path.starts_with("scripts/");
    text_kind && path != "docs/decisions.md" && path != "tests/tests/references.rs"
}

/// The repository's files, relative to its root (`.git`, `target` and vendored trees left out).
fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            let skip = name.starts_with('.')
                || name == "target"
                || name == "node_modules"
                || name == "__pycache__";
            if !skip {
                walk(root, &p, out);
            }
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

#[test]
fn every_decision_reference_points_into_the_repository() {
    let root = repo_root();
    let decisions =
        std::fs::read_to_string(root.join("docs/decisions.md")).expect("docs/decisions.md exists");
    let codes = defined_codes(&decisions);
    assert!(codes.contains("P6") && codes.contains("A4"), "{codes:?}");
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files.sort();
    let mut found = Vec::new();
    let mut checked = 0;
    for f in files.iter().filter(|f| is_checked(f)) {
        let Ok(text) = std::fs::read_to_string(root.join(f)) else {
            continue;
        };
        checked += 1;
        found.extend(problems(f, &text, &codes));
    }
    assert!(checked > 100, "only {checked} files were checked");
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_check_finds_outside_specs_sections_and_unknown_codes() {
    let codes: BTreeSet<String> = ["P6".to_string()].into();
    let text = "ok (docs/decisions.md, P6)\n\
                see companion-api.md\n\
                as §4.2 says\n\
                (docs/decisions.md, P77)\n\
                spec `extension-api.md` here\n\
                the [reference](docs/extension-api.md)\n\
                0xE1 and %C3 are not codes\n";
    let found = problems("gateway/src/x.rs", text, &codes);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0].starts_with("gateway/src/x.rs:2: cites `companion-api.md`"));
    assert!(found[1].starts_with("gateway/src/x.rs:3: cites a numbered section"));
    assert!(found[2].contains("decision P77 is not in docs/decisions.md"));
    assert!(found[3].starts_with("gateway/src/x.rs:5: cites `extension-api.md`"));
    // A relative link inside docs/ is the repository's own file.
    assert!(problems("docs/x.md", "[api](extension-api.md)", &codes).is_empty());
}

#[test]
fn decision_codes_are_whole_words_with_one_or_two_digits() {
    assert_eq!(
        codes_in("(docs/decisions.md, A4, E1–E10, P6)"),
        ["A4", "E1", "E10", "P6"]
    );
    assert!(codes_in("P100 XP6 P6x 0xE1 %C3").is_empty());
    assert_eq!(
        defined_codes("## Egress\n\n### P6\n\ntext\n### Wire rules\n"),
        ["P6".to_string()].into()
    );
}
