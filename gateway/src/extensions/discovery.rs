//! Discovery of extension entry files (docs/decisions.md, E7).
//!
//! `<home>/extensions/` (global) and `<project>/.vis/extensions/` (project): top-level `*.py`
//! files except `test_*.py` / `*_test.py`, and folders holding `extension.py`. Children are
//! visited sorted by name; dot-names are skipped; entries are de-duplicated by canonical path.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The global extensions folder of a Vis home.
pub fn global_dir(home: &Path) -> PathBuf {
    home.join("extensions")
}

/// The extensions folder of a project.
pub fn project_dir(project_root: &Path) -> PathBuf {
    project_root.join(".vis").join("extensions")
}

fn is_test_file(name: &str) -> bool {
    name.starts_with("test_") || name.ends_with("_test.py")
}

/// Canonical entry files under `dir` (empty when the folder does not exist).
pub fn entries(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut children: Vec<(String, PathBuf)> = read
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(name, _)| !name.starts_with('.'))
        .collect();
    children.sort();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (name, path) in children {
        let entry = if path.is_dir() {
            let candidate = path.join("extension.py");
            if !candidate.is_file() {
                continue;
            }
            candidate
        } else if path.is_file() && name.ends_with(".py") && !is_test_file(&name) {
            path
        } else {
            continue;
        };
        let canonical = std::fs::canonicalize(&entry).unwrap_or(entry);
        if seen.insert(canonical.clone()) {
            out.push(canonical);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_files_and_package_folders_are_entries_but_tests_are_not() {
        let d = std::env::temp_dir().join(format!("vis-disc-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(d.join("pkg")).expect("mkdir");
        std::fs::create_dir_all(d.join("nopkg")).expect("mkdir");
        std::fs::create_dir_all(d.join(".hidden")).expect("mkdir");
        for f in [
            "b.py",
            "a.py",
            "test_a.py",
            "a_test.py",
            "notes.txt",
            "pkg/extension.py",
            "pkg/helper.py",
            "nopkg/other.py",
            ".hidden/extension.py",
            ".dot.py",
        ] {
            std::fs::write(d.join(f), "").expect("write");
        }
        let names: Vec<String> = entries(&d)
            .iter()
            .map(|p| {
                p.strip_prefix(std::fs::canonicalize(&d).expect("canon"))
                    .expect("prefix")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, vec!["a.py", "b.py", "pkg/extension.py"]);
        assert!(entries(&d.join("missing")).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }
}
