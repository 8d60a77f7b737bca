//! Tests of `patch` with real files.

use super::*;
use crate::{anchor_hash, cat};
use std::fs;

fn ws_with(name: &str, content: &[u8]) -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join(name), content).expect("write");
    let ws = Workspace::new(vec![dir.path().to_path_buf()]).expect("ws");
    (dir, ws)
}

fn a(n: usize, line: &str) -> String {
    format!("{n}:{}", anchor_hash(line))
}

fn read(d: &tempfile::TempDir, name: &str) -> Vec<u8> {
    fs::read(d.path().join(name)).expect("read")
}

const FIVE: &str = "one\ntwo\nthree\nfour\nfive\n";

#[test]
fn a_range_is_replaced_and_the_fresh_anchors_are_returned() {
    let (d, ws) = ws_with("f.txt", FIVE.as_bytes());
    let edit =
        Edit::replace(&a(2, "two"), Some(&a(3, "three")), "TWO\nTHREE\nTHREE+\n").expect("edit");
    let out = patch(&ws, "f.txt", &[edit]).expect("patch");
    assert_eq!(read(&d, "f.txt"), b"one\nTWO\nTHREE\nTHREE+\nfour\nfive\n");
    assert_eq!(out.edits.len(), 1);
    let r = &out.edits[0];
    assert_eq!((r.first, r.last), (2, 4));
    assert_eq!(r.anchors[0], format!("{}│ TWO", a(2, "TWO")));
    assert!(
        out.text
            .starts_with("patched `f.txt`: 1 edit, 5 → 6 lines\n1:"),
        "{}",
        out.text
    );
    assert!(out.text.ends_with("│ five"), "{}", out.text);
}

#[test]
fn a_stale_anchor_refuses_the_whole_batch_and_leaves_the_file_untouched() {
    let (d, ws) = ws_with("f.txt", FIVE.as_bytes());
    let before = read(&d, "f.txt");
    let good = Edit::replace(&a(1, "one"), None, "ONE").expect("edit");
    let stale = Edit::replace(&a(4, "FOUR"), None, "4").expect("edit");
    let e = patch(&ws, "f.txt", &[good, stale]).expect_err("stale");
    assert_eq!(read(&d, "f.txt"), before);
    match &e {
        FileError::StaleAnchor {
            anchor, current, ..
        } => {
            assert_eq!(anchor, &a(4, "FOUR"));
            assert!(
                current.contains(&format!("`{}│ four`", a(4, "four"))),
                "{current}"
            );
        }
        other => panic!("expected a stale anchor, got {other}"),
    }
    assert!(e.to_string().contains("no edit was applied"), "{e}");
    assert!(
        e.to_string()
            .contains("Re-read the lines with cat(\"f.txt\", 1, 5)"),
        "{e}"
    );
    assert_eq!(e.python_type(), "ValueError");
}

#[test]
fn an_anchor_past_the_end_is_stale_and_says_how_long_the_file_is() {
    let (d, ws) = ws_with("f.txt", FIVE.as_bytes());
    let e = patch(
        &ws,
        "f.txt",
        &[Edit::replace("9:abc", None, "x").expect("edit")],
    )
    .expect_err("gone");
    assert!(
        e.to_string()
            .contains("line 9 does not exist, the file has 5 lines"),
        "{e}"
    );
    assert_eq!(read(&d, "f.txt"), FIVE.as_bytes());
}

#[test]
fn a_stale_anchor_hints_where_a_moved_line_went() {
    let (_d, ws) = ws_with("f.txt", b"new\none\ntwo\n");
    let e = patch(
        &ws,
        "f.txt",
        &[Edit::replace(&a(1, "one"), None, "x").expect("edit")],
    )
    .expect_err("moved");
    assert!(
        e.to_string().contains(&format!(
            "a line with hash {} is at line 2",
            anchor_hash("one")
        )),
        "{e}"
    );
}

