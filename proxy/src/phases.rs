//! The one order every flow goes through, written once:
//!
//! ```text
//! attribute → slot → decide → request filters → credentials → validate (SSRF)
//!           → connect → response filters → relay
//! ```
//!
//! | Step | What happens | On refusal |
//! |---|---|---|
//! | attribute | the lane reads the proxy token in its protocol; [`crate::attribution::authorize`] | answered, not recorded (no session to record it for) |
//! | slot | one of the session's concurrent-flow slots (held until the flow ends; the requests an intercepted tunnel relays one at a time run on the slot it took at CONNECT) | `deny` record, 503 / REP `01` |
//! | decide | the session's policy ([`crate::policy::decide`]); a provider route is allowed by the provider's configuration instead | `deny` record |
//! | request filters | only when filters are registered and the lane has a request phase (not CONNECT: its inner requests are filtered); first deny wins | `deny` record with the rule host |
//! | credentials | phantom → secret swap on the provider's hosts (HTTP lanes; filters saw the phantom) | `deny` record with the rule host |
//! | validate | the SSRF floor: resolve once, classify every answer, keep the one address (a tunnel's inner requests reuse the address validated at CONNECT) | `deny` record (`allow` with a kind for a name that does not resolve) |
//! | connect | the lane dials that address, or sends the request on a connection to it | a failure ends the allow record with its kind |
//! | response filters | the upstream's status and headers, before any body byte | the allow record is replaced by a `deny` record of the response phase |
//! | relay | the lane streams the answer; the allow record is emitted when it ends | — |
//!
//! A lane (plain HTTP, intercepted HTTPS, provider route, CONNECT, SOCKS5, and
//! `/net-probe`) adapts framing only, through [`Framing`]: how it learns who is asking,
//! what its request filters see besides the target, how it swaps credentials, how it
//! connects and relays, and how it answers a refusal in its own protocol. The checks,
//! their order and the records live here; `/net-probe` runs them with a connector that
//! does not dial.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::deny::{DeciderKind, Denial};
use crate::dial::validate_with;
use crate::filters::run_filters;
use crate::policy::{decide_or_learn, Allowed, DecideInput};
use crate::record::{emit_denial_of, AllowRecord, RecordBase};
use crate::state::{SessionSlot, Shared};
use crate::traits::{
    DecisionSink, FilterCtx, Lane, NetworkFilter, Phase, Principal, ProviderCredential,
};

/// The steps, in order; a lane's answer to a refusal may depend on where it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Who is asking.
    Attribute,
    /// The session's concurrency slot.
    Slot,
    /// The session's policy.
    Decide,
    /// Request filters (or reading what they are shown).
    RequestFilters,
    /// Provider credentials.
    Credentials,
    /// The SSRF floor.
    Validate,
    /// Dialing / sending upstream.
    Connect,
    /// Response filters.
    ResponseFilters,
}

/// What the steps check for one flow.
pub(crate) struct Target {
    /// Lane, phase, method, path, host and port, as recorded (shared with the allow record).
    pub base: Arc<RecordBase>,
    /// The port the policy's port checks see (`None` inside a tunnel: checked at CONNECT).
    pub check_port: Option<u16>,
    /// A provider route: allowed by the provider's configuration, not the session's
    /// policy, and reported with the provider.
    pub route: Option<String>,
    /// Filter phase of the request (`None`: no request filters on this lane).
    pub request_phase: Option<Phase>,
    /// Filter phase of the response (`None`: no response filters on this lane).
    pub response_phase: Option<Phase>,
}

impl Target {
    /// A plain-HTTP request: the lane's record fields and filter phases; `check_port` for the
    /// policy's port checks (`None` inside a CONNECT tunnel, whose port CONNECT checked).
    pub(crate) fn http(
        method: &str,
        path: String,
        host: String,
        port: u16,
        check_port: Option<u16>,
    ) -> Target {
        Target::request(Lane::Http, method, path, host, port, check_port)
    }

    /// An intercepted HTTPS request inside a tunnel (its port checked at CONNECT).
    pub(crate) fn intercepted(method: &str, path: String, host: String, port: u16) -> Target {
        Target::request(Lane::Https, method, path, host, port, None)
    }

    fn request(
        lane: Lane,
        method: &str,
        path: String,
        host: String,
        port: u16,
        check_port: Option<u16>,
    ) -> Target {
        let https = lane == Lane::Https;
        Target {
            base: Arc::new(RecordBase {
                lane,
                phase: if https { "https" } else { "http" },
                method: Some(method.to_string()),
                path: Some(path),
                host,
                port,
                is_intercepted: https,
            }),
            check_port,
            route: None,
            request_phase: Some(if https { Phase::Https } else { Phase::Http }),
            response_phase: Some(if https {
                Phase::HttpsResponse
            } else {
                Phase::HttpResponse
            }),
        }
    }
}

