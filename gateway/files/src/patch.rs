//! `patch`: anchored edits of one file, all or nothing, in one atomic write.

use std::io::Write;
use std::path::Path;

use crate::anchor::{anchored, hash_bytes};
use crate::cat::{read_text_file, CAT_MAX_LINE_CHARS};
use crate::text::{py_str, split_lines, thousands, Line};
use crate::{Anchor, Edit, FileError, Workspace};

/// What a successful patch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchOutcome {
    /// A one-line summary, then the fresh anchored lines of each edited region with 2 lines of
    /// context around it (disjoint regions separated by a `…` line).
    pub text: String,
    /// One result per edit, in the order the edits were given.
    pub edits: Vec<EditResult>,
}

/// Where an edit landed in the new file: lines `first..=last` (1-based). A pure deletion leaves
/// an empty region, `last == first - 1`, where `first` is the line now after the deletion point.
/// `anchors` are the region's new anchored lines (`LINE:HASH│ text`), for the model's next edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditResult {
    pub first: usize,
    pub last: usize,
    pub anchors: Vec<String>,
}

/// Lines of context shown around each edited region.
const CONTEXT: usize = 2;

/// One planned edit: old lines `start..end` (0-based, half-open; empty for an insertion) become
/// `new`.
struct Op<'e> {
    start: usize,
    end: usize,
    index: usize,
    new: Vec<&'e str>,
}

/// Applies every edit to one file in one atomic write (temp file in the same directory, fsync,
/// rename over it, permissions kept). All anchors are checked first: a stale anchor (its line is
/// gone or its content changed since it was read) or two overlapping edits refuse the whole batch
/// and leave the file byte for byte untouched. The file's line endings (`\n` / `\r\n`) and whether
/// it ends with a newline are preserved.
pub fn patch(ws: &Workspace, path: &str, edits: &[Edit]) -> Result<PatchOutcome, FileError> {
    if edits.is_empty() {
        return Err(FileError::BadArgument(format!(
            "patch of `{path}` got no edits; nothing was changed"
        )));
    }
    let file = read_text_file(ws, path)?;
    let lines = split_lines(&file.bytes);
    let mut ops = plan(&file.shown, &lines, edits)?;
    ops.sort_by_key(|op| (op.start, op.end));
    check_overlaps(&file.shown, &ops, edits)?;

    let eol: &[u8] = lines
        .iter()
        .map(|l| l.terminator)
        .find(|t| !t.is_empty())
        .unwrap_or(b"\n");
    let ends_with_newline = lines.last().is_none_or(|l| !l.terminator.is_empty());
    let mut out = Vec::with_capacity(
        file.bytes.len() + edits.iter().map(|e| e.text().len() + 2).sum::<usize>(),
    );
    let mut regions = vec![(0, 0); edits.len()];
    let mut pos = 0;
    let mut line_no = 0;
    let copy_old = |out: &mut Vec<u8>, old: &[Line<'_>]| {
        for l in old {
            out.extend_from_slice(l.content);
            out.extend_from_slice(if l.terminator.is_empty() {
                eol
            } else {
                l.terminator
            });
        }
        old.len()
    };
    for op in &ops {
        line_no += copy_old(&mut out, &lines[pos..op.start]);
        for new in &op.new {
            out.extend_from_slice(new.as_bytes());
            out.extend_from_slice(eol);
        }
        regions[op.index] = (line_no + 1, line_no + op.new.len());
        line_no += op.new.len();
        pos = op.end;
    }
    copy_old(&mut out, &lines[pos..]);
    if !ends_with_newline && out.ends_with(eol) {
        out.truncate(out.len() - eol.len());
    }

    if out != file.bytes {
        atomic_write(&file.path, &out, &file.permissions)
            .map_err(|e| FileError::io(&file.path, &file.shown, e))?;
    }
    let new_lines = split_lines(&out);
    let results = regions
        .iter()
        .map(|&(first, last)| EditResult {
            first,
            last,
            anchors: (first..=last)
                .map(|n| anchored(n, new_lines[n - 1].content, Some(CAT_MAX_LINE_CHARS)))
                .collect(),
        })
        .collect::<Vec<_>>();
    let text = summary(&file.shown, edits.len(), lines.len(), &new_lines, &regions);
    Ok(PatchOutcome {
        text,
        edits: results,
    })
}

