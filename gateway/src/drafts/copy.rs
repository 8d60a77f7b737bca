//! The copy backend (a root outside any git repository). Blocking: run on a blocking thread.
//!
//! Create copies the trunk folder file by file — a reflink (`FICLONE`, copy-on-write, no
//! data copied) where the filesystem has them, else `std::fs::copy` (which uses
//! `copy_file_range`, in-kernel). Never hardlinks: an in-place write in the draft (`>>`,
//! an editor saving in place) would change trunk too. The baseline is a manifest of every
//! file's content hash, written next to the copy. Apply compares three states per file —
//! baseline, draft, trunk — and lands the draft's changes (writes and deletions) only when
//! no file the draft changed was also changed in trunk; otherwise it refuses and writes
//! nothing.

use super::DraftError;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Relative path → content hash (hex) of every regular file and symlink (`link:` + target).
pub type Manifest = BTreeMap<String, String>;

fn io(what: &str, p: &Path, e: std::io::Error) -> DraftError {
    DraftError::failed(format!("cannot {what} {}: {e}", p.display()))
}

fn hash_file(p: &Path) -> std::io::Result<String> {
    let meta = std::fs::symlink_metadata(p)?;
    if meta.file_type().is_symlink() {
        return Ok(format!("link:{}", std::fs::read_link(p)?.to_string_lossy()));
    }
    let mut f = std::fs::File::open(p)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// The content hash of `p`, `None` when it does not exist.
fn state_of(p: &Path) -> Result<Option<String>, DraftError> {
    match hash_file(p) {
        Ok(h) => Ok(Some(h)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("read", p, e)),
    }
}

/// Copies one file: a reflink when possible, else an in-kernel copy.
fn clone_file(src: &Path, dst: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let from = std::fs::File::open(src)?;
        let to = std::fs::File::create(dst)?;
        // SAFETY: both descriptors are open for the duration of the call.
        let r = unsafe { libc::ioctl(to.as_raw_fd(), libc::FICLONE, from.as_raw_fd()) };
        if r == 0 {
            to.set_permissions(from.metadata()?.permissions())?;
            return Ok(());
        }
    }
    std::fs::copy(src, dst).map(|_| ())
}

/// Every file under `root` (relative paths), skipping `skip` (the gateway's own folders).
fn walk(root: &Path, skip: &[PathBuf]) -> Result<Vec<(String, std::fs::FileType)>, DraftError> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let entries = std::fs::read_dir(&dir).map_err(|e| io("read", &dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io("read", &dir, e))?;
            let path = entry.path();
            if skip.iter().any(|s| path.starts_with(s)) {
                continue;
            }
            let ty = entry.file_type().map_err(|e| io("read", &path, e))?;
            let r = rel.join(entry.file_name());
            if ty.is_dir() {
                stack.push(r);
            } else if ty.is_file() || ty.is_symlink() {
                out.push((r.to_string_lossy().into_owned(), ty));
            }
        }
    }
    Ok(out)
}

/// Copies `src` into the new folder `dst` and returns the baseline manifest.
pub fn create(src: &Path, dst: &Path, skip: &[PathBuf]) -> Result<Manifest, DraftError> {
    std::fs::create_dir_all(dst).map_err(|e| io("make", dst, e))?;
    let mut manifest = Manifest::new();
    for (rel, ty) in walk(src, skip)? {
        let (from, to) = (src.join(&rel), dst.join(&rel));
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("make", parent, e))?;
        }
        if ty.is_symlink() {
            let target = std::fs::read_link(&from).map_err(|e| io("read", &from, e))?;
            std::os::unix::fs::symlink(&target, &to).map_err(|e| io("write", &to, e))?;
        } else {
            clone_file(&from, &to).map_err(|e| io("copy", &from, e))?;
        }
        let h = hash_file(&to).map_err(|e| io("read", &to, e))?;
        manifest.insert(rel, h);
    }
    Ok(manifest)
}

/// One file the draft changed: its new hash (`None`: deleted).
struct Change {
    rel: String,
    draft: Option<String>,
}

