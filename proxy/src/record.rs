//! Building [`Decision`] records and emitting them exactly once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::deny::{DeciderKind, Denial};
use crate::traits::{DecidedBy, Decision, DecisionSink, FlowState, Lane, Verdict};

/// The request facts a record carries.
#[derive(Debug, Clone)]
pub struct RecordBase {
    /// Lane.
    pub lane: Lane,
    /// Phase string.
    pub phase: &'static str,
    /// Method.
    pub method: Option<String>,
    /// Path.
    pub path: Option<String>,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Inside TLS.
    pub is_intercepted: bool,
}

impl RecordBase {
    /// A decision about this request: its facts, who decided, and nothing else yet (no
    /// bytes, no error, a one-shot record); callers fill in the rest.
    fn decision(self, ts: u64, decision: Verdict, decided_by: DecidedBy) -> Decision {
        Decision {
            ts,
            decision,
            lane: self.lane,
            phase: self.phase,
            method: self.method,
            path: self.path,
            host: self.host,
            port: self.port,
            decided_by,
            error_kind: None,
            reason: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            is_intercepted: self.is_intercepted,
            provider: None,
            state: None,
            flow: 0,
            would_deny: None,
            command: None,
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Emit a refusal right away: a policy denial as `deny`; a failure past the policy (DNS,
/// upstream, the client's body) as `allow` with its kind and reason.
pub fn emit_denial(sink: &dyn DecisionSink, session: &str, base: &RecordBase, d: &Denial) {
    emit_denial_of(sink, session, None, base, d)
}

/// [`emit_denial`] for a labelled token (`command`: [`crate::Principal::label`]).
pub fn emit_denial_of(
    sink: &dyn DecisionSink,
    session: &str,
    command: Option<&str>,
    base: &RecordBase,
    d: &Denial,
) {
    let verdict = if d.is_failure() {
        Verdict::Allow
    } else {
        Verdict::Deny
    };
    let decided_by = DecidedBy {
        kind: d.decider,
        rule_host: d.rule_host.clone(),
        filter: d.filter.clone(),
    };
    sink.record(
        session,
        Decision {
            error_kind: d.record_kind().map(str::to_string),
            reason: Some(d.reason.clone()),
            command: command.map(str::to_string),
            ..base.clone().decision(now_ms(), verdict, decided_by)
        },
    );
}

/// A response still streaming after this long is reported as an open flow (a long
/// download or an event stream is visible while it runs).
pub const LONG_FLOW: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs `flow` (a tunnel's or an upgraded connection's relay) and reports `record` as an
/// open flow once it has lasted [`LONG_FLOW`]: a long tunnel is visible while it runs, a
/// short one (a TLS handshake and a request or two) is one record when it ends, which the
/// gateway can fold with its like. One timer per tunnel, none per request.
pub async fn open_when_long<F: std::future::Future>(record: &AllowRecord, flow: F) -> F::Output {
    tokio::pin!(flow);
    tokio::select! {
        biased;
        out = &mut flow => return out,
        _ = tokio::time::sleep(LONG_FLOW) => record.open(),
    }
    flow.await
}

/// Proxy-wide flow ids (see [`Decision::flow`]).
static NEXT_FLOW: AtomicU64 = AtomicU64::new(1);

/// What went wrong with an allowed request, if anything.
struct Outcome {
    kind: Option<&'static str>,
    note: Option<String>,
}

/// An allowed request in flight: counts bytes, emits on drop.
pub struct AllowRecord {
    sink: Arc<dyn DecisionSink>,
    session: Arc<str>,
    /// Shared with the flow's target: the record takes its strings when it alone holds it.
    /// Always `Some` until the record is dropped.
    base: Option<Arc<RecordBase>>,
    decider: DeciderKind,
    rule_host: Option<String>,
    ts: u64,
    start: Instant,
    /// Bytes client → upstream.
    pub up: Arc<AtomicU64>,
    /// Bytes upstream → client.
    pub down: Arc<AtomicU64>,
    outcome: std::sync::Mutex<Outcome>,
    provider: Option<String>,
    /// The session's concurrency slot, given back when the record is dropped.
    slot: Option<crate::state::SessionSlot>,
    cancelled: std::sync::atomic::AtomicBool,
    /// Set while the request waits for the upstream's response head.
    awaiting: std::sync::atomic::AtomicBool,
    /// Non-zero once [`AllowRecord::open`] reported the flow.
    flow: AtomicU64,
    would_deny: Option<crate::policy::WouldDeny>,
    command: Option<String>,
}

impl AllowRecord {
    /// Start the clock for an allowed request.
    pub fn new(
        sink: Arc<dyn DecisionSink>,
        session: Arc<str>,
        base: Arc<RecordBase>,
        decider: DeciderKind,
        rule_host: Option<String>,
    ) -> Self {
        AllowRecord {
            sink,
            session,
            base: Some(base),
            decider,
            rule_host,
            ts: now_ms(),
            start: Instant::now(),
            up: Arc::default(),
            down: Arc::default(),
            outcome: std::sync::Mutex::new(Outcome {
                kind: None,
                note: None,
            }),
            provider: None,
            slot: None,
            cancelled: std::sync::atomic::AtomicBool::new(false),
            awaiting: std::sync::atomic::AtomicBool::new(false),
            flow: AtomicU64::new(0),
            would_deny: None,
            command: None,
        }
    }

    /// Attach a note (e.g. an upstream error) as the record's `reason`.
    pub fn set_note(&self, note: String) {
        if let Ok(mut g) = self.outcome.lock() {
            g.note = Some(note);
        }
    }

    /// The request failed past the policy: the record keeps `kind` and `note`. The first
    /// failure reported wins.
    pub fn set_failure(&self, kind: &'static str, note: String) {
        if let Ok(mut g) = self.outcome.lock() {
            if g.kind.is_none() {
                g.kind = Some(kind);
                g.note = Some(note);
            }
        }
    }

    /// Record a refusal that happened after the allow (an upstream error, a stalled body).
    pub fn fail_with(&self, d: &Denial) {
        match d.record_kind() {
            Some(k) => self.set_failure(k, d.reason.clone()),
            None => self.set_note(d.reason.clone()),
        }
    }

    /// Mark whether the request is waiting for the upstream's response head: a record
    /// dropped while waiting (the client gave up) says the upstream never answered.
    pub fn awaiting_response(&self, waiting: bool) {
        self.awaiting.store(waiting, Ordering::Relaxed);
    }

    /// The client closed its connection while the upstream's answer was awaited.
    pub fn client_gave_up(&self) {
        let ms = self.start.elapsed().as_millis();
        self.set_failure(
            crate::deny::kind::UPSTREAM_NO_RESPONSE,
            format!("no response from the upstream; the client gave up after {ms} ms"),
        );
    }

    /// Has the request run longer than [`LONG_FLOW`]?
    pub fn is_long(&self) -> bool {
        self.start.elapsed() >= LONG_FLOW
    }

    /// When the request will have run for [`LONG_FLOW`].
    pub fn long_at(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.start + LONG_FLOW)
    }

    /// Report the flow now, as `open` (bytes so far); the record emitted on drop becomes its
    /// `closed` counterpart. For tunnels and upgraded connections, which can run for hours
    /// (through [`open_when_long`]), and responses still streaming after [`LONG_FLOW`].
    pub fn open(&self) {
        let Some(base) = self.base.as_deref() else {
            return;
        };
        if self.flow.load(Ordering::Relaxed) != 0 {
            return;
        }
        let flow = NEXT_FLOW.fetch_add(1, Ordering::Relaxed);
        self.flow.store(flow, Ordering::Relaxed);
        let decided_by = DecidedBy {
            kind: self.decider,
            rule_host: self.rule_host.clone(),
            filter: None,
        };
        self.sink.record(
            &self.session,
            Decision {
                bytes_up: self.up.load(Ordering::Relaxed),
                bytes_down: self.down.load(Ordering::Relaxed),
                duration_ms: self.start.elapsed().as_millis() as u64,
                provider: self.provider.clone(),
                state: Some(FlowState::Open),
                flow,
                would_deny: self.would_deny.clone(),
                command: self.command.clone(),
                ..base.clone().decision(self.ts, Verdict::Allow, decided_by)
            },
        );
    }
}

impl AllowRecord {
    /// Set the provider whose credential was injected.
    pub fn set_provider(&mut self, provider: Option<String>) -> &mut Self {
        self.provider = provider;
        self
    }

    /// Mark the request as let through by learn mode (docs/decisions.md, L1).
    pub fn set_would_deny(&mut self, w: Option<crate::policy::WouldDeny>) -> &mut Self {
        self.would_deny = w;
        self
    }

    /// Name the program whose token made the request.
    pub fn set_command(&mut self, command: Option<&str>) -> &mut Self {
        self.command = command.map(str::to_string);
        self
    }

    /// Hold the session's concurrency slot as long as this record.
    pub(crate) fn hold(&mut self, slot: crate::state::SessionSlot) {
        self.slot = Some(slot);
    }

    /// Do not emit an allow record (a later stage denied and reported instead).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }
}

impl Drop for AllowRecord {
    fn drop(&mut self) {
        if self.cancelled.load(Ordering::Relaxed) {
            return;
        }
        let duration_ms = self.start.elapsed().as_millis() as u64;
        if self.awaiting.load(Ordering::Relaxed) {
            self.client_gave_up();
        }
        let (kind, reason) = match self.outcome.get_mut() {
            Ok(o) => (o.kind, o.note.take()),
            Err(_) => (None, None),
        };
        let flow = *self.flow.get_mut();
        // dropping: the base's strings are moved out when nothing else holds it (every lane
        // lets go of the flow's target before its record ends), copied otherwise
        let Some(base) = self.base.take() else { return };
        let base = Arc::try_unwrap(base).unwrap_or_else(|shared| (*shared).clone());
        let decided_by = DecidedBy {
            kind: self.decider,
            rule_host: self.rule_host.take(),
            filter: None,
        };
        self.sink.record(
            &self.session,
            Decision {
                error_kind: kind.map(str::to_string),
                reason,
                bytes_up: self.up.load(Ordering::Relaxed),
                bytes_down: self.down.load(Ordering::Relaxed),
                duration_ms,
                provider: self.provider.take(),
                state: (flow != 0).then_some(FlowState::Closed),
                flow,
                would_deny: self.would_deny.take(),
                command: self.command.take(),
                ..base.decision(self.ts, Verdict::Allow, decided_by)
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deny::kind;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Sink(Mutex<Vec<Decision>>);
    impl DecisionSink for Sink {
        fn record(&self, _: &str, d: Decision) {
            self.0.lock().unwrap().push(d);
        }
    }

    fn record(sink: &Arc<Sink>) -> AllowRecord {
        AllowRecord::new(
            sink.clone(),
            "s".into(),
            base().into(),
            DeciderKind::Default,
            None,
        )
    }

    fn base() -> RecordBase {
        RecordBase {
            lane: Lane::Http,
            phase: "http",
            method: Some("GET".into()),
            path: Some("/".into()),
            host: "x.test".into(),
            port: 80,
            is_intercepted: false,
        }
    }

    #[test]
    fn records_serialize_with_the_companion_field_names() {
        let sink = Sink::default();
        let d = Denial::policy(
            kind::DENYLIST,
            "host not permitted: x.test",
            DeciderKind::HostGate,
        );
        emit_denial(&sink, "s", &base(), &d);
        let v = serde_json::to_value(&sink.0.lock().unwrap()[0]).unwrap();
        assert_eq!(v["decision"], "deny");
        assert_eq!(v["lane"], "http");
        assert_eq!(v["decided_by"]["kind"], "host-gate");
        assert_eq!(v["error_kind"], "blocked-by-denylist");
        for key in [
            "ts",
            "phase",
            "method",
            "path",
            "host",
            "port",
            "reason",
            "bytes_up",
            "bytes_down",
            "duration_ms",
            "is_intercepted",
            "provider",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
    }

    #[test]
    fn an_allow_record_is_emitted_once_when_dropped_unless_cancelled() {
        let sink: Arc<Sink> = Arc::default();
        let r = record(&sink);
        r.down.fetch_add(5, Ordering::Relaxed);
        drop(r);
        let r = record(&sink);
        r.cancel();
        drop(r);
        let all = sink.0.lock().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].bytes_down, 5);
        assert_eq!(all[0].decision, Verdict::Allow);
    }

    #[test]
    fn a_record_reports_the_same_request_whether_or_not_its_base_is_still_shared() {
        let sink: Arc<Sink> = Arc::default();
        let shared = Arc::new(base());
        let r = AllowRecord::new(
            sink.clone(),
            "s".into(),
            shared.clone(),
            DeciderKind::Default,
            None,
        );
        drop(r);
        drop(shared);
        let r = record(&sink);
        drop(r);
        let all = sink.0.lock().unwrap();
        assert_eq!(all.len(), 2);
        for d in all.iter() {
            assert_eq!(
                (
                    d.phase,
                    d.method.as_deref(),
                    d.path.as_deref(),
                    d.host.as_str(),
                    d.port
                ),
                ("http", Some("GET"), Some("/"), "x.test", 80)
            );
        }
    }

    #[tokio::test]
    async fn a_flow_shorter_than_a_second_is_one_record_when_it_ends() {
        let sink: Arc<Sink> = Arc::default();
        let r = record(&sink);
        let out = open_when_long(&r, async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            7
        })
        .await;
        assert_eq!(out, 7, "the flow's own answer is passed on");
        assert!(sink.0.lock().unwrap().is_empty(), "nothing while it ran");
        drop(r);
        let all = sink.0.lock().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].state, None, "a short flow is a plain record");
        assert_eq!(all[0].flow, 0);
    }

    #[tokio::test]
    async fn a_flow_that_lasts_a_second_is_reported_open_while_it_runs_then_closed() {
        let sink: Arc<Sink> = Arc::default();
        let r = record(&sink);
        let seen = sink.clone();
        open_when_long(&r, async move {
            tokio::time::sleep(LONG_FLOW + std::time::Duration::from_millis(200)).await;
            let during: Vec<_> = seen.0.lock().unwrap().iter().map(|d| d.state).collect();
            assert_eq!(during, [Some(FlowState::Open)], "open while it runs");
        })
        .await;
        drop(r);
        let all = sink.0.lock().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].state, Some(FlowState::Closed));
        assert_eq!(all[1].flow, all[0].flow, "the close names the same flow");
    }
}
