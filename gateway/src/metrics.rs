//! Process-wide counters for `/metrics` that no engine structure owns: the egress proxy's
//! decisions (by lane and verdict, denials by kind, bytes) and network-filter latency, and
//! the store's write failures and the events they lost. Relaxed atomics: a decision costs a
//! few uncontended increments on the proxy thread that made it.
//!
//! API: [`egress_decision`] (called once per decision from `sandbox/sink.rs`; counts it and
//! logs it), [`record_decision`], [`record_filter_latency`], [`store_write_failed`],
//! [`event_lost`], [`event_not_published`]; [`families`] renders them for `/metrics`.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use vis_companion_api::metrics::{Family, Kind, Sample};

static STORE_WRITE_FAILURES: AtomicU64 = AtomicU64::new(0);
static EVENTS_LOST: AtomicU64 = AtomicU64::new(0);
static EVENTS_NOT_PUBLISHED: AtomicU64 = AtomicU64::new(0);

/// A store job or batch commit failed.
pub fn store_write_failed() {
    STORE_WRITE_FAILURES.fetch_add(1, Relaxed);
}

/// An event could not be stored, so it was not delivered.
pub fn event_lost() {
    EVENTS_LOST.fetch_add(1, Relaxed);
}

/// A committed event found the NATS publisher's queue full (it stays in the journal).
pub fn event_not_published() {
    EVENTS_NOT_PUBLISHED.fetch_add(1, Relaxed);
}

const LANES: [&str; 6] = ["http", "connect", "https", "socks", "provider", "other"];
const VERDICTS: [&str; 2] = ["allow", "deny"];

static DECISIONS: [[AtomicU64; 2]; 6] = [const { [const { AtomicU64::new(0) }; 2] }; 6];
static BYTES_UP: AtomicU64 = AtomicU64::new(0);
static BYTES_DOWN: AtomicU64 = AtomicU64::new(0);
/// Denials by error kind. The kinds are the proxy's constants; past this many distinct
/// ones (never expected) the rest count as `other`, so the series stays bounded.
static DENIALS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
const MAX_DENIAL_KINDS: usize = 64;

/// Counts one egress decision: `lane` (`http`, `connect`, `https`, `socks`, `provider`),
/// `verdict` (`allow`, `deny`), the denial's error kind, and the bytes it relayed.
pub fn record_decision(
    lane: &str,
    verdict: &str,
    deny_kind: Option<&str>,
    bytes_up: u64,
    bytes_down: u64,
) {
    let l = LANES
        .iter()
        .position(|x| *x == lane)
        .unwrap_or(LANES.len() - 1);
    let deny = verdict == "deny";
    DECISIONS[l][usize::from(deny)].fetch_add(1, Relaxed);
    BYTES_UP.fetch_add(bytes_up, Relaxed);
    BYTES_DOWN.fetch_add(bytes_down, Relaxed);
    if deny {
        let kind = deny_kind.unwrap_or("unspecified");
        let mut d = DENIALS.lock();
        let key = if d.contains_key(kind) || d.len() < MAX_DENIAL_KINDS {
            kind
        } else {
            "other"
        };
        *d.entry(key.to_string()).or_default() += 1;
    }
}

fn lane_name(lane: vis_proxy::Lane) -> &'static str {
    use vis_proxy::Lane;
    match lane {
        Lane::Http => "http",
        Lane::Connect => "connect",
        Lane::Https => "https",
        Lane::Socks => "socks",
        Lane::Provider => "provider",
        #[allow(unreachable_patterns)]
        _ => "other",
    }
}

/// One decision of the egress proxy for a session: counted, and logged (`vis::egress`):
/// denials at `info`, allowed requests at `debug`. The path is not logged (its query can
/// carry secrets); the session's egress list has it.
pub fn egress_decision(session_id: &str, d: &vis_proxy::Decision) {
    let lane = lane_name(d.lane);
    let deny = matches!(d.decision, vis_proxy::Verdict::Deny);
    record_decision(
        lane,
        if deny { "deny" } else { "allow" },
        d.error_kind.as_deref(),
        d.bytes_up,
        d.bytes_down,
    );
    if deny {
        tracing::info!(
            target: "vis::egress",
            session = session_id,
            lane,
            host = %d.host,
            port = d.port,
            kind = d.error_kind.as_deref().unwrap_or(""),
            reason = d.reason.as_deref().unwrap_or(""),
            "egress denied"
        );
    } else {
        tracing::debug!(
            target: "vis::egress",
            session = session_id,
            lane,
            method = d.method.as_deref().unwrap_or(""),
            host = %d.host,
            port = d.port,
            bytes_up = d.bytes_up,
            bytes_down = d.bytes_down,
            duration_ms = d.duration_ms,
            error = d.reason.as_deref().unwrap_or(""),
            "egress allowed"
        );
    }
}

