//! The drafts' and forks' rows, run on the store thread, on either engine.

use super::{Draft, DraftState};
use crate::store::{Db, StoreError, StoreResult};

fn decode(rec: String) -> StoreResult<Draft> {
    serde_json::from_str(&rec).map_err(|e| StoreError::Other(format!("a draft record: {e}")))
}

/// Writes (inserts or replaces) a draft.
pub fn put(db: &mut Db, d: &Draft) -> StoreResult<()> {
    let rec = serde_json::to_string(d).map_err(|e| StoreError::Other(e.to_string()))?;
    // Only an active draft may hold a label or a session pin.
    let pinned = (d.state == DraftState::Active)
        .then_some(d.session_id.as_deref())
        .flatten();
    let root = d.repo_root.to_string_lossy().into_owned();
    db.exec(
        "INSERT INTO drafts (id, repo_root, label, state, session_id, created_at, record) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
         ON CONFLICT (id) DO UPDATE SET repo_root = excluded.repo_root, label = excluded.label, \
         state = excluded.state, session_id = excluded.session_id, \
         created_at = excluded.created_at, record = excluded.record",
        &[
            &d.workspace_id,
            &root,
            &d.label,
            &d.state.as_str(),
            &pinned,
            &d.fork_ms,
            &rec,
        ],
    )?;
    Ok(())
}

pub fn get(db: &mut Db, id: &str) -> StoreResult<Option<Draft>> {
    db.value::<String>("SELECT record FROM drafts WHERE id = ?1", &[&id])?
        .map(decode)
        .transpose()
}

/// Active drafts of a repository, newest first.
pub fn active_of_repo(db: &mut Db, repo_root: &str) -> StoreResult<Vec<Draft>> {
    db.column::<String>(
        "SELECT record FROM drafts WHERE repo_root = ?1 AND state = 'active' \
         ORDER BY created_at DESC, id",
        &[&repo_root],
    )?
    .into_iter()
    .map(decode)
    .collect()
}

/// Every active draft a session is inside (for the in-memory pins at start).
pub fn pinned(db: &mut Db) -> StoreResult<Vec<Draft>> {
    db.column::<String>(
        "SELECT record FROM drafts WHERE state = 'active' AND session_id IS NOT NULL",
        &[],
    )?
    .into_iter()
    .map(decode)
    .collect()
}

/// One fork of a session.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ForkRow {
    pub session_id: String,
    pub through_turn_id: Option<String>,
    pub created_at: i64,
}

pub fn put_fork(
    db: &mut Db,
    child: &str,
    parent: &str,
    through: Option<&str>,
    at: i64,
) -> StoreResult<()> {
    db.exec(
        "INSERT INTO forks (child, parent, through_tid, created_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (child) DO UPDATE SET parent = excluded.parent, \
         through_tid = excluded.through_tid, created_at = excluded.created_at",
        &[&child, &parent, &through, &at],
    )?;
    Ok(())
}

/// The forks cut from `parent` that still exist, oldest first.
pub fn forks_of(db: &mut Db, parent: &str) -> StoreResult<Vec<ForkRow>> {
    db.rows(
        "SELECT f.child, f.through_tid, f.created_at FROM forks f \
         JOIN sessions s ON s.id = f.child WHERE f.parent = ?1 ORDER BY f.created_at, f.child",
        &[&parent],
        |r| {
            Ok(ForkRow {
                session_id: r.get(0)?,
                through_turn_id: r.get(1)?,
                created_at: r.get(2)?,
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drafts::Backend;
    use crate::store::rows::{put_session, SessionRow};
    use crate::store::test_support::each_engine;
    use std::path::PathBuf;

    fn draft(id: &str, label: &str, state: DraftState, sid: Option<&str>, at: i64) -> Draft {
        Draft {
            workspace_id: id.into(),
            label: label.into(),
            repo_root: PathBuf::from("/repo"),
            trunk_root: PathBuf::from("/repo"),
            dir: PathBuf::from("/drafts").join(id),
            root: PathBuf::from("/drafts").join(id),
            backend: Backend::Copy,
            branch: None,
            target_branch: None,
            baseline: None,
            state,
            session_id: sid.map(str::to_string),
            created_by: "test".into(),
            fork_ms: at,
            ended_ms: None,
            reason: None,
        }
    }

    #[tokio::test]
    async fn drafts_are_replaced_in_place_and_listed_newest_first_on_either_engine() {
        for (store, _keep) in each_engine("drafts").await {
            let (listed, pinned, ended) = store
                .with(|db| {
                    put(db, &draft("d1", "one", DraftState::Active, Some("s1"), 1))?;
                    put(db, &draft("d2", "two", DraftState::Active, None, 2))?;
                    // Ending a draft keeps its row and frees its label and pin.
                    put(db, &draft("d1", "one", DraftState::Applied, Some("s1"), 1))?;
                    put(db, &draft("d3", "one", DraftState::Active, Some("s1"), 3))?;
                    let listed: Vec<String> = active_of_repo(db, "/repo")?
                        .into_iter()
                        .map(|d| d.workspace_id)
                        .collect();
                    let pinned: Vec<String> =
                        pinned(db)?.into_iter().map(|d| d.workspace_id).collect();
                    Ok((listed, pinned, get(db, "d1")?.map(|d| d.state)))
                })
                .await
                .expect("store");
            assert_eq!(listed, ["d3", "d2"]);
            assert_eq!(pinned, ["d3"]);
            assert_eq!(ended, Some(DraftState::Applied));
        }
    }

    #[tokio::test]
    async fn a_second_active_draft_with_the_same_label_is_refused_on_either_engine() {
        for (store, _keep) in each_engine("drafts").await {
            let second = store
                .with(|db| {
                    put(db, &draft("d1", "same", DraftState::Active, None, 1))?;
                    Ok(put(db, &draft("d2", "same", DraftState::Active, None, 2)).is_err())
                })
                .await
                .expect("store");
            assert!(second, "the label's unique index refuses it");
        }
    }

    #[tokio::test]
    async fn forks_of_a_session_list_only_children_that_still_exist_on_either_engine() {
        for (store, _keep) in each_engine("forks").await {
            let forks = store
                .with(|db| {
                    for id in ["p", "c1"] {
                        let row = SessionRow::bare(id);
                        put_session(db, &row)?;
                    }
                    put_fork(db, "c1", "p", Some("t1"), 10)?;
                    put_fork(db, "gone", "p", None, 5)?;
                    forks_of(db, "p")
                })
                .await
                .expect("store");
            assert_eq!(
                forks,
                [ForkRow {
                    session_id: "c1".into(),
                    through_turn_id: Some("t1".into()),
                    created_at: 10
                }]
            );
        }
    }
}
