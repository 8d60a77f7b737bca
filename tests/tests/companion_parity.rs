//! The Companion app's calls beyond the core flow, against the real binary: every call of
//! the app's client (`apps/vis-companion/src/lib/gateway.ts`) answers (no route-level 404,
//! no 405), with the shapes the app's TypeScript types describe.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// Every call the app's client makes, as `(method, path)`; `{sid}` a real session, `{tid}`
/// a real turn, `{iid}` a real iteration with an artifact, `{pid}` the session's project,
/// `{token}` a registered device. Unknown ids only where no real one can exist (jobs).
const APP_CALLS: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("GET", "/v1/admin/status"),
    ("GET", "/v1/capabilities"),
    ("GET", "/v1/devices"),
    ("POST", "/v1/devices"),
    ("DELETE", "/v1/devices/{token}"),
    ("GET", "/v1/voice/model"),
    ("POST", "/v1/voice/model"),
    ("GET", "/v1/speech/model"),
    ("POST", "/v1/speech/model"),
    ("GET", "/v1/speech/voices"),
    ("POST", "/v1/speech/voices?name=x"),
    ("DELETE", "/v1/speech/voices/v1"),
    ("POST", "/v1/sessions/{sid}/speech"),
    ("GET", "/v1/sessions/{sid}/speech/jobs/j1"),
    ("GET", "/v1/sessions/{sid}/speech/jobs/j1/audio"),
    ("DELETE", "/v1/sessions/{sid}/speech/jobs/j1"),
    ("POST", "/v1/sessions/{sid}/voice"),
    ("GET", "/v1/sessions/{sid}/voice/jobs/j1/events"),
    ("DELETE", "/v1/sessions/{sid}/voice/jobs/j1"),
    ("GET", "/v1/settings?channel=all"),
    ("GET", "/v1/settings/reasoning_level"),
    ("POST", "/v1/settings"),
    ("GET", "/v1/router"),
    ("PATCH", "/v1/router"),
    ("GET", "/v1/sessions/{sid}/model"),
    ("PATCH", "/v1/sessions/{sid}/model"),
    ("GET", "/v1/sessions/{sid}/slashes"),
    ("GET", "/v1/sessions/{sid}/suggest?kind=file&q=src"),
    ("GET", "/v1/sessions/{sid}/turns/{tid}/attachments"),
    ("GET", "/v1/sessions?limit=100"),
    ("GET", "/v1/sessions?root=/&limit=10"),
    ("GET", "/v1/sessions/actions/search?q=hello"),
    ("POST", "/v1/sessions"),
    ("GET", "/v1/fs"),
    ("POST", "/v1/fs/actions/mkdir"),
    ("GET", "/v1/sessions/{sid}/workspace/drafts"),
    ("POST", "/v1/sessions/{sid}/workspace/drafts"),
    ("POST", "/v1/sessions/{sid}/workspace/resume"),
    ("GET", "/v1/sessions/{sid}/forks"),
    ("POST", "/v1/sessions/{sid}/forks"),
    ("GET", "/v1/sessions/{sid}"),
    ("GET", "/v1/sessions/{sid}?include=queued"),
    ("GET", "/v1/sessions/{sid}/usage"),
    ("PATCH", "/v1/sessions/{sid}"),
    ("GET", "/v1/sessions/{sid}/transcript?limit=24"),
    ("GET", "/v1/sessions/{sid}/artifacts"),
    ("GET", "/v1/sessions/{sid}/transcript.md"),
    ("GET", "/v1/sessions/{sid}/iterations/{iid}/attachments/0"),
    ("POST", "/v1/sessions/{sid}/iterations/{iid}/attachments"),
    ("POST", "/v1/sessions/{sid}/turns"),
    ("POST", "/v1/sessions/{sid}/turns/{tid}/cancel"),
    ("POST", "/v1/sessions/{sid}/cancel-current"),
    ("PATCH", "/v1/sessions/{sid}/turns/{tid}"),
    ("DELETE", "/v1/sessions/{sid}/turns/{tid}"),
    ("GET", "/v1/sessions/{sid}/turns?status=queued"),
    ("GET", "/v1/sessions/{sid}/human-input"),
    ("POST", "/v1/sessions/{sid}/human-input/00000000-0000-4000-8000-000000000003/actions/submit"),
    ("POST", "/v1/sessions/{sid}/human-input/00000000-0000-4000-8000-000000000003/actions/cancel"),
    ("GET", "/v1/sessions/{sid}/human-input/live"),
    ("GET", "/v1/sessions/{sid}/human-input/live/00000000-0000-4000-8000-000000000002/log/n1"),
    ("POST", "/v1/sessions/{sid}/human-input/live/00000000-0000-4000-8000-000000000002/actions/focus"),
    ("POST", "/v1/sessions/{sid}/human-input/live/00000000-0000-4000-8000-000000000002/actions/interrupt"),
    ("GET", "/v1/sessions/{sid}/turns/{tid}"),
    ("GET", "/v1/sessions/{sid}/turns/{tid}/trace"),
    ("POST", "/v1/sessions/{sid}/resume-queue"),
    ("GET", "/v1/sessions/{sid}/events"),
    ("GET", "/v1/events?sids={sid}:-1"),
    ("GET", "/v1/provider-presets"),
    ("POST", "/v1/providers"),
    ("GET", "/v1/providers/openai/status"),
    ("GET", "/v1/providers/openai/limits"),
    ("POST", "/v1/providers/openai/auth/start"),
    ("POST", "/v1/providers/openai/auth/complete"),
    ("POST", "/v1/providers/openai/auth/poll"),
    ("POST", "/v1/providers/openai/auth/cancel"),
    ("DELETE", "/v1/providers/openai"),
    ("DELETE", "/v1/projects/{pid}?is_recursive=true"),
    ("DELETE", "/v1/sessions/{sid}"),
];

