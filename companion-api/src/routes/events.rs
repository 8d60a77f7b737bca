//! SSE streams and their polling fallbacks.

use super::path::Path;
use super::{int_param, Q};
use crate::areas::Cursor;
use crate::error::{ApiError, ApiResult};
use crate::serve::ConnKill;
use crate::sse::{body_stream, wants_pad};
use crate::wire::{EgressPage, EventsSince};
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Json};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// Every route of this resource, each path once.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/events", get(multiplexed))
        .route("/v1/sessions/{sid}/events", get(session_stream))
        .route("/v1/sessions/{sid}/events-since", get(since))
        .route("/v1/sessions/{sid}/seq", get(seq))
        .route("/v1/sessions/{sid}/egress", get(egress))
}

fn last_event_id(h: &HeaderMap) -> Option<i64> {
    h.get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse().ok())
}

/// Single-session cursor: `Last-Event-ID` (if it parses) → `?cursor=` → 0.
fn single_cursor(h: &HeaderMap, q: &Q) -> i64 {
    last_event_id(h)
        .or_else(|| q.get("cursor").and_then(|c| c.trim().parse().ok()))
        .unwrap_or(0)
}

fn sse_response(
    stream: futures::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>,
) -> Response {
    let body = Body::from_stream(stream);
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// The connection's kill switch: a client's liveness is its connection, so a stream ends when
/// the connection closes or the engine drops a subscriber that fell behind.
fn kill_token(kill: Option<Extension<ConnKill>>) -> CancellationToken {
    kill.map(|Extension(k)| k.0).unwrap_or_default()
}

pub async fn session_stream(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
    headers: HeaderMap,
    kill: Option<Extension<ConnKill>>,
) -> ApiResult<Response> {
    let kill = kill_token(kill);
    let sub = st
        .areas
        .events
        .subscribe(&sid, Cursor(single_cursor(&headers, &q)), kill.clone())
        .await?;
    Ok(sse_response(body_stream(vec![sub], wants_pad(&headers))))
}

/// Parses `sids=a:10,b,c:-1` into `(sid, cursor)` pairs; tokens with a bad cursor are dropped.
pub fn parse_sids(raw: &str) -> Vec<(String, i64)> {
    raw.split(',')
        .filter_map(|tok| {
            let tok = tok.trim();
            if tok.is_empty() {
                return None;
            }
            match tok.rsplit_once(':') {
                Some((sid, c)) => c.trim().parse().ok().map(|c| (sid.to_string(), c)),
                None => Some((tok.to_string(), 0)),
            }
        })
        .collect()
}

pub async fn multiplexed(
    State(st): State<AppState>,
    q: Q,
    headers: HeaderMap,
    kill: Option<Extension<ConnKill>>,
) -> ApiResult<Response> {
    let kill = kill_token(kill);
    let mut wanted = parse_sids(q.get("sids").map(String::as_str).unwrap_or(""));
    let mut seen = std::collections::HashSet::new();
    wanted.retain(|(sid, _)| seen.insert(sid.clone()));
    let mut subs = Vec::new();
    let lone_cursor = last_event_id(&headers);
    let mut pending = Vec::new();
    for (sid, c) in wanted {
        // Existence check first, so Last-Event-ID applies only when exactly one sid is valid.
        if st.areas.sessions.get(&sid, false).await.is_ok() {
            pending.push((sid, c));
        }
    }
    if pending.is_empty() {
        return Err(ApiError::bad_request("bad-request", "no valid sids"));
    }
    let single = pending.len() == 1;
    for (sid, c) in pending {
        let cursor = if single { lone_cursor.unwrap_or(c) } else { c };
        match st
            .areas
            .events
            .subscribe(&sid, Cursor(cursor), kill.clone())
            .await
        {
            Ok(sub) => subs.push(sub),
            Err(e) if e.status == StatusCode::NOT_FOUND => continue,
            Err(e) => return Err(e),
        }
    }
    if subs.is_empty() {
        return Err(ApiError::bad_request("bad-request", "no valid sids"));
    }
    Ok(sse_response(body_stream(subs, wants_pad(&headers))))
}

pub async fn since(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
    headers: HeaderMap,
) -> ApiResult<Json<EventsSince>> {
    let cursor = q
        .get("cursor")
        .and_then(|c| c.trim().parse().ok())
        .or_else(|| last_event_id(&headers))
        .unwrap_or(0);
    Ok(Json(EventsSince {
        events: st.areas.events.since(&sid, cursor).await?,
    }))
}

pub async fn seq(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(json!({"seq": st.areas.events.seq(&sid).await?})))
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
        st.areas
            .events
            .egress(&sid, limit.min(1000) as usize, before)
            .await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::parse_sids;

    #[test]
    fn sids_take_optional_cursors() {
        assert_eq!(
            parse_sids("a:10,b,c:-1,,d:x"),
            vec![
                ("a".to_string(), 10),
                ("b".to_string(), 0),
                ("c".to_string(), -1)
            ]
        );
    }
}
