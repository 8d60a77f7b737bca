//! The folder browser a person uses to pick a project (`GET /v1/fs`, `POST /v1/fs/actions/mkdir`):
//! sub-folders of the gateway user's home or of any absolute path, and making one. The
//! filesystem work runs on a blocking thread.

use super::error::{WorkspaceError, WorkspaceResult};
use std::path::{Component, Path, PathBuf};
use vis_companion_api::records::BrowseEntry;
use vis_companion_api::FolderListing;

/// Most folders one listing shows.
const MAX_ENTRIES: usize = 400;

fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/".into()))
}

/// The sub-folders of `path` (default: home), without dot-folders, sorted, at most
/// [`MAX_ENTRIES`].
pub async fn list(path: Option<String>) -> WorkspaceResult<FolderListing> {
    let home = home().to_string_lossy().into_owned();
    let path = path.unwrap_or_else(|| home.clone());
    let dir = PathBuf::from(&path);
    let listing = tokio::task::spawn_blocking(move || read_folders(&dir))
        .await
        .map_err(|e| WorkspaceError::Internal(e.to_string()))?;
    let (entries, is_truncated) = listing.map_err(|e| WorkspaceError::Unlistable {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let parent = Path::new(&path)
        .parent()
        .map(|p| p.to_string_lossy().into_owned());
    Ok(FolderListing {
        path,
        parent,
        home,
        is_truncated,
        entries,
    })
}

fn read_folders(dir: &Path) -> std::io::Result<(Vec<BrowseEntry>, bool)> {
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    let truncated = names.len() > MAX_ENTRIES;
    let entries = names
        .into_iter()
        .take(MAX_ENTRIES)
        .map(|name| {
            let p = dir.join(&name);
            BrowseEntry {
                entry_count: std::fs::read_dir(&p).map(|r| r.count()).unwrap_or(0) as u64,
                is_repo: p.join(".git").exists(),
                path: p.to_string_lossy().into_owned(),
                name,
                branch: None,
            }
        })
        .collect();
    Ok((entries, truncated))
}

/// Checks a new folder's `path` (absolute or `~…`, no `..`) and `name` (one plain segment).
pub fn target(path: &str, name: &str) -> WorkspaceResult<PathBuf> {
    let bad = WorkspaceError::BadPath;
    let path = path.trim();
    if path.is_empty() {
        return Err(bad("path is required".into()));
    }
    let parent = if path == "~" {
        home()
    } else if let Some(rest) = path.strip_prefix("~/") {
        home().join(rest)
    } else {
        PathBuf::from(path)
    };
    if !parent.is_absolute() {
        return Err(bad(format!(
            "path must be absolute or start with ~: {path:?}"
        )));
    }
    if path.split('/').any(|seg| seg == "." || seg == "..")
        || parent
            .components()
            .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(bad(format!(
            "path must not contain . or .. segments: {path:?}"
        )));
    }
    let name = name.trim();
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\\')
        && !name.chars().any(|c| c.is_control())
        && name.len() <= 255;
    if !plain {
        return Err(WorkspaceError::BadName {
            name: name.to_string(),
        });
    }
    Ok(parent.join(name))
}

/// Makes the folder `name` in `path`: 404 when `path` is not a folder, 409 when the folder
/// exists, 403 when the system refuses.
pub async fn make(path: &str, name: &str) -> WorkspaceResult<BrowseEntry> {
    let target = target(path, name)?;
    tokio::task::spawn_blocking(move || make_blocking(target))
        .await
        .map_err(|e| WorkspaceError::Internal(e.to_string()))?
}

fn make_blocking(target: PathBuf) -> WorkspaceResult<BrowseEntry> {
    let parent = target.parent().map(PathBuf::from).unwrap_or_default();
    if !parent.is_dir() {
        return Err(WorkspaceError::NotADirectory { path: parent });
    }
    match std::fs::create_dir(&target) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(WorkspaceError::AlreadyExists { path: target })
        }
        Err(e) => {
            return Err(WorkspaceError::MkdirRefused {
                path: target,
                reason: e.to_string(),
            })
        }
    }
    Ok(BrowseEntry {
        name: target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        path: target.to_string_lossy().into_owned(),
        entry_count: 0,
        is_repo: false,
        branch: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_folder_refuses_dot_dot_in_the_path_and_the_name() {
        for (path, name) in [
            ("/tmp/../etc", "x"),
            ("/tmp", ".."),
            ("/tmp", "a/b"),
            ("/tmp", ""),
            ("relative/dir", "x"),
            ("/tmp/./x", "y"),
        ] {
            let e = vis_companion_api::ApiError::from(target(path, name).unwrap_err());
            assert_eq!(e.status.as_u16(), 400, "{path} {name}");
        }
        assert_eq!(target("/tmp", "new").unwrap(), PathBuf::from("/tmp/new"));
    }
}
