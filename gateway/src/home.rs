//! The Vis home: database, token file, the running-gateway registry and its lock.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Home {
    pub dir: PathBuf,
}

/// What a running gateway writes so that `status`, `stop`, `pair` and `exec` find it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registry {
    pub pid: u32,
    pub url: String,
    pub host: String,
    pub port: u16,
    pub token: String,
    pub require_token: bool,
    #[serde(default)]
    pub proxy_port: Option<u16>,
    pub started_at: i64,
}

impl Home {
    /// `--home`, else `VIS_HOME`, else `~/.vis`.
    pub fn resolve(flag: Option<PathBuf>) -> Result<Home> {
        let dir = match flag.or_else(|| std::env::var_os("VIS_HOME").map(PathBuf::from)) {
            Some(d) => d,
            None => {
                let home = std::env::var_os("HOME")
                    .context("HOME is not set; pass --home or set VIS_HOME")?;
                PathBuf::from(home).join(".vis")
            }
        };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create the Vis home {}", dir.display()))?;
        // Transcripts, tokens and extension state live here: private to the user.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).with_context(
            || {
                format!(
                    "cannot restrict the Vis home {} to its owner",
                    dir.display()
                )
            },
        )?;
        Ok(Home { dir })
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.join("vis.db")
    }
    pub fn registry_path(&self) -> PathBuf {
        self.dir.join("gateway.json")
    }
    pub fn default_token_path(&self) -> PathBuf {
        self.dir.join("gateway.token")
    }

    /// Takes the one-gateway-per-database lock; held until the returned file is dropped.
    pub fn lock(&self) -> Result<File> {
        let path = self.dir.join("gateway.lock");
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        // SAFETY: flock on a descriptor we own; no memory is shared with the kernel.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let who = self
                .read_registry()
                .map(|r| format!(" (pid {}, {})", r.pid, r.url))
                .unwrap_or_default();
            bail!("a gateway is already running on this database{who}; stop it with `vis-gateway stop`");
        }
        Ok(f)
    }

    pub fn write_registry(&self, r: &Registry) -> Result<()> {
        write_private(
            &self.registry_path(),
            serde_json::to_string_pretty(r)?.as_bytes(),
        )
    }

    pub fn read_registry(&self) -> Option<Registry> {
        let text = std::fs::read_to_string(self.registry_path()).ok()?;
        serde_json::from_str(&text).ok()
    }

    pub fn remove_registry(&self) {
        let _ = std::fs::remove_file(self.registry_path());
    }
}

/// Reads the token file, creating it (random UUID, mode 0600, atomically) on first run.
pub fn load_or_create_token(path: &Path) -> Result<String> {
    if let Ok(t) = std::fs::read_to_string(path) {
        let t = t.trim().to_string();
        if !t.is_empty() {
            return Ok(t);
        }
    }
    let token = uuid::Uuid::new_v4().to_string();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    write_private(path, token.as_bytes())
        .with_context(|| format!("cannot write the token file {}", path.display()))?;
    Ok(token)
}

/// Writes a file with mode 0600 from its first byte, via a temporary file and a rename (a
/// stale temporary file is removed first: opening an existing one would keep its mode).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    {
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Whether a process with this pid exists.
impl Home {
    /// A gateway of this home holds its lock now (a registry whose process died leaves the
    /// lock free, and its pid may since belong to an unrelated process).
    pub fn lock_held(&self) -> bool {
        let Ok(f) = OpenOptions::new()
            .read(true)
            .open(self.dir.join("gateway.lock"))
        else {
            return false;
        };
        // SAFETY: flock on a descriptor we own; closing it releases a lock we took.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        rc != 0
    }
}

pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_token_file_is_created_private_and_then_reused() {
        let dir = std::env::temp_dir().join(format!("vis-home-test-{}", uuid::Uuid::new_v4()));
        let path = dir.join("gateway.token");
        let a = load_or_create_token(&path).unwrap();
        let b = load_or_create_token(&path).unwrap();
        assert_eq!(a, b);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_second_lock_on_the_same_home_is_refused() {
        let dir = std::env::temp_dir().join(format!("vis-home-test-{}", uuid::Uuid::new_v4()));
        let home = Home::resolve(Some(dir.clone())).unwrap();
        let _held = home.lock().unwrap();
        let err = home.lock().unwrap_err().to_string();
        assert!(err.contains("a gateway is already running"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
