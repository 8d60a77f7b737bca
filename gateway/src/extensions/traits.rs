//! The traits the gateway implements for the host: state, events, human-facing doors.

use super::{client, SessionCtx};
use async_trait::async_trait;
#[cfg(test)]
use parking_lot::Mutex;
use serde_json::Value;
#[cfg(test)]
use std::collections::BTreeMap;
use std::sync::Arc;

/// Durable extension state (docs/decisions.md, E6), keyed by extension NAME. Values are JSON data;
/// `put` is never called with `Value::Null` (writing `None` in Python deletes). The worker
/// blocks while these run; implementations may do blocking database work inside
/// `spawn_blocking`.
#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    async fn get(&self, extension: &str, key: &str) -> anyhow::Result<Option<Value>>;
    async fn put(&self, extension: &str, key: &str, value: Value) -> anyhow::Result<()>;
    /// Deleting an absent key is not an error.
    async fn delete(&self, extension: &str, key: &str) -> anyhow::Result<()>;
    /// Keys of one extension (any order; the SDK sorts).
    async fn keys(&self, extension: &str) -> anyhow::Result<Vec<String>>;
}

/// Where `vis.notify` and `publish_activity` go. Called from async tasks: do not block.
pub trait HostEvents: Send + Sync + 'static {
    /// A toast (`level`: info, success, warn, error). `session_id` is `None` for calls made
    /// outside a session (registration worker).
    fn notify(&self, session_id: Option<&str>, extension: &str, text: &str, level: &str);
    /// Replace the running tool's activity presentation (wire form). `true` when shown.
    fn activity(&self, session_id: Option<&str>, extension: &str, presentation: Value) -> bool;
}

/// The worker that called a human-facing door, as that door sees it.
#[async_trait]
pub trait DoorWorker: Send + Sync + 'static {
    /// Calls a Python callable that crossed in the door payload (its wire form
    /// `{"__vis_callback__": name, "id": …}`) with `args`, as a nested request served while
    /// the door is pending. Errors are messages.
    async fn callback(&self, callable: &Value, args: Vec<Value>) -> Result<Value, String>;
    /// `false` once the worker process has ended (its call was abandoned, timed out or the
    /// session was disposed): nobody is waiting for the door's answer any more.
    fn is_alive(&self) -> bool;
    /// While the returned guard lives, the request the door serves does not time out (a
    /// human is answering).
    fn hold(&self) -> Box<dyn Send + Sync>;
}

/// The doors that reach the human or the session's sandbox: `request_input` (`vis.ask`),
/// `live`, `reveal_secret` / `forget_secret` and the shell family. The gateway implements
/// it; the tests' `NoHumanDoors` answers "not available".
#[async_trait]
pub trait HumanDoors: Send + Sync + 'static {
    /// `vis.ask`: the door payload (`request`, `validators`, `run_validator`); answers
    /// `{status, values, request_id, reason}`.
    async fn request_input(
        &self,
        session: Option<&SessionCtx>,
        extension: &str,
        payload: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError>;
    /// `vis.live`: one envelope (`op`: open, patch, state, close).
    async fn live(
        &self,
        session: Option<&SessionCtx>,
        extension: &str,
        envelope: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError>;
    /// `shell`, `jailed_shell` or `jailed_shell_session` (`door`) with the SDK's `opts`;
    /// answers a shell record.
    async fn shell(
        &self,
        door: &str,
        session: Option<&SessionCtx>,
        extension: &str,
        opts: Value,
        worker: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError>;
    /// Plaintext of a `vis-secret:` handle, `None` when unknown.
    fn reveal_secret(&self, session_id: Option<&str>, handle: &str) -> Option<String>;
    /// Drops a handle; `true` when it existed.
    fn forget_secret(&self, session_id: Option<&str>, handle: &str) -> bool;
    /// The session is being disposed (`host.sessions().stop(..)`): settle its forms,
    /// close its views, stop its children, drop its secrets.
    fn session_disposed(&self, _session_id: &str) {}
}

/// [`HumanDoors`] of a host without a gateway behind it: every door answers
/// "`<op>` is not available in this gateway build yet".
#[cfg(test)]
#[derive(Default)]
pub struct NoHumanDoors;

#[cfg(test)]
fn not_available(op: &str) -> client::DoorError {
    client::DoorError::typed(
        "NotImplementedError",
        format!("{op} is not available in this gateway build yet"),
    )
}

#[cfg(test)]
#[async_trait]
impl HumanDoors for NoHumanDoors {
    async fn request_input(
        &self,
        _: Option<&SessionCtx>,
        _: &str,
        _: Value,
        _: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError> {
        Err(not_available("request_input"))
    }
    async fn live(
        &self,
        _: Option<&SessionCtx>,
        _: &str,
        _: Value,
        _: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError> {
        Err(not_available("live"))
    }
    async fn shell(
        &self,
        door: &str,
        _: Option<&SessionCtx>,
        _: &str,
        _: Value,
        _: Arc<dyn DoorWorker>,
    ) -> Result<Value, client::DoorError> {
        Err(not_available(door))
    }
    fn reveal_secret(&self, _: Option<&str>, _: &str) -> Option<String> {
        None
    }
    fn forget_secret(&self, _: Option<&str>, _: &str) -> bool {
        false
    }
}

/// An in-memory [`StateStore`] (tests).
#[cfg(test)]
#[derive(Default)]
pub struct MemoryState {
    map: Mutex<BTreeMap<(String, String), Value>>,
}

#[cfg(test)]
#[async_trait]
impl StateStore for MemoryState {
    async fn get(&self, extension: &str, key: &str) -> anyhow::Result<Option<Value>> {
        Ok(self
            .map
            .lock()
            .get(&(extension.to_string(), key.to_string()))
            .cloned())
    }
    async fn put(&self, extension: &str, key: &str, value: Value) -> anyhow::Result<()> {
        self.map
            .lock()
            .insert((extension.to_string(), key.to_string()), value);
        Ok(())
    }
    async fn delete(&self, extension: &str, key: &str) -> anyhow::Result<()> {
        self.map
            .lock()
            .remove(&(extension.to_string(), key.to_string()));
        Ok(())
    }
    async fn keys(&self, extension: &str) -> anyhow::Result<Vec<String>> {
        Ok(self
            .map
            .lock()
            .keys()
            .filter(|(e, _)| e == extension)
            .map(|(_, k)| k.clone())
            .collect())
    }
}
