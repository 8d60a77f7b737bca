//! The lanes: plain HTTP forwarding, CONNECT tunnels, HTTPS interception, provider
//! routes and SOCKS5. Each adapts framing only; the steps every flow goes through are
//! in [`crate::phases`]. `h1` relays the plain HTTP/1.1 requests of the plain and
//! intercepted lanes without an HTTP server or client; `forward` frames the HTTP requests
//! those lanes hand to hyper and the provider lane's; `target` reads request targets.

pub mod connect;
pub(crate) mod forward;
pub(crate) mod h1;
pub mod http;
pub(crate) mod intercept;
pub mod provider;
pub mod socks5;
pub(crate) mod target;

/// The HTTP/1.1 relay's head readers, for the fuzz target only.
#[doc(hidden)]
pub use h1::wire::fuzz_heads as fuzz_intercepted_heads;