/// Upper bounds (seconds) of the filter-latency buckets.
const FILTER_BOUNDS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1.0, 5.0,
];
static FILTER_BUCKETS: [AtomicU64; 12] = [const { AtomicU64::new(0) }; 12];
static FILTER_COUNT: AtomicU64 = AtomicU64::new(0);
static FILTER_SUM_NS: AtomicU64 = AtomicU64::new(0);

/// How a network-filter call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterOutcome {
    Allow,
    Block,
    Error,
    /// The proxy stopped waiting (its deadline) before the filter answered.
    Abandoned,
}

static FILTER_OUTCOMES: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
const OUTCOMES: [&str; 4] = ["allow", "block", "error", "abandoned"];

/// One network-filter call and how long it took.
pub fn record_filter_latency(took: Duration, outcome: FilterOutcome) {
    let secs = took.as_secs_f64();
    if let Some(i) = FILTER_BOUNDS.iter().position(|b| secs <= *b) {
        FILTER_BUCKETS[i].fetch_add(1, Relaxed);
    }
    FILTER_COUNT.fetch_add(1, Relaxed);
    FILTER_SUM_NS.fetch_add(took.as_nanos().min(u64::MAX as u128) as u64, Relaxed);
    FILTER_OUTCOMES[outcome as usize].fetch_add(1, Relaxed);
}

/// A network filter whose calls are timed into [`record_filter_latency`]; a call the proxy
/// gives up on (its deadline) is recorded as `abandoned` when its future is dropped.
pub struct TimedFilter(pub std::sync::Arc<dyn vis_proxy::NetworkFilter>);

#[async_trait::async_trait]
impl vis_proxy::NetworkFilter for TimedFilter {
    fn name(&self) -> &str {
        self.0.name()
    }

    async fn check(
        &self,
        ctx: &vis_proxy::FilterCtx,
    ) -> Result<vis_proxy::FilterVerdict, vis_proxy::FilterError> {
        struct Timer(std::time::Instant, FilterOutcome);
        impl Drop for Timer {
            fn drop(&mut self) {
                record_filter_latency(self.0.elapsed(), self.1);
            }
        }
        let mut timer = Timer(std::time::Instant::now(), FilterOutcome::Abandoned);
        let out = self.0.check(ctx).await;
        timer.1 = match &out {
            Ok(vis_proxy::FilterVerdict::Allow) => FilterOutcome::Allow,
            Ok(vis_proxy::FilterVerdict::Block(_)) => FilterOutcome::Block,
            Err(_) => FilterOutcome::Error,
        };
        out
    }
}

fn get(a: &AtomicU64) -> f64 {
    a.load(Relaxed) as f64
}

