//! Process figures for status and metrics.

use std::sync::atomic::{AtomicI64, Ordering};

static SSE_CLIENTS: AtomicI64 = AtomicI64::new(0);

/// Counts an open SSE stream while alive.
pub struct SseGuard;

impl SseGuard {
    pub fn new() -> Self {
        SSE_CLIENTS.fetch_add(1, Ordering::Relaxed);
        SseGuard
    }
}

impl Default for SseGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SseGuard {
    fn drop(&mut self) {
        SSE_CLIENTS.fetch_sub(1, Ordering::Relaxed);
    }
}

pub fn sse_clients() -> i64 {
    SSE_CLIENTS.load(Ordering::Relaxed)
}

/// Resident set size of this process (Linux `/proc/self/statm`), 0 when unknown.
pub fn rss_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}
