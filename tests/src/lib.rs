//! Test support: gateway process harness and fixture servers.

pub mod fixture_llm;

pub use fixture_llm::{is_summary_request, system_text, FixtureLlm, RecordedRequest, Script};

/// Installs ring as the process-wide rustls crypto provider (needed before
/// building a reqwest client with the workspace's `rustls-no-provider`
/// feature). Idempotent; a provider installed earlier is kept.
pub fn init_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