/// The series of this module, for `/metrics`.
pub fn families() -> Vec<Family> {
    let mut decisions = Vec::new();
    for (l, lane) in LANES.iter().enumerate() {
        for (v, verdict) in VERDICTS.iter().enumerate() {
            decisions.push(Sample::labelled(
                vec![
                    ("lane", lane.to_string()),
                    ("decision", verdict.to_string()),
                ],
                get(&DECISIONS[l][v]),
            ));
        }
    }
    let denials = DENIALS
        .lock()
        .iter()
        .map(|(k, n)| Sample::labelled(vec![("kind", k.clone())], *n as f64))
        .collect();
    let mut buckets = Vec::new();
    let mut cumulative = 0u64;
    for (i, bound) in FILTER_BOUNDS.iter().enumerate() {
        cumulative += FILTER_BUCKETS[i].load(Relaxed);
        buckets.push(Sample {
            suffix: "_bucket",
            labels: vec![("le", bound.to_string())],
            value: cumulative as f64,
        });
    }
    let count = FILTER_COUNT.load(Relaxed);
    buckets.push(Sample {
        suffix: "_bucket",
        labels: vec![("le", "+Inf".into())],
        value: count as f64,
    });
    buckets.push(Sample {
        suffix: "_sum",
        labels: vec![],
        value: FILTER_SUM_NS.load(Relaxed) as f64 / 1e9,
    });
    buckets.push(Sample {
        suffix: "_count",
        labels: vec![],
        value: count as f64,
    });
    vec![
        Family {
            name: "vis_egress_decisions_total",
            help: "Egress proxy decisions, by lane (http, connect, https, socks, provider) and decision (allow, deny).",
            kind: Kind::Counter,
            samples: decisions,
        },
        Family {
            name: "vis_egress_denials_total",
            help: "Denied egress requests, by error kind (blocked-by-allowlist, ssrf-blocked, filter-error, ...).",
            kind: Kind::Counter,
            samples: denials,
        },
        Family {
            name: "vis_egress_bytes_total",
            help: "Bytes relayed by the egress proxy, by direction (up: client to upstream, down: upstream to client).",
            kind: Kind::Counter,
            samples: vec![
                Sample::labelled(vec![("direction", "up".into())], get(&BYTES_UP)),
                Sample::labelled(vec![("direction", "down".into())], get(&BYTES_DOWN)),
            ],
        },
        Family {
            name: "vis_egress_filter_duration_seconds",
            help: "Time of one network-filter call, from the proxy's question to the extension's answer.",
            kind: Kind::Histogram,
            samples: buckets,
        },
        Family {
            name: "vis_egress_filter_calls_total",
            help: "Network-filter calls by outcome (allow, block, error, abandoned: the proxy's deadline passed first).",
            kind: Kind::Counter,
            samples: OUTCOMES
                .iter()
                .enumerate()
                .map(|(i, o)| Sample::labelled(vec![("outcome", o.to_string())], get(&FILTER_OUTCOMES[i])))
                .collect(),
        },
        Family::single(
            "vis_store_write_failures_total",
            "Store writes that failed (a job's statements, or a batch's commit or rollback by SQLite).",
            Kind::Counter,
            get(&STORE_WRITE_FAILURES),
        ),
        Family::single(
            "vis_events_lost_total",
            "Events the store could not write; they were not delivered, and their turns failed with storage_error.",
            Kind::Counter,
            get(&EVENTS_LOST),
        ),
        Family::single(
            "vis_events_not_published_total",
            "Committed events not handed to the NATS publisher because its queue was full (with --nats-url); they stay in the journal.",
            Kind::Counter,
            get(&EVENTS_NOT_PUBLISHED),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(fams: &[Family], name: &str, labels: &[(&str, &str)]) -> f64 {
        fams.iter()
            .find(|f| f.name == name)
            .and_then(|f| {
                f.samples.iter().find(|s| {
                    s.labels.len() == labels.len()
                        && s.labels
                            .iter()
                            .zip(labels)
                            .all(|((k, v), (k2, v2))| k == k2 && v == v2)
                })
            })
            .map_or(0.0, |s| s.value)
    }

    #[test]
    fn decisions_are_counted_by_lane_and_verdict_with_denials_by_kind_and_bytes() {
        let before = families();
        let n = |f: &[Family], l: &[(&str, &str)], name: &str| sample(f, name, l);
        let lane = [("lane", "socks"), ("decision", "deny")];
        let kind = [("kind", "test-kind-a")];
        record_decision("socks", "deny", Some("test-kind-a"), 10, 20);
        record_decision("socks", "allow", None, 1, 2);
        let after = families();
        assert_eq!(
            n(&after, &lane, "vis_egress_decisions_total")
                - n(&before, &lane, "vis_egress_decisions_total"),
            1.0
        );
        assert_eq!(n(&after, &kind, "vis_egress_denials_total"), 1.0);
        let up = [("direction", "up")];
        assert!(
            n(&after, &up, "vis_egress_bytes_total") - n(&before, &up, "vis_egress_bytes_total")
                >= 11.0
        );
    }

    #[test]
    fn a_filter_call_lands_in_its_bucket_and_the_count() {
        let count = || FILTER_COUNT.load(Relaxed);
        let c0 = count();
        record_filter_latency(Duration::from_micros(300), FilterOutcome::Block);
        assert!(count() > c0);
        let f = families();
        let h = f
            .iter()
            .find(|f| f.name == "vis_egress_filter_duration_seconds")
            .expect("histogram");
        let le = |b: &str| {
            h.samples
                .iter()
                .find(|s| s.labels.first().is_some_and(|(_, v)| v == b))
                .map(|s| s.value)
                .expect("bucket")
        };
        assert!(le("0.0005") >= 1.0);
        assert!(le("+Inf") >= le("0.0005"));
    }
}
