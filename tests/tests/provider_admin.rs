//! Providers managed from the phone against the real binary: `/v1/providers…` and
//! `/v1/provider-presets`. A key saved from the phone is used by the very next turn, is
//! never returned by any GET, lives in a private file in the gateway home and survives a
//! restart; status probes the provider through its own wire; sign-in flows save keys and
//! drive a Provider extension's `auth_fn`.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

const KEY: &str = "sk-phone-0123456789abcdef";

fn key_file(gw: &Gateway) -> std::path::PathBuf {
    gw.dirs.home().join("provider-keys.json")
}

fn row<'a>(list: &'a Value, id: &str) -> &'a Value {
    list["providers"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["id"] == id))
        .unwrap_or_else(|| panic!("no provider {id} in {list}"))
}

async fn add(gw: &Gateway, body: Value) -> Value {
    let (s, v) = gw.post("/v1/providers", body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

/// Every GET route of the route table, filled with real ids where they exist.
fn get_routes(sid: &str, tid: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (method, path) in common::routes::source_routes() {
        // Streams are left out (they never end); their replay is read through events-since.
        if method == "GET" && !path.ends_with("/events") {
            out.push(
                path.replace("{sid}", sid)
                    .replace("{tid}", tid)
                    .replace("{id}", "openai")
                    .replace("{iid}", "none")
                    .replace("{vid}", "none")
                    .replace("{nid}", "n1")
                    .replace("{idx}", "0")
                    .replace("{jid}", "j1"),
            );
        }
    }
    out.push(format!("/v1/sessions/{sid}/events-since?cursor=0"));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_added_from_the_phone_is_used_by_the_next_turn_and_never_returned_by_a_get() {
    let llm = FixtureLlm::start().await;
    llm.require_api_key(Some(KEY));
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let list = add(
        &gw,
        json!({"id": "openai", "base_url": llm.openai_base_url(), "api_key": KEY}),
    )
    .await;
    assert!(!list.to_string().contains(KEY), "{list}");
    let p = row(&list, "openai");
    assert_eq!(p["has_key"], true);
    assert_eq!(p["source"], "saved");
    assert_eq!(p["is_removable"], true);
    assert_eq!(p["label"], "OpenAI");
    assert!(p["models"].as_array().is_some_and(|m| !m.is_empty()), "{p}");

    // The very next turn, no restart: the fixture sees the key in the Authorization header.
    llm.push(Script::text(&["Hello with the phone's key."]));
    let (evs, last) = gw.run_turn(&sid, "hi").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let reqs = llm.requests();
    let turn = reqs.last().expect("a model request");
    assert_eq!(turn.path, "/v1/chat/completions");
    assert_eq!(
        turn.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let tid = last.data["turn_id"].as_str().unwrap_or("none").to_string();

    // No GET answer carries the key.
    let routes = get_routes(&sid, &tid);
    assert!(routes.len() > 20, "{routes:?}");
    for path in routes {
        let r = gw.req(Method::GET, &path).send().await.expect("GET");
        let text = r.text().await.unwrap_or_default();
        assert!(!text.contains(KEY), "GET {path} returned the key: {text}");
    }
    // Nor the database, nor the logs.
    gw.wait_idle(&sid).await;
    for entry in std::fs::read_dir(gw.dirs.home()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("provider-keys.json") || entry.path().is_dir() {
            continue;
        }
        let bytes = std::fs::read(entry.path()).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "{name} holds the key"
        );
    }
    assert!(!gw.stderr().contains(KEY) && !gw.stdout().contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_a_provider_that_refuses_the_key_says_the_key_was_rejected() {
    let llm = FixtureLlm::start().await;
    llm.require_api_key(Some(KEY));
    let gw = Gateway::start(Opts::default()).await;
    add(
        &gw,
        json!({"id": "openai", "base_url": llm.openai_base_url(), "api_key": "sk-wrong-key-000"}),
    )
    .await;
    let (s, v) = gw.get("/v1/providers/openai/status").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let st = &v["status"];
    assert_eq!(st["auth_state"], "rejected", "{v}");
    assert_eq!(st["is_authenticated"], false);
    let err = st["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("rejected the API key") && err.contains("401"),
        "{err}"
    );
    assert!(!v.to_string().contains("sk-wrong-key-000"), "{v}");
    let probe = llm.requests().pop().expect("a models-list call");
    assert_eq!(probe.path, "/v1/models");
    // The list shows the last check.
    let (_, list) = gw.get("/v1/providers").await;
    assert_eq!(row(&list, "openai")["status"]["auth_state"], "rejected");

    // The right key, through the Anthropic wire as well: verified.
    add(&gw, json!({"id": "openai", "api_key": KEY})).await;
    add(
        &gw,
        json!({"id": "anthropic", "base_url": llm.anthropic_base_url(), "api_key": KEY}),
    )
    .await;
    for id in ["openai", "anthropic"] {
        let (s, v) = gw.get(format!("/v1/providers/{id}/status")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["status"]["auth_state"], "verified", "{id}: {v}");
    }
    assert_eq!(llm.requests().pop().unwrap().header("x-api-key"), Some(KEY));
    let (s, v) = gw.get("/v1/providers/nowhere/status").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(error_type(&v), "provider-not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presets_list_cloud_and_local_servers_and_leave_out_configured_ones() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::openai(&llm)).await;
    let (s, v) = gw.get("/v1/provider-presets").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let presets = v["presets"].as_array().expect("presets").clone();
    let ids: Vec<&str> = presets.iter().filter_map(|p| p["id"].as_str()).collect();
    // `openai` comes from the environment here, so it is not offered again.
    assert!(!ids.contains(&"openai"), "{ids:?}");
    for id in [
        "anthropic",
        "ollama",
        "llama-cpp",
        "vllm",
        "openai-compatible",
    ] {
        assert!(ids.contains(&id), "{id}: {ids:?}");
    }
    for p in &presets {
        assert!(p["label"].as_str().is_some_and(|l| !l.is_empty()), "{p}");
        assert!(
            ["oauth", "api-key", "none", "command"]
                .contains(&p["auth_kind"].as_str().unwrap_or("")),
            "{p}"
        );
        assert!(p["is_local"].is_boolean() && p["models"].is_array(), "{p}");
    }
    let ollama = presets.iter().find(|p| p["id"] == "ollama").unwrap();
    assert_eq!(ollama["base_url"], "http://localhost:11434/v1");
    assert_eq!(ollama["auth_kind"], "none");
    assert_eq!(ollama["is_local"], true);
    let anthropic = presets.iter().find(|p| p["id"] == "anthropic").unwrap();
    assert_eq!(anthropic["auth_kind"], "api-key");
    assert_eq!(anthropic["api_style"], "anthropic");

    // A local server added at its own address needs no key and leaves the picker.
    let list = add(
        &gw,
        json!({"id": "ollama", "base_url": llm.openai_base_url()}),
    )
    .await;
    let p = row(&list, "ollama");
    assert_eq!(p["has_key"], false);
    // Added without models of its own, it was checked at once (to learn its models).
    assert_eq!(p["status"]["auth_state"], "verified", "{p}");
    let (_, v) = gw.get("/v1/provider-presets").await;
    assert!(!v.to_string().contains("\"ollama\""), "{v}");
    let (s, v) = gw.get("/v1/providers/ollama/status").await;
    assert_eq!(v["status"]["auth_state"], "verified", "{s} {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_provider_is_removed_with_its_key_and_file_or_env_ones_say_where_they_live() {
    let llm = FixtureLlm::start().await;
    let dirs = Dirs::new();
    std::fs::write(
        dirs.root().join("vis.yml"),
        format!(
            "providers:\n  claude:\n    api_style: anthropic\n    base_url: {}\n    api_key: k\n",
            llm.anthropic_base_url()
        ),
    )
    .unwrap();
    let gw = Gateway::start_in(dirs, Opts::openai(&llm)).await;
    let (_, list) = gw.get("/v1/providers").await;
    assert_eq!(row(&list, "openai")["source"], "env-var");
    assert_eq!(row(&list, "openai")["configured_in"], "OPENAI_API_KEY");
    assert_eq!(row(&list, "claude")["source"], "config");
    assert_eq!(row(&list, "claude")["is_removable"], false);

    let (s, v) = gw.delete("/v1/providers/openai").await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("OPENAI_API_KEY"),
        "{v}"
    );
    let (s, v) = gw.delete("/v1/providers/claude").await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("vis.yml"),
        "{v}"
    );
    let (s, v) = gw
        .post("/v1/providers", json!({"id": "claude", "api_key": KEY}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");

    add(
        &gw,
        json!({"id": "vllm", "base_url": llm.openai_base_url(), "api_key": KEY}),
    )
    .await;
    assert!(std::fs::read_to_string(key_file(&gw))
        .unwrap()
        .contains(KEY));
    let (s, v) = gw.delete("/v1/providers/vllm").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        v["providers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["id"] != "vllm"),
        "{v}"
    );
    assert!(!std::fs::read_to_string(key_file(&gw))
        .unwrap()
        .contains(KEY));
    let (s, v) = gw.delete("/v1/providers/vllm").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_provider_input_is_a_400_naming_the_field() {
    let gw = Gateway::start(Opts::default()).await;
    let cases = [
        (json!({}), "id"),
        (json!({"id": "no-such-preset"}), "id"),
        (json!({"id": "Bad Id!"}), "id"),
        (
            json!({"id": "openai", "base_url": "ftp://example.test/v1"}),
            "base_url",
        ),
        (json!({"id": "openai", "base_url": "not a url"}), "base_url"),
        (json!({"id": "openai", "api_key": ""}), "api_key"),
        (json!({"id": "openai", "api_key": "two words"}), "api_key"),
        (json!({"id": "openai", "colour": "red"}), "colour"),
        (json!(["openai"]), "JSON object"),
    ];
    for (body, field) in cases {
        let (s, v) = gw.post("/v1/providers", body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(field), "{body}: {msg}");
    }
    // Nothing was saved.
    let (_, list) = gw.get("/v1/providers").await;
    assert_eq!(list["providers"], json!([]));
    assert!(!key_file(&gw).exists());
    // A sign-in without its key, or with a flow that does not exist.
    let (_, flow) = gw.post_empty("/v1/providers/openai/auth/start").await;
    let flow_id = flow["flow_id"].as_str().expect("flow id").to_string();
    let (s, v) = gw
        .post(
            "/v1/providers/openai/auth/complete",
            json!({"flow_id": flow_id}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("api_key"),
        "{v}"
    );
    let (s, v) = gw
        .post(
            "/v1/providers/openai/auth/complete",
            json!({"flow_id": "nope", "api_key": KEY}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(error_type(&v), "unknown-flow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_file_is_private_and_survives_a_restart() {
    let llm = FixtureLlm::start().await;
    llm.require_api_key(Some(KEY));
    let gw = Gateway::start(Opts::default()).await;
    add(
        &gw,
        json!({"id": "openai", "base_url": llm.openai_base_url(), "api_key": KEY}),
    )
    .await;
    let mode = std::fs::metadata(key_file(&gw))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let gw = gw.restart_after_kill().await;
    let (_, list) = gw.get("/v1/providers").await;
    assert_eq!(row(&list, "openai")["has_key"], true);
    let sid = gw.create_session().await;
    llm.push(Script::text(&["still signed in"]));
    let (evs, last) = gw.run_turn(&sid, "hi").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let mode = std::fs::metadata(key_file(&gw))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_sign_in_saves_the_key_and_other_clients_hear_of_each_change() {
    let llm = FixtureLlm::start().await;
    llm.require_api_key(Some(KEY));
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut watcher = gw.events(&sid, -1).await;
    // The app adds the preset first (no key), then signs in.
    let list = add(
        &gw,
        json!({"id": "anthropic", "base_url": llm.anthropic_base_url()}),
    )
    .await;
    let p = row(&list, "anthropic");
    assert_eq!(p["has_key"], false);
    assert_eq!(p["status"]["auth_state"], "rejected");
    let ev = watcher
        .collect_until("providers.updated", Duration::from_secs(10))
        .await;
    assert_eq!(ev.last().unwrap().data["change"], "added");
    assert_eq!(ev.last().unwrap().data["provider_id"], "anthropic");

    let (s, flow) = gw.post_empty("/v1/providers/anthropic/auth/start").await;
    assert_eq!(s, StatusCode::OK, "{flow}");
    assert_eq!(flow["kind"], "api-key");
    assert_eq!(flow["provider_id"], "anthropic");
    assert!(
        flow["instructions"][0]
            .as_str()
            .unwrap()
            .contains("API key"),
        "{flow}"
    );
    let flow_id = flow["flow_id"].as_str().unwrap();
    let (_, v) = gw
        .post(
            "/v1/providers/anthropic/auth/poll",
            json!({"flow_id": flow_id}),
        )
        .await;
    assert_eq!(v["status"], "pending");
    let (s, v) = gw
        .post(
            "/v1/providers/anthropic/auth/complete",
            json!({"flow_id": flow_id, "api_key": KEY}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "ok");
    assert!(!v.to_string().contains(KEY));
    let ev = watcher
        .collect_until("providers.updated", Duration::from_secs(10))
        .await;
    assert_eq!(ev.last().unwrap().data["change"], "signed-in");
    assert!(!ev.iter().any(|e| e.data.to_string().contains(KEY)));

    llm.push(Script::text(&["signed in"]));
    let (evs, last) = gw.run_turn(&sid, "hi").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let turn = llm.requests().pop().unwrap();
    assert_eq!(turn.path, "/v1/messages");
    assert_eq!(turn.header("x-api-key"), Some(KEY));

    // The finished flow is gone; cancelling one that is gone is harmless.
    let (s, _) = gw
        .post(
            "/v1/providers/anthropic/auth/complete",
            json!({"flow_id": flow_id, "api_key": KEY}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, v) = gw
        .post(
            "/v1/providers/anthropic/auth/cancel",
            json!({"flow_id": flow_id}),
        )
        .await;
    assert_eq!(
        (s, v["status"].clone()),
        (StatusCode::OK, json!("cancelled"))
    );
    // Removal is heard as well.
    let (s, _) = gw.delete("/v1/providers/anthropic").await;
    assert_eq!(s, StatusCode::OK);
    let ev = watcher
        .collect_until("providers.updated", Duration::from_secs(10))
        .await;
    assert_eq!(ev.last().unwrap().data["change"], "removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_report_the_rate_limit_headers_of_the_last_answer() {
    let llm = FixtureLlm::start().await;
    llm.set_response_headers(&[
        ("x-ratelimit-limit-requests", "500"),
        ("x-ratelimit-remaining-requests", "497"),
        ("x-ratelimit-reset-requests", "1s"),
    ]);
    let gw = Gateway::start(Opts::default()).await;
    add(
        &gw,
        json!({"id": "openai", "base_url": llm.openai_base_url(), "api_key": KEY}),
    )
    .await;
    let (_, v) = gw.get("/v1/providers/openai/limits").await;
    assert_eq!(v["report"]["status"], "ok", "{v}");
    assert_eq!(v["report"]["dynamic"]["limits"], json!([]));
    assert!(v["report"]["dynamic"]["note"].is_string(), "{v}");
    let sid = gw.create_session().await;
    llm.push(Script::text(&["ok"]));
    let (_, last) = gw.run_turn(&sid, "hi").await;
    assert_eq!(last.event, "turn.completed");
    let (s, v) = gw.get("/v1/providers/openai/limits").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let r = &v["report"];
    assert_eq!(r["provider_id"], "openai");
    assert!(r["fetched_at_ms"].as_i64().is_some(), "{v}");
    let rows = r["dynamic"]["limits"].as_array().unwrap();
    let req = rows
        .iter()
        .find(|x| x["id"] == "rate-requests")
        .expect("requests row");
    assert_eq!(req["limit"], 500.0);
    assert_eq!(req["remaining"], 497.0);
    assert_eq!(req["used"], 3.0);
    assert!(req["window"]["resets_at_ms"].as_i64().is_some(), "{req}");
}

fn login_extension(base_url: &str) -> String {
    format!(
        r#"import blockether.vis.extension as vis

def login(printer):
    printer("Open http://127.0.0.1:9/device and enter the code ACME-0042.")
    vis.state["token"] = "tok-from-login"
    return "ok"

def token():
    t = vis.state.get("token")
    return vis.ProviderCredential(token=t) if t else None

def limits():
    return vis.ProviderLimits(status="ok", rpm=60, limits=[
        vis.ProviderLimit(id="credits", label="Credits", kind="credits", used=2, limit=10)])

vis.register(vis.Extension(
    name="acme", description="A provider that signs in with a device code.",
    providers=[vis.Provider(
        id="acme", label="Acme AI",
        preset=vis.ProviderPreset(base_url="{base_url}", api_style="openai", default_models=["acme-1"]),
        auth_fn=login, get_token_fn=token, limits_fn=limits,
    )],
))
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extensions_auth_fn_is_driven_by_the_sign_in_routes() {
    let llm = FixtureLlm::start().await;
    llm.require_api_key(Some("tok-from-login"));
    let gw = Gateway::start(Opts::default()).await;
    let ext_dir = gw.dirs.root().join(".vis").join("extensions");
    std::fs::create_dir_all(&ext_dir).unwrap();
    std::fs::write(
        ext_dir.join("acme.py"),
        login_extension(&llm.openai_base_url()),
    )
    .unwrap();

    let (_, v) = gw.get("/v1/provider-presets").await;
    let preset = v["presets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "acme")
        .unwrap_or_else(|| panic!("no acme preset: {v}"))
        .clone();
    assert_eq!(preset["auth_kind"], "oauth");
    assert_eq!(preset["extension"], "acme");
    assert_eq!(preset["models"], json!(["acme-1"]));
    let (_, list) = gw.get("/v1/providers").await;
    assert_eq!(row(&list, "acme")["source"], "extension");
    assert_eq!(row(&list, "acme")["is_removable"], false);
    // The app adds the preset, then signs in; the provider stays the extension's.
    let list = add(&gw, json!({"id": "acme"})).await;
    assert_eq!(row(&list, "acme")["source"], "extension");
    assert_eq!(row(&list, "acme")["is_removable"], true);
    let (_, v) = gw.get("/v1/provider-presets").await;
    assert!(
        v["presets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["id"] != "acme"),
        "{v}"
    );

    let (s, flow) = gw.post_empty("/v1/providers/acme/auth/start").await;
    assert_eq!(s, StatusCode::OK, "{flow}");
    assert_eq!(flow["kind"], "device");
    assert!(
        flow["instructions"][0]
            .as_str()
            .unwrap()
            .contains("ACME-0042"),
        "{flow}"
    );
    assert_eq!(flow["url"], "http://127.0.0.1:9/device");
    let flow_id = flow["flow_id"].as_str().unwrap();
    let mut verdict = Value::Null;
    for _ in 0..100 {
        let (_, v) = gw
            .post("/v1/providers/acme/auth/poll", json!({"flow_id": flow_id}))
            .await;
        verdict = v;
        if verdict["status"] != "pending" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(verdict["status"], "ok", "{verdict}");

    // The credential the login stored is live: status verified (the models list accepted
    // it and the extension's limits said ok), and the limits carry the extension's rows.
    let (s, v) = gw.get("/v1/providers/acme/status").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"]["auth_state"], "verified", "{v}");
    let (_, v) = gw.get("/v1/providers/acme/limits").await;
    assert_eq!(v["report"]["static"]["rpm"], 60, "{v}");
    assert_eq!(v["report"]["dynamic"]["limits"][0]["id"], "credits", "{v}");
    // A turn runs on the credential the login stored.
    let sid = gw.create_session().await;
    llm.push(Script::text(&["signed in through the extension"]));
    let (evs, last) = gw.run_turn(&sid, "hi").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let turn = llm.requests().pop().unwrap();
    assert_eq!(turn.header("authorization"), Some("Bearer tok-from-login"));
    assert_eq!(turn.body["model"], "acme-1");
    // Removing it from the phone undoes the add; the extension's own declaration stays.
    let (s, v) = gw.delete("/v1/providers/acme").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = gw.delete("/v1/providers/acme").await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("extension acme"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_compatible_server_added_from_the_phone_uses_the_models_it_lists() {
    let llm = FixtureLlm::start().await;
    let gw = Gateway::start(Opts::default()).await;
    // The app's shape: the preset's id and the server's address.
    let list = add(
        &gw,
        json!({"id": "vllm", "base_url": llm.openai_base_url()}),
    )
    .await;
    let p = row(&list, "vllm");
    assert_eq!(p["models"], json!(["fixture-model"]), "{p}");
    let (s, r) = gw.get("/v1/router").await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let p = row(&r, "vllm");
    assert_eq!(p["label"], "vLLM", "the preset's name: {p}");
    assert_eq!(p["models"], json!(["fixture-model"]), "{p}");
    assert_eq!(p["default_model"], "fixture-model", "{p}");
    // The status check verified it; the router says so.
    let (s, st) = gw.get("/v1/providers/vllm/status").await;
    assert_eq!(s, StatusCode::OK, "{st}");
    assert_eq!(st["status"]["auth_state"], "verified", "{st}");
    let (_, r) = gw.get("/v1/router").await;
    assert_eq!(row(&r, "vllm")["status"]["auth_state"], "verified", "{r}");

    let sid = gw.create_session().await;
    llm.push(Script::text(&["hello from the listed model"]));
    let (evs, last) = gw.run_turn(&sid, "hi").await;
    assert_eq!(last.event, "turn.completed", "{:?}", ev_types(&evs));
    let sent = llm.requests().last().unwrap().body.clone();
    assert_eq!(sent["model"], "fixture-model", "{sent}");

    // The user's pick from the model menu wins.
    let (s, v) = gw
        .patch(
            "/v1/router",
            json!({"provider": "vllm", "model": "picked-model"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    llm.push(Script::text(&["hello from the pick"]));
    gw.run_turn(&sid, "again").await;
    let sent = llm.requests().last().unwrap().body.clone();
    assert_eq!(sent["model"], "picked-model", "{sent}");
}
