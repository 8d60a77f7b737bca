//! The extension host runtime (docs/decisions.md, A4, E1–E10, P6).
//!
//! Python extensions run in worker PROCESSES: the `vis-gateway` binary started as
//! `vis-gateway worker` (see [`worker`]), embedding CPython. The gateway keeps ONE
//! registration worker that loads every extension file (catalog, provider callbacks), one
//! filter worker per extension file with network filters (`filter_workers.rs`), and one
//! worker per session, started on that session's first extension call and stopped with
//! `Sessions::stop`. Session and filter workers idle for `HostConfig::session_idle` stop
//! (the pool's reaper; the next call starts them again). The worker pool (`pool.rs`) owns
//! them all; each dies with the gateway, however it ends.
//! Entry files are read once per load (the "admitted" bytes) and every worker executes
//! exactly those bytes, so a session worker started after an edit runs the version the
//! catalog describes; edits are adopted by `Catalog::reload` only.
//!
//! [`ExtensionHost`] is the cheap-clone handle and composition root (`host.rs`). It hands
//! out one object per job, each with its own small API:
//! - `Catalog` (`catalog/`): the loaded extensions of each scope, (re)loading, the listing;
//! - `Tools` (`tools.rs`): tool definitions, calls, op hooks, `apropos`/`doc`, `fs_access`;
//! - `Filters` (`filters.rs`): the network filters handed to the proxy;
//! - `Providers` (`providers.rs`): the extensions' `vis.Provider`s and their callbacks;
//! - `Sessions` (`sessions.rs`): per-turn extras, slash commands, the end of a session.
//!
//! Under them: the registry of loaded files (`registry.rs`, data), the worker pool
//! (`pool.rs`, `filter_workers.rs`, `client/`) and the doors the workers call back through
//! (`doors.rs`).
//!
//! ```ignore
//! let host = ExtensionHost::new(HostConfig::new(home), state_store, host_events, human_doors);
//! host.catalog().reload(None).await;               // global extensions, at start
//! let tools = host.tools().list(&session).await;   // ensures the session's project is loaded
//! let out = host.tools().call(&session, "todo__add", json!({"text": "x"})).await;
//! let filters = host.filters().network(session.project_root.as_deref());
//! host.sessions().stop(&session.id).await;
//! ```

mod catalog;
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
pub mod logfile;
mod pool;
pub mod protocol;
mod providers;
mod registry;
mod sessions;
#[cfg(test)]
mod tests;
mod tools;
mod traits;
mod types;
pub mod worker;

pub use self::host::ExtensionHost;
pub use self::providers::{dialect_of, DRIVEN_API_STYLES};
pub use self::traits::{DoorWorker, HostEvents, HumanDoors, StateStore};
#[cfg(test)]
pub use self::traits::{MemoryState, NoHumanDoors};
pub use self::types::{
    CatalogEntry, FilterInfo, HostConfig, LinePrinter, LoadFailure, ProviderInfo, ReloadReport,
    SessionCtx, SlashOutcome, ToolDef, ToolError, ToolResult, TurnExtras,
};
