//! Sub-commands.

pub mod client;
mod cluster;
mod database;
mod http;
pub mod logging;
mod nats;
pub mod start;
pub mod transfer;