#[test]
fn overlapping_edits_are_refused_and_the_file_is_untouched() {
    let (d, ws) = ws_with("f.txt", FIVE.as_bytes());
    let cases = [
        (
            Edit::replace(&a(1, "one"), Some(&a(3, "three")), "x"),
            Edit::replace(&a(3, "three"), Some(&a(4, "four")), "y"),
        ),
        (
            Edit::replace(&a(2, "two"), None, "x"),
            Edit::replace(&a(2, "two"), None, "y"),
        ),
        (
            Edit::replace(&a(2, "two"), Some(&a(4, "four")), "x"),
            Edit::insert_after(&a(3, "three"), "y"),
        ),
        (
            Edit::insert_before(&a(3, "three"), "y"),
            Edit::replace(&a(2, "two"), Some(&a(4, "four")), "x"),
        ),
    ];
    for (first, second) in cases {
        let edits = [first.expect("edit"), second.expect("edit")];
        let e = patch(&ws, "f.txt", &edits).expect_err("overlap");
        assert!(
            matches!(
                e,
                FileError::Overlap {
                    first: 0,
                    second: 1,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(read(&d, "f.txt"), FIVE.as_bytes());
    }
}

#[test]
fn insertions_next_to_a_replaced_range_do_not_overlap() {
    let (d, ws) = ws_with("f.txt", FIVE.as_bytes());
    let edits = [
        Edit::insert_after(&a(4, "four"), "after four").expect("edit"),
        Edit::replace(&a(2, "two"), Some(&a(4, "four")), "mid").expect("edit"),
        Edit::insert_before(&a(2, "two"), "before two").expect("edit"),
        Edit::insert_after("0", "top").expect("edit"),
    ];
    let out = patch(&ws, "f.txt", &edits).expect("patch");
    assert_eq!(
        read(&d, "f.txt"),
        b"top\none\nbefore two\nmid\nafter four\nfive\n"
    );
    let regions: Vec<_> = out.edits.iter().map(|r| (r.first, r.last)).collect();
    assert_eq!(regions, [(5, 5), (4, 4), (3, 3), (1, 1)]);
}

#[test]
fn an_empty_replacement_deletes_the_lines() {
    let (d, ws) = ws_with("f.txt", FIVE.as_bytes());
    let out = patch(
        &ws,
        "f.txt",
        &[Edit::replace(&a(2, "two"), Some(&a(4, "four")), "").expect("edit")],
    )
    .expect("patch");
    assert_eq!(read(&d, "f.txt"), b"one\nfive\n");
    assert_eq!((out.edits[0].first, out.edits[0].last), (2, 1));
    assert!(out.edits[0].anchors.is_empty());
}

#[test]
fn crlf_line_endings_are_preserved_including_in_new_lines() {
    let (d, ws) = ws_with("f.txt", b"a\r\nb\r\nc\r\n");
    let edits = [
        Edit::replace(&a(2, "b"), None, "B1\nB2\n").expect("edit"),
        Edit::insert_after(&a(3, "c"), "d\r\n").expect("edit"),
    ];
    patch(&ws, "f.txt", &edits).expect("patch");
    assert_eq!(read(&d, "f.txt"), b"a\r\nB1\r\nB2\r\nc\r\nd\r\n");
}

#[test]
fn a_file_without_a_trailing_newline_keeps_it_that_way() {
    let (d, ws) = ws_with("f.txt", b"a\nb");
    patch(
        &ws,
        "f.txt",
        &[Edit::insert_after(&a(2, "b"), "c\n").expect("edit")],
    )
    .expect("patch");
    assert_eq!(read(&d, "f.txt"), b"a\nb\nc");
    patch(
        &ws,
        "f.txt",
        &[Edit::replace(&a(1, "a"), None, "A").expect("edit")],
    )
    .expect("patch");
    assert_eq!(read(&d, "f.txt"), b"A\nb\nc");
    patch(
        &ws,
        "f.txt",
        &[Edit::replace(&a(3, "c"), None, "").expect("edit")],
    )
    .expect("patch");
    assert_eq!(read(&d, "f.txt"), b"A\nb");
}

#[test]
fn an_empty_file_can_be_filled_by_inserting_after_line_zero() {
    let (d, ws) = ws_with("f.txt", b"");
    let out = patch(
        &ws,
        "f.txt",
        &[Edit::insert_after("0", "hello\nworld").expect("edit")],
    )
    .expect("patch");
    assert_eq!(read(&d, "f.txt"), b"hello\nworld\n");
    assert_eq!(out.edits[0].anchors.len(), 2);
}

#[test]
fn line_zero_is_only_an_insertion_point() {
    let (_d, ws) = ws_with("f.txt", FIVE.as_bytes());
    let e = patch(
        &ws,
        "f.txt",
        &[Edit::replace("0", None, "x").expect("edit")],
    )
    .expect_err("zero");
    assert!(matches!(e, FileError::BadEdit { index: 0, .. }), "{e}");
}

#[test]
fn to_before_from_is_a_bad_edit() {
    let (_d, ws) = ws_with("f.txt", FIVE.as_bytes());
    let e = patch(
        &ws,
        "f.txt",
        &[Edit::replace(&a(3, "three"), Some(&a(1, "one")), "x").expect("edit")],
    )
    .expect_err("backwards");
    assert!(e.to_string().contains("is before `from`"), "{e}");
}

#[test]
fn permissions_are_kept_and_no_temp_file_is_left_behind() {
    use std::os::unix::fs::PermissionsExt;
    let (d, ws) = ws_with("run.sh", b"#!/bin/sh\necho hi\n");
    fs::set_permissions(d.path().join("run.sh"), fs::Permissions::from_mode(0o751)).expect("chmod");
    patch(
        &ws,
        "run.sh",
        &[Edit::replace(&a(2, "echo hi"), None, "echo bye").expect("edit")],
    )
    .expect("patch");
    let mode = fs::metadata(d.path().join("run.sh"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o751);
    let names: Vec<_> = fs::read_dir(d.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["run.sh"]);
}

#[test]
fn the_new_anchors_work_for_the_next_patch_and_match_cat() {
    let (_d, ws) = ws_with("f.txt", FIVE.as_bytes());
    let out = patch(
        &ws,
        "f.txt",
        &[Edit::replace(&a(3, "three"), None, "3").expect("edit")],
    )
    .expect("patch");
    let fresh = out.edits[0].anchors[0]
        .split('│')
        .next()
        .expect("anchor")
        .to_string();
    let shown = cat(&ws, "f.txt", Some(3), Some(3)).expect("cat");
    assert_eq!(shown.text, out.edits[0].anchors[0]);
    patch(
        &ws,
        "f.txt",
        &[Edit::replace(&fresh, None, "three again").expect("edit")],
    )
    .expect("second patch");
    let e = patch(
        &ws,
        "f.txt",
        &[Edit::replace(&fresh, None, "x").expect("edit")],
    )
    .expect_err("now stale");
    assert_eq!(e.kind(), "stale-anchor");
}

#[test]
fn binary_files_and_escapes_are_refused() {
    let (_d, ws) = ws_with("b.bin", b"a\0b\n");
    let e =
        patch(&ws, "b.bin", &[Edit::insert_after("0", "x").expect("edit")]).expect_err("binary");
    assert_eq!(e.kind(), "binary");
    let e = patch(&ws, "../x", &[Edit::insert_after("0", "x").expect("edit")]).expect_err("escape");
    assert_eq!(e.kind(), "outside-workspace");
    let e = patch(&ws, "b.bin", &[]).expect_err("no edits");
    assert_eq!(e.kind(), "bad-argument");
}
