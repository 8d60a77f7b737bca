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
