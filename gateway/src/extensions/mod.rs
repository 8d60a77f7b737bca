//! The extension host runtime (decisions A4, E1–E10, P6).

pub mod embed;
pub mod protocol;
pub mod worker;
