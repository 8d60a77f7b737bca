//! The gateway's side of the Companion boundary: each area's trait, implemented where the
//! work is. [`GatewayAreas`] (the gateway's jobs as a shared handle, since starting a turn
//! spawns work that outlives the request) answers sessions, turns, events, human input and
//! the machine, one file per area, calling the turn engine (`Turns`) and the other jobs; the workspace job answers the workspace
//! area (`workspace/area.rs`); MCP, learn mode and providers answer their own
//! (`engine/routes/`).

mod events;
mod human_input;
mod machine;
#[cfg(test)]
mod oneshot_tests;
mod sessions;
mod turn_errors;
mod turns;

use super::Gateway;
use std::sync::Arc;
use vis_companion_api::{ApiError, Areas};

/// The gateway's jobs as the areas they answer see them: a shared handle.
#[derive(Clone)]
pub struct GatewayAreas(pub(super) Arc<Gateway>);

/// Every area of the Companion boundary over one gateway.
pub fn areas(gw: &Arc<Gateway>) -> Areas {
    let engine = Arc::new(GatewayAreas(gw.clone()));
    Areas {
        sessions: engine.clone(),
        turns: engine.clone(),
        events: engine.clone(),
        human_input: engine.clone(),
        workspace: gw.workspaces.clone(),
        machine: engine,
        mcp: Some(Arc::new(super::routes::mcp::McpRoutes(gw.clone()))),
        learn: Some(Arc::new(super::routes::learn::LearnRoutes(gw.clone()))),
        providers: Some(Arc::new(super::routes::providers::ProviderRoutes(
            gw.clone(),
        ))),
    }
}

/// A store failure on the wire: 507 when the disk is full (the client can tell the user
/// what happened and that nothing was changed), else 500.
impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> ApiError {
        if e.is_full() {
            return ApiError::insufficient_storage(format!(
                "the gateway's disk is full; nothing was changed ({e})"
            ));
        }
        ApiError::engine(e.to_string())
    }
}