/// What request filters see besides the target.
#[derive(Debug, Default)]
pub(crate) struct RequestView {
    /// Request headers (lower-cased, trimmed, last duplicate wins).
    pub headers: BTreeMap<String, String>,
    /// A small request body.
    pub body: Option<String>,
}

/// What response filters see.
#[derive(Debug)]
pub(crate) struct ResponseView {
    /// Status code.
    pub status: u16,
    /// Response headers.
    pub headers: BTreeMap<String, String>,
}

/// A flow the checks let through.
pub(crate) struct Cleared {
    /// Who asked.
    pub principal: Principal,
    /// How the policy allowed it.
    pub allowed: Allowed,
    /// The one address that may be dialled.
    pub addr: SocketAddr,
    /// The principal's filters (also run on the response).
    pub filters: Vec<Arc<dyn NetworkFilter>>,
    /// The principal's provider credentials.
    pub credentials: Arc<[ProviderCredential]>,
    /// The allow record (holds the session slot; emitted when dropped).
    pub record: AllowRecord,
}

/// What the steps read from the proxy (or from a probe).
pub(crate) trait Env: Sync {
    /// Where records go.
    fn sink(&self) -> &Arc<dyn DecisionSink>;
    /// One of the session's slots, held as long as the flow; `None` at the cap.
    fn slot(&self, session: &Arc<str>) -> Option<SessionSlot>;
    /// The principal's filters, in order.
    fn filters(&self, principal: &Principal) -> Vec<Arc<dyn NetworkFilter>>;
    /// Time allowed to each filter.
    fn filter_timeout(&self) -> Duration;
    /// The principal's provider credentials.
    fn credentials(&self, principal: &Principal) -> Arc<[ProviderCredential]>;
    /// The SSRF floor for `host:port`.
    fn validate(
        &self,
        principal: &Principal,
        host: &str,
        port: u16,
    ) -> impl Future<Output = Result<SocketAddr, Denial>> + Send;
}

/// How a lane frames a flow.
pub(crate) trait Framing: Sized + Send {
    /// The lane's answer (an HTTP response, nothing for a socket the lane answers itself).
    type Answer;
    /// What `connect` hands to `relay`.
    type Upstream: Send;

    /// Who is asking (read in the lane's protocol, or known already).
    fn attribute(&mut self) -> impl Future<Output = Result<Principal, Denial>> + Send;

    /// Headers and body shown to request filters. A request that cannot be read is
    /// answered and not recorded (as a malformed request is).
    fn request_view(&mut self) -> impl Future<Output = Result<RequestView, Denial>> + Send {
        async { Ok(RequestView::default()) }
    }

    /// Swap provider phantoms for secrets; the provider that applied.
    fn credentials(
        &mut self,
        _creds: &[ProviderCredential],
        _target: &Target,
    ) -> Result<Option<String>, Denial> {
        Ok(None)
    }

    /// The address validated earlier for this flow (a tunnel's inner requests).
    fn validated(&self) -> Option<SocketAddr> {
        None
    }

    /// The flow runs on a session slot its connection already holds: one request at a time
    /// on an intercepted tunnel, which took its slot at CONNECT and keeps it while it runs.
    fn on_held_slot(&self) -> bool {
        false
    }

    /// Dial the validated address (or send the request to it).
    fn connect(
        &mut self,
        target: &Target,
        cleared: &Cleared,
    ) -> impl Future<Output = Result<Self::Upstream, Denial>> + Send;

    /// What response filters see of the upstream's answer.
    fn response_view(&self, _up: &Self::Upstream) -> Option<ResponseView> {
        None
    }

    /// Relay (or hand back) the upstream's answer. The flow's target is gone by then: the
    /// allow record holds the request's base alone and moves its strings when it is emitted.
    fn relay(
        self,
        up: Self::Upstream,
        cleared: Cleared,
    ) -> impl Future<Output = Self::Answer> + Send;

    /// Answer a refusal in the lane's protocol (the record is already taken care of).
    fn refuse(self, step: Step, denial: Denial) -> impl Future<Output = Self::Answer> + Send;
}

