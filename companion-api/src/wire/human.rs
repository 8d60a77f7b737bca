//! Human input (forms a tool asks a person to fill) and live views.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `GET …/human-input`: pending requests, oldest first (each a form as its extension
/// described it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HumanInputList {
    pub requests: Vec<Value>,
}

/// `POST …/human-input/:rid`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HumanInputSubmitted {
    pub is_accepted: bool,
    pub request_id: String,
    /// Why an answer was not taken (the request was already settled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Per-field messages when the values did not validate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Map<String, Value>>,
}

/// `POST …/human-input/:rid/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HumanInputCancelled {
    pub is_cancelled: bool,
    pub request_id: String,
}

/// `GET …/live`: the session's open views (each a node tree as its extension built it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveViews {
    pub views: Vec<Value>,
}

/// `GET …/live/:vid/log/:nid`: a window of a log node's lines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveLog {
    pub node_id: String,
    pub from: usize,
    pub total: usize,
    pub lines: Vec<String>,
}

/// `POST …/live/:vid/focus`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveFocused {
    pub focused_ids: Vec<String>,
    pub node_id: String,
    pub view_id: String,
}

/// `POST …/live/:vid/interrupt`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveInterrupted {
    pub is_interrupted: bool,
    pub view_id: String,
}
