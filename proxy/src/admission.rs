//! Connection admission: who may hold one of the proxy's connection places.
//!
//! A connection is *unauthenticated* from its accept until a request (or a SOCKS5
//! handshake) on it is attributed to a session. Unauthenticated connections live in a
//! small budget of their own (`ProxyConfig::max_unauthenticated`) with a deadline
//! (`ProxyConfig::auth_timeout`); only an authenticated connection takes one of the places
//! of the overall cap (`max_connections`). So idle connections opened by any local process
//! cannot lock the sessions out: when the budget is full, a new connection takes the place
//! of the oldest one that has not sent a byte yet (an idle one), and a connection that
//! never authenticates is closed at its deadline. Refusals are answered (HTTP 503, SOCKS5
//! "general failure") and logged at most once per [`LOG_EVERY`] with a count.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How often a refusal kind is logged at most.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The places of a running proxy: the overall cap and the unauthenticated budget.
pub(crate) struct Admission {
    authenticated: Arc<Semaphore>,
    pending: Mutex<VecDeque<Arc<Entry>>>,
    max_pending: usize,
    auth_timeout: Duration,
    pub refused_unauthenticated: RateLog,
    pub refused_cap: RateLog,
}

/// One unauthenticated connection's place in the budget.
struct Entry {
    /// Set when the connection's first byte arrived.
    spoke: AtomicBool,
    /// Set when its place was given to a newer connection.
    evicted: AtomicBool,
    wake: Notify,
}

/// One client connection's admission state; shared by whatever outlives the connection's
/// first exchange (a tunnel, an upgraded connection) through [`crate::state::ConnGuard`].
pub(crate) struct Conn {
    admission: Arc<Admission>,
    entry: Arc<Entry>,
    accepted: Instant,
    /// Its place under the overall cap, once authenticated.
    place: OnceLock<OwnedSemaphorePermit>,
}

impl Admission {
    pub fn new(cap: usize, max_pending: usize, auth_timeout: Duration) -> Arc<Admission> {
        Arc::new(Admission {
            authenticated: Arc::new(Semaphore::new(cap.max(1))),
            pending: Mutex::new(VecDeque::new()),
            max_pending: max_pending.max(1),
            auth_timeout,
            refused_unauthenticated: RateLog::default(),
            refused_cap: RateLog::default(),
        })
    }

    /// A place in the unauthenticated budget for a new connection, taking the place of the
    /// oldest connection that has not sent a byte when the budget is full. `None` when every
    /// unauthenticated connection has spoken (they are all mid-handshake).
    pub fn accept(self: &Arc<Self>) -> Option<Arc<Conn>> {
        let entry = Arc::new(Entry {
            spoke: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            wake: Notify::new(),
        });
        {
            let mut q = self.pending.lock().ok()?;
            if q.len() >= self.max_pending {
                let idle = q.iter().position(|e| !e.spoke.load(Ordering::Acquire))?;
                if let Some(old) = q.remove(idle) {
                    old.evicted.store(true, Ordering::Release);
                    old.wake.notify_one();
                }
            }
            q.push_back(entry.clone());
        }
        Some(Arc::new(Conn {
            admission: self.clone(),
            entry,
            accepted: Instant::now(),
            place: OnceLock::new(),
        }))
    }

    fn leave(&self, entry: &Arc<Entry>) {
        if let Ok(mut q) = self.pending.lock() {
            q.retain(|e| !Arc::ptr_eq(e, entry));
        }
    }
}

impl Conn {
    /// The connection's first byte arrived: it is no longer idle.
    pub fn spoke(&self) {
        self.entry.spoke.store(true, Ordering::Release);
    }

    /// Whether the connection holds a place under the overall cap.
    pub fn is_authenticated(&self) -> bool {
        self.place.get().is_some()
    }

    /// A request on this connection was attributed: move it from the unauthenticated budget
    /// to a place under the overall cap. `false` when the cap is full (the caller answers
    /// 503 or a SOCKS failure) or the connection lost its place already.
    pub fn authenticated(&self) -> bool {
        if self.place.get().is_some() {
            return true;
        }
        if self.entry.evicted.load(Ordering::Acquire) {
            return false;
        }
        let Ok(permit) = self.admission.authenticated.clone().try_acquire_owned() else {
            self.admission
                .refused_cap
                .note("proxy connection cap reached; refused an authenticated connection (503)");
            return false;
        };
        if self.place.set(permit).is_ok() {
            self.admission.leave(&self.entry);
        }
        true
    }

    /// Resolves when the connection must close: its place was given to a newer connection,
    /// or its deadline passed before it authenticated. Never resolves once authenticated.
    pub async fn must_close(&self) {
        let deadline = tokio::time::Instant::from_std(self.accepted + self.admission.auth_timeout);
        if !self.entry.evicted.load(Ordering::Acquire) {
            tokio::select! {
                _ = self.entry.wake.notified() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
        if self.place.get().is_some() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.place.get().is_none() {
            self.admission.leave(&self.entry);
        }
    }
}

/// A warning logged at most once per [`LOG_EVERY`], with how many were suppressed.
#[derive(Default)]
pub(crate) struct RateLog {
    /// Milliseconds since `start` of the last line (0: none yet).
    last: AtomicU64,
    suppressed: AtomicU64,
    start: OnceLock<Instant>,
}

impl RateLog {
    pub fn note(&self, what: &'static str) {
        let start = *self.start.get_or_init(Instant::now);
        let now = start.elapsed().as_millis() as u64 + 1;
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now < last + LOG_EVERY.as_millis() as u64 {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self
            .last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            let more = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::warn!(also_refused = more, "{what}");
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_budget_gives_the_oldest_idle_place_to_a_new_connection() {
        let a = Admission::new(4, 2, Duration::from_secs(10));
        let first = a.accept().expect("room");
        let second = a.accept().expect("room");
        second.spoke();
        let third = a.accept().expect("the idle first one makes room");
        assert!(first.entry.evicted.load(Ordering::Acquire));
        assert!(!first.authenticated(), "an evicted connection stays out");
        third.spoke();
        assert!(
            a.accept().is_none(),
            "every unauthenticated connection has spoken: no room"
        );
        assert!(second.authenticated());
        assert!(a.accept().is_some(), "an authenticated one left the budget");
    }

    #[test]
    fn the_overall_cap_counts_authenticated_connections_only() {
        let a = Admission::new(1, 8, Duration::from_secs(10));
        let one = a.accept().expect("room");
        let two = a.accept().expect("room");
        assert!(one.authenticated());
        assert!(!two.authenticated(), "the cap is full");
        drop(one);
        assert!(two.authenticated(), "its place came free");
    }
}
