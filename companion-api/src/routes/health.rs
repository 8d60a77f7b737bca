//! Health, capabilities, status and metrics.

use crate::metrics::{self, Family, Kind, Sample};
use crate::middleware::auth::token_matches;
use crate::protocol::{compatibility_short, protocol_block, ClientInfo};
use crate::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde_json::{json, Value};

/// Every route of this resource, each path once.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(healthz))
        .route("/v1/capabilities", get(capabilities))
        .route("/v1/admin/status", get(admin_status))
        .route("/v1/admin/stop", post(admin_stop))
        .route("/metrics", get(metrics))
}

async fn status_map(state: &AppState, status: &str) -> Value {
    let s = state.areas.machine.stats().await;
    let sse = crate::serve_stats::sse_clients();
    let c = &state.cfg;
    json!({
        "status": status, "id": c.gateway_id, "protocol": protocol_block(), "pid": std::process::id(),
        "host": c.host, "port": c.port, "db": s.db, "require_token": c.require_token, "managed": c.managed,
        "clients": sse, "client_leases": 0, "sse_clients": sse, "client_registrations_total": 0,
        "client_releases_total": 0, "client_replacements_total": 0, "client_leases_reaped_total": 0,
        "running_turns": s.turns_running,
    })
}

pub async fn healthz(State(state): State<AppState>, headers: HeaderMap) -> Json<Value> {
    let mut m = status_map(&state, "ok").await;
    let matched = headers
        .get("x-vis-gateway-secret")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| token_matches(&state.cfg.token, t.trim()));
    m["secret_match"] = json!(matched);
    Json(m)
}

pub async fn admin_status(State(state): State<AppState>) -> Json<Value> {
    Json(status_map(&state, "running").await)
}

pub async fn admin_stop(State(state): State<AppState>) -> Json<Value> {
    state.areas.machine.request_stop();
    Json(json!({"stopping": true, "status": status_map(&state, "running").await}))
}

pub async fn capabilities(State(state): State<AppState>, headers: HeaderMap) -> Json<Value> {
    let client = ClientInfo::from_headers(&headers);
    let push = state.areas.machine.push_status().await;
    Json(json!({
        "version": 1,
        "protocol": protocol_block(),
        "addresses": state.cfg.addresses,
        "compatibility": compatibility_short(&client),
        "features": {
            "chat": {"enabled": true},
            "attachments": {"enabled": true, "transport": "inline-base64",
                "media_types": ["image/jpeg", "image/png", "image/gif", "image/webp"],
                "video_media_types": [], "audio_media_types": [],
                "max_files": 8, "max_file_bytes": 26_214_400, "max_video_bytes": 33_554_432, "max_audio_bytes": 33_554_432},
            "voice": {"enabled": false, "transport": "audio/wav", "transcription": "gateway-local", "is_async": true,
                "progress": "sse", "progress_event": "voice.job", "phases": [], "model": {"status": "unavailable"},
                "engines": [], "selected": null},
            "speech": {"is_enabled": false, "transport": "audio/wav", "synthesis": "gateway-local", "is_async": true,
                "progress": "sse", "progress_event": "speech.job", "phases": [], "inline_max_chars": 280,
                "max_chars": 20000, "model": {}, "engines": [], "selected": null},
            "push": push,
        }
    }))
}

/// Every series of the metrics answer: the Companion's figures, then the engine's own.
async fn series(state: &AppState) -> Vec<Family> {
    use Kind::{Counter, Gauge};
    let s = state.areas.machine.stats().await;
    let retained = state.areas.machine.replay_events_retained().await;
    let rss = crate::serve_stats::rss_bytes() as f64;
    let sse = crate::serve_stats::sse_clients() as f64;
    let tokens = Family {
        name: "vis_turn_tokens_total",
        help: "Provider tokens used by turns, by kind (input, output).",
        kind: Counter,
        samples: vec![
            Sample::labelled(vec![("kind", "input".into())], s.tokens_input as f64),
            Sample::labelled(vec![("kind", "output".into())], s.tokens_output as f64),
        ],
    };
    let one = Family::single;
    let mut out = vec![
        tokens,
        one(
            "vis_turns_total",
            "Turns started.",
            Counter,
            s.turns_total as f64,
        ),
        one(
            "vis_turns_failed_total",
            "Turns that ended failed or cancelled.",
            Counter,
            s.turns_failed_total as f64,
        ),
        one(
            "vis_turn_cost_usd_total",
            "Cost of turns in USD (not computed: always 0).",
            Counter,
            0.0,
        ),
        one(
            "vis_turn_duration_ms_total",
            "Milliseconds from start to terminal, summed over ended turns.",
            Counter,
            s.turn_duration_ms_total as f64,
        ),
        one(
            "vis_sessions_tracked",
            "Sessions loaded in memory.",
            Gauge,
            s.sessions_tracked as f64,
        ),
        one(
            "vis_turns_running",
            "Turns started and not ended.",
            Gauge,
            s.turns_running as f64,
        ),
        one(
            "vis_turns_executing",
            "Running turns holding an execution slot.",
            Gauge,
            s.turns_executing as f64,
        ),
        one(
            "vis_turns_waiting",
            "Running turns waiting for an execution slot.",
            Gauge,
            s.turns_running.saturating_sub(s.turns_executing) as f64,
        ),
        one(
            "vis_turns_queued",
            "Turns queued behind a running turn.",
            Gauge,
            s.turns_queued as f64,
        ),
        one(
            "vis_turn_concurrency_limit",
            "Execution slots (VIS_GATEWAY_MAX_CONCURRENT_TURNS).",
            Gauge,
            s.concurrency_limit as f64,
        ),
        one(
            "vis_replay_events_retained",
            "Stored events kept for replay, all sessions.",
            Gauge,
            retained as f64,
        ),
        one(
            "vis_process_rss_bytes",
            "Resident memory of the gateway process.",
            Gauge,
            rss,
        ),
    ];
    for (name, help) in [
        (
            "vis_gateway_client_registrations_total",
            "Client lease registrations (no leases here: always 0).",
        ),
        (
            "vis_gateway_client_releases_total",
            "Client lease releases (always 0).",
        ),
        (
            "vis_gateway_client_replacements_total",
            "Client lease replacements (always 0).",
        ),
        (
            "vis_gateway_client_leases_reaped_total",
            "Client leases reaped (always 0).",
        ),
    ] {
        out.push(one(name, help, Counter, 0.0));
    }
    out.push(one(
        "vis_gateway_client_leases",
        "Client leases held (always 0).",
        Gauge,
        0.0,
    ));
    out.push(one(
        "vis_gateway_sse_clients",
        "Open SSE streams.",
        Gauge,
        sse,
    ));
    out.extend(state.areas.machine.metric_families());
    out
}

pub async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let families = series(&state).await;
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"));
    if wants_json {
        let mut m = metrics::to_json(&families);
        // The reference's JSON keys for the token counters.
        if let Some(Value::Object(t)) = m.remove("turn_tokens_total") {
            for (k, v) in t {
                m.insert(format!("tokens_{k}"), v);
            }
        }
        return Json(Value::Object(m)).into_response();
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics::render(&families),
    )
        .into_response()
}
