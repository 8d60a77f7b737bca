//! Route families that bind a subsystem's Companion API to the gateway: the MCP servers
//! (`mcp`), the providers (`providers`) and learn mode (`learn`). The subsystems themselves (`crate::mcp`,
//! `crate::provider_admin`) know nothing of the gateway; these adapters reach the sessions,
//! the configuration and the router on their behalf.

pub mod learn;
pub mod mcp;
pub mod providers;
