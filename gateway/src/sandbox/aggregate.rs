//! Bounding what allowed egress costs (pure bookkeeping; `sink.rs` publishes).
//!
//! Every denial and every failed request stays its own record. Allowed requests that went
//! well are counted per session, lane, host, port and minute: the first [`KEEP_SINGLE`] of
//! such a bucket stay records of their own (a person running a few commands sees each
//! one), the rest are folded into ONE record with an exact `count` and byte totals. That
//! record is published at once when it starts (the phone sees it immediately), later
//! requests only add to it, and it is republished — same `id`, same stored row — at most
//! once per flush tick while it keeps changing. A million requests to one host cost a few
//! dozen rows, not a million.

// foldhash, not SipHash: this map is read on every allowed request (its hash was a tenth of
// the folding); it is seeded per map, and its keys are a session's own hosts.
use foldhash::HashMap;
use vis_proxy::{Decision, Lane};

/// Allowed requests of one bucket kept as records of their own before folding starts.
pub const KEEP_SINGLE: u32 = 16;

/// One bucket's key inside a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BucketKey {
    lane: u8,
    host: String,
    port: u16,
    minute: u64,
}

fn lane_code(l: Lane) -> u8 {
    match l {
        Lane::Http => 0,
        Lane::Connect => 1,
        Lane::Https => 2,
        Lane::Socks => 3,
        Lane::Provider => 4,
    }
}

/// The running totals of one bucket.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// The record id every publication of this bucket carries.
    pub id: String,
    /// The seq the bucket's row is stored under (its first publication).
    pub seq: i64,
    /// The record as first seen; its byte counts and duration are replaced by the totals.
    pub first: Decision,
    /// Requests folded in, the first included.
    pub count: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// The longest request's duration.
    pub duration_ms: u64,
    /// The last request's decision time.
    pub last_ts: u64,
    /// Changed since it was last published.
    pub dirty: bool,
}

impl Bucket {
    /// The record to publish: the first request's fields with the bucket's totals.
    pub fn record(&self) -> Decision {
        let mut d = self.first.clone();
        d.bytes_up = self.bytes_up;
        d.bytes_down = self.bytes_down;
        d.duration_ms = self.duration_ms;
        d
    }
}

/// Is this record folded into a bucket? Allowed, nothing went wrong, not part of a
/// long-lived flow (those are reported when they open and when they close).
pub fn foldable(d: &Decision) -> bool {
    d.decision == vis_proxy::Verdict::Allow
        // learn mode's "would deny" records stay their own, as denials do (L1)
        && d.would_deny.is_none()
        && d.error_kind.is_none()
        && d.reason.is_none()
        && d.state.is_none()
}

/// A bucket: still counting single records, or folding.
enum Slot {
    Singles(u32),
    Folding(Box<Bucket>),
}

/// Buckets of every session.
#[derive(Default)]
pub struct Buckets {
    by_session: HashMap<String, HashMap<BucketKey, Slot>>,
}

/// What [`Buckets::fold`] did with a record.
pub enum Folded {
    /// One of the bucket's first [`KEEP_SINGLE`]: publish it as a record of its own.
    Single(Decision),
    /// Added to an existing bucket (nothing to publish now).
    Added,
    /// The first request of a new bucket: publish it now and call [`Buckets::started`]
    /// with the seq it got.
    New(Decision, BucketKey),
}

impl Buckets {
    /// Fold an allowed record (see [`foldable`]) into its bucket.
    pub fn fold(&mut self, sid: &str, mut d: Decision) -> Folded {
        // the host moves into the key and back: a request added to a bucket (the common
        // case) copies no string
        let key = BucketKey {
            lane: lane_code(d.lane),
            host: std::mem::take(&mut d.host),
            port: d.port,
            minute: d.ts / 60_000,
        };
        let session = match self.by_session.get_mut(sid) {
            Some(s) => s,
            None => self.by_session.entry(sid.to_string()).or_default(),
        };
        let b = match session.get_mut(&key) {
            None => {
                d.host = key.host.clone();
                session.insert(key, Slot::Singles(1));
                return Folded::Single(d);
            }
            Some(Slot::Singles(n)) if *n < KEEP_SINGLE => {
                *n += 1;
                d.host = key.host;
                return Folded::Single(d);
            }
            Some(Slot::Singles(_)) => {
                d.host = key.host.clone();
                return Folded::New(d, key);
            }
            Some(Slot::Folding(b)) => b,
        };
        {
            b.count += 1;
            b.bytes_up += d.bytes_up;
            b.bytes_down += d.bytes_down;
            b.duration_ms = b.duration_ms.max(d.duration_ms);
            b.last_ts = b.last_ts.max(d.ts);
            if b.first.method != d.method {
                b.first.method = None;
            }
            if b.first.path != d.path {
                b.first.path = None;
            }
            if b.first.command != d.command {
                b.first.command = None;
            }
            if b.first.decided_by != d.decided_by {
                b.first.decided_by.rule_host = None;
            }
            if b.first.provider != d.provider {
                b.first.provider = None;
            }
            b.dirty = true;
        }
        Folded::Added
    }

