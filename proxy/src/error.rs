//! The one error type of the crate.

use std::io;

/// Everything that can go wrong outside of a per-request denial.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A policy or stand-alone configuration is invalid; the message names the key.
    #[error("config error: {0}")]
    Config(String),
    /// Socket or file IO failed (shown as the IO error itself, once).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// TLS setup (CA, leaf, upstream roots) failed.
    #[error("tls error: {0}")]
    Tls(String),
    /// A protocol violation by a peer.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl From<rcgen::Error> for ProxyError {
    fn from(e: rcgen::Error) -> Self {
        ProxyError::Tls(e.to_string())
    }
}

impl From<rustls::Error> for ProxyError {
    fn from(e: rustls::Error) -> Self {
        ProxyError::Tls(e.to_string())
    }
}

/// Crate result alias.
pub type Result<T, E = ProxyError> = std::result::Result<T, E>;
