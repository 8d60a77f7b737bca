//! The control channel between the gateway and a sandbox runtime (`runtime.py`): one JSON
//! object per line over the runtime's stdin/stdout (a Unix socket pair), typed on this side.
//!
//! Gateway → runtime: `run` (one block, with the function table of the block's namespace)
//! and `reply` (the answer to a host call). Runtime → gateway: `ready` once, `call` for each
//! host function the block calls (several may be outstanding), `done` when the block ends.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How a function of the block's namespace is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FnKind {
    /// A synchronous host function (`cat`, `grep`, `patch`, `ls`, `shell`, `apropos`, `doc`).
    Builtin,
    /// An extension Symbol: an async function at its dotted name.
    Symbol,
    /// A tool of an MCP server: an async function under the server's name.
    Mcp,
    /// A name offered without functions (an MCP server waiting for a sign-in): any use
    /// raises `PermissionError` with the entry's doc.
    Unavailable,
}

/// One function of the block's namespace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FnEntry {
    pub name: String,
    pub kind: FnKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
}

impl FnEntry {
    pub fn builtin(name: &str) -> FnEntry {
        FnEntry {
            name: name.to_string(),
            kind: FnKind::Builtin,
            contract: None,
            doc: None,
        }
    }
}

pub use crate::tools::CallError;

/// One top-level `def` or `class` the model ran: its name and its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Def {
    pub name: String,
    pub source: String,
}

/// The result half of a `reply`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Ok(Value),
    Error(CallError),
}

#[derive(Debug, Serialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ToRuntime<'a> {
    Run {
        id: u64,
        code: &'a str,
        functions: &'a [FnEntry],
        /// Sources to run first, in a fresh runtime (the model's functions and classes).
        #[serde(skip_serializing_if = "<[Def]>::is_empty")]
        restore: &'a [Def],
    },
    Reply {
        id: u64,
        #[serde(flatten)]
        answer: Answer,
    },
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum FromRuntime {
    Ready {
        pid: u32,
        #[serde(default)]
        python: String,
    },
    Call {
        id: u64,
        #[serde(default)]
        run: u64,
        #[serde(rename = "fn")]
        func: String,
        #[serde(default)]
        args: Map<String, Value>,
    },
    Done {
        id: u64,
        #[serde(default)]
        output: String,
        #[serde(default)]
        output_bytes: u64,
        #[serde(default)]
        error: Option<String>,
        /// The model's definitions now, when they changed in this block.
        #[serde(default)]
        defs: Option<Vec<Def>>,
        /// Restored definitions that failed to run again (`name: error`).
        #[serde(default)]
        restore_failed: Vec<String>,
    },
}

/// One line of the channel (with its newline).
pub fn line(msg: &ToRuntime<'_>) -> Vec<u8> {
    // A message of strings, numbers and JSON values always serializes.
    let mut v = serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec());
    v.push(b'\n');
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reply_carries_either_ok_or_error_beside_its_id() {
        let ok = ToRuntime::Reply {
            id: 7,
            answer: Answer::Ok(json!("text")),
        };
        let v: Value = serde_json::from_slice(&line(&ok)).unwrap();
        assert_eq!(v, json!({"t": "reply", "id": 7, "ok": "text"}));
        let err = ToRuntime::Reply {
            id: 8,
            answer: Answer::Error(CallError::permission("no")),
        };
        let v: Value = serde_json::from_slice(&line(&err)).unwrap();
        assert_eq!(
            v,
            json!({"t": "reply", "id": 8, "error": {"type": "PermissionError", "message": "no"}})
        );
    }

    #[test]
    fn runtime_messages_parse_by_their_tag() {
        let call: FromRuntime =
            serde_json::from_str(r#"{"t":"call","id":3,"run":1,"fn":"cat","args":{"path":"a"}}"#)
                .unwrap();
        assert!(matches!(call, FromRuntime::Call { ref func, .. } if func == "cat"));
        let done: FromRuntime = serde_json::from_str(
            r#"{"t":"done","id":1,"output":"1\n","output_bytes":2,"error":null}"#,
        )
        .unwrap();
        assert_eq!(
            done,
            FromRuntime::Done {
                id: 1,
                output: "1\n".into(),
                output_bytes: 2,
                error: None,
                defs: None,
                restore_failed: vec![],
            }
        );
    }
}
