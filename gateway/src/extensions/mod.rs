//! The extension host runtime (docs/decisions.md, A4, E1–E10, P6).
//!
//! Python extensions run in worker PROCESSES: the `vis-gateway` binary started as
//! `vis-gateway worker` (see [`worker`]), embedding CPython. The gateway keeps ONE
//! registration worker that loads every extension file (catalog, provider callbacks), one
//! filter worker per extension file with network filters (`filter_workers.rs`), and one
//! worker per session, started on that session's first extension call and stopped with
//! [`ExtensionHost::stop_session`]. Session and filter workers idle for
//! `HostConfig::session_idle` stop (`reaper.rs`; the next call starts them again). The
//! worker pool (`pool.rs`) owns them all; each dies with the gateway, however it ends.
//! Entry files are read once per load (the "admitted" bytes) and every worker executes
//! exactly those bytes, so a session worker started after an edit runs the version the
//! catalog describes; edits are adopted by [`ExtensionHost::reload`] only.
//!
//! ```ignore
//! let host = ExtensionHost::new(HostConfig::new(home), state_store, host_events, human_doors);
//! host.reload(None).await;                       // global extensions, at start
//! let tools = host.tools(&session).await;        // ensures the session's project is loaded
//! let out = host.call_tool(&session, "todo__add", json!({"text": "x"})).await;
//! host.stop_session(&session.id).await;
//! ```

pub mod client;
pub mod discovery;
mod doors;
pub mod embed;
pub mod env;
mod filter_workers;
mod filters;
pub mod freeze;
mod host;
pub mod lane;
mod listing;
mod load;
pub mod logfile;
mod pool;
pub mod protocol;
mod providers;
mod reaper;
mod registry;
#[cfg(test)]
mod tests;
mod tools;
mod traits;
mod types;
pub mod worker;

pub(crate) use self::filters::LoadingScope;
pub use self::host::ExtensionHost;
pub use self::providers::{dialect_of, LinePrinter, DRIVEN_API_STYLES};
pub use self::traits::{DoorWorker, HostEvents, HumanDoors, StateStore};
#[cfg(test)]
pub use self::traits::{MemoryState, NoHumanDoors};
pub use self::types::{
    CatalogEntry, FilterInfo, HostConfig, LoadFailure, ProviderInfo, ReloadReport, SessionCtx,
    SlashOutcome, ToolDef, ToolError, ToolResult, TurnExtras,
};

// The host's internals, for the modules that extend it (`use super::*`).
use self::host::{file_str, session_call_ctx, Inner};
use self::registry::{Catalog, Entry, Registry, Scope, ScopeState};
