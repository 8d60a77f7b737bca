//! Route families that bind a subsystem's Companion API to the gateway: the MCP servers
//! (`mcp`), the providers (`providers`), learn mode (`learn`) and the cluster's hop
//! between nodes (`cluster`). The subsystems themselves (`crate::mcp`,
//! `crate::provider_admin`) know nothing of the gateway; these adapters reach the sessions,
//! the configuration and the router on their behalf.

pub mod cluster;
pub mod learn;
pub mod mcp;
pub mod providers;
