//! Session metadata: rename and star (`PATCH /v1/sessions/:sid`), the model pin, project
//! deletion and forks. Gateway work (sessions and turns): they change session rows under the
//! session's mutex and publish on the bus; forks create sessions, copy turns and open drafts
//! through the engine.

use super::session_life::SessionLifeError;
use crate::companion::project_id;
use crate::drafts::DraftError;
use crate::engine::{now_ms, Turns};
use crate::records::turn::{Status, Turn};
use crate::records::SessionError;
use crate::store::{rows, StoreError};
use serde_json::json;
use std::sync::Arc;
use vis_companion_api::events::{Event, FavoriteUpdated, Forked, ModelUpdated};
use vis_companion_api::records::{
    ForkChild, ForkPoint, ForkPoints, ForkRequest, ModelAnswer, ModelPref, ProjectDeleted,
    SessionPatch,
};
use vis_companion_api::CreateSession;

/// Why a change to a session's metadata, a project or a fork was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("no provider {provider:?} is configured (configured: {})", list_or_none(.configured))]
    UnknownProvider {
        provider: String,
        configured: Vec<String>,
    },
    #[error("no project {pid}")]
    ProjectNotFound { pid: String },
    #[error("the session has no finished turn to fork")]
    NothingToFork,
    #[error("no finished turn {tid} in this session (a fork is cut at one of its own turns)")]
    UnknownForkTurn { tid: String },
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The fork's draft could not be opened.
    #[error(transparent)]
    Draft(#[from] DraftError),
    /// The fork's new session could not be created.
    #[error(transparent)]
    Create(#[from] SessionLifeError),
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

pub type MetaResult<T> = Result<T, MetaError>;

/// A fork checked and ready: the turns it copies (`..end`), the session to create for it
/// and the draft to open in it.
struct ForkPlan {
    source: rows::SessionRow,
    turns: Vec<Turn>,
    end: usize,
    draft_label: Option<String>,
    /// The new session, created between the two halves of [`Gateway::fork`].
    session: CreateSession,
}

impl Turns {
    /// Renames and/or (un)stars a session. Publishes `session.title_updated` (the title
    /// event every client already follows) and `session.favorite_updated {favorite_rank,
    /// is_favorite}`, each also copied to every other open session with the changed
    /// session's id, as titles are.
    pub async fn patch_session(&self, sid: &str, patch: SessionPatch) -> MetaResult<()> {
        let shared = self.sessions.get(sid).await?;
        // The next star rank: one past the largest stored or loaded one.
        let next_rank = if patch.is_favorite == Some(true) {
            let stored: i64 = self
                .store
                .with(|db| {
                    Ok(db
                        .value("SELECT COALESCE(MAX(favorite_rank), 0) FROM sessions", &[])?
                        .unwrap_or(0))
                })
                .await?;
            let loaded = self
                .sessions
                .all()
                .iter()
                .filter_map(|(_, s)| s.lock().row.favorite_rank)
                .max()
                .unwrap_or(0);
            stored.max(loaded) + 1
        } else {
            0
        };
        let (row, title_changed, star_changed) = {
            let mut st = shared.lock();
            let mut title_changed = false;
            if let Some(t) = &patch.title {
                title_changed = st.row.title.as_deref() != Some(t.as_str());
                st.row.title = Some(t.clone());
            }
            let mut star_changed = false;
            match patch.is_favorite {
                Some(true) if st.row.favorite_rank.is_none() => {
                    st.row.favorite_rank = Some(next_rank);
                    star_changed = true;
                }
                Some(false) if st.row.favorite_rank.is_some() => {
                    st.row.favorite_rank = None;
                    star_changed = true;
                }
                _ => {}
            }
            if title_changed || star_changed {
                st.row.last_active_at = now_ms();
            }
            (st.row.clone(), title_changed, star_changed)
        };
        if !(title_changed || star_changed) {
            return Ok(());
        }
        let r = row.clone();
        self.store.with(move |db| rows::put_session(db, &r)).await?;
        if title_changed {
            if let Some(t) = &row.title {
                self.publish_title(sid, t);
            }
        }
        if star_changed {
            let body = FavoriteUpdated {
                favorite_rank: row.favorite_rank,
                is_favorite: row.favorite_rank.is_some(),
                favorite_session_id: None,
            };
            self.bus
                .publish(sid, Event::SessionFavoriteUpdated(body.clone()));
            for other in self.bus.open_sessions() {
                if other != sid {
                    let copy = FavoriteUpdated {
                        favorite_session_id: Some(sid.to_string()),
                        ..body.clone()
                    };
                    self.bus
                        .publish(&other, Event::SessionFavoriteUpdated(copy));
                }
            }
        }
        Ok(())
    }

    /// Pins (or clears) the session's provider and model; publishes `session.model_updated`.
    pub async fn set_session_model(
        &self,
        sid: &str,
        pref: Option<ModelPref>,
    ) -> MetaResult<ModelAnswer> {
        if let Some(p) = &pref {
            if !self.configuration.has_provider(&p.provider) {
                return Err(MetaError::UnknownProvider {
                    provider: p.provider.clone(),
                    configured: self.configuration.provider_ids(),
                });
            }
        }
        let shared = self.sessions.get(sid).await?;
        let row = {
            let mut st = shared.lock();
            st.row.model_pref = pref
                .as_ref()
                .map(|p| json!({"provider": p.provider, "model": p.model}));
            st.row.clone()
        };
        self.store
            .with(move |db| rows::put_session(db, &row))
            .await?;
        let (provider, model) = pref
            .as_ref()
            .map(|p| (p.provider.clone(), p.model.clone()))
            .unwrap_or_default();
        self.bus.publish(
            sid,
            Event::SessionModelUpdated(ModelUpdated {
                provider,
                model,
                reason: "pinned".into(),
            }),
        );
        Ok(ModelAnswer { model: pref })
    }

    /// Sessions of the project `pid` (the id derived from its root).
    async fn project_sessions(&self, pid: &str) -> MetaResult<Vec<String>> {
        let all = self.store.with(rows::all_sessions).await?;
        Ok(all
            .into_iter()
            .filter(|r| project_id(&r.root) == pid)
            .map(|r| r.id)
            .collect())
    }

    /// Deletes a project: with `recursive`, every session in it (as `DELETE` of each does).
    /// A project is its root folder here, so there is no separate row to drop.
    pub async fn delete_project(
        self: &Arc<Self>,
        pid: &str,
        recursive: bool,
    ) -> MetaResult<ProjectDeleted> {
        let sids = self.project_sessions(pid).await?;
        if sids.is_empty() {
            return Err(MetaError::ProjectNotFound {
                pid: pid.to_string(),
            });
        }
        let mut deleted = Vec::new();
        if recursive {
            for sid in &sids {
                self.delete_session(sid).await;
                deleted.push(sid.clone());
            }
        }
        Ok(ProjectDeleted {
            project_id: pid.to_string(),
            session_count: sids.len() as u64,
            deleted_session_ids: deleted,
        })
    }

    /// The settled turns of a session, oldest first (where a fork can be cut).
    pub async fn fork_points(&self, sid: &str) -> MetaResult<ForkPoints> {
        let turns = self.sessions.turns(sid).await?;
        let parent = sid.to_string();
        let forks = self
            .store
            .with(move |db| {
                let rows = crate::drafts::rows::forks_of(db, &parent)?;
                let mut out = Vec::new();
                for f in rows {
                    let title = rows::get_session(db, &f.session_id)?.and_then(|r| r.title);
                    out.push(ForkChild {
                        session_id: f.session_id,
                        title,
                        through_turn_id: f.through_turn_id,
                        created_at: f.created_at,
                    });
                }
                Ok(out)
            })
            .await?;
        Ok(ForkPoints {
            forks,
            turns: turns
                .into_iter()
                .filter(|t| t.status.is_terminal())
                .map(|t| ForkPoint {
                    request: Some(t.display_request.clone().unwrap_or(t.request.clone())),
                    created_at: Some(t.created_at),
                    turn_id: t.tid,
                })
                .collect(),
        })
    }

    /// Forks a session: a new session in the same project holding copies of the settled
    /// turns up to and including `req.through_turn_id` (a gateway or engine turn id; all
    /// when absent), with its own draft when a label is given. Answers the new session's id.
    pub async fn fork(self: &Arc<Self>, sid: &str, req: &ForkRequest) -> MetaResult<String> {
        let plan = self.plan_fork(sid, req).await?;
        let created = self.create_session(plan.session.clone()).await?;
        self.finish_fork(sid, plan, created.id).await
    }

    /// The first half of a fork: checks the request and the parent's settled turns and
    /// names the new session.
    async fn plan_fork(&self, sid: &str, req: &ForkRequest) -> MetaResult<ForkPlan> {
        if let Some(l) = &req.draft_label {
            crate::drafts::check_label(l)?;
        }
        let through = req.through_turn_id.clone();
        let turns: Vec<Turn> = self
            .sessions
            .turns(sid)
            .await?
            .into_iter()
            .filter(|t| t.status.is_terminal())
            .collect();
        if turns.is_empty() {
            return Err(MetaError::NothingToFork);
        }
        let end = match &through {
            None => turns.len(),
            Some(id) => {
                turns
                    .iter()
                    .position(|t| &t.tid == id || &t.engine_turn_id == id)
                    .ok_or_else(|| MetaError::UnknownForkTurn { tid: id.clone() })?
                    + 1
            }
        };
        let source = self.sessions.get(sid).await?.lock().row.clone();
        let parent = sid.to_string();
        let earlier = self
            .store
            .with(move |db| crate::drafts::rows::forks_of(db, &parent))
            .await?
            .len();
        let title = fork_title(
            source.title.as_deref(),
            earlier + 1,
            (end < turns.len()).then_some(end),
        );
        let session = CreateSession {
            channel: Some(source.channel.clone()),
            title: Some(title.chars().take(200).collect()),
            root: Some(source.root.clone()),
            ..Default::default()
        };
        Ok(ForkPlan {
            source,
            turns,
            end,
            draft_label: req.draft_label.clone(),
            session,
        })
    }

    /// The second half of a fork, once its session `new_sid` exists: copies the turns and
    /// the memory, records the fork, opens its draft (the new session is deleted when the
    /// draft cannot be opened).
    async fn finish_fork(
        self: &Arc<Self>,
        sid: &str,
        plan: ForkPlan,
        new_sid: String,
    ) -> MetaResult<String> {
        let ForkPlan {
            source,
            turns,
            end,
            draft_label,
            session: _,
        } = plan;
        let shared = self.sessions.get(&new_sid).await?;
        let mut copies = Vec::new();
        let mut memory = Vec::new();
        for t in &turns[..end] {
            let mut c = t.clone();
            c.tid = uuid::Uuid::new_v4().to_string();
            c.sid = new_sid.clone();
            c.ord = self.sessions.next_ord();
            c.engine_turn_id = c.tid.clone();
            c.idempotency_key = None;
            if c.status == Status::Streaming || c.status == Status::Queued {
                continue;
            }
            memory.push(crate::agent::memory::CopiedTurn {
                old_tid: t.tid.clone(),
                new_tid: c.tid.clone(),
                old_ord: t.ord,
                new_ord: c.ord,
            });
            copies.push(c);
        }
        let through_tid = turns[end - 1].tid.clone();
        let row = {
            let mut st = shared.lock();
            st.row.turn_count = copies.len() as i64;
            st.row.first_request = source.first_request.clone();
            st.row.model_pref = source.model_pref.clone();
            st.row.modified_at = copies.last().and_then(|t| t.completed_at);
            st.row.clone()
        };
        let (parent, now) = (sid.to_string(), now_ms());
        self.store
            .with(move |db| {
                db.atomically(|db| {
                    for t in &copies {
                        let rec = serde_json::to_string(t)
                            .map_err(|e| crate::store::StoreError::Other(e.to_string()))?;
                        rows::put_turn(db, &t.tid, &t.sid, t.ord, t.status.as_str(), None, &rec)?;
                    }
                    rows::put_session(db, &row)?;
                    crate::agent::memory::copy_for_fork(db, &parent, &row.id, &memory)?;
                    crate::drafts::rows::put_fork(db, &row.id, &parent, Some(&through_tid), now)
                })
            })
            .await?;
        self.workspaces.publish(
            sid,
            Event::SessionForked(Forked {
                session_id: sid.to_string(),
                fork_session_id: new_sid.clone(),
                through_turn_id: turns[end - 1].tid.clone(),
                created_at: now,
            }),
        );
        if let Some(label) = &draft_label {
            if let Err(e) = self.workspaces.create(&new_sid, label, false).await {
                self.delete_session(&new_sid).await;
                return Err(e.into());
            }
        }
        Ok(new_sid)
    }
}

/// A fork's title: the parent's, numbered among its forks, with the turn it was cut at
/// when that is not the last one (`Fork 2 · Parser work (turn 3)`), so the list tells
/// forks of one session apart.
fn fork_title(parent: Option<&str>, n: usize, cut_at: Option<usize>) -> String {
    let title = parent
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or("Untitled");
    let at = cut_at.map(|t| format!(" (turn {t})")).unwrap_or_default();
    let max = 200usize.saturating_sub(at.chars().count() + 16);
    let title: String = title.chars().take(max).collect();
    format!("Fork {n} · {title}{at}")
}