/// Checks every anchor against the current lines and turns edits into ops.
fn plan<'e>(shown: &str, lines: &[Line<'_>], edits: &'e [Edit]) -> Result<Vec<Op<'e>>, FileError> {
    let check = |index: usize, a: &Anchor, field: &str| -> Result<(), FileError> {
        if a.line == 0 {
            return Err(FileError::BadEdit {
                index,
                why: format!(
                    "`{field}` is line 0, which only exists as `after` (= insert at the top)"
                ),
            });
        }
        match lines.get(a.line - 1) {
            Some(l) if a.matches(l.content) => Ok(()),
            found => Err(FileError::StaleAnchor {
                path: shown.to_string(),
                anchor: a.to_string(),
                current: describe_current(lines, a, found.copied()),
                reread: reread_call(shown, a.line, lines.len()),
            }),
        }
    };
    let mut ops = Vec::with_capacity(edits.len());
    for (index, edit) in edits.iter().enumerate() {
        let (start, end) = match edit {
            Edit::Replace { from, to, .. } => {
                check(index, from, "from")?;
                check(index, to, "to")?;
                if to.line < from.line {
                    return Err(FileError::BadEdit {
                        index,
                        why: format!("`to` ({to}) is before `from` ({from})"),
                    });
                }
                (from.line - 1, to.line)
            }
            Edit::InsertBefore { before, .. } => {
                check(index, before, "before")?;
                (before.line - 1, before.line - 1)
            }
            Edit::InsertAfter { after, .. } => {
                if after.line != 0 {
                    check(index, after, "after")?;
                }
                (after.line, after.line)
            }
        };
        ops.push(Op {
            start,
            end,
            index,
            new: new_lines(edit.text()),
        });
    }
    Ok(ops)
}

/// The edit's text as lines: `""` is none, a trailing newline adds no empty line, and a `\r`
/// before a newline is dropped (the file's own line ending is used).
fn new_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// What the stale anchor's line holds now, and where a line with that hash went, if nearby.
fn describe_current(lines: &[Line<'_>], a: &Anchor, found: Option<Line<'_>>) -> String {
    let mut s = match found {
        Some(l) => format!(
            "line {} is now `{}`",
            a.line,
            anchored(a.line, l.content, Some(200))
        ),
        None => format!(
            "line {} does not exist, the file has {} lines",
            a.line,
            thousands(lines.len())
        ),
    };
    let lo = a.line.saturating_sub(50);
    let moved = lines
        .iter()
        .enumerate()
        .skip(lo)
        .take(100)
        .filter(|(_, l)| hash_bytes(l.content) == a.hash)
        .min_by_key(|(i, _)| (i + 1).abs_diff(a.line));
    if let Some((i, _)) = moved {
        s.push_str(&format!(
            " (a line with hash {} is at line {})",
            a.hash,
            i + 1
        ));
    }
    s
}

/// `cat("src/x.rs", 7, 17)`: the window around a line (or the end of the file).
fn reread_call(shown: &str, line: usize, total: usize) -> String {
    let hi = (line + 5).min(total).max(1);
    let lo = line.saturating_sub(5).clamp(1, hi);
    format!("cat({}, {lo}, {hi})", py_str(shown))
}

fn check_overlaps(shown: &str, ops: &[Op<'_>], edits: &[Edit]) -> Result<(), FileError> {
    let mut reach: Option<&Op<'_>> = None;
    for op in ops {
        if let Some(prev) = reach {
            if op.start < prev.end {
                let (first, second) = (prev.index.min(op.index), prev.index.max(op.index));
                return Err(FileError::Overlap {
                    path: shown.to_string(),
                    first,
                    second,
                    detail: format!(
                        "{} and {}",
                        describe(&edits[first]),
                        describe(&edits[second])
                    ),
                });
            }
        }
        if reach.is_none_or(|r| op.end > r.end) {
            reach = Some(op);
        }
    }
    Ok(())
}

fn describe(edit: &Edit) -> String {
    match edit {
        Edit::Replace { from, to, .. } if from == to => format!("replace {from}"),
        Edit::Replace { from, to, .. } => format!("replace {from}..{to}"),
        Edit::InsertBefore { before, .. } => format!("insert before {before}"),
        Edit::InsertAfter { after, .. } => format!("insert after {after}"),
    }
}

fn summary(
    shown: &str,
    n_edits: usize,
    old_total: usize,
    new: &[Line<'_>],
    regions: &[(usize, usize)],
) -> String {
    let mut text = format!(
        "patched `{shown}`: {n_edits} edit{}, {} → {} lines",
        if n_edits == 1 { "" } else { "s" },
        thousands(old_total),
        thousands(new.len())
    );
    let mut windows: Vec<(usize, usize)> = regions
        .iter()
        .map(|&(first, last)| {
            (
                first.saturating_sub(CONTEXT).max(1),
                (last + CONTEXT).min(new.len()),
            )
        })
        .filter(|(a, b)| a <= b)
        .collect();
    windows.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (a, b) in windows {
        match merged.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    for (i, (a, b)) in merged.iter().enumerate() {
        if i > 0 {
            text.push_str("\n…");
        }
        for n in *a..=*b {
            text.push('\n');
            text.push_str(&anchored(n, new[n - 1].content, Some(CAT_MAX_LINE_CHARS)));
        }
    }
    text
}

/// Writes `bytes` to a temp file next to `path`, fsyncs it, gives it `permissions` and renames
/// it over `path`; the directory is fsynced too (best effort).
fn atomic_write(
    path: &Path,
    bytes: &[u8],
    permissions: &std::fs::Permissions,
) -> std::io::Result<()> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the file has no parent directory"))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.vis-patch-{}-{n}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(permissions.clone())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
#[path = "patch_tests.rs"]
mod tests;
