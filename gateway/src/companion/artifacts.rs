//! Files the agent produced: after an iteration's tool calls (`patch`, `shell`, Python
//! writing files) the workspace is walked (`.gitignore` honoured, bounded) for files
//! modified since the calls began; each is copied into the store (table `artifacts`) as an
//! immutable version, listed by `GET …/artifacts` and served by
//! `GET …/iterations/:iid/attachments/:idx`. People save revisions through `POST` on the
//! same resource. Copies, not links: a later edit in the workspace does not change what a
//! turn produced.

use super::errors::ArtifactError;
use crate::records::SessionReader;
use crate::store::sql::AnyRow;
use crate::store::{Db, Store, StoreResult};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
use vis_companion_api::records::{
    ArtifactList, IterationAttachment, IterationAttachments, NewRevision, StoredBytes,
};
use vis_companion_api::sse::now_ms;

/// Entries walked per scan at most, and the longest a scan may take (a scan that hits either
/// reports what it found so far).
const MAX_SCAN: usize = 200_000;
const MAX_SCAN_TIME: std::time::Duration = std::time::Duration::from_secs(2);
/// Files kept per iteration at most.
const MAX_PER_ITERATION: usize = 16;
/// Largest file copied.
const MAX_BYTES: u64 = 25 * 1024 * 1024;

/// The start of a tool phase, as compared with file modification times: a little before
/// now, because file systems stamp times from a coarse clock that can lag by a tick.
pub fn mark() -> SystemTime {
    SystemTime::now() - std::time::Duration::from_millis(25)
}

/// A media type from a file name's extension (`application/octet-stream` when unknown).
pub fn media_type(name: &str) -> &'static str {
    let ext = name.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "csv" => "text/csv",
        "md" | "markdown" => "text/markdown",
        "txt" | "log" | "rs" | "py" | "js" | "ts" | "tsx" | "jsx" | "toml" | "yaml" | "yml"
        | "sh" | "c" | "h" | "cpp" | "go" | "java" | "rb" | "sql" | "xml" => "text/plain",
        "zip" => "application/zip",
        "mp4" => "video/mp4",
        "wav" => "audio/wav",
        "mp3" => "audio/mpeg",
        _ => "application/octet-stream",
    }
}

/// Files under `root` modified at or after `since`, relative paths, oldest first.
pub fn changed_since(root: &Path, since: SystemTime) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    let walker = ignore::WalkBuilder::new(root)
        .hidden(true)
        .git_ignore(true)
        .git_global(false)
        .require_git(false)
        .build();
    let started = std::time::Instant::now();
    for (n, dent) in walker.flatten().enumerate() {
        if n >= MAX_SCAN || (n % 1024 == 0 && started.elapsed() > MAX_SCAN_TIME) {
            break;
        }
        if !dent.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let Some(meta) = dent.metadata().ok() else {
            continue;
        };
        let Ok(modified) = meta.modified() else {
            continue;
        };
        if modified < since || meta.len() > MAX_BYTES {
            continue;
        }
        if let Ok(rel) = dent.path().strip_prefix(root) {
            found.push((
                modified,
                rel.to_string_lossy().to_string(),
                dent.into_path(),
            ));
        }
    }
    found.sort();
    found
        .into_iter()
        .take(MAX_PER_ITERATION)
        .map(|(_, rel, abs)| (rel, abs))
        .collect()
}

/// A select of attachment descriptors from `artifacts a`, with the rest of the statement.
macro_rules! descriptors {
    ($rest:literal) => {
        concat!(
            "SELECT a.idx, a.iteration_id, a.tool_call_id, a.kind, a.media_type, a.filename, \
             a.version, a.size, (SELECT COUNT(*) FROM turns t WHERE t.sid = a.sid \
             AND t.ord <= (SELECT ord FROM turns WHERE tid = a.tid)) FROM artifacts a ",
            $rest
        )
    };
}

fn descriptor(r: &AnyRow) -> StoreResult<IterationAttachment> {
    Ok(IterationAttachment {
        index: r.get(0)?,
        iteration_id: r.get(1)?,
        tool_call_id: r.get(2)?,
        kind: r.get(3)?,
        media_type: r.get(4)?,
        filename: r.get(5)?,
        version: r.get(6)?,
        size: r.get(7)?,
        turn: r.get::<Option<i64>>(8)?.filter(|n| *n > 0),
    })
}

