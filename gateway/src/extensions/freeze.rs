//! Frozen copies of extension import roots: a worker imports the admitted version of a file's modules, not what changed on disk since.
//!
//! A load copies the entry's import root into `<home>/python/frozen/<code-sha>/` and puts
//! that copy (not the live folder) first on the worker's `sys.path`, so helper modules an
//! extension imports are the bytes admitted at load time, in every worker, until the next
//! reload. `__file__` stays the real entry path.
//!
//! * a package entry (`<dir>/extension.py`): the whole `<dir>` (recursively, without
//!   `__pycache__`, `.git`, `.venv`, `venv`, `node_modules` and dot-files);
//! * a single-file entry: the `*.py` files next to it (its siblings are importable helpers).

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

const SKIP: &[&str] = &["__pycache__", ".git", ".venv", "venv", "node_modules"];

/// What a load executes: the entry's admitted bytes and the frozen import root.
#[derive(Debug, Clone)]
pub struct Frozen {
    pub import_root: PathBuf,
    pub source: Vec<u8>,
}

fn collect(
    dir: &Path,
    rel: &Path,
    recursive: bool,
    out: &mut Vec<(PathBuf, Vec<u8>)>,
) -> Result<()> {
    let mut children: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .flatten()
        .collect();
    children.sort_by_key(|e| e.file_name());
    for child in children {
        let name = child.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || SKIP.contains(&name.as_str()) {
            continue;
        }
        let path = child.path();
        if path.is_dir() {
            if recursive {
                collect(&path, &rel.join(&name), true, out)?;
            }
        } else if path.is_file() && (recursive || name.ends_with(".py")) {
            let bytes =
                std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            out.push((rel.join(&name), bytes));
        }
    }
    Ok(())
}

/// Freezes the import root of `entry` under `<home>/python/frozen/` (blocking IO).
pub fn freeze(home: &Path, entry: &Path) -> Result<Frozen> {
    let folder = entry
        .parent()
        .with_context(|| format!("{} has no folder", entry.display()))?;
    let is_package = entry.file_name().is_some_and(|n| n == "extension.py");
    let mut files = Vec::new();
    collect(folder, Path::new(""), is_package, &mut files)?;
    let entry_name = entry
        .file_name()
        .map(PathBuf::from)
        .with_context(|| format!("{} has no file name", entry.display()))?;
    if !files.iter().any(|(rel, _)| *rel == entry_name) {
        // The entry itself vanished between discovery and now.
        let bytes =
            std::fs::read(entry).with_context(|| format!("cannot read {}", entry.display()))?;
        files.push((entry_name.clone(), bytes));
    }
    let mut h = Sha256::new();
    h.update(folder.to_string_lossy().as_bytes());
    for (rel, bytes) in &files {
        h.update([0]);
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(Sha256::digest(bytes));
    }
    let sha = hex::encode(h.finalize());
    let base = home.join("python").join("frozen");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&base)
        .with_context(|| format!("cannot create {}", base.display()))?;
    let root = base.join(&sha[..24]);
    let source = files
        .iter()
        .find(|(rel, _)| *rel == entry_name)
        .map(|(_, b)| b.clone())
        .unwrap_or_default();
    if !root.join(".complete").exists() {
        let tmp = base.join(format!(".tmp-{}", uuid::Uuid::new_v4()));
        for (rel, bytes) in &files {
            let path = tmp.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)?;
            }
            std::fs::write(&path, bytes)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&tmp)?;
        std::fs::write(tmp.join(".complete"), sha.as_bytes())?;
        if std::fs::rename(&tmp, &root).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
            if !root.join(".complete").exists() {
                anyhow::bail!("cannot install the frozen copy {}", root.display());
            }
        }
    }
    Ok(Frozen {
        import_root: root,
        source,
    })
}

/// Removes every frozen copy (at host start: nothing runs from them yet).
pub fn clear(home: &Path) {
    let _ = std::fs::remove_dir_all(home.join("python").join("frozen"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_is_frozen_whole_and_a_single_file_with_its_python_siblings() {
        let d = std::env::temp_dir().join(format!("vis-freeze-{}", uuid::Uuid::new_v4()));
        let ext = d.join("ext");
        std::fs::create_dir_all(ext.join("pkg/sub")).expect("mkdir");
        std::fs::create_dir_all(ext.join("pkg/__pycache__")).expect("mkdir");
        std::fs::write(ext.join("pkg/extension.py"), "E").expect("w");
        std::fs::write(ext.join("pkg/sub/helper.py"), "H").expect("w");
        std::fs::write(ext.join("pkg/data.json"), "{}").expect("w");
        std::fs::write(ext.join("pkg/__pycache__/x.pyc"), "c").expect("w");
        std::fs::write(ext.join("single.py"), "S").expect("w");
        std::fs::write(ext.join("common.py"), "C").expect("w");
        std::fs::write(ext.join("notes.txt"), "n").expect("w");
        let home = d.join("home");
        let p = freeze(&home, &ext.join("pkg/extension.py")).expect("freeze pkg");
        assert_eq!(p.source, b"E");
        assert!(p.import_root.join("sub/helper.py").exists());
        assert!(p.import_root.join("data.json").exists());
        assert!(!p.import_root.join("__pycache__").exists());
        let s = freeze(&home, &ext.join("single.py")).expect("freeze single");
        assert_eq!(s.source, b"S");
        assert!(s.import_root.join("common.py").exists());
        assert!(!s.import_root.join("notes.txt").exists());
        assert!(!s.import_root.join("pkg").exists());
        let again = freeze(&home, &ext.join("single.py")).expect("again");
        assert_eq!(again.import_root, s.import_root);
        std::fs::write(ext.join("common.py"), "C2").expect("w");
        let changed = freeze(&home, &ext.join("single.py")).expect("changed");
        assert_ne!(changed.import_root, s.import_root);
        let _ = std::fs::remove_dir_all(&d);
    }
}
