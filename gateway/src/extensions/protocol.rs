//! Gateway ↔ worker messages: one JSON object per line over the worker's stdin/stdout.
//!
//! * gateway → worker: [`Msg::Request`] (`load`, `unload`, `call_tool`, `run_slash`,
//!   `run_hook`, `provider`, `turn`, `ping`, `shutdown`) and
//!   [`Msg::DoorReply`];
//! * worker → gateway: [`Msg::Response`] to a request and [`Msg::Door`], a host-door call
//!   made by extension code (`state_get`, `log`, `fs_read`, …). `on` names the request the
//!   worker was serving when the door was called (absent for calls from background threads).
//!
//! Bytes cross as `{"__vis_bytes__": "<base64>"}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A Python exception (or a host failure) as it crosses the boundary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// Python class name (`ValueError`), or a host kind (`Timeout`, `WorkerExited`).
    #[serde(rename = "type", default)]
    pub kind: String,
    /// `ClassName: message`.
    #[serde(default)]
    pub message: String,
    /// Formatted Python traceback, when there is one.
    #[serde(default)]
    pub traceback: Option<String>,
}

impl WireError {
    pub fn host(kind: &str, message: impl Into<String>) -> WireError {
        WireError {
            kind: kind.to_string(),
            message: message.into(),
            traceback: None,
        }
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Msg {
    Request {
        id: u64,
        op: String,
        #[serde(default)]
        payload: Value,
    },
    Response {
        id: u64,
        ok: bool,
        #[serde(default)]
        value: Value,
        #[serde(default)]
        error: Option<WireError>,
        /// The worker must be replaced after this answer (`sys.exit` in extension code).
        #[serde(default)]
        restart: bool,
    },
    Door {
        id: u64,
        #[serde(default)]
        on: Option<u64>,
        op: String,
        #[serde(default)]
        payload: Value,
    },
    DoorReply {
        id: u64,
        ok: bool,
        #[serde(default)]
        value: Value,
        /// Message of a failed door; raised in Python as `error_type`.
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        error_type: Option<String>,
    },
}

impl Msg {
    /// One line (no trailing newline).
    pub fn to_line(&self) -> String {
        // Serializing a Msg (strings, numbers, serde_json values) cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                r#"{{"t":"invalid","error":{}}}"#,
                Value::String(e.to_string())
            )
        })
    }

    pub fn parse(line: &str) -> Result<Msg, serde_json::Error> {
        serde_json::from_str(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_round_trips_through_one_line() {
        let m = Msg::Response {
            id: 7,
            ok: false,
            value: Value::Null,
            error: Some(WireError {
                kind: "ValueError".into(),
                message: "ValueError: x".into(),
                traceback: Some("Traceback…".into()),
            }),
            restart: false,
        };
        let line = m.to_line();
        assert!(!line.contains('\n'));
        match Msg::parse(&line).expect("parse") {
            Msg::Response { id, error, .. } => {
                assert_eq!(id, 7);
                assert_eq!(error.map(|e| e.kind), Some("ValueError".to_string()));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
