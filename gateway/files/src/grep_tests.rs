//! Tests of `grep` with real trees.

use super::*;
use crate::anchor_hash;
use std::fs;

fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, content) in files {
        let p = dir.path().join(name);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, content).expect("write");
    }
    let ws = Workspace::new(vec![dir.path().to_path_buf()]).expect("ws");
    (dir, ws)
}

fn q(query: &str) -> GrepQuery {
    GrepQuery {
        query: query.into(),
        ..GrepQuery::default()
    }
}

#[test]
fn hits_are_grouped_by_file_sorted_and_anchored() {
    let (_d, ws) = tree(&[("b.rs", "x\nfoo here\n"), ("a.rs", "foo\nbar\nfoo again\n")]);
    let page = grep(&ws, &q("foo")).expect("grep");
    let expected = format!(
        "a.rs\n  1:{}│ foo\n  3:{}│ foo again\nb.rs\n  2:{}│ foo here",
        anchor_hash("foo"),
        anchor_hash("foo again"),
        anchor_hash("foo here")
    );
    assert_eq!(page.text, expected);
    assert_eq!((page.hits, page.files, page.next), (3, 2, None));
}

#[test]
fn a_literal_query_matches_regex_characters_literally_and_a_regex_does_not() {
    let (_d, ws) = tree(&[("a.txt", "a.c\nabc\n(x)\n")]);
    assert_eq!(grep(&ws, &q("a.c")).expect("literal").hits, 1);
    assert_eq!(grep(&ws, &q("(x)")).expect("literal parens").hits, 1);
    let re = GrepQuery {
        is_regex: true,
        ..q("a.c")
    };
    assert_eq!(grep(&ws, &re).expect("regex").hits, 2);
    let bad = GrepQuery {
        is_regex: true,
        ..q("(x")
    };
    assert_eq!(
        grep(&ws, &bad).expect_err("bad regex").kind(),
        "bad-pattern"
    );
    assert_eq!(grep(&ws, &q("A.C")).expect("case-sensitive").hits, 0);
}

#[test]
fn include_and_exclude_globs_filter_files() {
    let (_d, ws) = tree(&[
        ("src/a.rs", "hit\n"),
        ("src/b.py", "hit\n"),
        ("docs/c.rs", "hit\n"),
    ]);
    let inc = GrepQuery {
        include: vec!["*.rs".into()],
        ..q("hit")
    };
    let page = grep(&ws, &inc).expect("include");
    assert_eq!((page.hits, page.files), (2, 2));
    assert!(!page.text.contains("b.py"));
    let exc = GrepQuery {
        exclude: vec!["docs/**".into()],
        ..q("hit")
    };
    let page = grep(&ws, &exc).expect("exclude");
    assert_eq!(page.files, 2);
    assert!(!page.text.contains("docs/"), "{}", page.text);
    assert_eq!(
        grep(
            &ws,
            &GrepQuery {
                include: vec!["[".into()],
                ..q("hit")
            }
        )
        .expect_err("glob")
        .kind(),
        "bad-pattern"
    );
}

#[test]
fn gitignore_is_honoured_outside_a_git_repository_and_hidden_files_are_skipped() {
    let (_d, ws) = tree(&[
        (".gitignore", "target/\n*.log\n"),
        ("target/out.txt", "needle\n"),
        ("run.log", "needle\n"),
        (".hidden/x.txt", "needle\n"),
        ("src/kept.txt", "needle\n"),
    ]);
    let page = grep(&ws, &q("needle")).expect("grep");
    assert_eq!(page.files, 1, "{}", page.text);
    assert!(page.text.starts_with("src/kept.txt\n"), "{}", page.text);
}

#[test]
fn binary_files_are_skipped() {
    let (_d, ws) = tree(&[("bin.dat", "needle\0\0\n"), ("t.txt", "needle\n")]);
    let page = grep(&ws, &q("needle")).expect("grep");
    assert_eq!(page.files, 1, "{}", page.text);
}

