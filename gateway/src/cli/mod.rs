//! Sub-commands.

pub mod client;
mod database;
mod http;
pub mod logging;
mod nats;
pub mod start;