    /// Register a new bucket under the id and seq its first record was published with.
    pub fn started(&mut self, sid: &str, key: BucketKey, id: String, seq: i64, first: Decision) {
        let b = Bucket {
            id,
            seq,
            count: 1,
            bytes_up: first.bytes_up,
            bytes_down: first.bytes_down,
            duration_ms: first.duration_ms,
            last_ts: first.ts,
            first,
            dirty: false,
        };
        self.by_session
            .entry(sid.to_string())
            .or_default()
            .insert(key, Slot::Folding(Box::new(b)));
    }

    /// Buckets changed since the last call (marked clean), and buckets of minutes before
    /// `now_minute - 1` that are clean are forgotten (nothing can change them any more).
    pub fn take_dirty(&mut self, now_minute: u64) -> Vec<(String, Bucket)> {
        let mut out = Vec::new();
        for (sid, buckets) in self.by_session.iter_mut() {
            buckets.retain(|k, slot| {
                if let Slot::Folding(b) = slot {
                    if b.dirty {
                        b.dirty = false;
                        out.push((sid.clone(), Bucket::clone(b)));
                        return true;
                    }
                }
                k.minute + 1 >= now_minute
            });
        }
        self.by_session.retain(|_, b| !b.is_empty());
        out
    }

    /// Forget a session's buckets (it was deleted).
    pub fn forget(&mut self, sid: &str) {
        self.by_session.remove(sid);
    }

    /// Buckets held (tests).
    #[cfg(test)]
    pub fn open_buckets(&self) -> usize {
        self.by_session.values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vis_proxy::deny::DeciderKind;
    use vis_proxy::{DecidedBy, Verdict};

    fn allow(host: &str, ts: u64, path: &str, down: u64) -> Decision {
        Decision {
            ts,
            decision: Verdict::Allow,
            lane: Lane::Http,
            phase: "http",
            method: Some("GET".into()),
            path: Some(path.into()),
            host: host.into(),
            port: 80,
            decided_by: DecidedBy {
                kind: DeciderKind::Default,
                rule_host: None,
                filter: None,
            },
            error_kind: None,
            reason: None,
            bytes_up: 10,
            bytes_down: down,
            duration_ms: ts % 7,
            is_intercepted: false,
            provider: None,
            state: None,
            flow: 0,
            would_deny: None,
            command: None,
        }
    }

    #[test]
    fn repeated_allows_in_one_minute_fold_into_one_bucket_with_exact_totals() {
        let mut b = Buckets::default();
        let t0 = 1_700_000_080_000; // 40 s into a minute
        for i in 0..KEEP_SINGLE as u64 {
            assert!(
                matches!(
                    b.fold("s", allow("a.test", t0 + i, "/0", 1)),
                    Folded::Single(_)
                ),
                "the first requests of a minute stay records of their own"
            );
        }
        let Folded::New(first, key) = b.fold("s", allow("a.test", t0, "/1", 100)) else {
            panic!("then a folded record starts");
        };
        b.started("s", key, "id-1".into(), 7, first);
        for i in 1..1000 {
            assert!(matches!(
                b.fold("s", allow("a.test", t0 + i, "/2", 100)),
                Folded::Added
            ));
        }
        // another host, another session and the next minute are other buckets
        assert!(matches!(
            b.fold("s", allow("b.test", t0, "/", 1)),
            Folded::Single(..)
        ));
        assert!(matches!(
            b.fold("t", allow("a.test", t0, "/", 1)),
            Folded::Single(..)
        ));
        assert!(matches!(
            b.fold("s", allow("a.test", t0 + 30_000, "/", 1)),
            Folded::Single(..)
        ));
        let dirty = b.take_dirty(t0 / 60_000);
        assert_eq!(dirty.len(), 1);
        let (sid, bucket) = &dirty[0];
        assert_eq!(sid, "s");
        assert_eq!((bucket.id.as_str(), bucket.seq), ("id-1", 7));
        assert_eq!(bucket.count, 1000);
        assert_eq!(bucket.bytes_down, 100_000);
        assert_eq!(bucket.bytes_up, 10_000);
        assert_eq!(bucket.last_ts, t0 + 999);
        let r = bucket.record();
        assert_eq!(r.path, None, "mixed paths are not shown as one");
        assert_eq!(r.method.as_deref(), Some("GET"));
        assert_eq!(r.ts, t0);
        assert!(b.take_dirty(t0 / 60_000).is_empty(), "published once");
        // two minutes later clean buckets are forgotten
        b.take_dirty(t0 / 60_000 + 3);
        assert_eq!(b.open_buckets(), 0);
    }

    #[test]
    fn denials_failures_and_flows_are_never_folded() {
        let mut d = allow("a.test", 1, "/", 1);
        assert!(foldable(&d));
        d.decision = Verdict::Deny;
        assert!(!foldable(&d));
        let mut d = allow("a.test", 1, "/", 1);
        d.error_kind = Some("upstream-error".into());
        assert!(!foldable(&d));
        let mut d = allow("a.test", 1, "/", 1);
        d.state = Some(vis_proxy::FlowState::Open);
        assert!(!foldable(&d));
    }
}
