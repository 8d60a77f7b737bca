//! The session stream's events: one [`Event`] per kind, carrying its data, and the
//! [`EventKind`] list that knows each kind's wire name and whether it is live-only.
//!
//! An event's data serializes to the members of its JSON object; the bus adds the envelope
//! (`schema`, `seq`, `ts`, `session_id`, `type`). Fields that carry content whose shape is
//! decided elsewhere (content blocks, an extension's presentation, a form, a view's nodes)
//! stay JSON inside the typed payload.

use serde::Serialize;
use serde_json::{Map, Value};

/// Declares [`EventKind`] from one table (variant => wire name): the enum, its `as_str` and
/// `ALL`, so a new kind is one line here.
macro_rules! event_kinds {
    ($($(#[$doc:meta])* $kind:ident => $name:literal,)*) => {
        /// Every kind of event a session stream carries, including the stream's own control frames.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum EventKind {
            $($(#[$doc])* $kind,)*
        }

        impl EventKind {
            /// Every kind.
            pub const ALL: &'static [EventKind] = &[$(EventKind::$kind,)*];

            /// The `type` on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(EventKind::$kind => $name,)*
                }
            }
        }
    };
}

event_kinds! {
    TurnQueued => "turn.queued",
    TurnQueuedUpdated => "turn.queued.updated",
    TurnQueuedDeleted => "turn.queued.deleted",
    TurnQueuedDrained => "turn.queued.drained",
    TurnStarted => "turn.started",
    TurnCompleted => "turn.completed",
    TurnFailed => "turn.failed",
    TurnCancelled => "turn.cancelled",
    ContextUpdated => "context.updated",
    /// The older part of the session was replaced by a summary (stored, replayed).
    ContextCompacted => "context.compacted",
    QueuePaused => "queue.paused",
    QueueResumed => "queue.resumed",
    SessionTitleUpdated => "session.title_updated",
    SessionFavoriteUpdated => "session.favorite_updated",
    SessionModelUpdated => "session.model_updated",
    ContentBlockStarted => "content.block.started",
    ContentBlockDelta => "content.block.delta",
    ContentBlockCompleted => "content.block.completed",
    BlockPreview => "block.preview",
    BlockStarted => "block.started",
    BlockOutput => "block.output",
    Activity => "activity",
    IterationError => "iteration.error",
    IterationCompleted => "iteration.completed",
    ProviderRetry => "provider.retry",
    ChunkProviderFallback => "chunk.provider-fallback",
    ChunkSlash => "chunk.slash",
    HumanInputRequest => "human_input.request",
    HumanInputClose => "human_input.close",
    HumanInputLiveOpen => "human_input.live.open",
    HumanInputLivePatch => "human_input.live.patch",
    HumanInputLiveClose => "human_input.live.close",
    Notification => "notification",
    EgressDecision => "egress.decision",
    ProvidersUpdated => "providers.updated",
    McpServersUpdated => "mcp.servers_updated",
    SessionWorkspaceUpdated => "session.workspace_updated",
    SessionForked => "session.forked",
    /// Control frame: the subscription is registered (never stored).
    SubscriptionReady => "subscription.ready",
    /// Control frame: stored events were trimmed (never stored).
    StreamGap => "stream.gap",
}

impl EventKind {
    /// Consumes a seq but is never stored or replayed (the egress decision keeps its own
    /// row, served by the egress route).
    pub const fn is_live_only(self) -> bool {
        use EventKind::*;
        matches!(
            self,
            Activity
                | TurnQueued
                | TurnQueuedUpdated
                | TurnQueuedDeleted
                | TurnQueuedDrained
                | SessionModelUpdated
                | EgressDecision
                | Notification
                | ProvidersUpdated
                | McpServersUpdated
                | SubscriptionReady
                | StreamGap
        )
    }
}

impl EventKind {
    /// The kind a stored `type` names.
    pub fn parse(name: &str) -> Option<EventKind> {
        EventKind::ALL.iter().copied().find(|k| k.as_str() == name)
    }

    /// A turn's terminal event.
    pub const fn is_turn_terminal(self) -> bool {
        matches!(
            self,
            EventKind::TurnCompleted | EventKind::TurnFailed | EventKind::TurnCancelled
        )
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

mod data;
mod tool_blocks;
pub use data::*;
pub use tool_blocks::*;

/// One event of a session stream, with its data: the payload the bus serializes in a
/// `vis_events::Envelope`. (Egress decisions are published by the egress sink with their
/// own typed payload.)
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Event {
    TurnQueued(TurnQueued),
    TurnQueuedUpdated(TurnQueuedUpdated),
    TurnQueuedDeleted(TurnQueuedDeleted),
    TurnQueuedDrained(TurnRef),
    TurnStarted(TurnStarted),
    TurnCompleted(TurnSettled),
    TurnFailed(TurnSettled),
    TurnCancelled(TurnSettled),
    ContextUpdated(ContextUpdated),
    ContextCompacted(ContextCompacted),
    QueuePaused(QueuePaused),
    QueueResumed(QueueResumed),
    SessionTitleUpdated(TitleUpdated),
    SessionFavoriteUpdated(FavoriteUpdated),
    SessionModelUpdated(ModelUpdated),
    ContentBlockStarted(BlockStartedData),
    ContentBlockDelta(BlockDelta),
    ContentBlockCompleted(BlockCompleted),
    BlockPreview(BlockPreview),
    /// A tool call's display record as it starts.
    BlockStarted(ToolBlock),
    /// The same record with the call's result.
    BlockOutput(ToolBlockOutput),
    /// What Vis is doing right now (tool, provider call, extension presentation).
    Activity(Activity),
    IterationError(IterationError),
    IterationCompleted(IterationCompleted),
    ProviderRetry(ProviderRetry),
    ChunkProviderFallback(ProviderFallback),
    ChunkSlash(SlashChunk),
    HumanInputRequest(HumanInputRequest),
    HumanInputClose(HumanInputClose),
    HumanInputLiveOpen(LiveOpen),
    HumanInputLivePatch(LivePatch),
    HumanInputLiveClose(LiveClose),
    Notification(Notification),
    /// The provider list changed: clients re-read `/v1/providers`.
    ProvidersUpdated(ProvidersUpdated),
    /// The MCP server list changed: clients re-read `/v1/mcp/servers`.
    McpServersUpdated(McpServersUpdated),
    /// The session's workspace changed (drafts).
    SessionWorkspaceUpdated(WorkspaceUpdated),
    /// A fork of this session was made.
    SessionForked(Forked),
}

impl Event {
    pub fn kind(&self) -> EventKind {
        use Event as E;
        use EventKind as K;
        match self {
            E::TurnQueued(_) => K::TurnQueued,
            E::TurnQueuedUpdated(_) => K::TurnQueuedUpdated,
            E::TurnQueuedDeleted(_) => K::TurnQueuedDeleted,
            E::TurnQueuedDrained(_) => K::TurnQueuedDrained,
            E::TurnStarted(_) => K::TurnStarted,
            E::TurnCompleted(_) => K::TurnCompleted,
            E::TurnFailed(_) => K::TurnFailed,
            E::TurnCancelled(_) => K::TurnCancelled,
            E::ContextUpdated(_) => K::ContextUpdated,
            E::ContextCompacted(_) => K::ContextCompacted,
            E::QueuePaused(_) => K::QueuePaused,
            E::QueueResumed(_) => K::QueueResumed,
            E::SessionTitleUpdated(_) => K::SessionTitleUpdated,
            E::SessionFavoriteUpdated(_) => K::SessionFavoriteUpdated,
            E::SessionModelUpdated(_) => K::SessionModelUpdated,
            E::ContentBlockStarted(_) => K::ContentBlockStarted,
            E::ContentBlockDelta(_) => K::ContentBlockDelta,
            E::ContentBlockCompleted(_) => K::ContentBlockCompleted,
            E::BlockPreview(_) => K::BlockPreview,
            E::BlockStarted(_) => K::BlockStarted,
            E::BlockOutput(_) => K::BlockOutput,
            E::Activity(_) => K::Activity,
            E::IterationError(_) => K::IterationError,
            E::IterationCompleted(_) => K::IterationCompleted,
            E::ProviderRetry(_) => K::ProviderRetry,
            E::ChunkProviderFallback(_) => K::ChunkProviderFallback,
            E::ChunkSlash(_) => K::ChunkSlash,
            E::HumanInputRequest(_) => K::HumanInputRequest,
            E::HumanInputClose(_) => K::HumanInputClose,
            E::HumanInputLiveOpen(_) => K::HumanInputLiveOpen,
            E::HumanInputLivePatch(_) => K::HumanInputLivePatch,
            E::HumanInputLiveClose(_) => K::HumanInputLiveClose,
            E::Notification(_) => K::Notification,
            E::SessionForked(_) => K::SessionForked,
            E::SessionWorkspaceUpdated(_) => K::SessionWorkspaceUpdated,
            E::McpServersUpdated(_) => K::McpServersUpdated,
            E::ProvidersUpdated(_) => K::ProvidersUpdated,
        }
    }

    pub fn is_live_only(&self) -> bool {
        self.kind().is_live_only()
    }

    /// The event's members as a JSON object (the bus does not use it: it serializes the
    /// event once, inside its envelope).
    pub fn into_members(self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::TurnStatus;

    #[test]
    fn live_only_kinds_are_the_ones_never_replayed() {
        let live: Vec<&str> = [
            EventKind::Activity,
            EventKind::TurnQueued,
            EventKind::TurnQueuedUpdated,
            EventKind::TurnQueuedDeleted,
            EventKind::TurnQueuedDrained,
            EventKind::SessionModelUpdated,
            EventKind::EgressDecision,
            EventKind::Notification,
        ]
        .iter()
        .map(|k| k.as_str())
        .collect();
        assert_eq!(
            live,
            [
                "activity",
                "turn.queued",
                "turn.queued.updated",
                "turn.queued.deleted",
                "turn.queued.drained",
                "session.model_updated",
                "egress.decision",
                "notification"
            ]
        );
        assert!(live.iter().all(|k| !k.is_empty()));
        assert!(!EventKind::TurnStarted.is_live_only());
        assert!(!EventKind::BlockOutput.is_live_only());
    }

    #[test]
    fn every_kind_parses_back_from_its_name_and_names_are_unique() {
        for &k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
        let mut names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), EventKind::ALL.len());
        assert_eq!(EventKind::parse("x.unknown"), None);
    }

    #[test]
    fn an_event_serializes_to_its_members_only() {
        let e = Event::TurnFailed(TurnSettled {
            turn_id: "t".into(),
            status: TurnStatus::Failed,
            idempotency_key: None,
            content: Some(vec![]),
            error: Some(None),
        });
        assert_eq!(e.kind().as_str(), "turn.failed");
        assert_eq!(
            Value::Object(e.into_members()),
            serde_json::json!({"turn_id": "t", "status": "failed", "content": [], "error": null})
        );
    }
}
