//! The providers added from the phone, with their keys: `<home>/provider-keys.json`, mode
//! 0600, written atomically. Never in the database, never in a GET answer, never logged
//! (`Debug` hides the key).

use std::path::{Path, PathBuf};

pub use crate::providers::{Saved, SavedProvider};

pub fn path(home: &Path) -> PathBuf {
    home.join("provider-keys.json")
}

/// The saved providers; a missing file is none, a broken one an error naming it (never
/// quoting its content, which holds keys).
pub fn load(home: &Path) -> Result<Saved, String> {
    let p = path(home);
    match std::fs::read(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Saved::new()),
        Err(e) => Err(format!("cannot read {}: {e}", p.display())),
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{} is not a valid provider list (line {}, column {})",
                p.display(),
                e.line(),
                e.column()
            )
        }),
    }
}

/// Writes the list (0600 from the first byte; replaced by rename).
pub fn save(home: &Path, saved: &Saved) -> Result<(), String> {
    let p = path(home);
    let text = serde_json::to_vec_pretty(saved).map_err(|e| e.to_string())?;
    crate::home::write_private(&p, &text).map_err(|e| format!("cannot write {}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn entry(key: &str) -> SavedProvider {
        SavedProvider {
            preset: "openai".into(),
            label: "OpenAI".into(),
            api_style: "openai".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: Some(key.into()),
            models: vec!["m".into()],
            extension: None,
        }
    }

    #[test]
    fn saved_keys_round_trip_in_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty());
        let mut s = Saved::new();
        s.insert("openai".into(), entry("sk-phone-1"));
        save(dir.path(), &s).unwrap();
        assert_eq!(load(dir.path()).unwrap(), s);
        let mode = std::fs::metadata(path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_broken_file_is_named_without_quoting_its_keys() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), "{\"openai\": sk-broken-key").unwrap();
        let e = load(dir.path()).unwrap_err();
        assert!(e.contains("provider-keys.json"), "{e}");
        assert!(!e.contains("sk-broken-key"), "{e}");
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let s = format!("{:?}", entry("sk-secret-9"));
        assert!(!s.contains("sk-secret-9"), "{s}");
    }
}
