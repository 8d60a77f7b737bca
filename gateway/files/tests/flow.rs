//! The model's loop through the public API: grep → cat → patch → cat.

use std::fs;

use vis_files::{cat, edits_from_json, grep, patch, GrepQuery, Workspace};

#[test]
fn grep_then_cat_then_patch_edits_exactly_the_line_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::create_dir(dir.path().join("src")).expect("mkdir");
    fs::write(
        dir.path().join("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n",
    )
    .expect("write");
    let ws = Workspace::new(vec![dir.path().to_path_buf()]).expect("ws");

    let page = grep(
        &ws,
        &GrepQuery {
            query: "a - b".into(),
            ..GrepQuery::default()
        },
    )
    .expect("grep");
    let hit = page.text.lines().nth(1).expect("one hit line").trim_start();
    let anchor = hit.split('│').next().expect("anchor");
    assert_eq!(anchor.split(':').next(), Some("2"));

    let shown = cat(&ws, "src/lib.rs", Some(2), Some(2)).expect("cat");
    assert_eq!(shown.text, hit);

    let edits = edits_from_json(&serde_json::json!([
        {"from": anchor, "replace": "    a + b\n"}
    ]))
    .expect("edits");
    let out = patch(&ws, "src/lib.rs", &edits).expect("patch");
    assert_eq!(
        fs::read_to_string(dir.path().join("src/lib.rs")).expect("read"),
        "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n"
    );
    assert!(out.edits[0].anchors[0].ends_with("│     a + b"));

    // The old anchor is now stale: the same patch again is refused.
    let again = patch(&ws, "src/lib.rs", &edits).expect_err("stale");
    assert_eq!(again.kind(), "stale-anchor");
}
