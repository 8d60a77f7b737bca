//! The learn-mode answers over the gateway (docs/decisions.md, L1): proposals of a session or
//! a project, the review form on the phone, applying rules to `vis.yml`, the session's own
//! mode switch and the suggested additions. `crate::learn` does the work; this adapter finds
//! the session's project and reaches the human-input forms.

use crate::engine::Gateway;
use crate::extensions::{DoorWorker, HumanDoors, SessionCtx};
use crate::human_input::HumanInput;
use crate::learn::rows::Scope;
use crate::learn::Learn;
use crate::learn::{parse_mode, LearnError};
use async_trait::async_trait;
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use vis_companion_api::learn::*;
use vis_companion_api::{ApiError, ApiResult};

pub struct LearnRoutes(pub Arc<Gateway>);

/// The configuration job as learn mode's view of the projects.
pub struct ConfigurationProjects(pub Arc<crate::configuration::Configuration>);

#[async_trait]
impl crate::learn::Projects for ConfigurationProjects {
    async fn project(&self, root: &std::path::Path) -> Result<crate::config::Config, String> {
        self.0.project(root).await
    }
    async fn reload(&self, root: &std::path::Path) -> Result<(), String> {
        self.0.reload(root).await.map(|_| ())
    }
}

fn api_error(e: LearnError) -> ApiError {
    match e {
        LearnError::Invalid(m) => ApiError::bad_request("invalid-request", m),
        LearnError::Conflict(m) => ApiError::conflict("policy-not-editable", m),
        LearnError::Failed(m) => ApiError::engine(m),
    }
}

/// The form's source, so its request can be found right after it opens.
const FORM_SOURCE: &str = "vis.net-policy";

/// The review form's worker: the gateway itself, alive as long as the gateway is.
struct GatewayAsker;

#[async_trait]
impl DoorWorker for GatewayAsker {
    async fn callback(&self, _: &Value, _: Vec<Value>) -> Result<Value, String> {
        Err("the review form has no custom validators".into())
    }
    fn is_alive(&self) -> bool {
        true
    }
    fn hold(&self) -> Box<dyn Send + Sync> {
        Box::new(())
    }
}

impl LearnRoutes {
    async fn root_of(&self, sid: &str) -> ApiResult<PathBuf> {
        let shared = self.0.sessions.get(sid).await?;
        let root = shared.lock().row.root.clone();
        Ok(PathBuf::from(root))
    }

    fn default_root(&self, root: Option<String>) -> PathBuf {
        root.filter(|r| !r.trim().is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| self.0.default_root.clone())
    }

    /// The review form of a proposal: every rule a checkbox option (those that would be
    /// denied now ticked), and the switch to `mode: enforce`.
    pub fn form(p: &EgressProposal) -> Value {
        let options: Vec<Value> = p
            .rules
            .iter()
            .map(|r| json!({"value": r.id, "label": crate::learn::describe(std::slice::from_ref(r)).trim_start_matches("- ").trim_end()}))
            .collect();
        let ticked: Vec<&str> = p
            .rules
            .iter()
            .filter(|r| !r.already_allowed)
            .map(|r| r.id.as_str())
            .collect();
        json!({"request": {
            "title": "Network policy from what this session did",
            "description": format!("Tick the rules to write into {}/vis.yml. The proposal in full:\n\n```yaml\n{}```", p.root, p.yaml),
            "source": FORM_SOURCE,
            "submit_label": "Apply",
            "timeout_ms": 0,
            "fields": [
                {"type": "multiselect", "name": "rules", "label": "Rules", "options": options, "default": ticked},
                {"type": "checkbox", "name": "enforce", "label": format!("Switch to mode: enforce (now: {})", p.mode), "default": false},
            ],
        }})
    }

    /// The rules of `p` named by `ids` (400 naming the unknown ones).
    fn pick(p: &EgressProposal, ids: &[String]) -> ApiResult<Vec<ProposedRule>> {
        let unknown: Vec<&String> = ids
            .iter()
            .filter(|id| !p.rules.iter().any(|r| &r.id == *id))
            .collect();
        if !unknown.is_empty() {
            return Err(ApiError::bad_request(
                "unknown-rule",
                format!("not rules of the current proposal: {unknown:?}"),
            ));
        }
        Ok(p.rules
            .iter()
            .filter(|r| ids.contains(&r.id))
            .cloned()
            .collect())
    }

