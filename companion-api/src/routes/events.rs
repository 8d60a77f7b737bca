//! SSE streams and their polling fallbacks.

use super::path::Path;
use super::Q;
use crate::engine::Cursor;
use crate::error::{ApiError, ApiResult};
use crate::serve::ConnKill;
use crate::sse::{body_stream, wants_pad};
use crate::wire::EventsSince;
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::{Extension, Json};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

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

/// The connection's kill switch; with `X-Vis-Client-Pid`, also fired once that local process
/// is gone (checked every second).
fn kill_token(kill: Option<Extension<ConnKill>>, headers: &HeaderMap) -> CancellationToken {
    let token = kill.map(|Extension(k)| k.0).unwrap_or_default();
    let pid = headers
        .get("x-vis-client-pid")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<i32>().ok());
    if let Some(pid) = pid.filter(|p| *p > 0) {
        let t = token.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = t.cancelled() => return,
                    _ = tick.tick() => {}
                }
                // SAFETY: signal 0 only checks that the process exists.
                if unsafe { libc::kill(pid, 0) } != 0
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
                {
                    t.cancel();
                    return;
                }
            }
        });
    }
    token
}

pub async fn session_stream(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
    headers: HeaderMap,
    kill: Option<Extension<ConnKill>>,
) -> ApiResult<Response> {
    let kill = kill_token(kill, &headers);
    let sub = st
        .engine
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
    let kill = kill_token(kill, &headers);
    let mut wanted = parse_sids(q.get("sids").map(String::as_str).unwrap_or(""));
    let mut seen = std::collections::HashSet::new();
    wanted.retain(|(sid, _)| seen.insert(sid.clone()));
    let mut subs = Vec::new();
    let lone_cursor = last_event_id(&headers);
    let mut pending = Vec::new();
    for (sid, c) in wanted {
        // Existence check first, so Last-Event-ID applies only when exactly one sid is valid.
        if st.engine.get_session(&sid, false).await.is_ok() {
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
            .engine
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
        events: st.engine.events_since(&sid, cursor).await?,
    }))
}

pub async fn seq(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(json!({"seq": st.engine.seq(&sid).await?})))
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
