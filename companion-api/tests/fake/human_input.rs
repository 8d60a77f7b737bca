//! The fake human input area.

use super::*;

#[async_trait]
impl HumanInputApi for FakeEngine {
    async fn list(&self, sid: &str) -> ApiResult<HumanInputList> {
        known(sid)?;
        Ok(HumanInputList {
            requests: vec![json!({"id": RID, "title": "Name?"})],
        })
    }

    async fn submit(
        &self,
        sid: &str,
        rid: &str,
        values: Map<String, Value>,
    ) -> ApiResult<HumanInputSubmitted> {
        known(sid)?;
        if rid != RID {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "human-input-not-found",
                format!("no pending request {rid}"),
            ));
        }
        let mut errors = Map::new();
        if !values.contains_key("name") {
            errors.insert("name".into(), json!("is required"));
        }
        Ok(HumanInputSubmitted {
            is_accepted: errors.is_empty(),
            request_id: rid.into(),
            reason: None,
            errors: (!errors.is_empty()).then_some(errors),
        })
    }

    async fn cancel(&self, sid: &str, rid: &str) -> ApiResult<HumanInputCancelled> {
        known(sid)?;
        Ok(HumanInputCancelled {
            is_cancelled: rid == RID,
            request_id: rid.into(),
        })
    }

    async fn live_views(&self, sid: &str) -> ApiResult<LiveViews> {
        known(sid)?;
        Ok(LiveViews { views: vec![] })
    }

    async fn live_log(
        &self,
        sid: &str,
        vid: &str,
        nid: &str,
        from: usize,
        limit: usize,
    ) -> ApiResult<LiveLog> {
        known(sid)?;
        self.calls.push(format!("live_log {vid} {from} {limit}"));
        Ok(LiveLog {
            node_id: nid.into(),
            from,
            total: 0,
            lines: vec![],
        })
    }

    async fn live_focus(&self, sid: &str, vid: &str, body: Value) -> ApiResult<LiveFocused> {
        known(sid)?;
        Ok(LiveFocused {
            focused_ids: vec![],
            node_id: body["node_id"].as_str().unwrap_or_default().into(),
            view_id: vid.into(),
        })
    }

    async fn live_interrupt(
        &self,
        sid: &str,
        vid: &str,
        note: Option<String>,
    ) -> ApiResult<LiveInterrupted> {
        known(sid)?;
        self.calls.push(format!("live_interrupt {note:?}"));
        Ok(LiveInterrupted {
            is_interrupted: true,
            view_id: vid.into(),
        })
    }
}
