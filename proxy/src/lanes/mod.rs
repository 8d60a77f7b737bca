//! The lanes: plain HTTP forwarding, CONNECT tunnels, HTTPS interception, provider
//! routes and SOCKS5. Each adapts framing only; the steps every flow goes through are
//! in [`crate::phases`]. `forward` frames the HTTP requests of the plain, intercepted
//! and provider lanes; `target` reads request targets.

pub mod connect;
pub(crate) mod forward;
pub mod http;
pub(crate) mod intercept;
pub mod provider;
pub mod socks5;
pub(crate) mod target;

/// The intercepted HTTP/1.1 relay's head readers, for the fuzz target only.
#[doc(hidden)]
pub use intercept::h1::wire::fuzz_heads as fuzz_intercepted_heads;
