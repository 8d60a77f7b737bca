//! The fake events area.

use super::*;

#[async_trait]
impl EventsApi for FakeEngine {
    async fn subscribe(
        &self,
        sid: &str,
        cursor: Cursor,
        _kick: CancellationToken,
    ) -> ApiResult<Subscription> {
        known(sid)?;
        let (_tx, rx) = live::channel(8);
        Ok(Subscription {
            session_id: sid.into(),
            ready: Ready {
                cursor: cursor.0.max(0),
                current_turn_id: None,
                is_live: false,
            },
            gap: None,
            replay: vec![],
            rest: None,
            live: rx,
        })
    }

    async fn since(&self, sid: &str, cursor: i64) -> ApiResult<Vec<JournalEntry>> {
        known(sid)?;
        let stored = r#"{"type":"turn.started","seq":2,"turn_id":"t"}"#.to_string();
        let event = StoredJson::parse(stored).map(JournalEntry::Event);
        let gap = JournalEntry::Gap(StreamGap {
            kind: "stream.gap".into(),
            session_id: sid.into(),
            from: cursor + 1,
            to: 1,
        });
        Ok([Some(gap), event].into_iter().flatten().collect())
    }

    async fn seq(&self, sid: &str) -> ApiResult<i64> {
        known(sid)?;
        Ok(7)
    }

    async fn egress(&self, sid: &str, limit: usize, before: Option<i64>) -> ApiResult<EgressPage> {
        known(sid)?;
        self.calls.push(format!("egress {limit} {before:?}"));
        let decision = StoredJson::parse(r#"{"id":"e1","decision":"deny"}"#.to_string());
        Ok(EgressPage {
            decisions: decision.into_iter().collect(),
            has_more: false,
            next_before: None,
        })
    }
}
