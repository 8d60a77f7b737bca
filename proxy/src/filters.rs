//! Running network filters (docs/decisions.md, P6): registration order, first deny
//! wins, an error, a panic or a timeout DENIES with kind `filter-error`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde::Serialize;

use crate::deny::{kind, DeciderKind, Denial};
use crate::traits::{FilterCtx, FilterError, FilterVerdict, NetworkFilter};

/// The `filter-error` reason: `network filter error in '<name>': <message>`
/// (a message that already carries that prefix is used as is).
pub fn error_reason(name: &str, message: &str) -> String {
    if message.starts_with("network filter error in '") {
        message.to_string()
    } else {
        format!("network filter error in '{name}': {message}")
    }
}

/// Run one filter with the timeout, turning panics and timeouts into errors.
pub async fn run_one(
    f: &dyn NetworkFilter,
    ctx: &FilterCtx,
    timeout: Duration,
) -> Result<FilterVerdict, FilterError> {
    match tokio::time::timeout(timeout, AssertUnwindSafe(f.check(ctx)).catch_unwind()).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(FilterError {
            message: "filter panicked".into(),
            trace: None,
        }),
        Err(_) => Err(FilterError {
            message: format!("timed out after {} ms", timeout.as_millis()),
            trace: None,
        }),
    }
}

/// What one filter's answer means: `None` lets the request through; otherwise the
/// denial (kind `blocked-by-filter`, or `filter-error` with the failure). The lanes and
/// `/net-probe` read answers only through this.
fn outcome(
    name: &str,
    answer: Result<FilterVerdict, FilterError>,
) -> Option<(Denial, Option<FilterError>)> {
    match answer {
        Ok(FilterVerdict::Allow) => None,
        Ok(FilterVerdict::Block(reason)) => {
            let reason = if reason.trim().is_empty() {
                "blocked by network filter".to_string()
            } else {
                reason
            };
            let d = Denial::policy(kind::FILTER, reason, DeciderKind::Filter).with_filter(name);
            Some((d, None))
        }
        Err(e) => {
            let d = Denial::policy(
                kind::FILTER_ERROR,
                error_reason(name, &e.message),
                DeciderKind::Filter,
            )
            .with_filter(name);
            Some((d, Some(e)))
        }
    }
}

/// Run filters in order; the first deny (or failure) stops and is returned.
pub async fn run_filters(
    filters: &[Arc<dyn NetworkFilter>],
    ctx: &FilterCtx,
    timeout: Duration,
) -> Result<(), Denial> {
    for f in filters {
        if let Some((d, failure)) = outcome(f.name(), run_one(f.as_ref(), ctx, timeout).await) {
            if let Some(e) = failure {
                tracing::warn!(filter = f.name(), error = %e.message, "network filter failed (fail closed)");
            }
            return Err(d);
        }
    }
    Ok(())
}

/// One row of a probe report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilterRow {
    /// Filter name.
    pub owner: String,
    /// Verdict.
    pub allow: bool,
    /// Block reason.
    pub reason: Option<String>,
    /// Failure, if any.
    pub error: Option<FilterErrorView>,
}

/// Serializable filter failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilterErrorView {
    /// Message.
    pub message: String,
    /// Traceback.
    pub trace: Option<String>,
}

/// Run EVERY filter (no short-circuit) for `/net-probe`; each row reads the filter's
/// answer as the lanes do (the first row that denies is what a lane answers).
pub async fn run_all(
    filters: &[Arc<dyn NetworkFilter>],
    ctx: &FilterCtx,
    timeout: Duration,
) -> Vec<FilterRow> {
    let mut rows = Vec::new();
    for f in filters {
        let row = match outcome(f.name(), run_one(f.as_ref(), ctx, timeout).await) {
            None => FilterRow {
                owner: f.name().into(),
                allow: true,
                reason: None,
                error: None,
            },
            Some((d, failure)) => FilterRow {
                owner: f.name().into(),
                allow: false,
                reason: Some(d.reason),
                error: failure.map(|e| FilterErrorView {
                    message: e.message,
                    trace: e.trace,
                }),
            },
        };
        rows.push(row);
    }
    rows
}

/// Lower-case, trim, last duplicate wins. `proxy-authorization` (the
/// session's proxy token) is never shown to filters.
pub fn header_map(h: &http::HeaderMap) -> std::collections::BTreeMap<String, String> {
    h.iter()
        .filter(|(k, _)| *k != http::header::PROXY_AUTHORIZATION)
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).trim().to_string(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_error_reasons_are_prefixed_once() {
        assert_eq!(
            error_reason("ext", "boom"),
            "network filter error in 'ext': boom"
        );
        assert_eq!(
            error_reason("ext", "network filter error in 'ext': boom"),
            "network filter error in 'ext': boom"
        );
    }
}
