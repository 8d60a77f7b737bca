//! vis-proxy — the egress proxy.
#![warn(missing_docs)]

pub mod attribution;
pub mod body;
pub mod deny;
pub mod detect;
pub mod dial;
mod engine;
pub mod error;
pub mod filters;
pub mod lanes;
mod listener;
pub mod policy;
pub mod probe;
pub mod record;
pub mod relay;
pub mod settings;
pub mod ssrf;
pub mod standalone;
pub mod tls;
pub mod traits;
pub mod upstream;

pub use engine::{Proxy, Services};
pub use error::{ProxyError, Result};
pub use settings::ProxyConfig;
pub use standalone::{run_standalone, start_standalone, StandaloneConfig};
pub use traits::*;
