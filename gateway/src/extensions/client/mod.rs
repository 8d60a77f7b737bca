//! The gateway side of one worker process: spawn, request/response with timeouts, host-door
//! dispatch, crash detection and replacement.
//!
//! Pipe IO runs on dedicated tokio tasks (a writer, a stdout reader, a stderr forwarder and a
//! reaper that owns the child); nothing here blocks a runtime thread. Top-level calls are
//! serialized per worker ([`WorkerClient::call`]); nested calls made while a door is being
//! answered (the `fs_access` gate) go straight to the running process ([`Running::request`]).
//!
//! A worker spawned with [`WorkerSpec::filter_lane`] also gets a filter lane
//! ([`super::lane`]): [`WorkerClient::filter`] sends network-filter calls over it from the
//! calling task, concurrently with each other and with the serialized calls (the worker
//! keeps calls into one extension serialized).

//!
//! Files: `types.rs` (a call's context and errors, a worker's spec and owner), `running.rs`
//! (one live process: requests, lane calls, kills), `worker_client.rs` (the restartable handle
//! callers use), `spawn.rs` (starting a process and its IO tasks).

mod running;
mod spawn;
mod types;
mod worker_client;

pub use self::running::{Running, WorkerOwner};
pub use self::types::*;
pub use self::worker_client::WorkerClient;
