//! The `vis.fs` doors' file work: where a path given by extension code lands (relative
//! paths from the session's workspace, links resolved), and the operations themselves.
//! The gates are consulted by the caller (`doors/mod.rs`) before anything here runs.

use crate::extensions::client::DoorError;
use crate::extensions::types::file_str;
use base64::Engine;
use serde_json::{json, Value};
use std::path::{Component, Path, PathBuf};

fn io_error(e: std::io::Error, path: &Path) -> DoorError {
    use std::io::ErrorKind as K;
    let kind = match e.kind() {
        K::NotFound => "FileNotFoundError",
        K::PermissionDenied => "PermissionError",
        K::AlreadyExists => "FileExistsError",
        _ => "OSError",
    };
    DoorError::typed(kind, format!("{}: {e}", path.display()))
}

/// Lexical normalization: `.` dropped, `..` pops (never above the root).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Resolves symlinks of the longest existing ancestor, keeping the missing tail.
fn resolve_existing(p: &Path) -> PathBuf {
    let mut tail = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        if let Ok(real) = std::fs::canonicalize(&cur) {
            let mut out = real;
            for t in tail.iter().rev() {
                out.push(t);
            }
            return out;
        }
        match (cur.file_name().map(|f| f.to_os_string()), cur.parent()) {
            (Some(name), Some(parent)) => {
                tail.push(name);
                cur = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// The absolute, symlink-resolved path `raw` names: an absolute path as it is, a relative
/// one from `base` (the session's workspace). `vis.fs` acts with the extension's own
/// permissions, so nothing confines it to the workspace (the `fs_access` gates still run).
pub(super) fn locate(base: Option<&Path>, raw: &str) -> Result<PathBuf, DoorError> {
    let p = Path::new(raw);
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        match base {
            Some(b) => b.join(p),
            None => {
                return Err(DoorError::typed(
                    "ValueError",
                    format!("vis.fs: {raw} is relative and no session's workspace applies; use an absolute path"),
                ))
            }
        }
    };
    Ok(resolve_existing(&normalize(&joined)))
}

pub(super) fn bytes_of(v: Option<&Value>) -> Result<Vec<u8>, DoorError> {
    match v {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Object(o)) => match o.get("__vis_bytes__").and_then(Value::as_str) {
            Some(b) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| DoorError::typed("ValueError", format!("bad bytes: {e}"))),
            None => Err(DoorError::typed("TypeError", "data must be bytes")),
        },
        _ => Err(DoorError::typed("TypeError", "data must be bytes")),
    }
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DoorError> + Send + 'static,
) -> Result<T, DoorError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DoorError::new(format!("vis.fs task failed: {e}")))?
}

pub(super) fn fs_apply(
    op: &str,
    paths: &[PathBuf],
    data: Option<Vec<u8>>,
    append: bool,
) -> Result<Value, DoorError> {
    use std::io::Write;
    let Some(p) = paths.first() else {
        return Err(DoorError::new("vis.fs: no path"));
    };
    match op {
        "fs_read" => {
            let bytes = std::fs::read(p).map_err(|e| io_error(e, p))?;
            Ok(json!({"__vis_bytes__": base64::engine::general_purpose::STANDARD.encode(bytes)}))
        }
        "fs_write" => {
            let data = data.unwrap_or_default();
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(append)
                .truncate(!append)
                .open(p)
                .map_err(|e| io_error(e, p))?;
            f.write_all(&data).map_err(|e| io_error(e, p))?;
            Ok(Value::Null)
        }
        "fs_list" => {
            let mut names: Vec<String> = std::fs::read_dir(p)
                .map_err(|e| io_error(e, p))?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            Ok(json!(names))
        }
        "fs_stat" => {
            let m = std::fs::symlink_metadata(p).map_err(|e| io_error(e, p))?;
            use std::os::unix::fs::MetadataExt;
            Ok(json!({
                "path": file_str(p),
                "size": m.len(),
                "is_dir": m.is_dir(),
                "is_file": m.is_file(),
                "is_symlink": m.file_type().is_symlink(),
                "mode": m.mode() & 0o7777,
                "mtime": m.mtime() as f64 + m.mtime_nsec() as f64 / 1e9,
            }))
        }
        "fs_exists" => Ok(Value::Bool(p.exists())),
        "fs_remove" => {
            let Ok(m) = std::fs::symlink_metadata(p) else {
                return Ok(Value::Bool(false));
            };
            let r = if m.is_dir() {
                std::fs::remove_dir_all(p)
            } else {
                std::fs::remove_file(p)
            };
            r.map(|_| Value::Bool(true)).map_err(|e| io_error(e, p))
        }
        "fs_mkdir" => {
            if p.is_dir() {
                return Ok(Value::Bool(false));
            }
            std::fs::create_dir_all(p)
                .map(|_| Value::Bool(true))
                .map_err(|e| io_error(e, p))
        }
        "fs_copy" | "fs_move" => {
            let Some(dst) = paths.get(1) else {
                return Err(DoorError::new("vis.fs: no destination"));
            };
            if op == "fs_move" {
                std::fs::rename(p, dst).map_err(|e| io_error(e, p))?;
            } else {
                std::fs::copy(p, dst).map_err(|e| io_error(e, p))?;
            }
            Ok(Value::Null)
        }
        other => Err(DoorError::new(format!("unknown host operation '{other}'"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vis_fs_paths_resolve_inside_and_outside_the_workspace() {
        let root = std::env::temp_dir().join(format!("vis-conf-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        let real = std::fs::canonicalize(&root).expect("canon");
        let base = Some(real.as_path());
        assert_eq!(
            locate(base, "sub/x.txt").expect("inside"),
            real.join("sub/x.txt")
        );
        assert_eq!(locate(base, "sub/../y").expect("inside"), real.join("y"));
        let parent = real.parent().expect("parent");
        assert_eq!(
            locate(base, "../outside").expect("outside"),
            parent.join("outside")
        );
        assert_eq!(
            locate(base, "/etc/passwd").expect("absolute"),
            std::fs::canonicalize("/etc/passwd").expect("canon")
        );
        std::os::unix::fs::symlink("/etc", root.join("link")).expect("symlink");
        assert_eq!(
            locate(base, "link/hostname").expect("through a link"),
            std::fs::canonicalize("/etc")
                .expect("canon")
                .join("hostname")
        );
        assert!(locate(None, "relative").is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
