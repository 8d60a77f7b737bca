//! Sub-commands.

pub mod client;
mod http;
pub mod logging;
mod nats;
pub mod start;
