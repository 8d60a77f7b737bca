//! Schema migrations, applied in order and tracked by `PRAGMA user_version`.

use rusqlite::Connection;

const MIGRATIONS: &[&str] = &[
    // 1: sessions, turns, the stored event journal, extension state.
    r#"
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        title TEXT,
        external_id TEXT,
        workspace_id TEXT,
        root TEXT NOT NULL,
        owner_id TEXT,
        created_at INTEGER NOT NULL,
        modified_at INTEGER,
        last_active_at INTEGER NOT NULL,
        turn_count INTEGER NOT NULL DEFAULT 0,
        first_request TEXT,
        favorite_rank INTEGER,
        model_pref TEXT,
        last_seq INTEGER NOT NULL DEFAULT 0,
        trimmed_through INTEGER NOT NULL DEFAULT 0,
        last_status TEXT NOT NULL DEFAULT 'idle',
        queue_paused INTEGER NOT NULL DEFAULT 0,
        cancel_floor INTEGER
    );
    CREATE TABLE turns (
        tid TEXT PRIMARY KEY,
        sid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        ord INTEGER NOT NULL,
        status TEXT NOT NULL,
        idempotency_key TEXT,
        record TEXT NOT NULL
    );
    CREATE INDEX turns_by_session ON turns(sid, ord);
    CREATE INDEX turns_by_status ON turns(status);
    CREATE UNIQUE INDEX turns_idempotency ON turns(sid, idempotency_key) WHERE idempotency_key IS NOT NULL;
    CREATE TABLE events (
        sid TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (sid, seq)
    ) WITHOUT ROWID;
    CREATE TABLE egress (
        sid TEXT NOT NULL,
        seq INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (sid, seq)
    ) WITHOUT ROWID;
    CREATE TABLE extension_state (
        extension TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (extension, key)
    ) WITHOUT ROWID;
    "#,
    // 2: full-text search over session titles and turn texts (request, reply, thinking),
    // kept in step with every write of `sessions` and `turns` by triggers. Row ids:
    // `-sessions.rowid` for a title, `turns.rowid * 4 + 1..3` for a turn's three sides.
    r#"
    CREATE VIRTUAL TABLE search_text USING fts5(
        body, sid UNINDEXED, tid UNINDEXED, side UNINDEXED, at UNINDEXED,
        tokenize = 'unicode61 remove_diacritics 2', prefix = '2 3 4 5'
    );
    CREATE VIRTUAL TABLE search_terms USING fts5vocab(search_text, 'row');
    CREATE TRIGGER search_turn_insert AFTER INSERT ON turns BEGIN
        INSERT INTO search_text(rowid, body, sid, tid, side, at)
        SELECT new.rowid * 4 + 1, b, new.sid, new.tid, 'request', json_extract(new.record, '$.created_at')
        FROM (SELECT COALESCE(json_extract(new.record, '$.display_request'), json_extract(new.record, '$.request')) AS b)
        WHERE b IS NOT NULL AND b <> '';
        INSERT INTO search_text(rowid, body, sid, tid, side, at)
        SELECT new.rowid * 4 + 2, b, new.sid, new.tid, 'reply', json_extract(new.record, '$.created_at')
        FROM (SELECT group_concat(json_extract(value, '$.markdown'), char(10)) AS b
              FROM json_each(new.record, '$.content') WHERE json_extract(value, '$.type') = 'prose')
        WHERE b IS NOT NULL AND b <> '';
        INSERT INTO search_text(rowid, body, sid, tid, side, at)
        SELECT new.rowid * 4 + 3, b, new.sid, new.tid, 'thinking', json_extract(new.record, '$.created_at')
        FROM (SELECT group_concat(json_extract(value, '$.thinking'), char(10)) AS b
              FROM json_each(new.record, '$.iterations') WHERE json_extract(value, '$.thinking') <> '')
        WHERE b IS NOT NULL AND b <> '';
    END;
    CREATE TRIGGER search_turn_update AFTER UPDATE OF record ON turns BEGIN
        DELETE FROM search_text WHERE rowid BETWEEN old.rowid * 4 + 1 AND old.rowid * 4 + 3;
        INSERT INTO search_text(rowid, body, sid, tid, side, at)
        SELECT new.rowid * 4 + 1, b, new.sid, new.tid, 'request', json_extract(new.record, '$.created_at')
        FROM (SELECT COALESCE(json_extract(new.record, '$.display_request'), json_extract(new.record, '$.request')) AS b)
        WHERE b IS NOT NULL AND b <> '';
        INSERT INTO search_text(rowid, body, sid, tid, side, at)
        SELECT new.rowid * 4 + 2, b, new.sid, new.tid, 'reply', json_extract(new.record, '$.created_at')
        FROM (SELECT group_concat(json_extract(value, '$.markdown'), char(10)) AS b
              FROM json_each(new.record, '$.content') WHERE json_extract(value, '$.type') = 'prose')
        WHERE b IS NOT NULL AND b <> '';
        INSERT INTO search_text(rowid, body, sid, tid, side, at)
        SELECT new.rowid * 4 + 3, b, new.sid, new.tid, 'thinking', json_extract(new.record, '$.created_at')
        FROM (SELECT group_concat(json_extract(value, '$.thinking'), char(10)) AS b
              FROM json_each(new.record, '$.iterations') WHERE json_extract(value, '$.thinking') <> '')
        WHERE b IS NOT NULL AND b <> '';
    END;
    CREATE TRIGGER search_turn_delete AFTER DELETE ON turns BEGIN
        DELETE FROM search_text WHERE rowid BETWEEN old.rowid * 4 + 1 AND old.rowid * 4 + 3;
    END;
    CREATE TRIGGER search_session_insert AFTER INSERT ON sessions
    WHEN new.title IS NOT NULL AND new.title <> '' BEGIN
        INSERT INTO search_text(rowid, body, sid, tid, side, at)
        VALUES (-new.rowid, new.title, new.id, NULL, 'title', new.created_at);
    END;
    CREATE TRIGGER search_session_title AFTER UPDATE OF title ON sessions
    WHEN old.title IS NOT new.title BEGIN
        DELETE FROM search_text WHERE rowid = -old.rowid;
        INSERT INTO search_text(rowid, body, sid, tid, side, at)
        SELECT -new.rowid, new.title, new.id, NULL, 'title', new.created_at
        WHERE new.title IS NOT NULL AND new.title <> '';
    END;
    CREATE TRIGGER search_session_delete AFTER DELETE ON sessions BEGIN
        DELETE FROM search_text WHERE rowid = -old.rowid;
    END;
    INSERT INTO search_text(rowid, body, sid, tid, side, at)
    SELECT -rowid, title, id, NULL, 'title', created_at FROM sessions
    WHERE title IS NOT NULL AND title <> '';
    UPDATE turns SET record = record;
    "#,
    // 3: files the agent produced (and people's revisions of them), push devices, and the
    // gateway's own settings (reasoning level, verbosity, fast mode, router defaults).
    r#"
    CREATE TABLE artifacts (
        id INTEGER PRIMARY KEY,
        sid TEXT NOT NULL,
        tid TEXT NOT NULL,
        iteration_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        tool_call_id TEXT,
        kind TEXT NOT NULL,
        filename TEXT NOT NULL,
        media_type TEXT NOT NULL,
        version INTEGER NOT NULL,
        size INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        data BLOB NOT NULL,
        UNIQUE (sid, iteration_id, idx)
    );
    CREATE INDEX artifacts_by_session ON artifacts(sid, id);
    CREATE TRIGGER artifacts_follow_sessions AFTER DELETE ON sessions BEGIN
        DELETE FROM artifacts WHERE sid = old.id;
    END;
    CREATE TABLE devices (
        token TEXT PRIMARY KEY,
        record TEXT NOT NULL
    );
    CREATE TABLE gateway_settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    "#,
    // 4: drafts (isolated workspaces; `record` is the whole draft as JSON, the columns are
    // what lookups need) and forks (which session a fork was cut from, and where).
    r#"
    CREATE TABLE drafts (
        id TEXT PRIMARY KEY,
        repo_root TEXT NOT NULL,
        label TEXT NOT NULL,
        state TEXT NOT NULL,
        session_id TEXT,
        created_at INTEGER NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX drafts_by_repo ON drafts(repo_root, state, created_at);
    CREATE UNIQUE INDEX drafts_active_label ON drafts(repo_root, label) WHERE state = 'active';
    CREATE UNIQUE INDEX drafts_pinned ON drafts(session_id) WHERE session_id IS NOT NULL;
    CREATE TABLE forks (
        child TEXT PRIMARY KEY,
        parent TEXT NOT NULL,
        through_tid TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX forks_by_parent ON forks(parent, created_at);
    "#,
    // 5: the agent's memory: each settled turn's model-visible exchange, and the summaries
    // compactions wrote (the newest replaces the session's older part).
    r#"
    CREATE TABLE transcripts (
        sid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        tid TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (sid, tid)
    ) WITHOUT ROWID;
    CREATE TABLE compactions (
        sid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        n INTEGER NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (sid, n)
    ) WITHOUT ROWID;
    "#,
    // 6: learn mode (docs/decisions.md, L1): a session's own network mode switch, and the
    // policy changes written into a project's vis.yml (who applied what; `record` is the
    // change as JSON).
    r#"
    CREATE TABLE egress_modes (
        sid TEXT PRIMARY KEY,
        mode TEXT NOT NULL
    );
    CREATE TABLE policy_changes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        root TEXT NOT NULL,
        sid TEXT,
        applied_at INTEGER NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX policy_changes_by_root ON policy_changes(root, id);
    "#,
];

pub fn apply(conn: &Connection) -> rusqlite::Result<()> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate() {
        let version = i as i64 + 1;
        if version <= current {
            continue;
        }
        conn.execute_batch(&format!(
            "BEGIN; {sql}; PRAGMA user_version = {version}; COMMIT;"
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_once_and_are_idempotent() {
        let conn = Connection::open_in_memory().unwrap();
        apply(&conn).unwrap();
        apply(&conn).unwrap();
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, MIGRATIONS.len() as i64);
    }
}
