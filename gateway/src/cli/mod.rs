//! Sub-commands.

pub mod client;
mod http;
pub mod logging;
pub mod start;
