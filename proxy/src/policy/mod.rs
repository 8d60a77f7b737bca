//! Network policy: parse (`config`), compile once (`compile`), and decide per
//! request as a pure function (`decide`).

pub mod compile;
pub mod config;
pub mod decide;
pub mod glob;
pub mod learn;

pub use compile::{normalize_host, HostPattern, Policy, Rule};
pub use config::{Mode, NetworkConfig};
pub use decide::{decide, normalize_path, Allowed, DecideInput, WouldDeny};
pub use learn::decide_or_learn;