/// The app's MCP management calls (`/v1/mcp/*`, on a server `x` that does not exist): each
/// must be served (their shapes are asserted in `mcp.rs` and `mcp_oauth.rs`).
const MCP_CALLS: &[(&str, &str)] = &[
    ("GET", "/v1/mcp/servers"),
    ("POST", "/v1/mcp/servers"),
    ("POST", "/v1/mcp/servers/actions/test"),
    ("POST", "/v1/mcp/servers/x/actions/enable"),
    ("DELETE", "/v1/mcp/servers/x"),
    ("POST", "/v1/mcp/servers/x/actions/kill"),
    ("POST", "/v1/mcp/servers/x/actions/start"),
    ("POST", "/v1/mcp/servers/x/auth/start"),
    ("POST", "/v1/mcp/servers/x/auth/complete"),
    ("POST", "/v1/mcp/servers/x/auth/poll"),
    ("POST", "/v1/mcp/servers/x/auth/cancel"),
    ("POST", "/v1/mcp/servers/x/auth/logout"),
];

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// Paths whose id cannot name a real resource here (no speech engine ever makes a job or a
/// voice; no extension has opened a form or a live view): their typed 404 is the answer.
const NO_REAL_ID: &[&str] = &[
    "/jobs/",
    "/speech/voices/",
    "/human-input/0000",
    "/human-input/live/0000",
];

/// A 405, a route-level 404, or a 404 on a path whose ids are real.
fn is_missing(path: &str, status: StatusCode, body: &Value) -> bool {
    // The project's deletion just before it took the session along: the session route is
    // served and says the session is gone.
    let session_gone = body["error"]["type"] == "session-not-found";
    status == StatusCode::METHOD_NOT_ALLOWED
        || (status == StatusCode::NOT_FOUND
            && !session_gone
            && (body["error"]["message"] == "no such route"
                || !NO_REAL_ID.iter().any(|p| path.contains(p))))
}

