//! `cat`: a window of a text file as anchored lines.

use std::path::PathBuf;

use crate::anchor::anchored;
use crate::text::{is_binary, py_str, split_lines, thousands};
use crate::{FileError, Workspace};

/// At most this many lines per `cat` call.
pub const CAT_MAX_LINES: usize = 2_000;
/// At most this many bytes of text per `cat` call.
pub const CAT_MAX_BYTES: usize = 256 * 1024;
/// Longer lines are cut with `…` (their anchor still hashes the whole line).
pub const CAT_MAX_LINE_CHARS: usize = 2_000;
/// `cat` and `patch` refuse files larger than this.
pub const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// A window of a file. `first..=last` are the 1-based line numbers shown; an empty window has
/// `last < first`. `text` holds one anchored line per line (`12:a3f│ text`), without a final
/// newline, plus a last line saying how to read on when the output was capped; an empty window
/// gives a single explanatory line in parentheses instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatOutput {
    pub text: String,
    pub first: usize,
    pub last: usize,
    pub total_lines: usize,
}

/// Shows lines `start..=end` (1-based, inclusive) of a text file as anchored lines. Negative
/// endpoints count from the end (-1 is the last line); `None` means from the first / to the last
/// line; 0 is refused. Binary files (a NUL byte in the first 8 KiB) are refused. The output is
/// capped at [`CAT_MAX_LINES`] lines / [`CAT_MAX_BYTES`] bytes and then ends with a line such as
/// `… 8,123 more lines: cat("src/x.rs", 2001)`.
pub fn cat(
    ws: &Workspace,
    path: &str,
    start: Option<i64>,
    end: Option<i64>,
) -> Result<CatOutput, FileError> {
    let file = read_text_file(ws, path)?;
    let lines = split_lines(&file.bytes);
    let total = lines.len();
    let first = endpoint(start, total, "start")?.unwrap_or(1).max(1);
    let last = endpoint(end, total, "end")?
        .unwrap_or(total as i64)
        .min(total as i64);
    let first = first as usize;
    if last < first as i64 {
        let first = first.min(total + 1);
        let text = empty_window(&file.shown, start, end, total);
        return Ok(CatOutput {
            text,
            first,
            last: first - 1,
            total_lines: total,
        });
    }
    let last = last as usize;
    let mut text = String::new();
    let mut shown_last = first - 1;
    for (i, line) in lines[first - 1..last].iter().enumerate() {
        let n = first + i;
        let row = anchored(n, line.content, Some(CAT_MAX_LINE_CHARS));
        let over_lines = n - first >= CAT_MAX_LINES;
        let over_bytes = !text.is_empty() && text.len() + row.len() + 1 > CAT_MAX_BYTES;
        if over_lines || over_bytes {
            break;
        }
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&row);
        shown_last = n;
    }
    if shown_last < last {
        let more = last - shown_last;
        let s = if more == 1 { "" } else { "s" };
        let end_arg = match end {
            Some(e) if (e > 0 && (e as usize) < total) || e < -1 => format!(", {e}"),
            _ => String::new(),
        };
        text.push_str(&format!(
            "\n… {} more line{s}: cat({}, {}{end_arg})",
            thousands(more),
            py_str(&file.shown),
            shown_last + 1
        ));
    }
    Ok(CatOutput {
        text,
        first,
        last: shown_last,
        total_lines: total,
    })
}

/// A 1-based or negative (from the end) endpoint as a possibly out-of-range line number.
fn endpoint(v: Option<i64>, total: usize, name: &str) -> Result<Option<i64>, FileError> {
    match v {
        None => Ok(None),
        Some(0) => Err(FileError::BadArgument(format!(
            "`{name}` is 0, but line numbers are 1-based: use 1 for the first line, -1 for the last"
        ))),
        Some(n) if n > 0 => Ok(Some(n)),
        Some(n) => Ok(Some(total as i64 + 1 + n)),
    }
}

fn empty_window(shown: &str, start: Option<i64>, end: Option<i64>, total: usize) -> String {
    let lines = format!(
        "{} line{}",
        thousands(total),
        if total == 1 { "" } else { "s" }
    );
    if total == 0 {
        return format!("(`{shown}` is empty: 0 lines)");
    }
    let show = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    match start {
        Some(s) if s > total as i64 => {
            format!("(`{shown}` has {lines}; line {s} is past the end, nothing to show)")
        }
        _ => format!(
            "(`{shown}` has {lines}; the window {}..{} is empty, nothing to show)",
            show(start),
            show(end)
        ),
    }
}

/// A text file read whole: its canonical path, its display path and its bytes.
pub(crate) struct TextFile {
    pub path: PathBuf,
    pub shown: String,
    pub bytes: Vec<u8>,
    pub permissions: std::fs::Permissions,
}

