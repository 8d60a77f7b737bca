//! The fake sessions area.

use super::*;

#[async_trait]
impl SessionsApi for FakeEngine {
    async fn create(&self, req: CreateSession) -> ApiResult<SessionCreated> {
        self.calls.push(format!("create_session {:?}", req.title));
        Ok(SessionCreated {
            id: SID.into(),
            channel: req.channel.unwrap_or_else(|| "api".into()),
            title: req.title,
            external_id: None,
            workspace_id: None,
        })
    }

    async fn list(&self, q: SessionListQuery) -> ApiResult<SessionList> {
        self.calls
            .push(format!("list_sessions {:?} {:?}", q.limit, q.after));
        Ok(SessionList {
            sessions: vec![session()],
            total: 1,
            limit: q.limit,
            ..Default::default()
        })
    }

    async fn get(&self, sid: &str, include_queued: bool) -> ApiResult<SessionRecord> {
        known(sid)?;
        Ok(SessionRecord {
            queued_turns: include_queued.then(Vec::new),
            ..session()
        })
    }

    async fn delete(&self, sid: &str) -> ApiResult<()> {
        self.calls.push(format!("delete_session {sid}"));
        Ok(())
    }

    async fn transcript(
        &self,
        sid: &str,
        limit: Option<usize>,
        offset: Option<usize>,
    ) -> ApiResult<Transcript> {
        known(sid)?;
        self.calls.push(format!("transcript {limit:?} {offset:?}"));
        Ok(Transcript {
            turns: vec![TranscriptRow {
                id: ENGINE_TID.into(),
                user_request: "hello".into(),
                status: "success".into(),
                ..Default::default()
            }],
            total: 1,
            offset: 0,
            has_more: false,
        })
    }

    async fn model(&self, sid: &str) -> ApiResult<SessionModel> {
        known(sid)?;
        Ok(SessionModel { model: None })
    }

    async fn slashes(&self, sid: &str) -> ApiResult<SlashPalette> {
        known(sid)?;
        Ok(SlashPalette {
            commands: vec![SlashCommand {
                name: "/help".into(),
                doc: "Show help".into(),
            }],
        })
    }

    async fn patch(&self, sid: &str, patch: SessionPatch) -> ApiResult<()> {
        known(sid)?;
        self.calls.push(format!("patch_session {:?}", patch.title));
        Ok(())
    }

    async fn search(&self, _q: &str) -> ApiResult<SearchResults> {
        Ok(SearchResults::default())
    }

    async fn usage(&self, sid: &str) -> ApiResult<UsageAnswer> {
        known(sid)?;
        Ok(UsageAnswer { usage: None })
    }

    async fn transcript_markdown(&self, sid: &str) -> ApiResult<String> {
        known(sid)?;
        Ok("# fake\n".into())
    }

    async fn set_model(&self, sid: &str, pref: Option<ModelPref>) -> ApiResult<ModelAnswer> {
        known(sid)?;
        Ok(ModelAnswer { model: pref })
    }

    async fn delete_project(&self, pid: &str, _recursive: bool) -> ApiResult<ProjectDeleted> {
        Ok(ProjectDeleted {
            project_id: pid.into(),
            ..Default::default()
        })
    }

    async fn fork_points(&self, sid: &str) -> ApiResult<ForkPoints> {
        known(sid)?;
        Ok(ForkPoints::default())
    }

    async fn fork(&self, sid: &str, _req: ForkRequest) -> ApiResult<String> {
        known(sid)?;
        Ok(SID.into())
    }
}
