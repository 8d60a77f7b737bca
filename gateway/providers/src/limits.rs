//! Rate-limit headers: what the provider said about its limits on its last answer.
//!
//! OpenAI sends `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (the reset as a Go
//! duration such as `6m0s`); Anthropic sends
//! `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`
//! (the reset as an RFC 3339 time). Both are read into one [`RateLimits`].

use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One limited quantity (`requests`, `tokens`, `input-tokens`, `output-tokens`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateWindow {
    pub id: String,
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    /// When the window refills (epoch ms), when the provider said.
    pub resets_at_ms: Option<i64>,
}

/// The rate-limit headers of one answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateLimits {
    /// When the answer carrying them arrived (epoch ms).
    pub seen_at_ms: i64,
    pub windows: Vec<RateWindow>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The rate-limit headers of an answer, if it carried any.
pub fn from_headers(headers: &HeaderMap) -> Option<RateLimits> {
    let now = now_ms();
    let get = |name: String| {
        headers
            .get(name.as_str())
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let num = |name: String| get(name).and_then(|v| v.parse::<u64>().ok());
    let mut windows = Vec::new();
    for id in ["requests", "tokens"] {
        let w = RateWindow {
            id: id.to_string(),
            limit: num(format!("x-ratelimit-limit-{id}")),
            remaining: num(format!("x-ratelimit-remaining-{id}")),
            resets_at_ms: get(format!("x-ratelimit-reset-{id}"))
                .and_then(go_duration)
                .map(|d| now + d.as_millis() as i64),
        };
        if w.limit.is_some() || w.remaining.is_some() {
            windows.push(w);
        }
    }
    for id in ["requests", "tokens", "input-tokens", "output-tokens"] {
        let w = RateWindow {
            id: id.to_string(),
            limit: num(format!("anthropic-ratelimit-{id}-limit")),
            remaining: num(format!("anthropic-ratelimit-{id}-remaining")),
            resets_at_ms: get(format!("anthropic-ratelimit-{id}-reset")).and_then(rfc3339_ms),
        };
        if w.limit.is_some() || w.remaining.is_some() {
            windows.push(w);
        }
    }
    (!windows.is_empty()).then_some(RateLimits {
        seen_at_ms: now,
        windows,
    })
}

/// A Go duration (`1h2m3s`, `6m0s`, `1.5s`, `20ms`).
fn go_duration(s: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[u..];
    }
    total
        .is_finite()
        .then(|| Duration::from_secs_f64(total.max(0.0)))
}

/// An RFC 3339 UTC time (`2026-12-01T18:00:30Z`, fractions allowed) as epoch ms.
fn rfc3339_ms(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z').or_else(|| s.strip_suffix("+00:00"))?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, mo, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, mi, sec) = (t.next()??, t.next()??, t.next()??);
    let ms = frac
        .get(..frac.len().min(3))
        .filter(|f| !f.is_empty())
        .and_then(|f| format!("{f:0<3}").parse::<i64>().ok())
        .unwrap_or(0);
    // Days from the civil date (proleptic Gregorian).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + sec * 1000 + ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn openai_headers_give_request_and_token_windows_with_reset_times() {
        let r = from_headers(&headers(&[
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-remaining-requests", "499"),
            ("x-ratelimit-reset-requests", "120ms"),
            ("x-ratelimit-limit-tokens", "30000"),
            ("x-ratelimit-remaining-tokens", "29000"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]))
        .unwrap();
        assert_eq!(r.windows.len(), 2);
        assert_eq!(r.windows[0].id, "requests");
        assert_eq!(r.windows[0].limit, Some(500));
        assert_eq!(r.windows[0].remaining, Some(499));
        let reset = r.windows[1].resets_at_ms.unwrap() - r.seen_at_ms;
        assert!((359_000..=361_000).contains(&reset), "{reset}");
    }

    #[test]
    fn anthropic_headers_give_windows_with_rfc3339_resets() {
        let r = from_headers(&headers(&[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "49"),
            (
                "anthropic-ratelimit-requests-reset",
                "2024-01-01T00:00:01.5Z",
            ),
        ]))
        .unwrap();
        assert_eq!(r.windows[0].resets_at_ms, Some(1_704_067_201_500));
    }

    #[test]
    fn an_answer_without_rate_limit_headers_reports_nothing() {
        assert!(from_headers(&headers(&[("content-type", "text/plain")])).is_none());
        assert_eq!(go_duration("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(go_duration("soon"), None);
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_ms("yesterday"), None);
    }
}