/// Resolves and reads a regular text file, refusing directories, special files, huge files and
/// binary files.
pub(crate) fn read_text_file(ws: &Workspace, path: &str) -> Result<TextFile, FileError> {
    let resolved = ws.resolve(path)?;
    let shown = ws.display(&resolved);
    let meta = std::fs::metadata(&resolved).map_err(|e| FileError::io(&resolved, &shown, e))?;
    if !meta.is_file() {
        return Err(FileError::NotAFile {
            path: shown,
            is_dir: meta.is_dir(),
        });
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(FileError::BadArgument(format!(
            "`{shown}` is {} MiB, too large to read whole (the limit is {} MiB); find lines in it with grep()",
            meta.len() >> 20,
            MAX_FILE_BYTES >> 20
        )));
    }
    let bytes = std::fs::read(&resolved).map_err(|e| FileError::io(&resolved, &shown, e))?;
    if is_binary(&bytes) {
        return Err(FileError::Binary { path: shown });
    }
    Ok(TextFile {
        path: resolved,
        shown,
        bytes,
        permissions: meta.permissions(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anchor_hash;
    use std::fs;

    fn ws_with(name: &str, content: &[u8]) -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(name), content).expect("write");
        let ws = Workspace::new(vec![dir.path().to_path_buf()]).expect("ws");
        (dir, ws)
    }

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn the_whole_file_is_shown_as_anchored_lines() {
        let (_d, ws) = ws_with("a.txt", b"alpha\nbeta\n");
        let out = cat(&ws, "a.txt", None, None).expect("cat");
        let expected = format!(
            "1:{}│ alpha\n2:{}│ beta",
            anchor_hash("alpha"),
            anchor_hash("beta")
        );
        assert_eq!(out.text, expected);
        assert_eq!((out.first, out.last, out.total_lines), (1, 2, 2));
    }

    #[test]
    fn negative_endpoints_count_from_the_end() {
        let (_d, ws) = ws_with("a.txt", numbered(10).as_bytes());
        let out = cat(&ws, "a.txt", Some(-3), None).expect("cat");
        assert_eq!((out.first, out.last), (8, 10));
        assert!(out.text.starts_with("8:") && out.text.ends_with("line 10"));
        let out = cat(&ws, "a.txt", Some(2), Some(-2)).expect("cat");
        assert_eq!((out.first, out.last), (2, 9));
        let out = cat(&ws, "a.txt", Some(-100), Some(2)).expect("cat");
        assert_eq!((out.first, out.last), (1, 2));
    }

    #[test]
    fn a_window_beyond_the_end_is_empty_with_a_clear_header() {
        let (_d, ws) = ws_with("a.txt", numbered(10).as_bytes());
        let out = cat(&ws, "a.txt", Some(20), None).expect("cat");
        assert!(out.last < out.first);
        assert_eq!(out.total_lines, 10);
        assert_eq!(
            out.text,
            "(`a.txt` has 10 lines; line 20 is past the end, nothing to show)"
        );
        let out = cat(&ws, "a.txt", Some(5), Some(3)).expect("cat");
        assert!(
            out.text.contains("the window 5..3 is empty"),
            "{}",
            out.text
        );
    }

    #[test]
    fn line_zero_is_refused_because_lines_are_one_based() {
        let (_d, ws) = ws_with("a.txt", b"x\n");
        let e = cat(&ws, "a.txt", Some(0), None).expect_err("zero");
        assert_eq!(e.kind(), "bad-argument");
    }

    #[test]
    fn binary_files_and_directories_are_refused() {
        let (d, ws) = ws_with("b.bin", b"\x7fELF\0\0\x01");
        let e = cat(&ws, "b.bin", None, None).expect_err("binary");
        assert!(matches!(e, FileError::Binary { .. }), "{e}");
        fs::create_dir(d.path().join("sub")).expect("mkdir");
        let e = cat(&ws, "sub", None, None).expect_err("dir");
        assert_eq!(e.python_type(), "IsADirectoryError");
        let e = cat(&ws, "missing.txt", None, None).expect_err("missing");
        assert_eq!(e.python_type(), "FileNotFoundError");
    }

    #[test]
    fn a_long_file_is_capped_with_a_line_that_says_how_to_read_on() {
        let (_d, ws) = ws_with("big.txt", numbered(CAT_MAX_LINES + 123).as_bytes());
        let out = cat(&ws, "big.txt", None, None).expect("cat");
        assert_eq!(out.last, CAT_MAX_LINES);
        let tail = out.text.lines().last().expect("a last line");
        assert_eq!(tail, "… 123 more lines: cat(\"big.txt\", 2001)");
        let out = cat(&ws, "big.txt", Some(2), Some(2100)).expect("cat");
        let tail = out.text.lines().last().expect("a last line");
        assert_eq!(tail, "… 99 more lines: cat(\"big.txt\", 2002, 2100)");
    }

    #[test]
    fn an_empty_file_says_so() {
        let (_d, ws) = ws_with("e.txt", b"");
        let out = cat(&ws, "e.txt", None, None).expect("cat");
        assert_eq!(out.total_lines, 0);
        assert_eq!(out.text, "(`e.txt` is empty: 0 lines)");
    }
}
