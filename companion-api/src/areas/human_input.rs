//! Human input: the forms a turn waits on, and the live views of running work.

use crate::error::ApiResult;
use crate::wire::*;
use async_trait::async_trait;
use serde_json::{Map, Value};

#[async_trait]
pub trait HumanInputApi: Send + Sync + 'static {
    async fn list(&self, sid: &str) -> ApiResult<HumanInputList>;
    async fn submit(
        &self,
        sid: &str,
        request_id: &str,
        values: Map<String, Value>,
    ) -> ApiResult<HumanInputSubmitted>;
    async fn cancel(&self, sid: &str, request_id: &str) -> ApiResult<HumanInputCancelled>;
    async fn live_views(&self, sid: &str) -> ApiResult<LiveViews>;
    async fn live_log(
        &self,
        sid: &str,
        view_id: &str,
        node_id: &str,
        from: usize,
        limit: usize,
    ) -> ApiResult<LiveLog>;
    async fn live_focus(&self, sid: &str, view_id: &str, body: Value) -> ApiResult<LiveFocused>;
    async fn live_interrupt(
        &self,
        sid: &str,
        view_id: &str,
        note: Option<String>,
    ) -> ApiResult<LiveInterrupted>;
}
