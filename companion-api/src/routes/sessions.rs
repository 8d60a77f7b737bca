//! Session routes: list, create, read, delete, release, transcript, model, slashes, egress.

use super::path::Path;
use super::{int_param, Q};
use crate::body::JsonBody;
use crate::engine::{CreateSession, SessionListQuery};
use crate::error::{ApiError, ApiResult};
use crate::wire::{EgressPage, SessionModel, SessionRecord, SlashPalette, Transcript};
use crate::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use sha2::{Digest, Sha256};

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
    let list = st.engine.list_sessions(query).await?;
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
    let created = st.engine.create_session(req).await?;
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
    Ok(Json(st.engine.get_session(&sid, include_queued).await?))
}

pub async fn delete(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<StatusCode> {
    st.engine.delete_session(&sid).await?;
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
        st.engine
            .transcript(&sid, limit.map(|l| l as usize), offset.map(|o| o as usize))
            .await?,
    ))
}

pub async fn model(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<SessionModel>> {
    Ok(Json(st.engine.model(&sid).await?))
}

pub async fn slashes(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Json<SlashPalette>> {
    Ok(Json(st.engine.slashes(&sid).await?))
}

pub async fn egress(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
) -> ApiResult<Json<EgressPage>> {
    let bad = || ApiError::bad_request("invalid-window", "limit and before must be integers");
    let limit = int_param(&q, "limit").map_err(|_| bad())?.unwrap_or(100);
    if limit < 1 {
        return Err(bad());
    }
    let before = int_param(&q, "before").map_err(|_| bad())?;
    Ok(Json(
        st.engine
            .egress(&sid, limit.min(1000) as usize, before)
            .await?,
    ))
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
}
