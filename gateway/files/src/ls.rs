//! `ls`: a directory listing, one entry per line.

use crate::text::thousands;
use crate::{FileError, Workspace};

/// At most this many entries are listed.
pub const LS_MAX_ENTRIES: usize = 1_000;

/// Lists a directory: one entry per line, sorted by name, directories with a trailing `/`,
/// files with their size, symlinks as `name -> target`. Dotfiles are shown; nothing is ignored.
/// Capped at [`LS_MAX_ENTRIES`] with a last line saying how many more there are. For a file,
/// the one line of that file (its display path and size).
pub fn ls(ws: &Workspace, path: &str) -> Result<String, FileError> {
    let resolved = ws.resolve(path)?;
    let shown = ws.display(&resolved);
    let meta = std::fs::metadata(&resolved).map_err(|e| FileError::io(&resolved, &shown, e))?;
    if !meta.is_dir() {
        return Ok(format!("{shown}  {}", size(meta.len())));
    }
    let mut entries = Vec::new();
    let dir = std::fs::read_dir(&resolved).map_err(|e| FileError::io(&resolved, &shown, e))?;
    for entry in dir {
        let entry = entry.map_err(|e| FileError::io(&resolved, &shown, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let line = match entry.file_type() {
            Ok(t) if t.is_symlink() => {
                let target = std::fs::read_link(entry.path())
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| "?".into());
                let slash = if entry.path().is_dir() { "/" } else { "" };
                format!("{name}{slash} -> {target}")
            }
            Ok(t) if t.is_dir() => format!("{name}/"),
            Ok(t) if t.is_file() => match entry.metadata() {
                Ok(m) => format!("{name}  {}", size(m.len())),
                Err(_) => name.clone(),
            },
            _ => name.clone(),
        };
        entries.push((name, line));
    }
    if entries.is_empty() {
        return Ok(format!("(`{shown}` is an empty directory)"));
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let more = entries.len().saturating_sub(LS_MAX_ENTRIES);
    let mut out: Vec<String> = entries
        .into_iter()
        .take(LS_MAX_ENTRIES)
        .map(|(_, line)| line)
        .collect();
    if more > 0 {
        out.push(format!(
            "… {} more entr{} not shown; narrow down with grep() or ls() of a subdirectory",
            thousands(more),
            if more == 1 { "y" } else { "ies" }
        ));
    }
    Ok(out.join("\n"))
}

/// `812 B`, `1.2 KiB`, `3.4 MiB`, `1.0 GiB`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn entries_are_sorted_with_dirs_slashed_sizes_shown_and_dotfiles_included() {
        let d = tempfile::tempdir().expect("tempdir");
        fs::create_dir(d.path().join("src")).expect("mkdir");
        fs::write(d.path().join("b.txt"), "hello").expect("write");
        fs::write(d.path().join(".env"), vec![b'x'; 2048]).expect("write");
        let ws = Workspace::new(vec![d.path().to_path_buf()]).expect("ws");
        assert_eq!(ls(&ws, ".").expect("ls"), ".env  2.0 KiB\nb.txt  5 B\nsrc/");
        assert_eq!(ls(&ws, "b.txt").expect("ls file"), "b.txt  5 B");
        assert_eq!(
            ls(&ws, "src").expect("empty"),
            "(`src` is an empty directory)"
        );
        assert_eq!(ls(&ws, "nope").expect_err("missing").kind(), "not-found");
        assert_eq!(
            ls(&ws, "../").expect_err("escape").kind(),
            "outside-workspace"
        );
    }

    #[test]
    fn a_huge_directory_is_capped_with_a_count_of_the_rest() {
        let d = tempfile::tempdir().expect("tempdir");
        for i in 0..LS_MAX_ENTRIES + 5 {
            fs::write(d.path().join(format!("f{i:05}")), "").expect("write");
        }
        let ws = Workspace::new(vec![d.path().to_path_buf()]).expect("ws");
        let out = ls(&ws, "").expect("ls");
        assert_eq!(out.lines().count(), LS_MAX_ENTRIES + 1);
        assert!(out.ends_with(
            "… 5 more entries not shown; narrow down with grep() or ls() of a subdirectory"
        ));
    }

    #[test]
    fn sizes_are_human_readable() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 * 1024 * 1024), "3.0 MiB");
    }
}
