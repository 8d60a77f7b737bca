//! Opening a provider stream with retries: exponential backoff with jitter,
//! `Retry-After` / `retry-after-ms` honoured, and only before the first byte
//! of a successful response (connect errors, 408/409/429/5xx).

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

use crate::error::{message_from_body, redact_error, status_is_retryable, Secrets};
use crate::{ProviderConfig, ProviderError, RetryInfo};

/// Largest error body read to find the provider's message.
const MAX_ERROR_BODY: usize = 64 * 1024;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    pub base: Duration,
    pub max: Duration,
    /// A longer `Retry-After` ends the retries instead of sleeping.
    pub max_retry_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            max: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// "Equal jitter": half the exponential step plus a random part of the other half.
    pub fn delay(&self, retry_index: u32) -> Duration {
        let step = self
            .base
            .saturating_mul(1u32.checked_shl(retry_index.min(20)).unwrap_or(u32::MAX))
            .min(self.max);
        let half = step / 2;
        let nanos = half.as_nanos() as u64;
        let jitter = if nanos == 0 {
            0
        } else {
            random_u64() % (nanos + 1)
        };
        half + Duration::from_nanos(jitter)
    }
}

/// Process-randomly seeded value from std's hasher (no extra RNG crate needed for jitter).
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// `retry-after-ms` (OpenAI) first, then `Retry-After` as seconds or an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Human-readable reqwest error with its source chain (never contains the key:
/// the key travels in a header, and reqwest only prints the URL).
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn send_with_retry(
    http: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: Bytes,
    cfg: &ProviderConfig,
    secrets: &Secrets,
    backoff: &Backoff,
    cancel: &CancellationToken,
    on_retry: &(dyn Fn(RetryInfo) + Send + Sync),
) -> Result<reqwest::Response, ProviderError> {
    let key = secrets;
    let mut retries_done = 0u32;
    loop {
        if cancel.is_cancelled() {
            return Err(ProviderError::Cancelled);
        }
        let send = http
            .post(url)
            .headers(headers.clone())
            .body(body.clone())
            .send();
        let sent = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            r = tokio::time::timeout(cfg.stall_timeout, send) => r,
        };
        let (err, wait) = match sent {
            Err(_) => return Err(ProviderError::Stalled),
            Ok(Ok(resp)) if resp.status().is_success() => return Ok(resp),
            Ok(Ok(resp)) => {
                let status = resp.status().as_u16();
                let wait = retry_after(resp.headers());
                // OpenAI and Anthropic may veto a retry explicitly.
                let vetoed = resp
                    .headers()
                    .get("x-should-retry")
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"false"));
                let body = read_body(resp, cancel, cfg.stall_timeout, MAX_ERROR_BODY, true).await?;
                let err = ProviderError::Http {
                    status,
                    message: message_from_body(status, &body),
                    retryable: status_is_retryable(status) && !vetoed,
                };
                (err, wait)
            }
            Ok(Err(e)) if e.is_builder() => {
                return Err(redact_error(
                    ProviderError::Protocol(format!("building request: {}", describe(&e))),
                    key,
                ))
            }
            Ok(Err(e)) => (ProviderError::Transport(describe(&e)), None),
        };
        let err = redact_error(err, key);
        if !err.is_retryable() || retries_done >= cfg.max_retries {
            return Err(err);
        }
        let delay = match wait {
            Some(d) if d > backoff.max_retry_after => return Err(err),
            Some(d) => d,
            None => backoff.delay(retries_done),
        };
        retries_done += 1;
        tracing::debug!(
            provider = %cfg.id,
            attempt = retries_done,
            delay_ms = delay.as_millis() as u64,
            error = %err,
            "retrying provider request"
        );
        on_retry(RetryInfo {
            attempt: retries_done,
            max_retries: cfg.max_retries,
            delay_ms: delay.as_millis() as u64,
            error: err.to_string(),
        });
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Reads a response body up to `limit` bytes (the rest is ignored). With
/// `lenient` (error bodies) read failures and stalls just end the body;
/// otherwise they are errors.
pub(crate) async fn read_body(
    mut resp: reqwest::Response,
    cancel: &CancellationToken,
    stall: Duration,
    limit: usize,
    lenient: bool,
) -> Result<Vec<u8>, ProviderError> {
    let mut buf = Vec::new();
    loop {
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            r = tokio::time::timeout(stall, resp.chunk()) => r,
        };
        match next {
            Ok(Ok(Some(chunk))) => {
                let room = limit.saturating_sub(buf.len());
                buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if buf.len() >= limit {
                    if lenient {
                        break;
                    }
                    return Err(ProviderError::Protocol(format!(
                        "response body larger than {limit} bytes"
                    )));
                }
            }
            Ok(Ok(None)) => break,
            _ if lenient => break,
            Ok(Err(e)) => return Err(ProviderError::Transport(describe(&e))),
            Err(_) => return Err(ProviderError::Stalled),
        }
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_grows_exponentially_within_jitter_bounds_and_is_capped() {
        let b = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_millis(1000),
            max_retry_after: Duration::from_secs(1),
        };
        for _ in 0..50 {
            let d0 = b.delay(0);
            assert!(d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100));
            let d2 = b.delay(2);
            assert!(d2 >= Duration::from_millis(200) && d2 <= Duration::from_millis(400));
            let d9 = b.delay(9);
            assert!(d9 >= Duration::from_millis(500) && d9 <= Duration::from_millis(1000));
            assert!(b.delay(40) <= Duration::from_millis(1000));
        }
    }

    #[test]
    fn retry_after_is_read_as_milliseconds_seconds_or_an_http_date() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));

        let mut h = HeaderMap::new();
        let later = SystemTime::now() + Duration::from_secs(30);
        let date = httpdate::fmt_http_date(later);
        h.insert("retry-after", HeaderValue::from_str(&date).unwrap());
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );

        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }
}
