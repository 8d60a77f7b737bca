//! The extensions' op hooks around the steps of the draft lifecycle (`draft/create`,
//! `draft/approve`, `draft/discard` and the git ops inside them): the one place the
//! workspaces call the extension host's hooks.

use crate::drafts::Hooks;
use crate::extensions::{ExtensionHost, SessionCtx};
use serde_json::Value;

/// The extensions' op hooks of one session.
pub struct SessionHooks {
    host: ExtensionHost,
    session: SessionCtx,
}

impl SessionHooks {
    pub fn new(host: ExtensionHost, session: SessionCtx) -> SessionHooks {
        SessionHooks { host, session }
    }
}

#[async_trait::async_trait]
impl Hooks for SessionHooks {
    async fn before(&self, op: &str, args: &Value) -> Result<(), String> {
        self.host
            .tools()
            .before_hooks(&self.session, op, std::slice::from_ref(args))
            .await
            .map_err(|e| e.message)
    }
    async fn after(&self, op: &str, args: &Value, result: &str) {
        self.host
            .tools()
            .after_hooks(&self.session, op, std::slice::from_ref(args), result)
            .await
    }
}
