//! The catalog: listing, load failures, project over global, reload (last good, no-op, swap),
//! files that hang or die at import, the `apropos`/`doc`/`/extensions` catalogue, frozen helper
//! modules.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_good_extension_is_listed_with_its_symbol_slash_hook_and_filter() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.loaded, vec!["todo".to_string()]);
    assert!(report.failures.is_empty(), "{:?}", report.failures);

    let list = listing(&f.host, None).await;
    let ext = &list["extensions"][0];
    assert_eq!(ext["name"], "todo");
    assert_eq!(ext["scope"], "global");
    assert_eq!(ext["kind"], "python");
    assert_eq!(ext["alias"], "todo");
    assert_eq!(ext["is_stale"], false);
    assert_eq!(ext["symbols"][0]["name"], "add");
    assert_eq!(ext["slash_commands"][0]["name"], "todos");
    assert_eq!(ext["op_hooks"][0]["ops"][0], "add");
    assert_eq!(ext["network_filters"], 1);
    assert_eq!(list["failures"], json!([]));

    let tools = f.host.tools().list(&f.session("s1")).await;
    let add = tools.iter().find(|t| t.name == "add").expect("add tool");
    assert_eq!(add.extension, "todo");
    assert!(!add.is_hidden);
    assert_eq!(add.parameters["properties"]["text"]["type"], "string");
    assert!(tools.iter().any(|t| t.name == "secret" && t.is_hidden));
    let hidden = f
        .host
        .tools()
        .call(&f.session("s1"), "secret", json!({}))
        .await
        .expect("hidden tools stay callable");
    assert_eq!(hidden.text, "hidden-ok");
    assert_eq!(
        f.host.catalog().slashes(None).await,
        vec![("todos".to_string(), "Count todos.".to_string())]
    );
    assert_eq!(f.host.filters().infos().len(), 1);
    let entries = f.host.tools().entries(&f.session("s1")).await;
    assert!(entries
        .iter()
        .any(|e| e.name == "add" && e.summary.starts_with("Add one todo")));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_file_is_reported_with_a_traceback_while_the_others_load() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    f.global(
        "broken.py",
        "import blockether.vis.extension as vis\n\ndef helper():\n    raise ValueError('boom at import')\n\nhelper()\n",
    );
    f.global("syntax.py", "def (:\n");
    f.global("silent.py", "x = 1\n");
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.loaded, vec!["todo".to_string()]);
    assert_eq!(report.failures.len(), 3, "{:?}", report.failures);
    let broken = report
        .failures
        .iter()
        .find(|x| x.file.ends_with("broken.py"))
        .expect("broken reported");
    assert_eq!(broken.error.message, "ValueError: boom at import");
    let tb = broken.error.traceback.clone().unwrap_or_default();
    assert!(tb.contains("broken.py") && tb.contains("helper"), "{tb}");
    assert!(!broken.is_stale);
    let syntax = report
        .failures
        .iter()
        .find(|x| x.file.ends_with("syntax.py"))
        .expect("syntax reported");
    assert_eq!(syntax.error.kind, "SyntaxError");
    let silent = report
        .failures
        .iter()
        .find(|x| x.file.ends_with("silent.py"))
        .expect("silent reported");
    assert!(silent.error.message.contains("never called vis.register"));
    let list = listing(&f.host, None).await;
    assert_eq!(list["failures"].as_array().map(Vec::len), Some(3));
    let out = f
        .host
        .tools()
        .call(&f.session("s"), "add", json!({"text": "a"}))
        .await
        .expect("the good extension still works");
    assert_eq!(out.value, json!({"count": 1}));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_extension_replaces_a_global_one_with_the_same_name() {
    let f = fixture();
    let ext = |who: &str| {
        format!(
            "import blockether.vis.extension as vis\n\ndef who() -> str:\n    \"\"\"Say who.\"\"\"\n    return '{who}'\n\nvis.register(vis.Extension(name='same', alias='same', description='d', symbols=[vis.Symbol(who)]))\n"
        )
    };
    f.global("same.py", &ext("global"));
    f.project_ext("same.py", &ext("project"));
    let in_project = f.session("p");
    let out = f
        .host
        .tools()
        .call(&in_project, "who", json!({}))
        .await
        .expect("call");
    assert_eq!(out.text, "project");
    let elsewhere = SessionCtx {
        id: "g".into(),
        project_root: None,
        workspace_root: f.project.clone(),
    };
    let out = f
        .host
        .tools()
        .call(&elsewhere, "who", json!({}))
        .await
        .expect("call");
    assert_eq!(out.text, "global");
    assert_eq!(
        f.host
            .tools()
            .list(&in_project)
            .await
            .iter()
            .filter(|t| t.name == "who")
            .count(),
        1
    );
    let list = listing(&f.host, Some(&f.project)).await;
    let scopes: Vec<&str> = list["extensions"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|e| e["scope"].as_str())
        .collect();
    assert_eq!(scopes, vec!["global", "project"]);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reload_keeps_the_last_good_version_when_a_file_breaks_and_swaps_when_fixed() {
    let f = fixture();
    let version = |v: &str| {
        format!(
            "import blockether.vis.extension as vis\n\ndef v() -> str:\n    \"\"\"Version.\"\"\"\n    return '{v}'\n\nvis.register(vis.Extension(name='ver', alias='ver', description='d', symbols=[vis.Symbol(v)]))\n"
        )
    };
    let file = f.global("ver.py", &version("one"));
    f.host.catalog().reload(None).await;
    let s = f.session("s");
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("v1")
            .text,
        "one"
    );

    std::fs::write(
        &file,
        "import blockether.vis.extension as vis\nraise ImportError('half-saved')\n",
    )
    .expect("break");
    // Not adopted before a reload (the admitted bytes are used).
    f.host.sessions().stop("s").await;
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("v1")
            .text,
        "one"
    );
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.failures.len(), 1);
    assert!(report.failures[0].is_stale);
    assert_eq!(report.failures[0].extension.as_deref(), Some("ver"));
    assert!(
        report.summary().contains("last good kept"),
        "{}",
        report.summary()
    );
    let list = listing(&f.host, None).await;
    assert_eq!(list["extensions"][0]["is_stale"], true);
    assert_eq!(list["failures"][0]["is_stale"], true);
    // The last good version still answers, also from a fresh session worker.
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("stale")
            .text,
        "one"
    );
    f.host.sessions().stop("s").await;
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("stale")
            .text,
        "one"
    );

    std::fs::write(&file, version("two")).expect("fix");
    let report = f.host.catalog().reload(None).await;
    assert!(report.failures.is_empty());
    assert_eq!(
        f.host
            .tools()
            .call(&s, "v", json!({}))
            .await
            .expect("v2")
            .text,
        "two"
    );
    let list = listing(&f.host, None).await;
    assert_eq!(list["extensions"][0]["is_stale"], false);

    std::fs::remove_file(&file).expect("delete");
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.removed, vec!["ver".to_string()]);
    assert!(f.host.tools().call(&s, "v", json!({})).await.is_err());
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_hangs_or_dies_at_import_fails_alone() {
    let f = fixture_with(|c| c.load_timeout = Duration::from_secs(2));
    f.global(
        "a_hang.py",
        "import time\nwhile True:\n    time.sleep(0.05)\n",
    );
    f.global("b_die.py", "import os\nos._exit(4)\n");
    f.global("todo.py", TODO_EXTENSION);
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.loaded, vec!["todo".to_string()]);
    let kinds: Vec<(String, String)> = report
        .failures
        .iter()
        .map(|x| {
            (
                x.file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                x.error.kind.clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("a_hang.py".to_string(), "Timeout".to_string()),
            ("b_die.py".to_string(), "WorkerExited".to_string())
        ]
    );
    let ctx = json!({"phase": "http", "method": "DELETE", "host": "h.test", "port": 80,
                     "path": "/", "headers": {}});
    assert_eq!(
        f.host.filters().run(&ctx).await,
        Ok(FilterVerdict::Block("no DELETE to h.test".into()))
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_without_changes_keeps_session_workers_and_a_change_replaces_them() {
    let f = fixture();
    let file = f.global("todo.py", TODO_EXTENSION);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "add", json!({"text": "a"}))
        .await
        .expect("call");
    let pid = f.host.workers().session_pid("s");
    f.host.catalog().reload(Some(&f.project)).await;
    f.host
        .tools()
        .call(&s, "add", json!({"text": "b"}))
        .await
        .expect("call");
    assert_eq!(f.host.workers().session_pid("s"), pid);
    std::fs::write(&file, format!("{TODO_EXTENSION}\n# edited\n")).expect("edit");
    f.host.catalog().reload(None).await;
    f.host
        .tools()
        .call(&s, "add", json!({"text": "c"}))
        .await
        .expect("call");
    assert_ne!(f.host.workers().session_pid("s"), pid);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apropos_doc_extensions_markdown_describe_the_catalogue_and_a_no_op_reload_keeps_workers() {
    let f = fixture();
    let generation = || f.host.catalog().generation();
    f.global("todo.py", TODO_EXTENSION);
    f.global("broken.py", "raise RuntimeError('nope')\n");
    let before = generation();
    f.host.catalog().reload(None).await;
    let loaded = generation();
    assert_ne!(
        loaded, before,
        "a reload that changed the scope starts a new generation"
    );
    f.host.catalog().reload(None).await;
    assert_eq!(
        generation(),
        loaded,
        "a reload without a change keeps the generation (session workers are not replaced)"
    );
    let s = f.session("s");
    let hits = f.host.tools().apropos(&s, "^a").await.expect("apropos");
    assert_eq!(
        hits.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        vec!["add"]
    );
    assert!(f
        .host
        .tools()
        .apropos(&s, "secret")
        .await
        .expect("apropos")
        .is_empty());
    assert!(f.host.tools().apropos(&s, "(").await.is_err());
    let doc = f.host.tools().doc(&s, "add").await.expect("doc");
    assert!(
        doc.contains("Add one todo item") && doc.contains("Effect: mutation"),
        "{doc}"
    );
    assert!(f.host.tools().doc(&s, "secret").await.is_err());
    let md = f.host.catalog().markdown(None).await;
    assert!(md.starts_with("Extensions: 1 loaded, 1 failed"), "{md}");
    assert!(md.contains("**todo**") && md.contains("/todos") && md.contains("RuntimeError: nope"));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn helper_modules_are_frozen_until_reload_and_packages_load_as_one_extension() {
    let f = fixture();
    let helper = f.global("pkg/helper.py", "WORD = 'one'\n");
    f.global(
        "pkg/extension.py",
        r#"
import blockether.vis.extension as vis
import helper
def word() -> str:
    """The helper's word."""
    return helper.WORD
def where() -> str:
    """This file."""
    return __file__
vis.register(vis.Extension(name="pkg", alias="pkg", description="d",
    symbols=[vis.Symbol(word), vis.Symbol(where)]))
"#,
    );
    f.global("pkg/test_pkg.py", "raise SystemExit('never loaded')\n");
    let report = f.host.catalog().reload(None).await;
    assert_eq!(report.loaded, vec!["pkg".to_string()]);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let s = f.session("s");
    assert_eq!(
        f.host
            .tools()
            .call(&s, "word", json!({}))
            .await
            .expect("w")
            .text,
        "one"
    );
    let real = std::fs::canonicalize(f.home.join("extensions/pkg/extension.py")).expect("canon");
    assert_eq!(
        f.host
            .tools()
            .call(&s, "where", json!({}))
            .await
            .expect("w")
            .text,
        real.to_string_lossy()
    );
    std::fs::write(&helper, "WORD = 'two'\n").expect("edit");
    f.host.sessions().stop("s").await;
    assert_eq!(
        f.host
            .tools()
            .call(&s, "word", json!({}))
            .await
            .expect("w")
            .text,
        "one",
        "a fresh worker still runs the admitted copy"
    );
    f.host.catalog().reload(None).await;
    assert_eq!(
        f.host
            .tools()
            .call(&s, "word", json!({}))
            .await
            .expect("w")
            .text,
        "two"
    );
    f.host.shutdown().await;
}
