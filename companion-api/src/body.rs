//! Request bodies: read with a size cap, parsed as JSON whatever the Content-Type; a blank
//! or malformed body counts as `null`.

use crate::error::ApiError;
use crate::AppState;
use axum::extract::{FromRequest, Request};
use serde_json::Value;

/// The request body as JSON (`Value::Null` when blank or malformed).
pub struct JsonBody(pub Value);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.cfg.max_body_bytes;
        let bytes = read_capped(req.into_body(), limit).await?;
        Ok(JsonBody(
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }
}

/// How much of an oversized body is still read (and thrown away) before the 413 is sent.
/// Answering while the client is still sending makes the server close a socket with unread
/// data, which resets the connection and can destroy the 413 before the client reads it; a
/// moderately oversized body is therefore drained first. Bigger ones are cut off.
const DRAIN_MAX: usize = 4 * 1024 * 1024;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// The slowest body accepted, once the first [`body_idle`] has passed: 16 KiB/s (a phone
/// on a poor link uploads faster; a client dripping bytes to hold a connection does not).
const MIN_RATE: f64 = 16.0 * 1024.0;

/// No byte of a body for this long ends it with 408 (`VIS_GATEWAY_BODY_IDLE_MS`, 10 s); it
/// is also the grace before [`MIN_RATE`] applies.
fn body_idle() -> std::time::Duration {
    static IDLE: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *IDLE.get_or_init(|| {
        let ms = std::env::var("VIS_GATEWAY_BODY_IDLE_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .unwrap_or(10_000);
        std::time::Duration::from_millis(ms)
    })
}

/// When a body that has delivered `seen` bytes since `start` (the last at `last`) must have
/// delivered its next frame: within the idle limit of its last byte, and never slower than
/// [`MIN_RATE`] on average after the grace.
fn next_deadline(
    start: tokio::time::Instant,
    last: tokio::time::Instant,
    seen: usize,
    idle: std::time::Duration,
) -> tokio::time::Instant {
    let by_rate = start + idle + std::time::Duration::from_secs_f64(seen as f64 / MIN_RATE);
    (last + idle).min(by_rate)
}

fn too_slow() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::REQUEST_TIMEOUT,
        "request-timeout",
        format!(
            "the request body arrived too slowly (nothing for {} s, or under {} KiB/s)",
            body_idle().as_secs(),
            MIN_RATE as u64 / 1024
        ),
    )
}

/// Reads a body of at most `limit` bytes; 413 beyond that (after draining what is cheap);
/// 408 when it stalls or creeps (a chunk that announces 2^64 bytes and sends none included).
async fn read_capped(mut body: axum::body::Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    use http_body_util::BodyExt;
    let mut out = Vec::new();
    let mut over = false;
    let mut seen = 0usize;
    let deadline = tokio::time::Instant::now() + DRAIN_TIME;
    let (idle, start) = (body_idle(), tokio::time::Instant::now());
    let mut last = start;
    loop {
        let frame = if over {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(f) => f,
                Err(_) => break,
            }
        } else {
            let due = next_deadline(start, last, seen, idle);
            match tokio::time::timeout_at(due, body.frame()).await {
                Ok(f) => f,
                Err(_) => return Err(too_slow()),
            }
        };
        last = tokio::time::Instant::now();
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| {
            ApiError::bad_request(
                "bad-request",
                format!("could not read the request body: {e}"),
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if over {
            if seen > DRAIN_MAX {
                break;
            }
            continue;
        }
        if seen > limit {
            over = true;
            out = Vec::new();
            continue;
        }
        out.extend_from_slice(&data);
    }
    if over {
        return Err(ApiError::payload_too_large(limit));
    }
    Ok(out)
}

impl JsonBody {
    /// The body as a typed request; `null` or a non-matching shape gives the default.
    pub fn parse<T: serde::de::DeserializeOwned + Default>(&self) -> T {
        serde_json::from_value(self.0.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_body_must_keep_arriving_and_not_creep() {
        let t0 = tokio::time::Instant::now();
        let idle = Duration::from_secs(10);
        // nothing yet: the idle limit
        assert_eq!(next_deadline(t0, t0, 0, idle), t0 + idle);
        // one byte every 9 s never trips the idle limit, but the rate does after the grace
        let late = t0 + Duration::from_secs(90);
        assert_eq!(
            next_deadline(t0, late, 10, idle),
            t0 + idle + Duration::from_secs_f64(10.0 / MIN_RATE)
        );
        // a fast upload keeps moving its deadline with its last byte
        let t = t0 + Duration::from_secs(20);
        assert_eq!(next_deadline(t0, t, 64 << 20, idle), t + idle);
    }

    #[tokio::test]
    async fn a_dripping_body_gets_a_408_instead_of_holding_the_connection() {
        tokio::time::pause();
        // one byte every 9 s: never idle for 10 s, but far below the minimum rate
        let drip = futures::stream::unfold(0u32, |n| async move {
            if n > 0 {
                tokio::time::sleep(Duration::from_secs(9)).await;
            }
            (n < 100).then(|| {
                (
                    Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"x")),
                    n + 1,
                )
            })
        });
        let body = axum::body::Body::from_stream(drip);
        let r = read_capped(body, 1 << 20).await;
        let e = r.expect_err("a 408");
        assert_eq!(e.status, axum::http::StatusCode::REQUEST_TIMEOUT);
    }
}
