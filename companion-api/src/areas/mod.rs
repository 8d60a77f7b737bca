//! The Companion boundary, one small trait per area. Each area is implemented by the part of
//! the gateway that owns it; the routes of an area call only its trait, and a route test fakes
//! only the areas it touches.

pub mod events;
pub mod human_input;
pub mod machine;
pub mod sessions;
pub mod turns;
pub mod workspace;

use std::sync::Arc;

// Each area's trait and the records that belong to it only.
pub use events::*;
pub use human_input::*;
pub use machine::*;
pub use sessions::*;
pub use turns::*;
pub use workspace::*;

/// Every area the routes serve. `mcp`, `learn` and `providers` are optional: a gateway
/// without them answers their routes 501.
#[derive(Clone)]
pub struct Areas {
    pub sessions: Arc<dyn SessionsApi>,
    pub turns: Arc<dyn TurnsApi>,
    pub events: Arc<dyn EventsApi>,
    pub human_input: Arc<dyn HumanInputApi>,
    pub workspace: Arc<dyn WorkspaceApi>,
    pub machine: Arc<dyn MachineApi>,
    pub mcp: Option<Arc<dyn crate::mcp::McpApi>>,
    pub learn: Option<Arc<dyn crate::learn::LearnApi>>,
    pub providers: Option<Arc<dyn crate::providers::ProvidersApi>>,
}