/// One file to store: `(filename, media type, bytes)`.
pub type NewFile = (String, String, Vec<u8>);

/// Stores `files` as the next attachments of the iteration (next index, next version of
/// each filename in the session) and returns their descriptors.
pub fn insert(
    db: &mut Db,
    sid: &str,
    tid: &str,
    iteration_id: &str,
    tool_call_id: Option<&str>,
    kind: &str,
    files: Vec<NewFile>,
) -> StoreResult<Vec<IterationAttachment>> {
    db.atomically(|db| {
        let mut out = Vec::new();
        for (filename, media, bytes) in files {
            let idx: i64 = db
                .value(
                    "SELECT COALESCE(MAX(idx) + 1, 0) FROM artifacts WHERE sid = ?1 AND iteration_id = ?2",
                    &[&sid, &iteration_id],
                )?
                .unwrap_or(0);
            let version: i64 = db
                .value(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM artifacts WHERE sid = ?1 AND filename = ?2",
                    &[&sid, &filename],
                )?
                .unwrap_or(1);
            db.exec(
                "INSERT INTO artifacts (sid, tid, iteration_id, idx, tool_call_id, kind, filename, \
                 media_type, version, size, created_at, data) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
                &[&sid, &tid, &iteration_id, &idx, &tool_call_id, &kind, &filename, &media,
                    &version, &(bytes.len() as i64), &now_ms(), &bytes],
            )?;
            let stored = db.row(
                descriptors!("WHERE a.sid = ?1 AND a.iteration_id = ?2 AND a.idx = ?3"),
                &[&sid, &iteration_id, &idx],
                descriptor,
            )?;
            out.extend(stored);
        }
        Ok(out)
    })
}

/// Reads the files a tool phase changed and stores them (blocking; run on a worker).
pub fn collect(root: &Path, since: SystemTime) -> Vec<NewFile> {
    changed_since(root, since)
        .into_iter()
        .filter_map(|(rel, abs)| {
            let bytes = std::fs::read(abs).ok()?;
            Some((rel.clone(), media_type(&rel).to_string(), bytes))
        })
        .collect()
}

/// The produced-files job: stores what a turn's tool calls wrote and serves it back.
pub struct Artifacts {
    store: Store,
    sessions: Arc<dyn SessionReader>,
}

impl Artifacts {
    pub fn new(store: Store, sessions: Arc<dyn SessionReader>) -> Self {
        Artifacts { store, sessions }
    }

