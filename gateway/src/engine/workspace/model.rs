//! The draft functions of the model's tools (`draft_create`, `draft_approve`,
//! `draft_discard`): answered by the workspaces, for the Python sandbox's built-ins and as
//! tools of the `model_tools: functions` mode.

use super::Workspaces;
use crate::drafts::{DraftError, SessionDrafts};
use crate::tools::Tool;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::{Arc, Weak};

impl Workspaces {
    /// Handle given to the model's tools. It holds the workspaces weakly: a tool that
    /// outlives the gateway answers that it is stopping rather than keeping it alive.
    pub fn model_drafts(self: &Arc<Self>) -> Arc<dyn SessionDrafts> {
        Arc::new(ModelDrafts(Arc::downgrade(self)))
    }

    /// The draft functions as tools of the `model_tools: functions` mode.
    pub fn draft_tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        let drafts = self.model_drafts();
        crate::drafts::FUNCTIONS
            .iter()
            .map(|f| {
                Arc::new(DraftTool {
                    name: f,
                    drafts: drafts.clone(),
                }) as Arc<dyn Tool>
            })
            .collect()
    }
}

/// The draft functions of the model's tools, answered by the workspaces.
struct ModelDrafts(Weak<Workspaces>);

#[async_trait::async_trait]
impl SessionDrafts for ModelDrafts {
    fn root(&self, sid: &str) -> Option<PathBuf> {
        self.0.upgrade()?.drafts.root_of(sid)
    }

    async fn call(
        &self,
        sid: &str,
        func: &str,
        args: &Map<String, Value>,
    ) -> Result<Value, DraftError> {
        let ws = self
            .0
            .upgrade()
            .ok_or_else(|| DraftError::failed("the gateway is stopping"))?;
        let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
        let (change, extra) = match func {
            "draft_create" => {
                let label = text("label").unwrap_or_default();
                (ws.create(sid, &label, false).await?, json!({}))
            }
            "draft_approve" => {
                let (c, a) = ws.approve_by_model(sid, text("message").as_deref()).await?;
                (c, json!({"files": a.files, "commit": a.commit}))
            }
            "draft_discard" => (
                ws.abandon(sid, None, text("reason").as_deref()).await?,
                json!({}),
            ),
            other => return Err(DraftError::failed(format!("no draft function {other}"))),
        };
        let mut out = json!({"workspace": change.workspace, "draft": change.draft,
            "cwd": change.workspace.root});
        if let (Some(o), Value::Object(e)) = (out.as_object_mut(), extra) {
            o.extend(e);
        }
        Ok(out)
    }
}

/// A draft function as a tool of the `model_tools: functions` mode.
struct DraftTool {
    name: &'static str,
    drafts: Arc<dyn SessionDrafts>,
}

#[async_trait::async_trait]
impl Tool for DraftTool {
    fn spec(&self) -> vis_providers::ToolSpec {
        let (description, params) = match self.name {
            "draft_create" => (
                "Create an isolated draft workspace (a copy of the project) and move this session into it; later commands and edits change only the draft until draft_approve.",
                json!({"label": {"type": "string", "description": "the draft's name: letters, digits, . _ -"}}),
            ),
            "draft_approve" => (
                "Ask the user to land the current draft's changes in the real project (git: one commit on the branch it came from) and return to it; the user may decline.",
                json!({"message": {"type": "string", "description": "the commit message"}}),
            ),
            _ => (
                "Discard the current draft for good and return to the real project.",
                json!({}),
            ),
        };
        let required: Vec<&str> = if self.name == "draft_create" {
            vec!["label"]
        } else {
            vec![]
        };
        vis_providers::ToolSpec {
            name: self.name.into(),
            description: description.into(),
            parameters: json!({"type": "object", "properties": params, "required": required}),
        }
    }

    async fn call(&self, ctx: &crate::tools::ToolCtx, args: Value) -> crate::tools::ToolOutput {
        let args = match args {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        match self.drafts.call(&ctx.session_id, self.name, &args).await {
            Ok(v) => crate::tools::ToolOutput::ok(v.to_string()),
            Err(e) => crate::tools::ToolOutput::fail(e.to_string()),
        }
    }
}
