//! Health, capabilities, status and metrics (§5.4–5.6).

use crate::middleware::auth::token_matches;
use crate::protocol::{compatibility_short, protocol_block, ClientInfo};
use crate::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

async fn status_map(state: &AppState, status: &str) -> Value {
    let s = state.engine.stats().await;
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
    state.engine.request_stop();
    Json(json!({"stopping": true, "status": status_map(&state, "running").await}))
}

pub async fn capabilities(State(state): State<AppState>, headers: HeaderMap) -> Json<Value> {
    let client = ClientInfo::from_headers(&headers);
    let push = state.engine.push_status().await;
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

/// `(name, kind, value)` rows of the metrics answer.
async fn series(state: &AppState) -> Vec<(&'static str, &'static str, f64)> {
    let s = state.engine.stats().await;
    let retained = state.engine.replay_events_retained().await;
    let rss = crate::serve_stats::rss_bytes() as f64;
    vec![
        (
            "vis_turn_tokens_total{kind=\"input\"}",
            "counter",
            s.tokens_input as f64,
        ),
        (
            "vis_turn_tokens_total{kind=\"output\"}",
            "counter",
            s.tokens_output as f64,
        ),
        ("vis_turns_total", "counter", s.turns_total as f64),
        (
            "vis_turns_failed_total",
            "counter",
            s.turns_failed_total as f64,
        ),
        ("vis_turn_cost_usd_total", "counter", 0.0),
        (
            "vis_turn_duration_ms_total",
            "counter",
            s.turn_duration_ms_total as f64,
        ),
        ("vis_sessions_tracked", "gauge", s.sessions_tracked as f64),
        ("vis_turns_running", "gauge", s.turns_running as f64),
        ("vis_turns_executing", "gauge", s.turns_executing as f64),
        (
            "vis_turns_waiting",
            "gauge",
            s.turns_running.saturating_sub(s.turns_executing) as f64,
        ),
        ("vis_turns_queued", "gauge", s.turns_queued as f64),
        (
            "vis_turn_concurrency_limit",
            "gauge",
            s.concurrency_limit as f64,
        ),
        ("vis_replay_events_retained", "gauge", retained as f64),
        ("vis_process_rss_bytes", "gauge", rss),
        ("vis_gateway_client_registrations_total", "counter", 0.0),
        ("vis_gateway_client_releases_total", "counter", 0.0),
        ("vis_gateway_client_replacements_total", "counter", 0.0),
        ("vis_gateway_client_leases_reaped_total", "counter", 0.0),
        ("vis_gateway_client_leases", "gauge", 0.0),
        (
            "vis_gateway_sse_clients",
            "gauge",
            crate::serve_stats::sse_clients() as f64,
        ),
    ]
}

pub async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let rows = series(&state).await;
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"));
    if wants_json {
        let mut m = serde_json::Map::new();
        for (name, _, v) in &rows {
            let key = name
                .trim_start_matches("vis_")
                .replace("turn_tokens_total{kind=\"input\"}", "tokens_input")
                .replace("turn_tokens_total{kind=\"output\"}", "tokens_output");
            m.insert(key, json!(v));
        }
        return Json(Value::Object(m)).into_response();
    }
    let mut out = String::new();
    let mut typed = std::collections::HashSet::new();
    for (name, kind, v) in rows {
        let base = name.split('{').next().unwrap_or(name);
        if typed.insert(base) {
            out.push_str(&format!("# TYPE {base} {kind}\n"));
        }
        out.push_str(&format!("{name} {v}\n"));
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        out,
    )
        .into_response()
}
