//! Test support: gateway process harness and fixture servers.