/// A session with one finished turn whose `shell` call wrote `out.txt` in the workspace.
async fn session_with_artifact(gw: &Gateway, llm: &FixtureLlm) -> (String, String, String) {
    llm.push(Script::tool_call(
        "shell",
        json!({"command": "printf 'made by the agent' > out.txt"}),
    ));
    llm.push(Script::text(&["Wrote out.txt."]));
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "write a file").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let tid = last.data["turn_id"].as_str().unwrap().to_string();
    let (_, arts) = gw.get(format!("/v1/sessions/{sid}/artifacts")).await;
    let iid = arts["artifacts"][0]["iteration_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no artifact: {arts}"))
        .to_string();
    (sid, tid, iid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_of_the_app_answers_without_a_404_or_a_405() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let (sid, tid, iid) = session_with_artifact(&gw, &llm).await;
    let (_, soul) = gw.get(format!("/v1/sessions/{sid}")).await;
    let pid = soul["project_id"].as_str().unwrap().to_string();
    let (s, dev) = gw
        .post(
            "/v1/devices",
            json!({"token": "device-token-1234", "platform": "ios"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{dev}");
    let fill = |t: &str| {
        t.replace("{sid}", &sid)
            .replace("{tid}", &tid)
            .replace("{iid}", &iid)
            .replace("{pid}", &pid)
            .replace("{token}", "device-token-1234")
    };
    let body = |m: &str, p: &str| -> Value {
        match (m, p) {
            ("POST", p) if p.ends_with("/turns") => json!({"request": "/help"}),
            ("POST", "/v1/devices") => json!({"token": "t-2"}),
            ("POST", "/v1/settings") => json!({"id": "verbosity", "action": "cycle"}),
            ("PATCH", "/v1/router") => {
                json!({"role": "primary", "provider": "openai", "model": "m"})
            }
            ("PATCH", p) if p.ends_with("/model") => json!({"provider": "openai", "model": "m"}),
            ("PATCH", p) if p.ends_with(&sid) => json!({"title": "Probe"}),
            ("POST", "/v1/fs/actions/mkdir") => json!({"path": "/tmp", "name": ".."}),
            ("POST", p) if p.ends_with("/attachments") => {
                json!({"filename": "out.txt", "media_type": "text/plain", "base64": "aGk="})
            }
            _ => json!({}),
        }
    };
    let client = stream_client();
    let mut missing = Vec::new();
    for (m, t) in APP_CALLS {
        let path = fill(t);
        let method = Method::from_bytes(m.as_bytes()).unwrap();
        let mut b = client
            .request(method, gw.u(&path))
            .header("X-Vis-Protocol", "2")
            .header("X-Vis-Min-Gateway-Protocol", "2")
            .header("X-Vis-Client", "vis-companion");
        if path.contains("/events") {
            b = b.header("Accept", "text/event-stream");
        }
        let r = tokio::time::timeout(WAIT, b.json(&body(m, &path)).send())
            .await
            .expect("timeout")
            .unwrap();
        let status = r.status();
        let v = if path.contains("/events") && status.is_success() {
            Value::Null
        } else {
            into_json(r).await.1
        };
        if is_missing(&path, status, &v) {
            missing.push(format!("{m} {path}: {status} {v}"));
        }
    }
    assert!(
        missing.is_empty(),
        "routes the app calls are missing: {missing:#?}"
    );
    let mut unserved = Vec::new();
    for (m, p) in MCP_CALLS {
        let (s, v) = into_json(
            gw.req(Method::from_bytes(m.as_bytes()).unwrap(), p)
                .json(&json!({}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        let no_route = s == StatusCode::NOT_FOUND && v["error"]["message"] == "no such route";
        if no_route || s == StatusCode::METHOD_NOT_ALLOWED || s == StatusCode::NOT_IMPLEMENTED {
            unserved.push(format!("{m} {p}: {s} {v}"));
        }
    }
    assert!(unserved.is_empty(), "MCP calls not served: {unserved:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_and_starring_are_seen_by_a_second_sse_client_and_in_the_list() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let other = gw.create_session().await;
    let mut watcher = gw.events(&sid, -1).await;
    let mut elsewhere = gw.events(&other, -1).await;
    let (s, row) = gw
        .patch(
            &format!("/v1/sessions/{sid}"),
            json!({"title": "Release plan"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{row}");
    assert_eq!(row["title"], "Release plan");
    assert_eq!(row["id"], sid.as_str());
    let ev = watcher.collect_until("session.title_updated", WAIT).await;
    assert_eq!(ev.last().unwrap().data["title"], "Release plan");
    let copy = elsewhere.collect_until("session.title_updated", WAIT).await;
    assert_eq!(copy.last().unwrap().data["titled_session_id"], sid.as_str());

    let (s, row) = gw
        .patch(&format!("/v1/sessions/{sid}"), json!({"is_favorite": true}))
        .await;
    assert_eq!(s, StatusCode::OK, "{row}");
    let rank = row["favorite_rank"].as_i64().expect("a rank");
    let ev = watcher
        .collect_until("session.favorite_updated", WAIT)
        .await;
    let data = &ev.last().unwrap().data;
    assert_eq!(data["is_favorite"], true);
    assert_eq!(data["favorite_rank"], rank);
    let (_, list) = gw.get("/v1/sessions?limit=10").await;
    assert_eq!(
        list["sessions"][0]["id"],
        sid.as_str(),
        "a starred session leads: {list}"
    );
    assert_eq!(list["sessions"][0]["title"], "Release plan");

    let (_, row) = gw
        .patch(
            &format!("/v1/sessions/{sid}"),
            json!({"is_favorite": false}),
        )
        .await;
    assert!(row["favorite_rank"].is_null(), "{row}");
    let ev = watcher
        .collect_until("session.favorite_updated", WAIT)
        .await;
    assert_eq!(ev.last().unwrap().data["is_favorite"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_patches_and_unknown_sessions_are_clear_4xx_and_change_nothing() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    gw.patch(&format!("/v1/sessions/{sid}"), json!({"title": "Keep"}))
        .await;
    for body in [
        json!({"title": ""}),
        json!({"title": 12}),
        json!({"is_favorite": "yes"}),
        json!({"title": "x".repeat(500)}),
        json!("not an object"),
        json!({}),
    ] {
        let (s, v) = gw.patch(&format!("/v1/sessions/{sid}"), body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(error_type(&v), "invalid-request", "{body}");
    }
    let (_, row) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(row["title"], "Keep");
    assert!(row["favorite_rank"].is_null());
    let unknown = "00000000-0000-4000-8000-00000000abcd";
    for (m, p, b) in [
        (
            "PATCH",
            format!("/v1/sessions/{unknown}"),
            json!({"title": "x"}),
        ),
        ("GET", format!("/v1/sessions/{unknown}/usage"), json!({})),
        (
            "GET",
            format!("/v1/sessions/{unknown}/transcript.md"),
            json!({}),
        ),
        (
            "GET",
            format!("/v1/sessions/{unknown}/suggest?kind=file&q=a"),
            json!({}),
        ),
        (
            "PATCH",
            format!("/v1/sessions/{unknown}/model"),
            json!({"provider": "", "model": ""}),
        ),
        (
            "GET",
            format!("/v1/sessions/{unknown}/artifacts"),
            json!({}),
        ),
    ] {
        let (s, v) = into_json(
            gw.req(Method::from_bytes(m.as_bytes()).unwrap(), &p)
                .json(&b)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{m} {p}: {v}");
        assert_eq!(error_type(&v), "session-not-found", "{m} {p}");
    }
    let (s, v) = gw
        .get(format!("/v1/sessions/{sid}/suggest?kind=symbol&q=a"))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_titles_requests_and_replies_with_their_side_snippet_and_turn() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let a = gw.create_session().await;
    llm.push(Script::text(&["The marmalade recipe needs oranges."]));
    let (_, last) = gw.run_turn(&a, "how do I cook breakfast").await;
    assert_eq!(last.event, "turn.completed");
    let b = gw.create_session().await;
    gw.patch(
        &format!("/v1/sessions/{b}"),
        json!({"title": "Marmalade notes"}),
    )
    .await;
    let c = gw.create_session().await;
    // titled first, so the request does not become the title
    gw.patch(&format!("/v1/sessions/{c}"), json!({"title": "Kitchen"}))
        .await;
    llm.push(Script::text(&["Fine."]));
    gw.run_turn(&c, "tell me about marmalade jars").await;

    let (s, v) = gw.get("/v1/sessions/actions/search?q=marmal").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let matches = v["matches"].as_array().unwrap();
    let order: Vec<&str> = matches
        .iter()
        .map(|m| m["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(order, vec![b.as_str(), c.as_str(), a.as_str()], "{v}");
    assert_eq!(v["session_ids"][0], b.as_str());
    assert_eq!(matches[0]["rank"], 0);
    assert_eq!(matches[0]["is_in_title"], true);
    assert_eq!(matches[1]["rank"], 1);
    assert_eq!(matches[1]["is_in_request"], true);
    assert!(matches[1]["request_snippet"]
        .as_str()
        .unwrap()
        .contains("marmalade jars"));
    let reply = &matches[2];
    assert_eq!(reply["rank"], 2);
    assert_eq!(reply["is_in_reply"], true);
    let hit = &reply["hits"][0];
    assert_eq!(hit["side"], "reply");
    assert!(
        hit["snippet"].as_str().unwrap().contains("marmalade"),
        "{hit}"
    );
    assert_eq!(hit["turn"], 1);
    assert!(hit["at"].as_i64().unwrap() > 0);
    let (_, none) = gw.get("/v1/sessions/actions/search?q=zebra").await;
    assert_eq!(none["matches"], json!([]));
    let (_, blank) = gw.get("/v1/sessions/actions/search?q=%20%22*").await;
    assert_eq!(blank["matches"], json!([]));
    // a deleted session is no longer found
    gw.delete(&format!("/v1/sessions/{b}")).await;
    let (_, v) = gw.get("/v1/sessions/actions/search?q=marmalade").await;
    assert!(!v.to_string().contains(&b), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_the_markdown_export_describe_every_turn() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let (_, empty) = gw.get(format!("/v1/sessions/{sid}/usage")).await;
    assert_eq!(empty, json!({"usage": null}));
    llm.push(Script::text(&["First **answer**."]));
    gw.run_turn(&sid, "first question").await;
    llm.push(Script::text(&["Second answer."]));
    gw.run_turn(&sid, "second question").await;
    let (s, v) = gw.get(format!("/v1/sessions/{sid}/usage")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let u = &v["usage"];
    assert_eq!(u["turn_count"], 2, "{v}");
    assert_eq!(u["turns"].as_array().unwrap().len(), 2);
    let per_turn: u64 = u["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["input_tokens"].as_u64().unwrap())
        .sum();
    assert!(per_turn > 0, "the fixture reports usage: {v}");
    assert_eq!(u["input_tokens"].as_u64().unwrap(), per_turn);
    assert!(u["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(u["provider"], "openai");
    assert!(u["cost_usd"].is_null(), "no prices are reported: {v}");

    let r = gw
        .req(Method::GET, &format!("/v1/sessions/{sid}/transcript.md"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/markdown"));
    let md = r.text().await.unwrap();
    assert!(md.starts_with("# first question"), "{md}");
    assert!(md.contains("## 1. You"), "{md}");
    assert!(md.contains("second question"), "{md}");
    assert!(md.contains("First **answer**."), "{md}");
    assert!(md.find("First").unwrap() < md.find("Second answer").unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suggest_ranks_workspace_files_and_leaves_out_gitignored_ones() {
    let gw = Gateway::start(Opts::default()).await;
    let root = gw.dirs.root();
    for p in [
        "src/engine/search.rs",
        "src/main.rs",
        "docs/searching.md",
        "build/search.rs",
    ] {
        let f = root.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, "x").unwrap();
    }
    std::fs::write(root.join(".gitignore"), "build/\n").unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(git.success());
    let sid = gw.create_session_at(&root).await;
    let (s, v) = gw
        .get(format!("/v1/sessions/{sid}/suggest?kind=file&q=search"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let rows = v.as_array().unwrap();
    assert_eq!(rows[0]["name"], "src/engine/search.rs", "{v}");
    assert!(rows
        .iter()
        .all(|r| !r["name"].as_str().unwrap().starts_with("build/")));
    for k in ["name", "size", "age", "status"] {
        assert!(rows[0][k].is_string(), "{k}: {v}");
    }
    assert_eq!(rows[0]["size"], "1 B");
    assert_eq!(rows[0]["status"], "?", "untracked in git: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_creates_one_folder_and_refuses_dot_dot_and_existing_names() {
    let gw = Gateway::start(Opts::default()).await;
    let base = gw.dirs.base.path().join("projects");
    std::fs::create_dir_all(&base).unwrap();
    let path = base.display().to_string();
    let (s, v) = gw
        .post(
            "/v1/fs/actions/mkdir",
            json!({"path": path, "name": "new-app"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["name"], "new-app");
    assert_eq!(v["path"], base.join("new-app").display().to_string());
    assert_eq!(v["entry_count"], 0);
    assert_eq!(v["is_repo"], false);
    assert!(base.join("new-app").is_dir());
    for (body, kind) in [
        (json!({"path": path, "name": ".."}), "invalid-name"),
        (json!({"path": path, "name": "../escape"}), "invalid-name"),
        (
            json!({"path": format!("{path}/../.."), "name": "x"}),
            "invalid-path",
        ),
        (json!({"path": "relative", "name": "x"}), "invalid-path"),
        (json!({"name": "x"}), "invalid-request"),
    ] {
        let (s, v) = gw.post("/v1/fs/actions/mkdir", body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(error_type(&v), kind, "{body}");
    }
    let (s, v) = gw
        .post(
            "/v1/fs/actions/mkdir",
            json!({"path": path, "name": "new-app"}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(!gw.dirs.base.path().join("escape").exists());
    let entries: Vec<_> = std::fs::read_dir(&base).unwrap().collect();
    assert_eq!(entries.len(), 1, "nothing else was written");
}

fn image_turn(png_as: &str) -> Value {
    json!({"request": "what is in this picture?", "attachments": [
        {"filename": "dot.png", "media_type": "image/png", "base64": png_as}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_sent_as_a_data_url_reaches_the_model_as_an_openai_image_url_part() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (s, rec) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            image_turn(&format!("data:image/png;base64,{PNG}")),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{rec}");
    assert_eq!(rec["attachment_previews"][0]["size"], 70, "{rec}");
    sse.collect_until_any(TERMINALS, WAIT).await;
    let req = llm.requests().pop().expect("a provider request");
    let user = req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()
        .clone();
    let parts = user["content"].as_array().expect("content parts");
    assert_eq!(
        parts[0],
        json!({"type": "text", "text": "what is in this picture?"})
    );
    assert_eq!(parts[1]["type"], "image_url");
    assert_eq!(
        parts[1]["image_url"]["url"],
        format!("data:image/png;base64,{PNG}")
    );
    // stored and served back as raw base64
    let tid = rec["turn_id"].as_str().unwrap();
    let (_, a) = gw
        .get(format!("/v1/sessions/{sid}/turns/{tid}/attachments"))
        .await;
    assert_eq!(a["attachments"][0]["base64"], PNG, "{a}");
    assert_eq!(a["attachments"][0]["media_type"], "image/png");
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(tr["turns"][0]["attachments"][0]["filename"], "dot.png");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_sent_as_raw_base64_reaches_the_model_as_an_anthropic_image_block() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts {
        provider: Provider::Anthropic(llm.anthropic_base_url()),
        ..Default::default()
    })
    .await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let mut sse = gw.events(&sid, -1).await;
    let (s, rec) = gw
        .post(&format!("/v1/sessions/{sid}/turns"), image_turn(PNG))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{rec}");
    let evs = sse.collect_until_any(TERMINALS, WAIT).await;
    assert_eq!(
        evs.last().unwrap().event,
        "turn.completed",
        "{:?}",
        ev_types(&evs)
    );
    let req = llm.requests().pop().expect("a provider request");
    assert_eq!(req.path, "/v1/messages");
    let user = &req.body["messages"][0];
    assert_eq!(user["role"], "user");
    let blocks = user["content"].as_array().unwrap();
    assert_eq!(
        blocks[0],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}})
    );
    assert_eq!(blocks[1]["text"], "what is in this picture?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_non_image_attachments_are_refused_and_nothing_is_stored() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let big = format!(
        "data:image/png;base64,{}",
        "A".repeat(30 * 1024 * 1024 / 3 * 4)
    );
    for (att, needle) in [
        (json!({"filename": "huge.png", "base64": big}), "exceeds"),
        (
            json!({"filename": "a.pdf", "base64": "data:application/pdf;base64,JVBERi0xLjQ="}),
            "application/pdf",
        ),
        (
            json!({"filename": "a.png", "base64": "data:image/png;base64,%%%"}),
            "base64",
        ),
    ] {
        let (s, v) = gw
            .post(
                &format!("/v1/sessions/{sid}/turns"),
                json!({"request": "look", "attachments": [att]}),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(error_type(&v), "invalid-attachment");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(needle),
            "{v}"
        );
    }
    let (_, turns) = gw.get(format!("/v1/sessions/{sid}/turns")).await;
    assert_eq!(turns["turns"], json!([]), "no turn was stored");
    assert_eq!(llm.request_count(), 0);
    // a text file reaches the model as text
    let mut sse = gw.events(&sid, -1).await;
    gw.post(
        &format!("/v1/sessions/{sid}/turns"),
        json!({"request": "summarise", "attachments": [
            {"filename": "notes.txt", "base64": "data:text/plain;base64,YnV5IG1pbGs="}]}),
    )
    .await;
    sse.collect_until_any(TERMINALS, WAIT).await;
    let body = llm.requests().pop().unwrap().body;
    let text = body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("notes.txt") && text.contains("buy milk"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_model_routes_the_next_turn_and_is_broadcast() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (s, v) = gw
        .patch(
            &format!("/v1/sessions/{sid}/model"),
            json!({"provider": "openai", "model": "pinned-model"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"model": {"provider": "openai", "model": "pinned-model"}})
    );
    let ev = sse.collect_until("session.model_updated", WAIT).await;
    assert_eq!(ev.last().unwrap().data["model"], "pinned-model");
    let (_, got) = gw.get(format!("/v1/sessions/{sid}/model")).await;
    assert_eq!(got["model"]["model"], "pinned-model");
    gw.run_turn(&sid, "hello").await;
    assert_eq!(llm.requests().pop().unwrap().body["model"], "pinned-model");
    let (s, v) = gw
        .patch(
            &format!("/v1/sessions/{sid}/model"),
            json!({"provider": "nope", "model": "x"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(error_type(&v), "unknown-provider");
    assert_eq!(v["error"]["provider_id"], "nope");
    let (_, v) = gw
        .patch(
            &format!("/v1/sessions/{sid}/model"),
            json!({"provider": "", "model": ""}),
        )
        .await;
    assert_eq!(v, json!({"model": null}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_cycle_and_reach_the_provider_request_in_both_dialects() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let (s, v) = gw.get("/v1/settings?channel=all").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let toggles = &v["groups"][0]["toggles"];
    assert_eq!(toggles[0]["id"], "reasoning_level");
    assert_eq!(toggles[0]["type"], "enum");
    assert_eq!(toggles[2]["type"], "boolean");
    let (_, t) = gw.get("/v1/settings/reasoning_level").await;
    assert_eq!(t["value"], "default");
    let (s, t) = gw
        .post(
            "/v1/settings",
            json!({"id": "reasoning_level", "action": "value", "value": "high"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(t["value"], "high");
    let (_, t) = gw
        .post(
            "/v1/settings",
            json!({"id": "verbosity", "action": "cycle"}),
        )
        .await;
    assert_eq!(t["value"], "low");
    let (_, t) = gw
        .post(
            "/v1/settings",
            json!({"id": "codex_fast_mode", "action": "toggle"}),
        )
        .await;
    assert_eq!(t["enabled"], true);
    let (s, v) = gw
        .post(
            "/v1/settings",
            json!({"id": "verbosity", "action": "value", "value": "loud"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _) = gw
        .post("/v1/settings", json!({"id": "nope", "action": "toggle"}))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let sid = gw.create_session().await;
    gw.run_turn(&sid, "think hard").await;
    let body = llm.requests().pop().unwrap().body;
    assert_eq!(body["reasoning_effort"], "high", "{body}");
    assert_eq!(body["verbosity"], "low");
    assert_eq!(body["service_tier"], "priority");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_requests_get_a_thinking_budget_from_the_reasoning_level() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts {
        provider: Provider::Anthropic(llm.anthropic_base_url()),
        ..Default::default()
    })
    .await;
    gw.post(
        "/v1/settings",
        json!({"id": "reasoning_level", "action": "value", "value": "medium"}),
    )
    .await;
    gw.post(
        "/v1/settings",
        json!({"id": "verbosity", "action": "value", "value": "low"}),
    )
    .await;
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    gw.run_turn(&sid, "think").await;
    let body = llm.requests().pop().unwrap().body;
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 8192})
    );
    assert!(body["max_tokens"].as_u64().unwrap() > 8192);
    assert!(
        body.get("verbosity").is_none(),
        "no such field in this dialect"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_reports_status_objects_and_patch_sets_default_and_fallback() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let (s, v) = gw.get("/v1/router").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let p = &v["providers"][0];
    assert_eq!(p["id"], "openai");
    assert_eq!(p["is_default"], true);
    assert_eq!(p["status"]["is_authenticated"], true, "{v}");
    assert_eq!(p["status"]["auth_state"], "unverified");
    assert_eq!(p["status"]["source"], "env-var");
    assert!(!v.to_string().contains("\"test\""), "no key: {v}");
    let (s, d) = gw
        .patch(
            "/v1/router",
            json!({"role": "primary", "provider": "openai", "model": "gpt-x"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["default_provider"], "openai");
    assert_eq!(d["default_model"], "gpt-x");
    let (_, v) = gw.get("/v1/router").await;
    assert_eq!(v["providers"][0]["default_model"], "gpt-x");
    let sid = gw.create_session().await;
    gw.run_turn(&sid, "which model").await;
    assert_eq!(llm.requests().pop().unwrap().body["model"], "gpt-x");
    let (s, e) = gw
        .patch(
            "/v1/router",
            json!({"role": "fallback", "provider": "openai", "model": "y"}),
        )
        .await;
    assert_eq!(
        s,
        StatusCode::BAD_REQUEST,
        "a fallback on the default's own provider: {e}"
    );
    let (s, e) = gw
        .patch("/v1/router", json!({"provider": "ghost", "model": "y"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(error_type(&e), "unknown-provider");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_routes_answer_the_shapes_of_the_apps_types() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let is_row = |p: &Value| {
        p["id"].is_string()
            && p["label"].is_string()
            && p["models"].is_array()
            && p["is_default"].is_boolean()
            && p["is_fallback"].is_boolean()
            && p.get("default_model").is_some()
            && p.get("fallback_model").is_some()
            && p["status"]["auth_state"].is_string()
    };
    let (s, v) = gw.get("/v1/providers").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let openai = &v["providers"][0];
    assert!(is_row(openai), "{v}");
    assert_eq!(openai["is_default"], true);
    assert!(openai["limits"]["dynamic"]["limits"].is_array(), "{v}");
    let (s, v) = gw.get("/v1/provider-presets").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    for p in v["presets"].as_array().unwrap() {
        assert!(p["id"].is_string() && p["label"].is_string(), "{p}");
        assert!(
            p["auth_kind"].is_string() && p["is_local"].is_boolean(),
            "{p}"
        );
        assert!(p["models"].is_array(), "{p}");
    }
    let (s, v) = gw
        .post(
            "/v1/providers",
            json!({"id": "lmstudio", "base_url": llm.openai_base_url()}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let rows = v["providers"].as_array().unwrap();
    assert!(rows.iter().all(is_row), "{v}");
    assert!(rows.iter().any(|p| p["id"] == "lmstudio"), "{v}");
    let (s, v) = gw.get("/v1/providers/openai/status").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["status"]["auth_state"].is_string(), "{v}");
    assert!(v["status"]["is_authenticated"].is_boolean(), "{v}");
    let (s, v) = gw.get("/v1/providers/openai/limits").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let report = &v["report"];
    assert!(
        report["status"].is_string() && report["static"].is_object(),
        "{v}"
    );
    assert!(report["dynamic"]["limits"].is_array(), "{v}");
    let (s, flow) = gw.post_empty("/v1/providers/lmstudio/auth/start").await;
    assert_eq!(s, StatusCode::OK, "{flow}");
    assert_eq!(flow["provider_id"], "lmstudio");
    assert_eq!(flow["kind"], "api-key");
    assert!(
        flow["flow_id"].is_string() && flow["expires_at"].is_i64(),
        "{flow}"
    );
    assert!(flow["instructions"].is_array(), "{flow}");
    let id = json!({"flow_id": flow["flow_id"]});
    let (_, v) = gw
        .post("/v1/providers/lmstudio/auth/poll", id.clone())
        .await;
    assert_eq!(v["status"], "pending", "{v}");
    let (_, v) = gw.post("/v1/providers/lmstudio/auth/cancel", id).await;
    assert_eq!(v["status"], "cancelled", "{v}");
    let (s, v) = gw.delete("/v1/providers/lmstudio").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["id"] != "lmstudio"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_are_registered_listed_and_removed_without_their_token() {
    let gw = Gateway::start(Opts::default()).await;
    let (_, v) = gw.get("/v1/devices").await;
    assert_eq!(v["devices"], json!([]));
    assert_eq!(v["push"]["is_available"], false);
    assert_eq!(v["push"]["devices"], 0);
    let (s, e) = gw.post("/v1/devices", json!({"platform": "ios"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("token or grant"));
    let token = "apns-secret-token-abcd";
    for _ in 0..2 {
        let (s, v) = gw
            .post(
                "/v1/devices",
                json!({"token": token, "platform": "ios", "label": "phone"}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["device"]["token_preview"], "…abcd");
        assert_eq!(v["push"]["devices"], 1, "re-registering refreshes: {v}");
    }
    let (_, v) = gw.get("/v1/devices").await;
    assert_eq!(v["devices"].as_array().unwrap().len(), 1);
    assert!(!v.to_string().contains(token), "{v}");
    let (_, caps) = gw.get("/v1/capabilities").await;
    assert_eq!(caps["features"]["push"]["is_delivered"], false);
    let (s, v) = gw.delete(&format!("/v1/devices/{token}")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v, json!({"is_removed": true}));
    let (_, v) = gw.delete(&format!("/v1/devices/{token}")).await;
    assert_eq!(v, json!({"is_removed": false}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_a_tool_writes_are_listed_and_downloadable_and_revisions_version_them() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let (sid, _tid, iid) = session_with_artifact(&gw, &llm).await;
    let (_, arts) = gw.get(format!("/v1/sessions/{sid}/artifacts")).await;
    let a = &arts["artifacts"][0];
    assert_eq!(a["filename"], "out.txt", "{arts}");
    assert_eq!(a["index"], 0);
    assert_eq!(a["version"], 1);
    assert_eq!(a["turn"], 1);
    assert_eq!(a["size"], 17);
    assert_eq!(a["media_type"], "text/plain");
    let r = gw
        .req(
            Method::GET,
            &format!("/v1/sessions/{sid}/iterations/{iid}/attachments/0"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    assert_eq!(r.text().await.unwrap(), "made by the agent");
    let (_, tr) = gw.get(format!("/v1/sessions/{sid}/transcript")).await;
    assert_eq!(
        tr["turns"][0]["iterations"][0]["attachments"][0]["filename"],
        "out.txt"
    );
    let (s, rev) = gw
        .post(
            &format!("/v1/sessions/{sid}/iterations/{iid}/attachments"),
            json!({"filename": "out.txt", "media_type": "text/plain",
                   "base64": "data:text/plain;base64,ZWRpdGVk"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{rev}");
    assert_eq!(rev["version"], 2);
    assert_eq!(rev["index"], 1);
    assert_eq!(rev["kind"], "revision");
    let (s, e) = gw
        .get(format!("/v1/sessions/{sid}/iterations/{iid}/attachments/9"))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(error_type(&e), "attachment-not-found");
    let (s, e) = gw
        .post(
            &format!("/v1/sessions/{sid}/iterations/nope:1/attachments"),
            json!({"filename": "x", "base64": "aGk="}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{e}");
    assert_eq!(error_type(&e), "attachment-not-stored");
    let fresh = gw.create_session().await;
    let (_, none) = gw.get(format!("/v1/sessions/{fresh}/artifacts")).await;
    assert_eq!(none, json!({"artifacts": []}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_project_recursively_deletes_its_sessions_and_answers_their_ids() {
    let gw = Gateway::start(Opts::default()).await;
    let proj = gw.dirs.base.path().join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    let a = gw.create_session_at(&proj).await;
    let b = gw.create_session_at(&proj).await;
    let keep = gw.create_session().await;
    let (_, soul) = gw.get(format!("/v1/sessions/{a}")).await;
    let pid = soul["project_id"].as_str().unwrap().to_string();
    let (s, v) = gw
        .delete(&format!("/v1/projects/{pid}?is_recursive=true"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let mut ids: Vec<String> = v["deleted_session_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(v["project_id"], pid.as_str());
    let (s, _) = gw.get(format!("/v1/sessions/{a}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = gw.get(format!("/v1/sessions/{keep}")).await;
    assert_eq!(s, StatusCode::OK);
    let (s, e) = gw
        .delete(&format!("/v1/projects/{pid}?is_recursive=true"))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(error_type(&e), "project-not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_copies_the_conversation_through_the_chosen_turn() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    gw.run_turn(&sid, "one").await;
    gw.run_turn(&sid, "two").await;
    let (_, pts) = gw.get(format!("/v1/sessions/{sid}/forks")).await;
    let turns = pts["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["request"], "one");
    let first = turns[0]["turn_id"].as_str().unwrap();
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/forks"),
            json!({"through_turn_id": first}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let fork = v["session"]["id"].as_str().unwrap().to_string();
    assert_ne!(fork, sid);
    let (_, tr) = gw.get(format!("/v1/sessions/{fork}/transcript")).await;
    assert_eq!(tr["total"], 1, "{tr}");
    assert_eq!(tr["turns"][0]["user_request"], "one");
    let (s, e) = gw
        .post(
            &format!("/v1/sessions/{sid}/forks"),
            json!({"through_turn_id": "nope"}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(error_type(&e), "unknown-turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_and_voice_answer_the_none_configured_shapes() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let (s, v) = gw.get("/v1/voice/model").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["status"], "unavailable");
    let (_, v) = gw.get("/v1/speech/voices").await;
    assert_eq!(v["voices"], json!([]));
    assert_eq!(v["engine"]["is_voice_import"], false);
    let (s, v) = gw
        .post(&format!("/v1/sessions/{sid}/speech"), json!({"text": "hi"}))
        .await;
    assert_eq!(s, StatusCode::NOT_IMPLEMENTED);
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("no speech synthesis engine"));
    let (_, caps) = gw.get("/v1/capabilities").await;
    assert_eq!(caps["features"]["voice"]["enabled"], false);
    assert_eq!(caps["features"]["speech"]["is_enabled"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_provider_fails_before_any_output_is_retried_on_the_fallback() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(
        Opts {
            provider: Provider::Anthropic(llm.anthropic_base_url()),
            ..Default::default()
        }
        .env("OPENAI_API_KEY", "test")
        .env("OPENAI_BASE_URL", &llm.openai_base_url()),
    )
    .await;
    let (s, d) = gw
        .patch(
            "/v1/router",
            json!({"role": "primary", "provider": "openai", "model": "a"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    let (s, d) = gw
        .patch(
            "/v1/router",
            json!({"role": "fallback", "provider": "claude", "model": "b"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["fallback_provider"], "claude");
    let (_, r) = gw.get("/v1/router").await;
    let claude = r["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "claude")
        .unwrap()
        .clone();
    assert_eq!(claude["is_fallback"], true, "{r}");
    assert_eq!(claude["status"]["source"], "config");
    llm.push(Script::error(400, "bad model"));
    let sid = gw.create_session_at(&gw.dirs.root()).await;
    let (evs, last) = gw.run_turn(&sid, "hello there").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    assert!(
        ev_types(&evs).contains(&"chunk.provider-fallback"),
        "{:?}",
        ev_types(&evs)
    );
    let reqs = llm.requests();
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].body["model"], "a");
    assert_eq!(reqs.last().unwrap().path, "/v1/messages");
    assert_eq!(reqs.last().unwrap().body["model"], "b");
}