    /// Opens the review form and waits for it; applies what the user ticked. Answers what
    /// was applied (`None` when the form was cancelled or timed out).
    pub async fn review_and_apply(
        human: Arc<HumanInput>,
        learn: Arc<Learn>,
        sid: String,
        root: PathBuf,
        p: EgressProposal,
    ) -> Result<Option<PolicyChange>, String> {
        let session = SessionCtx {
            id: sid.clone(),
            project_root: Some(root.clone()),
            workspace_root: root.clone(),
        };
        let answer = human
            .request_input(
                Some(&session),
                FORM_SOURCE,
                Self::form(&p),
                Arc::new(GatewayAsker),
            )
            .await
            .map_err(|e| e.message)?;
        if answer["status"] != "submitted" {
            return Ok(None);
        }
        let ids: Vec<String> = answer["values"]["rules"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let enforce = answer["values"]["enforce"].as_bool().unwrap_or(false);
        let chosen = Self::pick(&p, &ids).map_err(|e| e.to_string())?;
        let by = format!("the review form of session {sid}");
        learn
            .apply(&root, Some(&sid), chosen, enforce, &by)
            .await
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl LearnApi for LearnRoutes {
    async fn session_proposal(&self, sid: &str, project: bool) -> ApiResult<EgressProposal> {
        let root = self.root_of(sid).await?;
        let scope = if project {
            Scope::Project(root.to_string_lossy().into_owned())
        } else {
            Scope::Session(sid.to_string())
        };
        self.0
            .learn
            .proposal(scope, &root, Some(sid))
            .await
            .map_err(api_error)
    }

    async fn project_proposal(&self, root: Option<String>) -> ApiResult<EgressProposal> {
        let root = self.default_root(root);
        let scope = Scope::Project(root.to_string_lossy().into_owned());
        self.0
            .learn
            .proposal(scope, &root, None)
            .await
            .map_err(api_error)
    }

    async fn apply(&self, sid: &str, req: ApplyProposal) -> ApiResult<PolicyChange> {
        let root = self.root_of(sid).await?;
        let p = self
            .0
            .learn
            .proposal(Scope::Session(sid.to_string()), &root, Some(sid))
            .await
            .map_err(api_error)?;
        let chosen = Self::pick(&p, &req.rules)?;
        let by = req.applied_by.unwrap_or_else(|| "api".into());
        self.0
            .learn
            .apply(&root, Some(sid), chosen, req.enforce, &by)
            .await
            .map_err(api_error)
    }

    async fn review(&self, sid: &str) -> ApiResult<ReviewOpened> {
        let root = self.root_of(sid).await?;
        let p = self
            .0
            .learn
            .proposal(Scope::Session(sid.to_string()), &root, Some(sid))
            .await
            .map_err(api_error)?;
        let before: Vec<Value> = self.0.human_input.list(sid).requests;
        let rules = p.rules.len();
        let (human, learn, id) = (
            self.0.human_input.clone(),
            self.0.learn.clone(),
            sid.to_string(),
        );
        tokio::spawn(async move {
            if let Err(e) = LearnRoutes::review_and_apply(human, learn, id.clone(), root, p).await {
                tracing::warn!(session = %id, error = %e, "the network policy review failed");
            }
        });
        // the form is registered at once; find its id
        for _ in 0..100 {
            let now = self.0.human_input.list(sid).requests;
            if let Some(r) = now
                .iter()
                .find(|r| r["source"] == FORM_SOURCE && !before.contains(r))
            {
                return Ok(ReviewOpened {
                    request_id: r["id"].as_str().unwrap_or_default().to_string(),
                    rules,
                });
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "review-unavailable",
            "the review form did not open",
        ))
    }

    async fn mode(&self, sid: &str) -> ApiResult<EgressMode> {
        let root = self.root_of(sid).await?;
        self.0.learn.mode(sid, &root).await.map_err(api_error)
    }

    async fn set_mode(&self, sid: &str, req: SetEgressMode) -> ApiResult<EgressMode> {
        let root = self.root_of(sid).await?;
        let mode = match req.mode.as_deref() {
            Some(m) => Some(parse_mode(m).map_err(api_error)?),
            None => None,
        };
        self.0
            .learn
            .set_mode(sid, &root, mode)
            .await
            .map_err(api_error)
    }

    async fn suggested(&self, sid: &str, project: bool) -> ApiResult<SuggestedAdditions> {
        let root = self.root_of(sid).await?;
        let scope = if project {
            Scope::Project(root.to_string_lossy().into_owned())
        } else {
            Scope::Session(sid.to_string())
        };
        self.0
            .learn
            .suggested(scope, &root)
            .await
            .map_err(api_error)
    }

    async fn changes(&self, root: Option<String>) -> ApiResult<PolicyChanges> {
        let root = self.default_root(root);
        Ok(PolicyChanges {
            changes: self.0.learn.changes(&root).await.map_err(api_error)?,
        })
    }
}
