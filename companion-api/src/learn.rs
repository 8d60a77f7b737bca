//! Learn mode (docs/decisions.md, L1): the network policy proposed from what a session (or a
//! project) really did, its review and application, the per-session mode switch and the
//! "suggested additions" view of enforce-mode denials. The wire records and the trait the
//! `/v1/…/egress/…` learn routes call.

use crate::error::ApiResult;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Why a rule is proposed: the requests it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// Requests seen (folded records count every request they hold).
    pub requests: u64,
    /// Of those, how many the policy in force would have denied (learn mode let them through,
    /// or, in the suggested-additions view, enforcement denied them).
    pub would_deny: u64,
    /// First and last request, epoch milliseconds.
    pub first_seen: u64,
    pub last_seen: u64,
    /// The programs that made them (when their proxy token named one), sorted.
    pub commands: Vec<String>,
    /// The hosts the rule covers, sorted.
    pub hosts: Vec<String>,
}

/// One rule of a proposal, structured: what the YAML says about one host pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposedRule {
    /// Stable id within the proposal (the host pattern).
    pub id: String,
    /// The `allowed_domains` entry and the rule's `host`: an exact host, or `*.domain` when
    /// several subdomains of one registrable domain were seen.
    pub host: String,
    /// Ports seen (the rule's `ports`).
    pub ports: Vec<u16>,
    /// Methods seen, sorted; empty when none were visible (opaque tunnels, SOCKS).
    pub methods: Vec<String>,
    /// Only GET / HEAD / OPTIONS were used.
    pub read_only: bool,
    /// Every request was under this path prefix (the rule allows `<prefix>/*` only).
    pub path_prefix: Option<String>,
    /// The policy in force already allowed all of it (nothing would have been denied).
    pub already_allowed: bool,
    pub evidence: Evidence,
}

/// `GET /v1/sessions/:sid/egress/proposal`, `GET /v1/egress/proposal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressProposal {
    /// `session` or `project`.
    pub scope: String,
    pub session_id: Option<String>,
    /// The project whose `vis.yml` the proposal is for.
    pub root: String,
    /// The mode in force (`learn` or `enforce`).
    pub mode: String,
    /// A complete `jail:` block in the project's own syntax, `mode: enforce`.
    pub yaml: String,
    pub rules: Vec<ProposedRule>,
}

/// `POST /v1/sessions/:sid/egress/proposal/apply`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyProposal {
    /// Rule ids (host patterns) of the session's proposal to write into `vis.yml`.
    #[serde(default)]
    pub rules: Vec<String>,
    /// Also switch the project to `mode: enforce`.
    #[serde(default)]
    pub enforce: bool,
    /// Who applies (recorded); defaults to `api`.
    #[serde(default)]
    pub applied_by: Option<String>,
}

/// A change written into a project's `vis.yml` (who applied what).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyChange {
    pub id: i64,
    pub root: String,
    /// The file edited.
    pub file: String,
    pub session_id: Option<String>,
    pub applied_by: String,
    /// Epoch milliseconds.
    pub applied_at: i64,
    /// The rules written, as proposed.
    pub rules: Vec<ProposedRule>,
    /// `enforce` when the change switched the mode on.
    pub mode: Option<String>,
}

/// `GET /v1/egress/policy-changes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyChanges {
    pub changes: Vec<PolicyChange>,
}

/// `POST /v1/sessions/:sid/egress/proposal/review`: the form opened on the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewOpened {
    pub request_id: String,
    pub rules: usize,
}

/// `GET|PUT /v1/sessions/:sid/egress/mode`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressMode {
    pub session_id: String,
    /// The mode in force for the session's traffic.
    pub mode: String,
    /// The project's `jail.network.mode` (`enforce` when unset).
    pub project_mode: String,
    /// The session's own switch, when set from the phone.
    pub session_override: Option<String>,
}

/// `PUT /v1/sessions/:sid/egress/mode` body: `learn`, `enforce`, or `null` (follow the project).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetEgressMode {
    pub mode: Option<String>,
}

/// `GET /v1/sessions/:sid/egress/suggested`: enforce-mode denials a proposal would have
/// allowed, grouped by the rule that would allow them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuggestedAdditions {
    pub scope: String,
    pub session_id: Option<String>,
    pub root: String,
    /// Denials grouped here.
    pub denials: u64,
    pub rules: Vec<ProposedRule>,
}

/// The learn-mode routes' view of the gateway.
#[async_trait]
pub trait LearnApi: Send + Sync {
    /// The proposal from one session's egress (`project`: from every session of its project).
    async fn session_proposal(&self, sid: &str, project: bool) -> ApiResult<EgressProposal>;
    /// The proposal from every session of a project (`None`: the gateway's default root).
    async fn project_proposal(&self, root: Option<String>) -> ApiResult<EgressProposal>;
    /// Writes the chosen rules of the session's proposal into its project's `vis.yml`.
    async fn apply(&self, sid: &str, req: ApplyProposal) -> ApiResult<PolicyChange>;
    /// Opens the review form on the session; its answer is applied.
    async fn review(&self, sid: &str) -> ApiResult<ReviewOpened>;
    async fn mode(&self, sid: &str) -> ApiResult<EgressMode>;
    async fn set_mode(&self, sid: &str, req: SetEgressMode) -> ApiResult<EgressMode>;
    async fn suggested(&self, sid: &str, project: bool) -> ApiResult<SuggestedAdditions>;
    async fn changes(&self, root: Option<String>) -> ApiResult<PolicyChanges>;
}
