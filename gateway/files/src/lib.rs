//! The model sandbox's host-side file tools: `cat`, `grep`, `patch` and `ls`, run in the gateway
//! on behalf of the Python the model writes, confined to the session's [`Workspace`].
//!
//! Lines are shown as anchored lines, `LINE:HASH│ text` (e.g. `12:a3f│ fn main() {`): LINE is
//! 1-based, HASH is 3 lowercase hex chars of a hash of the line's content (see [`anchor_hash`]),
//! and the separator is U+2502 and a space. [`patch`] takes edits addressed by anchors and refuses
//! the whole batch when any anchor is stale, so the model never edits a line it has not seen.

mod anchor;
mod cat;
mod edit;
mod error;
mod grep;
mod ls;
mod patch;
mod text;
mod workspace;

pub use anchor::{anchor_hash, Anchor, SEPARATOR};
pub use cat::{cat, CatOutput, CAT_MAX_BYTES, CAT_MAX_LINES, CAT_MAX_LINE_CHARS, MAX_FILE_BYTES};
pub use edit::{edits_from_json, Edit};
pub use error::FileError;
pub use grep::{
    grep, GrepPage, GrepQuery, GREP_DEFAULT_PAGE, GREP_MAX_LINE_CHARS, GREP_MAX_STORED_HITS,
};
pub use ls::{ls, LS_MAX_ENTRIES};
pub use patch::{patch, EditResult, PatchOutcome};
pub use workspace::Workspace;
