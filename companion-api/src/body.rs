//! Request bodies: read with a size cap, parsed as JSON whatever the Content-Type; a blank
//! or malformed body counts as `null` (§2).

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

/// Reads a body of at most `limit` bytes; 413 beyond that (after draining what is cheap).
async fn read_capped(mut body: axum::body::Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    use http_body_util::BodyExt;
    let mut out = Vec::new();
    let mut over = false;
    let mut seen = 0usize;
    let deadline = tokio::time::Instant::now() + DRAIN_TIME;
    loop {
        let frame = if over {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(f) => f,
                Err(_) => break,
            }
        } else {
            body.frame().await
        };
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
