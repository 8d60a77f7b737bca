//! Sub-commands.

pub mod client;
pub mod start;
