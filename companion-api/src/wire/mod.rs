//! The Companion wire as typed records, split by area. Field names are the wire's
//! (snake_case) and the app's TypeScript types are the contract: a field that the wire always
//! carries (possibly as `null`) is a plain field or an `Option` without a skip; a field the
//! wire only carries sometimes is skipped when absent. `serde_json::Value` appears only for
//! content that is free-form by nature (a turn's content blocks, a form's fields, a view's
//! nodes, a stored event).

mod human;
mod misc;
mod sessions;
mod turns;

pub use human::*;
pub use misc::*;
pub use sessions::*;
pub use turns::*;
