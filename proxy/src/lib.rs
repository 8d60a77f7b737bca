//! The egress proxy. See ARCHITECTURE.md.