#[test]
fn pages_follow_the_cursor_and_the_last_page_has_no_next() {
    let content: String = (1..=25).map(|i| format!("hit {i}\n")).collect();
    let (_d, ws) = tree(&[("a.txt", &content), ("b.txt", "hit b\n")]);
    let mut cursor = 0;
    let mut seen = Vec::new();
    loop {
        let page = grep(
            &ws,
            &GrepQuery {
                page_size: 10,
                cursor,
                ..q("hit")
            },
        )
        .expect("page");
        assert_eq!(page.hits, 26);
        seen.extend(
            page.text
                .lines()
                .filter(|l| l.starts_with("  "))
                .map(str::to_string),
        );
        match page.next {
            Some(next) => {
                assert_eq!(next, cursor + 10);
                assert!(
                    page.text.ends_with(&format!("next page: cursor={next}")),
                    "{}",
                    page.text
                );
                cursor = next;
            }
            None => break,
        }
    }
    assert_eq!(cursor, 20);
    assert_eq!(seen.len(), 26);
    assert!(seen[25].ends_with("│ hit b"));
    let past = grep(
        &ws,
        &GrepQuery {
            cursor: 99,
            ..q("hit")
        },
    )
    .expect("past");
    assert_eq!(past.next, None);
    assert!(past.text.contains("past the end"), "{}", past.text);
}

#[test]
fn pages_beyond_the_stored_hits_are_read_again_from_the_files() {
    let per_file = GREP_MAX_STORED_HITS / 2 + 10;
    let content: String = (1..=per_file).map(|i| format!("x{i}\n")).collect();
    let (_d, ws) = tree(&[
        ("a.dat", &content),
        ("b.dat", &content),
        ("c.dat", &content),
    ]);
    let total = 3 * per_file;
    let last = grep(
        &ws,
        &GrepQuery {
            page_size: 5,
            cursor: total - 5,
            ..q("x")
        },
    )
    .expect("last page");
    assert_eq!(last.hits, total);
    assert_eq!(last.next, None);
    let lines: Vec<_> = last.text.lines().collect();
    assert_eq!(lines[0], "c.dat");
    assert!(
        lines[5].ends_with(&format!("│ x{per_file}")),
        "{}",
        last.text
    );
}

#[test]
fn long_lines_are_cut() {
    let long = "needle ".repeat(100);
    let (_d, ws) = tree(&[("a.txt", &long)]);
    let page = grep(&ws, &q("needle")).expect("grep");
    let hit = page.text.lines().nth(1).expect("hit line");
    assert!(hit.ends_with('…'));
    assert!(hit.chars().count() < GREP_MAX_LINE_CHARS + 20);
}

#[test]
fn paths_narrow_the_search_and_escapes_are_refused() {
    let (_d, ws) = tree(&[("src/a.txt", "hit\n"), ("other/b.txt", "hit\n")]);
    let page = grep(
        &ws,
        &GrepQuery {
            paths: vec!["src".into()],
            ..q("hit")
        },
    )
    .expect("grep");
    assert_eq!(page.files, 1);
    let page = grep(
        &ws,
        &GrepQuery {
            paths: vec!["other/b.txt".into()],
            ..q("hit")
        },
    )
    .expect("file");
    assert!(page.text.starts_with("other/b.txt\n"));
    let e = grep(
        &ws,
        &GrepQuery {
            paths: vec!["../".into()],
            ..q("hit")
        },
    )
    .expect_err("escape");
    assert_eq!(e.kind(), "outside-workspace");
    let e = grep(
        &ws,
        &GrepQuery {
            paths: vec!["nope".into()],
            ..q("hit")
        },
    )
    .expect_err("missing");
    assert_eq!(e.kind(), "not-found");
    let none = grep(&ws, &q("absent")).expect("no hits");
    assert_eq!(none.text, "(no matches for \"absent\" in .)");
}

