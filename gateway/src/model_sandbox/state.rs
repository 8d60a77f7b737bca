//! What of a session's sandbox outlives its runtime process: the source of every top-level
//! `def` and `class` the model ran (the runtime reports them after each block), kept in
//! memory and in a small JSON file under the gateway's home, so a restarted runtime (the
//! block's limit, a cancel, a crash, a gateway restart) gets the model's functions back by
//! re-running those statements, and nothing else.

use super::protocol::Def;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The model's definitions in the order they were made (a redefinition moves to the end).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Defs {
    /// A runtime of this session ran a block (a later first block means it restarted).
    #[serde(default)]
    pub was_used: bool,
    #[serde(default)]
    pub list: Vec<Def>,
}

impl Defs {
    /// Takes the runtime's current list; whether it differs.
    pub fn replace(&mut self, list: Vec<Def>) -> bool {
        let changed = self.list != list;
        self.list = list;
        changed
    }

    pub fn names(&self) -> Vec<String> {
        self.list.iter().map(|d| d.name.clone()).collect()
    }

    pub fn sources(&self) -> Vec<Def> {
        self.list.clone()
    }
}

/// The session's state file under the home.
pub fn file(home: &Path, sid: &str) -> PathBuf {
    let safe: String = sid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    home.join("sandbox-state").join(format!("{safe}.json"))
}

/// Reads the state file (missing or unreadable: nothing kept); blocking.
pub fn load(file: Option<&Path>) -> Defs {
    file.and_then(|f| std::fs::read(f).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Writes the state file (atomically: a temporary file renamed over it); blocking.
pub fn save(file: Option<&Path>, defs: &Defs) {
    let Some(file) = file else { return };
    let Some(dir) = file.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = file.with_extension("json.tmp");
    let Ok(bytes) = serde_json::to_vec(defs) else {
        return;
    };
    if std::fs::write(&tmp, bytes).is_ok() {
        let _ = std::fs::rename(&tmp, file);
    }
}

/// The one line a block's output starts with after a restart.
pub fn restart_note(why: &str, restored: &[String]) -> String {
    let what = if restored.is_empty() {
        "nothing to restore".to_string()
    } else {
        format!("restored from their source: {}", restored.join(", "))
    };
    format!(
        "[sandbox restarted ({why}): names from earlier blocks are gone; functions and classes {what}]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_survive_a_save_and_a_load() {
        let dir = tempfile::tempdir().unwrap();
        let f = file(dir.path(), "a1b2-c3");
        let defs = Defs {
            was_used: true,
            list: vec![Def {
                name: "f".into(),
                source: "def f():\n    return 1\n".into(),
            }],
        };
        save(Some(&f), &defs);
        assert_eq!(load(Some(&f)), defs);
        assert_eq!(load(Some(&dir.path().join("none.json"))), Defs::default());
    }

    #[test]
    fn the_restart_note_names_the_reason_and_what_came_back() {
        let n = restart_note("the previous block ran past its limit (5 s)", &["f".into()]);
        assert!(n.contains("past its limit") && n.contains(": f]"), "{n}");
        assert!(!n.contains('\n'));
    }
}
