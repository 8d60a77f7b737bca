//! The gateway on PostgreSQL (issue 25, decision C3): `start --database-url` keeps sessions,
//! turns, events and the search index in the machine's PostgreSQL (127.0.0.1:5432, or
//! `VIS_TEST_PG_URL`), in a schema of the test's own. The server must answer when `CI` is
//! set; elsewhere the tests are skipped.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::json;

/// Drops the test's schema when dropped, also when the test fails.
struct SchemaGuard(String);

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        vis_store::testing::drop_schema(std::mem::take(&mut self.0));
    }
}

fn pg_opts(llm: &FixtureLlm) -> Option<(Opts, SchemaGuard)> {
    if !vis_store::testing::reachable("PostgreSQL", &vis_store::testing::pg_addr()) {
        return None;
    }
    let schema = format!(
        "vis_bb_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let mut opts = Opts::openai(llm);
    opts.extra_args = vec![
        "--database-url".into(),
        vis_store::testing::pg_url(),
        "--database-schema".into(),
        schema.clone(),
    ];
    Some((opts, SchemaGuard(schema)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_on_postgres_keeps_its_sessions_events_and_search_across_a_crash() {
    let llm = FixtureLlm::start().await;
    let Some((opts, _schema)) = pg_opts(&llm) else {
        return;
    };
    let gw = Gateway::start(opts).await;
    let sid = gw.create_session().await;
    let (s, v) = gw
        .patch(&format!("/v1/sessions/{sid}"), json!({"title": "Kitchen"}))
        .await;
    assert!(s.is_success(), "{v}");
    llm.push(Script::text(&["Quince ", "preserves keep a year."]));
    gw.run_turn(&sid, "tell me about marmalade jars").await;
    let before = gw.events_since(&sid, 0).await;
    assert!(
        before.iter().any(|e| e["type"] == "turn.completed"),
        "{before:?}"
    );
    assert!(
        !gw.dirs.home().join("vis.db").exists(),
        "no SQLite file is made when the store is on PostgreSQL"
    );

    // kill -9, then the same home and database: everything is read back from PostgreSQL
    let gw = gw.restart_after_kill().await;
    let (s, session) = gw.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::OK, "{session}");
    assert_eq!(session["title"], "Kitchen", "{session}");
    let after = gw.events_since(&sid, 0).await;
    let seqs = |evs: &[serde_json::Value]| -> Vec<i64> {
        evs.iter().filter_map(|e| e["seq"].as_i64()).collect()
    };
    assert_eq!(
        seqs(&after)[..seqs(&before).len()],
        seqs(&before)[..],
        "the journal replays as it was stored"
    );

    let (s, v) = gw.get("/v1/sessions/actions/search?q=marmal").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["session_ids"], json!([sid]), "{v}");
    assert_eq!(v["matches"][0]["is_in_request"], true, "{v}");
    let (_, v) = gw.get("/v1/sessions/actions/search?q=kitchen").await;
    assert_eq!(v["matches"][0]["rank"], 0, "a title hit: {v}");
    let (_, v) = gw.get("/v1/sessions/actions/search?q=quince").await;
    assert_eq!(v["matches"][0]["is_in_reply"], true, "{v}");

    // a second turn after the restart continues the session's seqs
    llm.push(Script::text(&["Done."]));
    gw.run_turn(&sid, "and apricots?").await;
    let all = seqs(&gw.events_since(&sid, 0).await);
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "seqs keep growing after the restart: {all:?}"
    );
}

#[tokio::test]
async fn a_database_url_that_is_not_postgres_or_cannot_be_reached_stops_the_start() {
    let dirs = Dirs::new();
    let (code, _, stderr) = run_cli(
        &dirs,
        &[
            "start",
            "--port",
            "0",
            "--database-url",
            "mysql://127.0.0.1/vis",
        ],
    )
    .await;
    assert_ne!(code, Some(0));
    assert!(stderr.contains("--database-url"), "{stderr}");
    assert!(stderr.contains("not a PostgreSQL one"), "{stderr}");

    // a port where nothing listens, with a password that must not be printed
    let (code, _, stderr) = run_cli(
        &dirs,
        &[
            "start",
            "--port",
            "0",
            "--database-url",
            "postgres://vis:s3cret@127.0.0.1:1/vis",
        ],
    )
    .await;
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("cannot open the PostgreSQL store at postgres://vis:***@127.0.0.1:1/vis"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_home_exported_and_imported_into_postgres_serves_the_same_sessions() {
    let llm = FixtureLlm::start().await;
    let Some((pg, _schema)) = pg_opts(&llm) else {
        return;
    };
    let mut gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let (s, v) = gw
        .patch(&format!("/v1/sessions/{sid}"), json!({"title": "Larder"}))
        .await;
    assert!(s.is_success(), "{v}");
    llm.push(Script::text(&["Damsons ", "make a sharp jam."]));
    gw.run_turn(&sid, "what about damson jam").await;
    let before = gw.events_since(&sid, 0).await;
    let (_, mut session_before) = gw.get(&format!("/v1/sessions/{sid}")).await;
    let dirs = gw.dirs.clone();
    let file = dirs.base.path().join("home.jsonl");
    let file_arg = file.to_str().expect("utf-8 path");

    // the home's gateway holds its store: no export while it runs
    let (code, _, stderr) = run_cli(&dirs, &["store", "export", "--out", file_arg]).await;
    assert_ne!(code, Some(0));
    assert!(stderr.contains("stop the gateway"), "{stderr}");
    assert!(!file.exists(), "a refused export writes no file");
    gw.stop().await;

    let (code, stdout, stderr) = run_cli(&dirs, &["store", "export", "--out", file_arg]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("1 sessions"), "{stdout}");
    let (code, _, stderr) = run_cli(&dirs, &["store", "export", "--out", file_arg]).await;
    assert_ne!(code, Some(0), "an existing file is not overwritten");
    assert!(stderr.contains("exists already"), "{stderr}");

    let import: Vec<&str> = ["store", "import", "--in", file_arg]
        .into_iter()
        .chain(pg.extra_args.iter().map(String::as_str))
        .collect();
    let (code, stdout, stderr) = run_cli(&dirs, &import).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("1 sessions"), "{stdout}");
    let (code, _, stderr) = run_cli(&dirs, &import).await;
    assert_ne!(code, Some(0), "a second import into the same database");
    assert!(stderr.contains("not empty"), "{stderr}");

    // the same home, now on PostgreSQL: the session, its journal and its search are there
    let gw = Gateway::start_in(dirs, pg).await;
    let (s, mut session) = gw.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::OK, "{session}");
    for v in [&mut session, &mut session_before] {
        v["server_time_ms"] = json!(null);
    }
    assert_eq!(
        session, session_before,
        "the session reads as it did on SQLite"
    );
    let after = gw.events_since(&sid, 0).await;
    assert_eq!(after, before, "the journal replays as it was stored");
    let (_, v) = gw.get("/v1/sessions/actions/search?q=damson").await;
    assert_eq!(v["session_ids"], json!([sid]), "{v}");
    let (_, v) = gw.get("/v1/sessions/actions/search?q=larder").await;
    assert_eq!(v["matches"][0]["rank"], 0, "a title hit: {v}");

    // the next turn continues the session's seqs past the imported ones
    llm.push(Script::text(&["Yes."]));
    gw.run_turn(&sid, "and sloes?").await;
    let last_before = before.iter().filter_map(|e| e["seq"].as_i64()).max();
    let next = gw.events_since(&sid, 0).await;
    let new: Vec<i64> = next
        .iter()
        .filter_map(|e| e["seq"].as_i64())
        .filter(|s| Some(*s) > last_before)
        .collect();
    assert!(
        !new.is_empty(),
        "the new turn's events are stored: {next:?}"
    );
    assert_eq!(
        next.len(),
        before.len() + new.len(),
        "no imported seq was reused"
    );
}
