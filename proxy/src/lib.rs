//! vis-proxy — the egress proxy. (Module docs are filled in below.)
#![warn(missing_docs)]

pub mod body;
pub mod deny;
pub mod error;
pub mod policy;
pub mod ssrf;
pub mod traits;

pub use error::{ProxyError, Result};
pub use traits::*;