#[test]
fn a_symlink_pointing_outside_is_not_followed() {
    let outside = tempfile::tempdir().expect("outside");
    fs::write(outside.path().join("secret.txt"), "needle\n").expect("write");
    let (d, ws) = tree(&[("in.txt", "needle\n")]);
    std::os::unix::fs::symlink(outside.path(), d.path().join("out")).expect("symlink");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), d.path().join("s.txt"))
        .expect("symlink");
    let page = grep(&ws, &q("needle")).expect("grep");
    assert_eq!(page.files, 1, "{}", page.text);
}

#[test]
fn any_of_several_terms_is_a_hit_and_case_is_smart() {
    let (_d, ws) = tree(&[(
        "a.txt",
        "alpha one\nBeta two\nbeta three\ngamma\nALPHA four\n",
    )]);
    let both = GrepQuery {
        more: vec!["Beta".into()],
        ..q("alpha")
    };
    let page = grep(&ws, &both).expect("grep");
    // The query has a capital ("Beta"): every term matches its case exactly (as `rg -S`).
    assert_eq!(page.hits, 2, "{}", page.text);
    assert!(page.text.contains("│ alpha one") && !page.text.contains("│ ALPHA four"));
    assert!(page.text.contains("│ Beta two") && !page.text.contains("│ beta three"));
    let lower = GrepQuery {
        more: vec!["beta".into()],
        ..q("alpha")
    };
    assert_eq!(
        grep(&ws, &lower).expect("grep").hits,
        4,
        "no capital: any case"
    );
    let forced = GrepQuery {
        case: Some(false),
        ..both.clone()
    };
    assert_eq!(grep(&ws, &forced).expect("grep").hits, 4);
}

#[test]
fn context_lines_surround_hits_and_groups_are_separated() {
    let body: String = (1..=20).map(|i| format!("line {i}\n")).collect();
    let (_d, ws) = tree(&[("a.txt", &body)]);
    let page = grep(
        &ws,
        &GrepQuery {
            more: vec!["line 15".into()],
            context: 1,
            ..q("line 3")
        },
    )
    .expect("grep");
    let lines: Vec<&str> = page.text.lines().collect();
    assert_eq!(lines[0], "a.txt");
    assert!(lines[1].ends_with("┆ line 2"), "{}", page.text);
    assert!(lines[2].ends_with("│ line 3"), "{}", page.text);
    assert!(lines[3].ends_with("┆ line 4"), "{}", page.text);
    assert_eq!(lines[4], "  --");
    assert!(lines[5].ends_with("┆ line 14") && lines[6].ends_with("│ line 15"));
    assert_eq!(page.hits, 2);
}

#[test]
fn file_names_match_too_and_an_empty_query_lists_files_honouring_gitignore() {
    let (_d, ws) = tree(&[
        ("src/parser.rs", "fn main() {}\n"),
        ("notes.md", "the parser is slow\n"),
        ("target/parser.o", "x\n"),
        (".gitignore", "target/\n"),
    ]);
    let page = grep(&ws, &q("parser")).expect("grep");
    assert_eq!(page.names, 1, "{}", page.text);
    assert!(
        page.text
            .starts_with("files whose path matches:\n  src/parser.rs"),
        "{}",
        page.text
    );
    assert!(page.text.contains("notes.md\n  1:"), "{}", page.text);
    let all = grep(&ws, &q("")).expect("list");
    assert_eq!(
        all.text, "files:\n  notes.md\n  src/parser.rs",
        "{}",
        all.text
    );
    let limited = grep(
        &ws,
        &GrepQuery {
            page_size: 1,
            cursor: 1,
            ..q("")
        },
    )
    .expect("list");
    assert_eq!(
        limited.text, "files:\n  src/parser.rs",
        "the second file only"
    );
}
