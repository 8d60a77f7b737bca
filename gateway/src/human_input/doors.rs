//! The host's door implementation: [`HumanDoors`] for [`HumanInput`], forwarding to the
//! forms, live-view, shell and secret parts.

use super::HumanInput;
use crate::extensions::client::DoorError;
use crate::extensions::{DoorWorker, HumanDoors, SessionCtx};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;

#[async_trait]
impl HumanDoors for HumanInput {
    async fn request_input(
        &self,
        session: Option<&SessionCtx>,
        extension: &str,
        payload: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        let Some(session) = session else {
            return Err(DoorError::new(
                "vis.ask is available only while handling a session (a tool, slash command \
                 or hook call)",
            ));
        };
        self.ask(session, extension, payload, worker).await
    }

    async fn live(
        &self,
        session: Option<&SessionCtx>,
        extension: &str,
        envelope: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        self.live_door(session, extension, envelope, worker).await
    }

    async fn shell(
        &self,
        door: &str,
        session: Option<&SessionCtx>,
        extension: &str,
        opts: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, DoorError> {
        self.shell_door(door, session, extension, opts, worker)
            .await
    }

    fn reveal_secret(&self, session_id: Option<&str>, handle: &str) -> Option<String> {
        self.reveal(session_id, handle)
    }

    fn forget_secret(&self, session_id: Option<&str>, handle: &str) -> bool {
        self.forget(session_id, handle)
    }

    fn session_disposed(&self, session_id: &str) {
        self.drop_session(session_id);
    }
}
