//! The fake turns area.

use super::*;

#[async_trait]
impl TurnsApi for FakeEngine {
    async fn submit(&self, sid: &str, req: SubmitTurn) -> ApiResult<(bool, TurnRecord)> {
        known(sid)?;
        let replay = req.idempotency_key.as_deref() == Some("seen");
        Ok((replay, turn()))
    }

    async fn list(&self, sid: &str, queued_only: bool) -> ApiResult<TurnList> {
        known(sid)?;
        let turns = if queued_only { vec![] } else { vec![turn()] };
        Ok(TurnList { turns })
    }

    async fn get(&self, sid: &str, tid: &str) -> ApiResult<TurnRecord> {
        turn_known(sid, tid)?;
        Ok(turn())
    }

    async fn attachments(&self, sid: &str, tid: &str) -> ApiResult<TurnAttachments> {
        turn_known(sid, tid)?;
        Ok(TurnAttachments {
            attachments: vec![json!({"filename": "a.txt", "base64": "aGk="})],
        })
    }

    async fn edit(&self, sid: &str, tid: &str, request: Option<Value>) -> ApiResult<TurnRecord> {
        turn_known(sid, tid)?;
        match request {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(TurnRecord {
                request: s,
                ..turn()
            }),
            _ => Err(ApiError::conflict(
                "invalid-request",
                "request must be a non-blank string",
            )),
        }
    }

    async fn delete(&self, sid: &str, tid: &str) -> ApiResult<()> {
        turn_known(sid, tid)
    }

    async fn cancel(&self, sid: &str, tid: &str) -> ApiResult<()> {
        turn_known(sid, tid)
    }

    async fn cancel_current(&self, sid: &str, _key: Option<String>) -> ApiResult<String> {
        known(sid)?;
        Ok(TID.into())
    }

    async fn resume_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>> {
        known(sid)?;
        Ok(Some(turn()))
    }

    async fn drain_queue(&self, sid: &str) -> ApiResult<Option<TurnRecord>> {
        known(sid)?;
        Ok(None)
    }

    async fn trace(&self, sid: &str, _engine_tid: &str) -> ApiResult<Trace> {
        known(sid)?;
        Ok(Trace {
            iterations: vec![json!({"id": "i1"})],
        })
    }

    async fn artifacts(&self, sid: &str) -> ApiResult<ArtifactList> {
        known(sid)?;
        Ok(ArtifactList::default())
    }

    async fn iteration_attachments(&self, sid: &str, iid: &str) -> ApiResult<IterationAttachments> {
        known(sid)?;
        Ok(IterationAttachments {
            attachments: vec![attachment(iid)],
        })
    }

    async fn iteration_attachment_bytes(
        &self,
        sid: &str,
        _iid: &str,
        _index: i64,
    ) -> ApiResult<StoredBytes> {
        known(sid)?;
        Ok(StoredBytes {
            media_type: "text/plain".into(),
            filename: "a.txt".into(),
            bytes: b"hi".to_vec(),
        })
    }

    async fn save_revision(
        &self,
        sid: &str,
        iid: &str,
        _rev: NewRevision,
    ) -> ApiResult<IterationAttachment> {
        known(sid)?;
        Ok(attachment(iid))
    }
}
