//! Sub-commands.

pub mod client;
pub mod logging;
pub mod start;