/// Run one flow through every step.
pub(crate) async fn run<E: Env, F: Framing>(env: &E, target: Target, mut lane: F) -> F::Answer {
    let principal = match lane.attribute().await {
        Ok(p) => p,
        Err(d) => return lane.refuse(Step::Attribute, d).await,
    };
    let sid = &*principal.session_id;
    let command = principal.label.clone();
    let record_denial = |d: &Denial| {
        emit_denial_of(
            env.sink().as_ref(),
            sid,
            command.as_deref(),
            &target.base,
            d,
        )
    };

    let slot = if lane.on_held_slot() {
        None
    } else {
        match env.slot(&principal.session_id) {
            Some(s) => Some(s),
            None => {
                let d = Denial::overloaded("per session");
                record_denial(&d);
                return lane.refuse(Step::Slot, d).await;
            }
        }
    };

    let verdict = match &target.route {
        Some(_) => Ok(Allowed {
            decider: DeciderKind::Credential,
            rule_host: None,
            would_deny: None,
        }),
        None => decide_or_learn(
            &principal.policy,
            DecideInput {
                method: target.base.method.as_deref(),
                host: &target.base.host,
                path: target.base.path.as_deref(),
                port: target.check_port,
            },
        ),
    };
    let allowed = match verdict {
        Ok(a) => a,
        Err(d) => {
            record_denial(&d);
            return lane.refuse(Step::Decide, d).await;
        }
    };

    let filters = env.filters(&principal);
    if let (Some(phase), false) = (target.request_phase, filters.is_empty()) {
        let view = match lane.request_view().await {
            Ok(v) => v,
            Err(d) => return lane.refuse(Step::RequestFilters, d).await,
        };
        let ctx = FilterCtx {
            phase,
            method: target.base.method.clone(),
            host: target.base.host.clone(),
            port: target.base.port,
            path: target.base.path.clone(),
            headers: view.headers,
            body: view.body,
            status: None,
        };
        if let Err(d) = run_filters(&filters, &ctx, env.filter_timeout()).await {
            let d = d.with_rule(allowed.rule_host.clone());
            record_denial(&d);
            return lane.refuse(Step::RequestFilters, d).await;
        }
    }

    let credentials = env.credentials(&principal);
    let mut provider = None;
    if !credentials.is_empty() {
        match lane.credentials(&credentials, &target) {
            Ok(p) => provider = p,
            Err(d) => {
                let d = d.with_rule(allowed.rule_host.clone());
                record_denial(&d);
                return lane.refuse(Step::Credentials, d).await;
            }
        }
    }
    if target.route.is_some() {
        provider = target.route.clone();
    }

    let addr = match lane.validated() {
        Some(a) => a,
        None => match env
            .validate(&principal, &target.base.host, target.base.port)
            .await
        {
            Ok(a) => a,
            Err(d) => {
                record_denial(&d);
                return lane.refuse(Step::Validate, d).await;
            }
        },
    };

    // set in place: the record is large, and a builder chain would move it at each step
    let mut record = AllowRecord::new(
        env.sink().clone(),
        principal.session_id.clone(),
        Arc::clone(&target.base),
        allowed.decider,
        allowed.rule_host.clone(),
    );
    record
        .set_provider(provider)
        .set_would_deny(allowed.would_deny.clone())
        .set_command(command.as_deref());
    if let Some(slot) = slot {
        record.hold(slot);
    }
    let cleared = Cleared {
        principal,
        allowed,
        addr,
        filters,
        credentials,
        record,
    };
    let up = match lane.connect(&target, &cleared).await {
        Ok(up) => up,
        Err(d) => {
            if d.is_failure() {
                cleared.record.fail_with(&d);
            } else {
                cleared.record.cancel();
                emit_denial_of(
                    env.sink().as_ref(),
                    &cleared.principal.session_id,
                    command.as_deref(),
                    &target.base,
                    &d,
                );
            }
            return lane.refuse(Step::Connect, d).await;
        }
    };

    if let (Some(phase), false) = (target.response_phase, cleared.filters.is_empty()) {
        if let Some(view) = lane.response_view(&up) {
            let ctx = FilterCtx {
                phase,
                method: target.base.method.clone(),
                host: target.base.host.clone(),
                port: target.base.port,
                path: target.base.path.clone(),
                headers: view.headers,
                body: None,
                status: Some(view.status),
            };
            if let Err(d) = run_filters(&cleared.filters, &ctx, env.filter_timeout()).await {
                cleared.record.cancel();
                let mut base = RecordBase::clone(&target.base);
                base.phase = phase.as_str();
                emit_denial_of(
                    env.sink().as_ref(),
                    &cleared.principal.session_id,
                    command.as_deref(),
                    &base,
                    &d,
                );
                drop(up);
                return lane.refuse(Step::ResponseFilters, d).await;
            }
        }
    }

    drop(target);
    lane.relay(up, cleared).await
}

impl Env for Arc<Shared> {
    fn sink(&self) -> &Arc<dyn DecisionSink> {
        &self.svc.sink
    }

    fn slot(&self, session: &Arc<str>) -> Option<SessionSlot> {
        self.session_slot(session)
    }

    fn filters(&self, principal: &Principal) -> Vec<Arc<dyn NetworkFilter>> {
        self.svc.filters.filters(principal)
    }

    fn filter_timeout(&self) -> Duration {
        self.cfg.filter_timeout
    }

    fn credentials(&self, principal: &Principal) -> Arc<[ProviderCredential]> {
        self.svc.credentials.credentials(principal)
    }

    async fn validate(
        &self,
        principal: &Principal,
        host: &str,
        port: u16,
    ) -> Result<SocketAddr, Denial> {
        validate_with(
            self.svc.resolver.as_ref(),
            Some((&self.denied_cache, self.cfg.denied_name_ttl)),
            Some(self.own_port),
            principal,
            host,
            port,
        )
        .await
    }
}
