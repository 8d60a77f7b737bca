//! The Python SDK (`gateway/python/blockether`) shipped inside the binary.
//!
//! Every file is embedded with `include_bytes!` (so cargo rebuilds when one changes); a unit
//! test fails when a file is added to or removed from the SDK without updating [`FILES`].
//! At worker start the tree is written once to `<home>/python/<content-hash>/` (mode 0700),
//! which the worker puts first on `sys.path`.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

macro_rules! sdk {
    ($($rel:literal),* $(,)?) => {
        &[$(($rel, include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/python/", $rel)) as &[u8])),*]
    };
}

/// `(path relative to the import root, bytes)` of every SDK file.
pub const FILES: &[(&str, &[u8])] = sdk![
    "blockether/__init__.py",
    "blockether/vis/__init__.py",
    "blockether/vis/extension/__init__.py",
    "blockether/vis/extension/_activity.py",
    "blockether/vis/extension/_contract.py",
    "blockether/vis/extension/_decl.py",
    "blockether/vis/extension/_environ.py",
    "blockether/vis/extension/_forms.py",
    "blockether/vis/extension/_host.py",
    "blockether/vis/extension/_legacy.py",
    "blockether/vis/extension/_live.py",
    "blockether/vis/extension/_loader.py",
    "blockether/vis/extension/_procs.py",
    "blockether/vis/extension/_provider.py",
    "blockether/vis/extension/_registry.py",
    "blockether/vis/extension/_runtime.py",
    "blockether/vis/extension/_symbol.py",
    "blockether/vis/extension/_types.py",
    "blockether/vis/extension/_util.py",
];

/// The worker's own Python glue (not part of the SDK package).
pub const GLUE: &str = include_str!("worker_glue.py");

/// Hex SHA-256 over every embedded file (path and bytes) and the glue.
pub fn content_hash() -> String {
    let mut h = Sha256::new();
    for (rel, bytes) in FILES {
        h.update(rel.as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    h.update(GLUE.as_bytes());
    hex::encode(h.finalize())
}

fn mkdir_private(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot restrict {}", dir.display()))
}

/// Writes the SDK under `<home>/python/<hash>/` unless it is already there, and returns
/// that import root. Several workers may race: each writes a private temporary folder and
/// renames it into place; the loser removes its copy.
pub fn materialize(home: &Path) -> Result<PathBuf> {
    let base = home.join("python");
    mkdir_private(&base)?;
    let hash = content_hash();
    let root = base.join(&hash[..24]);
    if root.join(".complete").exists() {
        return Ok(root);
    }
    let tmp = base.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    mkdir_private(&tmp)?;
    for (rel, bytes) in FILES {
        let path = tmp.join(rel);
        if let Some(parent) = path.parent() {
            mkdir_private(parent)?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    std::fs::write(tmp.join(".complete"), hash.as_bytes())?;
    match std::fs::rename(&tmp, &root) {
        Ok(()) => {}
        Err(_) if root.join(".complete").exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e).with_context(|| format!("cannot install the SDK at {}", root.display()));
        }
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).expect("read sdk dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "__pycache__") {
                    walk(&p, root, out);
                }
            } else if p.extension().is_some_and(|x| x == "py") {
                let rel = p.strip_prefix(root).expect("prefix");
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }

    #[test]
    fn every_sdk_file_on_disk_is_embedded_and_nothing_else() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
        let mut on_disk = Vec::new();
        walk(&root.join("blockether"), &root, &mut on_disk);
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(r, _)| r.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "update extensions::embed::FILES");
    }

    #[test]
    fn materializing_twice_reuses_one_private_folder() {
        let home = std::env::temp_dir().join(format!("vis-embed-{}", uuid::Uuid::new_v4()));
        let a = materialize(&home).expect("first");
        let b = materialize(&home).expect("second");
        assert_eq!(a, b);
        assert!(a.join("blockether/vis/extension/_host.py").exists());
        let mode = std::fs::metadata(&a).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let _ = std::fs::remove_dir_all(&home);
    }
}
