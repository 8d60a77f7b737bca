//! The four lanes: plain HTTP forwarding, CONNECT tunnels, HTTPS
//! interception and SOCKS5. `forward` is the per-request pipeline shared by
//! plain HTTP and intercepted requests.

pub mod connect;
pub(crate) mod forward;
pub mod http;
pub(crate) mod intercept;
pub mod provider;
pub mod socks5;
