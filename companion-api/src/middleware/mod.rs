//! The gate pipeline, outer to inner: CORS → protocol gate (426) → auth (401) → router.

pub mod auth;
pub mod cors;
pub mod protocol;
