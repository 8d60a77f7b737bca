//! The agent's memory and instructions: what each model request of a turn holds.
//!
//! - `context`: the session's summary, its settled turns and the running turn rendered as
//!   native messages, shaped to fit the model's window (T1, T2);
//! - `window`: context windows and token estimates;
//! - `compact`: the model-written summary that replaces the older part;
//! - `memory`: the stored exchanges and compactions;
//! - `prompt`: the system prompt, assembled per turn (T3);
//! - `budget`: a turn's step, time and repeated-failure budgets (T4).
//!
//! The turn engine (`engine/runner.rs`, `engine/conversation.rs`) drives these; nothing here
//! knows the engine.

pub mod budget;
pub mod compact;
pub mod context;
pub mod memory;
pub mod prompt;
pub mod window;
