//! `/v1/sessions…` and `/v1/projects/…`: the session collection, one session, and what a
//! session holds (transcript, usage, model pin, slash palette, forks).

use super::path::Path;
use super::{int_param, Q};
use super::{invalid, object};
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::records::{ForkRequest, ModelPref, SessionPatch};
use crate::wire::{SessionModel, SessionRecord, SlashPalette, Transcript};
use crate::{AppState, CreateSession, SessionListQuery};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Every route of this resource, each path once.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions", get(list).post(create))
        .route("/v1/sessions/actions/search", get(search))
        .route(
            "/v1/sessions/{sid}",
            get(get_one).patch(patch_session).delete(remove),
        )
        .route("/v1/sessions/{sid}/release", post(release))
        .route("/v1/sessions/{sid}/transcript", get(transcript))
        .route("/v1/sessions/{sid}/transcript.md", get(transcript_md))
        .route("/v1/sessions/{sid}/usage", get(usage))
        .route("/v1/sessions/{sid}/model", get(model).patch(set_model))
        .route("/v1/sessions/{sid}/slashes", get(slashes))
        .route("/v1/sessions/{sid}/forks", get(fork_points).post(fork))
        .route("/v1/projects/{pid}", delete(delete_project))
}

fn invalid_window() -> ApiError {
    ApiError::bad_request(
        "invalid-window",
        "limit must be an integer and after must be a <band>:<key>:<id> cursor",
    )
}

/// Parses `<band>:<sort_key>:<id>`.
pub fn parse_after(s: &str) -> Option<(i64, i64, String)> {
    let mut it = s.splitn(3, ':');
    let band = it.next()?.parse().ok()?;
    let key = it.next()?.parse().ok()?;
    let id = it.next()?.to_string();
    (!id.is_empty()).then_some((band, key, id))
}

fn strip_server_time(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("server_time_ms");
            m.values_mut().for_each(strip_server_time);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_server_time),
        _ => {}
    }
}

/// Weak ETag over the content minus the server clock.
pub fn etag(body: &Value) -> String {
    let mut v = body.clone();
    strip_server_time(&mut v);
    let digest = Sha256::digest(v.to_string().as_bytes());
    format!("W/\"{}\"", &hex::encode(digest)[..32])
}

pub async fn list(State(st): State<AppState>, q: Q, headers: HeaderMap) -> ApiResult<Response> {
    let limit = int_param(&q, "limit").map_err(|_| invalid_window())?;
    if limit.is_some_and(|l| l < 0) {
        return Err(invalid_window());
    }
    let after = match q.get("after").map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(parse_after(s).ok_or_else(invalid_window)?),
    };
    let dirty = q
        .get("dirty")
        .map(|d| {
            d.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let query = SessionListQuery {
        limit: limit.map(|l| l as usize),
        after,
        root: q.get("root").cloned(),
        dirty,
        channel: q
            .get("channel")
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty()),
    };
    let list = st.areas.sessions.list(query).await?;
    let body = serde_json::to_value(&list).map_err(|e| ApiError::engine(e.to_string()))?;
    let tag = etag(&body);
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == tag);
    let hdrs = [
        (header::ETAG, tag),
        (header::CACHE_CONTROL, "no-cache".to_string()),
    ];
    if matches {
        return Ok((StatusCode::NOT_MODIFIED, hdrs).into_response());
    }
    Ok((StatusCode::OK, hdrs, Json(body)).into_response())
}

