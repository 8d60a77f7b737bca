//! The one error type of the file tools, with a stable short name and a Python exception name
//! per variant so the sandbox can raise something idiomatic.

use std::path::PathBuf;

/// Everything `cat`, `grep`, `patch` and `ls` can refuse. Paths inside are display paths (as the
/// model wrote them or as shown to it), so the messages can be shown to the model verbatim.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("no such file or directory: `{path}`; check the name with ls()")]
    NotFound { path: String },

    #[error(
        "`{path}` is outside the workspace; use a path relative to the workspace root \
         (no `..` out of it, no absolute path elsewhere, no symlink leading out)"
    )]
    OutsideWorkspace { path: String },

    #[error("{}", not_a_file(path, *is_dir))]
    NotAFile { path: String, is_dir: bool },

    #[error("`{path}` is a binary file (it has a NUL byte near the start); it cannot be shown or patched as text")]
    Binary { path: String },

    #[error(
        "stale anchor {anchor} in `{path}`: {current}; no edit was applied, the file is unchanged. \
         Re-read the lines with {reread} and retry with the fresh anchors"
    )]
    StaleAnchor {
        path: String,
        anchor: String,
        /// What is at that line now: its anchored form, or why there is no such line.
        current: String,
        /// The `cat(...)` call that shows the lines around it now.
        reread: String,
    },

    #[error(
        "edits #{first} and #{second} of the patch of `{path}` overlap ({detail}); \
         no edit was applied, the file is unchanged. Merge them into one edit"
    )]
    Overlap {
        path: String,
        first: usize,
        second: usize,
        detail: String,
    },

    #[error("`{0}` is not an anchor; an anchor is LINE:HASH exactly as cat() or grep() shows it, e.g. `12:a3f`")]
    BadAnchor(String),

    #[error("edit #{index}: {why}")]
    BadEdit { index: usize, why: String },

    #[error("bad pattern: {0}")]
    BadPattern(String),

    #[error("{0}")]
    BadArgument(String),

    #[error("I/O error on `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn not_a_file(path: &str, is_dir: bool) -> String {
    if is_dir {
        format!("`{path}` is a directory, not a file; list it with ls({path:?})")
    } else {
        format!(
            "`{path}` is not a regular file (a device, socket or pipe); it cannot be read as text"
        )
    }
}

impl FileError {
    /// A stable, short, kebab-case name per variant (for logs, metrics and the wire).
    pub fn kind(&self) -> &'static str {
        match self {
            FileError::NotFound { .. } => "not-found",
            FileError::OutsideWorkspace { .. } => "outside-workspace",
            FileError::NotAFile { .. } => "not-a-file",
            FileError::Binary { .. } => "binary",
            FileError::StaleAnchor { .. } => "stale-anchor",
            FileError::Overlap { .. } => "overlap",
            FileError::BadAnchor(_) => "bad-anchor",
            FileError::BadEdit { .. } => "bad-edit",
            FileError::BadPattern(_) => "bad-pattern",
            FileError::BadArgument(_) => "bad-argument",
            FileError::Io { .. } => "io",
        }
    }

    /// The Python built-in exception the sandbox should raise for this error.
    pub fn python_type(&self) -> &'static str {
        match self {
            FileError::NotFound { .. } => "FileNotFoundError",
            FileError::OutsideWorkspace { .. } => "PermissionError",
            FileError::NotAFile { .. } => "IsADirectoryError",
            FileError::Binary { .. }
            | FileError::StaleAnchor { .. }
            | FileError::Overlap { .. }
            | FileError::BadAnchor(_)
            | FileError::BadEdit { .. }
            | FileError::BadPattern(_)
            | FileError::BadArgument(_) => "ValueError",
            FileError::Io { .. } => "OSError",
        }
    }

    /// Wraps an I/O error, turning "not found" into [`FileError::NotFound`] with the display path.
    pub(crate) fn io(path: &std::path::Path, shown: &str, source: std::io::Error) -> FileError {
        if source.kind() == std::io::ErrorKind::NotFound {
            FileError::NotFound {
                path: shown.to_string(),
            }
        } else {
            FileError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_a_kind_and_a_python_type() {
        let errors = [
            FileError::NotFound { path: "a".into() },
            FileError::OutsideWorkspace {
                path: "../a".into(),
            },
            FileError::NotAFile {
                path: "src".into(),
                is_dir: true,
            },
            FileError::BadAnchor("12".into()),
        ];
        let kinds: Vec<_> = errors.iter().map(FileError::kind).collect();
        assert_eq!(
            kinds,
            ["not-found", "outside-workspace", "not-a-file", "bad-anchor"]
        );
        let types: Vec<_> = errors.iter().map(FileError::python_type).collect();
        assert_eq!(
            types,
            [
                "FileNotFoundError",
                "PermissionError",
                "IsADirectoryError",
                "ValueError"
            ]
        );
    }

    #[test]
    fn messages_name_the_path_and_what_to_do() {
        let e = FileError::NotAFile {
            path: "src".into(),
            is_dir: true,
        };
        assert_eq!(
            e.to_string(),
            "`src` is a directory, not a file; list it with ls(\"src\")"
        );
    }
}
