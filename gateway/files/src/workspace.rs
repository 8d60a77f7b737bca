//! The roots a session may touch, and the resolution of model-given paths inside them.

use std::path::{Component, Path, PathBuf};

use crate::FileError;

/// The roots a session may touch. Paths given by the model are relative to the first root (the
/// workspace) or absolute inside one of the roots. Roots are stored canonical (symlinks resolved).
#[derive(Debug, Clone)]
pub struct Workspace {
    roots: Vec<PathBuf>,
}

impl Workspace {
    /// Canonicalizes every root; fails if there is none or one does not exist.
    pub fn new(roots: Vec<PathBuf>) -> Result<Workspace, FileError> {
        if roots.is_empty() {
            return Err(FileError::BadArgument(
                "a workspace needs at least one root directory".into(),
            ));
        }
        let mut canonical = Vec::with_capacity(roots.len());
        for root in roots {
            let shown = root.display().to_string();
            let c = root
                .canonicalize()
                .map_err(|e| FileError::io(&root, &shown, e))?;
            if !c.is_dir() {
                return Err(FileError::BadArgument(format!(
                    "workspace root `{shown}` is not a directory"
                )));
            }
            canonical.push(c);
        }
        Ok(Workspace { roots: canonical })
    }

    /// The canonical roots; the first one is the workspace proper.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Resolves a model-given path to a canonical host path inside one of the roots. Refuses
    /// anything that escapes every root: `..` out of it, absolute paths elsewhere, and symlinks
    /// whose target leaves the roots. A path that does not exist yet is accepted when its nearest
    /// existing ancestor is inside a root (the missing tail is normalized lexically).
    /// `""` and `"."` are the first root.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, FileError> {
        if path.contains('\0') {
            return Err(FileError::BadArgument(format!(
                "path {path:?} contains a NUL character"
            )));
        }
        let given = Path::new(path);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.roots[0].join(given)
        };
        let outside = || FileError::OutsideWorkspace {
            path: path.to_string(),
        };
        let resolved = canonicalize_allowing_missing_tail(&joined).map_err(|e| match e {
            TailError::Escapes => outside(),
            TailError::Io(p, e) => FileError::io(&p, path, e),
        })?;
        if self.roots.iter().any(|r| resolved.starts_with(r)) {
            Ok(resolved)
        } else {
            Err(outside())
        }
    }

    /// The path as shown to the model: relative to the first root when inside it (`.` for the
    /// root itself), else absolute.
    pub fn display(&self, p: &Path) -> String {
        match p.strip_prefix(&self.roots[0]) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => p.display().to_string(),
        }
    }
}

enum TailError {
    Escapes,
    Io(PathBuf, std::io::Error),
}

/// Canonicalizes the longest existing prefix of `path` (resolving symlinks there) and appends
/// the missing tail with `.`/`..` applied lexically: nothing in it exists, so no symlink can hide
/// in it. A dangling symlink at the edge is refused, since creating through it could land anywhere.
fn canonicalize_allowing_missing_tail(path: &Path) -> Result<PathBuf, TailError> {
    for ancestor in path.ancestors() {
        match ancestor.canonicalize() {
            Ok(base) => {
                let tail = path.strip_prefix(ancestor).unwrap_or(Path::new(""));
                return apply_tail(base, tail);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if ancestor.is_symlink() {
                    return Err(TailError::Escapes);
                }
            }
            Err(e) => return Err(TailError::Io(ancestor.to_path_buf(), e)),
        }
    }
    Err(TailError::Io(
        path.to_path_buf(),
        std::io::ErrorKind::NotFound.into(),
    ))
}

fn apply_tail(mut out: PathBuf, tail: &Path) -> Result<PathBuf, TailError> {
    for component in tail.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(TailError::Escapes);
                }
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::Prefix(_) => return Err(TailError::Escapes),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        fs::create_dir_all(root.join("src")).expect("mkdir");
        fs::write(root.join("src/main.rs"), "fn main() {}\n").expect("write");
        let ws = Workspace::new(vec![root]).expect("workspace");
        (dir, ws)
    }

    #[test]
    fn a_relative_path_resolves_inside_the_first_root_and_displays_relative() {
        let (_d, ws) = setup();
        let p = ws.resolve("src/main.rs").expect("resolve");
        assert_eq!(p, ws.roots()[0].join("src/main.rs"));
        assert_eq!(ws.display(&p), "src/main.rs");
        assert_eq!(ws.display(&ws.resolve(".").expect("root")), ".");
        assert_eq!(ws.resolve("").expect("empty"), ws.roots()[0]);
    }

    #[test]
    fn dot_dot_out_of_the_workspace_is_refused() {
        let (_d, ws) = setup();
        for p in ["../x", "src/../../x", "missing/../../x", "../ws/../x"] {
            let e = ws.resolve(p).expect_err(p);
            assert_eq!(e.kind(), "outside-workspace", "{p}: {e}");
        }
        // Coming back in is fine.
        assert!(ws.resolve("../ws/src/main.rs").is_ok());
    }

    #[test]
    fn an_absolute_path_outside_every_root_is_refused() {
        let (_d, ws) = setup();
        let e = ws.resolve("/etc/passwd").expect_err("outside");
        assert!(matches!(e, FileError::OutsideWorkspace { .. }), "{e}");
        let inside = ws.roots()[0].join("src/main.rs");
        assert!(ws.resolve(&inside.display().to_string()).is_ok());
    }

    #[test]
    fn a_symlink_inside_the_workspace_pointing_outside_is_refused() {
        let (d, ws) = setup();
        let secret = d.path().join("secret.txt");
        fs::write(&secret, "secret\n").expect("write");
        std::os::unix::fs::symlink(&secret, ws.roots()[0].join("link.txt")).expect("symlink");
        std::os::unix::fs::symlink(d.path(), ws.roots()[0].join("up")).expect("symlink");
        for p in ["link.txt", "up/secret.txt", "up/new-file.txt"] {
            let e = ws.resolve(p).expect_err(p);
            assert!(matches!(e, FileError::OutsideWorkspace { .. }), "{p}: {e}");
        }
    }

    #[test]
    fn a_missing_path_is_checked_through_its_nearest_existing_ancestor() {
        let (_d, ws) = setup();
        let p = ws
            .resolve("src/new/dir/file.rs")
            .expect("missing but inside");
        assert_eq!(p, ws.roots()[0].join("src/new/dir/file.rs"));
        let p = ws.resolve("new/../src/./x.rs").expect("normalized");
        assert_eq!(p, ws.roots()[0].join("src/x.rs"));
    }

    #[test]
    fn a_second_root_is_reachable_by_absolute_path_and_displayed_absolute() {
        let (d, _) = setup();
        let other = d.path().join("other");
        fs::create_dir_all(&other).expect("mkdir");
        fs::write(other.join("notes.md"), "hi\n").expect("write");
        let ws = Workspace::new(vec![d.path().join("ws"), other.clone()]).expect("ws");
        let abs = other.canonicalize().expect("canon").join("notes.md");
        let p = ws.resolve(&abs.display().to_string()).expect("second root");
        assert_eq!(ws.display(&p), abs.display().to_string());
    }

    #[test]
    fn a_workspace_root_that_does_not_exist_is_an_error() {
        let d = tempfile::tempdir().expect("tempdir");
        let e = Workspace::new(vec![d.path().join("nope")]).expect_err("missing root");
        assert_eq!(e.kind(), "not-found");
    }
}
