//! The gateway's side of the Companion boundary: each area's trait, implemented where the
//! work is. The turn engine ([`TurnEngine`], the gateway seen as a shared handle, since
//! starting a turn spawns work that outlives the request) answers sessions, turns, events,
//! human input and the machine, one file per area; the workspace job answers the workspace
//! area (`workspace/area.rs`); MCP, learn mode and providers answer their own
//! (`engine/routes/`).

mod events;
mod human_input;
mod machine;
mod sessions;
mod turns;

use super::Gateway;
use std::sync::Arc;
use vis_companion_api::Areas;

/// The gateway as the areas it answers see it: a shared handle.
#[derive(Clone)]
pub struct TurnEngine(pub(super) Arc<Gateway>);

/// Every area of the Companion boundary over one gateway.
pub fn areas(gw: &Arc<Gateway>) -> Areas {
    let engine = Arc::new(TurnEngine(gw.clone()));
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