/// The files the draft changed since its baseline.
fn changes(draft: &Path, base: &Manifest) -> Result<Vec<Change>, DraftError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (rel, _) in walk(draft, &[])? {
        let h = state_of(&draft.join(&rel))?;
        if base.get(&rel) != h.as_ref() {
            out.push(Change {
                rel: rel.clone(),
                draft: h,
            });
        }
        seen.insert(rel);
    }
    for rel in base.keys().filter(|r| !seen.contains(*r)) {
        out.push(Change {
            rel: rel.clone(),
            draft: None,
        });
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// The changed files (for the approve hook's `files`).
pub fn changed_files(draft: &Path, base: &Manifest) -> Result<Vec<String>, DraftError> {
    Ok(changes(draft, base)?.into_iter().map(|c| c.rel).collect())
}

/// Lands the draft's changes in `trunk`; refuses, writing nothing, on any conflict.
pub fn apply(trunk: &Path, draft: &Path, base: &Manifest) -> Result<Vec<String>, DraftError> {
    let changes = changes(draft, base)?;
    let mut conflicts = Vec::new();
    let mut todo = Vec::new();
    for c in changes {
        let now = state_of(&trunk.join(&c.rel))?;
        if now == c.draft {
            continue; // trunk already has it
        }
        if now.as_ref() != base.get(&c.rel) {
            conflicts.push(c.rel);
            continue;
        }
        todo.push(c);
    }
    if !conflicts.is_empty() {
        return Err(DraftError::conflict(
            format!(
                "trunk changed files the draft also changes ({}): nothing was changed; \
                 reconcile them, then apply again",
                conflicts.join(", ")
            ),
            conflicts,
        ));
    }
    let mut landed = Vec::new();
    for c in todo {
        let (from, to) = (draft.join(&c.rel), trunk.join(&c.rel));
        match c.draft {
            None => match std::fs::remove_file(&to) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io("remove", &to, e))
                }
                _ => {}
            },
            Some(_) => {
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io("make", parent, e))?;
                }
                // Written beside, then renamed over: a reader never sees half a file.
                let tmp = to.with_file_name(format!(
                    ".{}.vis-draft",
                    to.file_name().unwrap_or_default().to_string_lossy()
                ));
                let meta = std::fs::symlink_metadata(&from).map_err(|e| io("read", &from, e))?;
                if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&from).map_err(|e| io("read", &from, e))?;
                    let _ = std::fs::remove_file(&tmp);
                    std::os::unix::fs::symlink(target, &tmp).map_err(|e| io("write", &tmp, e))?;
                } else {
                    clone_file(&from, &tmp).map_err(|e| io("write", &tmp, e))?;
                }
                std::fs::rename(&tmp, &to).map_err(|e| io("write", &to, e))?;
            }
        }
        landed.push(c.rel);
    }
    Ok(landed)
}

pub fn save_manifest(path: &Path, m: &Manifest) -> Result<(), DraftError> {
    let text = serde_json::to_vec(m).map_err(|e| DraftError::failed(e.to_string()))?;
    std::fs::write(path, text).map_err(|e| io("write", path, e))
}

pub fn load_manifest(path: &Path) -> Result<Manifest, DraftError> {
    let text = std::fs::read(path).map_err(|e| io("read", path, e))?;
    serde_json::from_slice(&text)
        .map_err(|e| DraftError::failed(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, t) in files {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, t).unwrap();
        }
        d
    }

    #[test]
    fn a_copy_draft_lands_edits_new_files_and_deletions() {
        let trunk = tree(&[("a.txt", "a"), ("sub/b.txt", "b"), ("gone.txt", "x")]);
        let place = tempfile::tempdir().unwrap();
        let draft = place.path().join("d");
        let m = create(trunk.path(), &draft, &[]).unwrap();
        assert_eq!(m.len(), 3);
        std::fs::write(draft.join("a.txt"), "a2").unwrap();
        std::fs::write(draft.join("sub/new.txt"), "n").unwrap();
        std::fs::remove_file(draft.join("gone.txt")).unwrap();
        assert_eq!(
            std::fs::read_to_string(trunk.path().join("a.txt")).unwrap(),
            "a"
        );
        let landed = apply(trunk.path(), &draft, &m).unwrap();
        assert_eq!(landed, vec!["a.txt", "gone.txt", "sub/new.txt"]);
        assert_eq!(
            std::fs::read_to_string(trunk.path().join("a.txt")).unwrap(),
            "a2"
        );
        assert!(!trunk.path().join("gone.txt").exists());
        assert_eq!(
            std::fs::read_to_string(trunk.path().join("sub/new.txt")).unwrap(),
            "n"
        );
    }

    #[test]
    fn a_file_changed_on_both_sides_refuses_the_whole_apply() {
        let trunk = tree(&[("a.txt", "a"), ("b.txt", "b")]);
        let place = tempfile::tempdir().unwrap();
        let draft = place.path().join("d");
        let m = create(trunk.path(), &draft, &[]).unwrap();
        std::fs::write(draft.join("a.txt"), "draft").unwrap();
        std::fs::write(draft.join("b.txt"), "draft b").unwrap();
        std::fs::write(trunk.path().join("a.txt"), "trunk").unwrap();
        let e = apply(trunk.path(), &draft, &m).unwrap_err();
        let DraftError::Conflict { files, .. } = e else {
            panic!("{e:?}");
        };
        assert_eq!(files, vec!["a.txt"]);
        assert_eq!(
            std::fs::read_to_string(trunk.path().join("a.txt")).unwrap(),
            "trunk"
        );
        assert_eq!(
            std::fs::read_to_string(trunk.path().join("b.txt")).unwrap(),
            "b"
        );
        assert_eq!(
            std::fs::read_to_string(draft.join("a.txt")).unwrap(),
            "draft"
        );
    }
}