    /// Records what the tool calls of one iteration wrote in the workspace.
    pub async fn record(
        &self,
        sid: &str,
        tid: &str,
        iteration_id: &str,
        tool_call_id: Option<String>,
        root: PathBuf,
        since: SystemTime,
    ) -> Vec<IterationAttachment> {
        let files = tokio::task::spawn_blocking(move || collect(&root, since))
            .await
            .unwrap_or_default();
        if files.is_empty() {
            return Vec::new();
        }
        let (s, t, i) = (sid.to_string(), tid.to_string(), iteration_id.to_string());
        self.store
            .with(move |db| insert(db, &s, &t, &i, tool_call_id.as_deref(), "file", files))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "could not store the turn's files");
                Vec::new()
            })
    }

    /// Every file stored for the session, oldest first.
    pub async fn list(&self, sid: &str) -> Result<ArtifactList, ArtifactError> {
        self.sessions.row(sid).await?;
        let s = sid.to_string();
        let artifacts = self
            .store
            .with(move |db| {
                db.rows(
                    descriptors!("WHERE a.sid = ?1 ORDER BY a.id"),
                    &[&s],
                    descriptor,
                )
            })
            .await?;
        Ok(ArtifactList { artifacts })
    }

    /// The files of one iteration, in index order.
    pub async fn of_iteration(
        &self,
        sid: &str,
        iid: &str,
    ) -> Result<IterationAttachments, ArtifactError> {
        self.sessions.row(sid).await?;
        let (s, i) = (sid.to_string(), iid.to_string());
        let attachments = self
            .store
            .with(move |db| {
                db.rows(
                    descriptors!("WHERE a.sid = ?1 AND a.iteration_id = ?2 ORDER BY a.idx"),
                    &[&s, &i],
                    descriptor,
                )
            })
            .await?;
        Ok(IterationAttachments { attachments })
    }

    /// The bytes of one stored file.
    pub async fn bytes(
        &self,
        sid: &str,
        iid: &str,
        index: i64,
    ) -> Result<StoredBytes, ArtifactError> {
        self.sessions.row(sid).await?;
        let (s, i) = (sid.to_string(), iid.to_string());
        let row = self
            .store
            .with(move |db| {
                db.row(
                    "SELECT media_type, filename, data FROM artifacts WHERE sid = ?1 AND iteration_id = ?2 AND idx = ?3",
                    &[&s, &i, &index],
                    |r| Ok(StoredBytes { media_type: r.get(0)?, filename: r.get(1)?, bytes: r.get(2)? }),
                )
            })
            .await
            ?;
        row.ok_or_else(|| ArtifactError::NoAttachment {
            iid: iid.to_string(),
            index,
        })
    }

    /// A person's revision of an artifact: stored as the next version of that filename in
    /// the iteration `iid` (`<turn id>:<n>`), which must exist in the session.
    pub async fn save_revision(
        &self,
        sid: &str,
        iid: &str,
        rev: NewRevision,
    ) -> Result<IterationAttachment, ArtifactError> {
        let missing = |message: String| ArtifactError::NoIteration { message };
        let (tid, n) = iid
            .rsplit_once(':')
            .and_then(|(t, n)| Some((t.to_string(), n.parse::<usize>().ok()?)))
            .ok_or_else(|| missing(format!("no iteration {iid}")))?;
        let turn = self
            .sessions
            .turn(sid, &tid)
            .await
            .map_err(|_| missing(format!("no iteration {iid} in this session")))?;
        if n == 0 || n > turn.iterations.len() {
            return Err(missing(format!("turn {tid} has no iteration {n}")));
        }
        let (s, i) = (sid.to_string(), iid.to_string());
        let file = (rev.filename, rev.media_type, rev.bytes);
        let mut saved = self
            .store
            .with(move |db| insert(db, &s, &tid, &i, None, "revision", vec![file]))
            .await?;
        saved.pop().ok_or(ArtifactError::RevisionNotStored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_changed_since_the_mark_are_found_and_gitignored_ones_are_not() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("old.txt"), "old").unwrap();
        std::fs::write(d.path().join(".gitignore"), "build/\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150));
        let mark = mark();
        std::fs::create_dir_all(d.path().join("build")).unwrap();
        std::fs::write(d.path().join("build/out.bin"), "x").unwrap();
        std::fs::write(d.path().join("plot.png"), "png").unwrap();
        let found: Vec<String> = changed_since(d.path(), mark)
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        assert_eq!(found, vec!["plot.png".to_string()]);
        assert_eq!(media_type("plot.PNG"), "image/png");
    }

    #[tokio::test]
    async fn stored_files_get_the_next_index_and_version_and_read_back_on_either_engine() {
        use crate::store::rows::{put_session, SessionRow};
        for (store, _keep) in crate::store::test_support::each_engine("artifacts").await {
            let (first, second, bytes) = store
                .with(|db| {
                    let row = SessionRow::bare("s");
                    put_session(db, &row)?;
                    let file = |b: &[u8]| ("a.txt".to_string(), "text/plain".to_string(), b.to_vec());
                    let first = insert(db, "s", "t", "t:1", None, "file", vec![file(b"one")])?;
                    let second = insert(db, "s", "t", "t:1", Some("c"), "file", vec![file(b"two!")])?;
                    let bytes: Option<Vec<u8>> = db.value(
                        "SELECT data FROM artifacts WHERE sid = ?1 AND iteration_id = ?2 AND idx = ?3",
                        &[&"s", &"t:1", &1i64],
                    )?;
                    Ok((first, second, bytes))
                })
                .await
                .expect("store");
            assert_eq!((first[0].index, first[0].version, first[0].size), (0, 1, 3));
            assert_eq!(
                (second[0].index, second[0].version, second[0].size),
                (1, 2, 4)
            );
            assert_eq!(second[0].tool_call_id.as_deref(), Some("c"));
            assert_eq!(bytes.as_deref(), Some(&b"two!"[..]));
        }
    }
}