pub async fn create(State(st): State<AppState>, body: JsonBody) -> ApiResult<Response> {
    let req: CreateSession = body.parse();
    let created = st.areas.sessions.create(req).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub async fn get_one(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
) -> ApiResult<Json<SessionRecord>> {
    let include_queued = q
        .get("include")
        .is_some_and(|s| s.split(',').any(|p| p.trim() == "queued"));
    Ok(Json(st.areas.sessions.get(&sid, include_queued).await?))
}

pub async fn remove(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<StatusCode> {
    st.areas.sessions.delete(&sid).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn release(Path(_sid): Path<String>) -> StatusCode {
    StatusCode::NO_CONTENT
}

pub async fn transcript(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
) -> ApiResult<Json<Transcript>> {
    let bad = || ApiError::bad_request("invalid-window", "limit and offset must be integers");
    let limit = int_param(&q, "limit").map_err(|_| bad())?;
    let offset = int_param(&q, "offset").map_err(|_| bad())?;
    if limit.is_some_and(|l| l < 0) || offset.is_some_and(|o| o < 0) {
        return Err(bad());
    }
    Ok(Json(
        st.areas
            .sessions
            .transcript(&sid, limit.map(|l| l as usize), offset.map(|o| o as usize))
            .await?,
    ))
}

pub async fn model(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<SessionModel>> {
    Ok(Json(st.areas.sessions.model(&sid).await?))
}

pub async fn slashes(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<SlashPalette>> {
    Ok(Json(st.areas.sessions.slashes(&sid).await?))
}

/// Longest accepted session title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// Parses `{title?, is_favorite?}`; any other key is ignored, a wrong type is a 400.
pub fn parse_patch(m: &serde_json::Map<String, Value>) -> ApiResult<SessionPatch> {
    let body = JsonBody(Value::Object(m.clone()));
    let b: PatchSession = super::typed_saying(body, |member| match member {
        "title" => Some("title must be a string".into()),
        "is_favorite" => Some("is_favorite must be true or false".into()),
        _ => None,
    })?;
    let mut patch = SessionPatch::default();
    match b.title {
        None => {}
        Some(t) => {
            let t = t.trim();
            if t.is_empty() {
                return Err(invalid("title must not be blank"));
            }
            if t.chars().count() > MAX_TITLE_CHARS {
                return Err(invalid(format!(
                    "title must be at most {MAX_TITLE_CHARS} characters"
                )));
            }
            if t.chars().any(|c| c.is_control()) {
                return Err(invalid("title must be one line without control characters"));
            }
            patch.title = Some(t.to_string());
        }
    }
    patch.is_favorite = b.is_favorite;
    if patch == SessionPatch::default() {
        return Err(invalid(
            "nothing to change: send title (string) and/or is_favorite (bool)",
        ));
    }
    Ok(patch)
}

pub async fn patch_session(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<crate::wire::SessionRecord>> {
    let patch = parse_patch(&object(&body, "{title?, is_favorite?}")?)?;
    st.areas.sessions.patch(&sid, patch).await?;
    Ok(Json(st.areas.sessions.get(&sid, false).await?))
}

/// Longest accepted search query, in characters.
pub const MAX_QUERY_CHARS: usize = 200;

pub async fn search(State(st): State<AppState>, q: Q) -> ApiResult<Response> {
    let text = q.get("q").map(|s| s.trim()).unwrap_or("");
    if text.chars().count() > MAX_QUERY_CHARS {
        return Err(ApiError::bad_request(
            "invalid-query",
            format!("q must be at most {MAX_QUERY_CHARS} characters"),
        ));
    }
    Ok(Json(st.areas.sessions.search(text).await?).into_response())
}

pub async fn usage(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<Response> {
    Ok(Json(st.areas.sessions.usage(&sid).await?).into_response())
}

pub async fn transcript_md(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Response> {
    let md = st.areas.sessions.transcript_markdown(&sid).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        md,
    )
        .into_response())
}

/// `PATCH …/model {provider, model}`; both blank (or absent) clear the pin.
pub async fn set_model(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let m = object(&body, "{provider, model}")?;
    let b: SetModel = super::typed_saying(JsonBody(Value::Object(m)), |member| {
        Some(format!("{member} must be a string"))
    })?;
    let text = |s: Option<String>| s.map(|s| s.trim().to_string()).unwrap_or_default();
    let (provider, model) = (text(b.provider), text(b.model));
    let pref = match (provider.is_empty(), model.is_empty()) {
        (true, true) => None,
        (true, false) => {
            return Err(invalid(
                "provider is required with a model (send both blank to clear the pin)",
            ))
        }
        _ => Some(ModelPref { provider, model }),
    };
    Ok(Json(st.areas.sessions.set_model(&sid, pref).await?).into_response())
}

pub async fn fork_points(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Response> {
    Ok(Json(st.areas.sessions.fork_points(&sid).await?).into_response())
}

pub async fn fork(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    if !body.0.is_object() && !body.0.is_null() {
        return Err(invalid(
            "the body must be a JSON object {through_turn_id?, draft_label?}",
        ));
    }
    let not_empty = |member: &str| format!("{member} must be a non-empty string");
    let b: Fork = super::typed_or_default(body, |member| Some(not_empty(member)))?;
    let text = |member: &str, s: Option<String>| match s.map(|s| s.trim().to_string()) {
        Some(s) if s.is_empty() => Err(invalid(not_empty(member))),
        s => Ok(s),
    };
    let req = ForkRequest {
        through_turn_id: text("through_turn_id", b.through_turn_id)?,
        draft_label: text("draft_label", b.draft_label)?,
    };
    let new_sid = st.areas.sessions.fork(&sid, req).await?;
    let soul = st.areas.sessions.get(&new_sid, false).await?;
    Ok((StatusCode::CREATED, Json(json!({ "session": soul }))).into_response())
}

pub async fn delete_project(
    State(st): State<AppState>,
    Path(pid): Path<String>,
    q: Q,
) -> ApiResult<Response> {
    let recursive = q
        .get("is_recursive")
        .is_some_and(|v| matches!(v.as_str(), "true" | "1"));
    let done = st.areas.sessions.delete_project(&pid, recursive).await?;
    if recursive {
        Ok(Json(done).into_response())
    } else {
        Ok(StatusCode::NO_CONTENT.into_response())
    }
}

/// `PATCH /v1/sessions/:session_id {title?, is_favorite?}`.
#[derive(serde::Deserialize)]
struct PatchSession {
    title: Option<String>,
    is_favorite: Option<bool>,
}

/// `PATCH …/model {provider, model}`.
#[derive(serde::Deserialize)]
struct SetModel {
    provider: Option<String>,
    model: Option<String>,
}

/// `POST …/fork {through_turn_id?, draft_label?}`.
#[derive(Default, serde::Deserialize)]
struct Fork {
    through_turn_id: Option<String>,
    draft_label: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_has_band_key_and_id() {
        assert_eq!(parse_after("2:-17:abc"), Some((2, -17, "abc".to_string())));
        assert_eq!(parse_after("x:1:abc"), None);
        assert_eq!(parse_after("1:2:"), None);
        assert_eq!(parse_after("1:2"), None);
    }

    #[test]
    fn the_etag_ignores_the_server_clock() {
        let a = serde_json::json!({"sessions": [{"id": "a", "server_time_ms": 1}], "server_time_ms": 5});
        let b = serde_json::json!({"sessions": [{"id": "a", "server_time_ms": 2}], "server_time_ms": 9});
        let c = serde_json::json!({"sessions": [{"id": "b", "server_time_ms": 2}]});
        assert_eq!(etag(&a), etag(&b));
        assert_ne!(etag(&a), etag(&c));
        assert!(etag(&a).starts_with("W/\""));
    }

    fn map(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_patch_takes_a_trimmed_title_and_a_favorite_flag() {
        let p = parse_patch(&map(json!({"title": "  Plan  ", "is_favorite": true}))).unwrap();
        assert_eq!(p.title.as_deref(), Some("Plan"));
        assert_eq!(p.is_favorite, Some(true));
    }

    #[test]
    fn malformed_patch_fields_are_refused_with_the_field_named() {
        for (body, needle) in [
            (json!({"title": ""}), "blank"),
            (json!({"title": 7}), "title must be a string"),
            (json!({"is_favorite": "yes"}), "is_favorite"),
            (json!({"title": "x".repeat(201)}), "at most"),
            (json!({"title": "a\nb"}), "one line"),
            (json!({"other": 1}), "nothing to change"),
        ] {
            let e = parse_patch(&map(body.clone())).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
    }
}
