//! Companion API.
