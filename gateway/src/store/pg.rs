//! The PostgreSQL engine of the store thread (docs/decisions.md, C3): one connection, driven
//! by a single-threaded runtime that lives on the store thread, so the jobs keep their one
//! order and no tokio worker ever waits on the database.

use super::error::{StoreError, StoreResult};
use events::{Deferred, DeferredWrite, EventStatements};
use std::collections::HashMap;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};
use vis_store::PgOptions;

mod events;
pub(crate) mod search;

/// The texts of a turn's record, one row per side (request, reply prose, thinking), as a
/// PL/pgSQL loop header over `r` (the record, parsed from `$record`) and `v_at`: the same in
/// migration 4's trigger and migration 5's indexer.
macro_rules! turn_sides {
    ($record:literal) => {
        concat!(
            "        r := ",
            $record,
            r#"::JSONB;
        v_at := CASE WHEN jsonb_typeof(r->'created_at') = 'number'
                     THEN (r->>'created_at')::NUMERIC::BIGINT END;
        FOR v_side, v_body IN
            SELECT 'request', COALESCE(r->>'display_request', r->>'request')
            UNION ALL
            SELECT 'reply', string_agg(e->>'markdown', E'\n')
            FROM jsonb_array_elements(CASE WHEN jsonb_typeof(r->'content') = 'array'
                                           THEN r->'content' ELSE '[]'::JSONB END) e
            WHERE e->>'type' = 'prose'
            UNION ALL
            SELECT 'thinking', string_agg(e->>'thinking', E'\n')
            FROM jsonb_array_elements(CASE WHEN jsonb_typeof(r->'iterations') = 'array'
                                           THEN r->'iterations' ELSE '[]'::JSONB END) e
            WHERE COALESCE(e->>'thinking', '') <> ''
"#
        )
    };
}

/// The start of the turn trigger (migrations 4 and 5): a deleted turn's texts go, and a write
/// that changed none of the record, session or order does nothing more.
macro_rules! turn_write_early_returns {
    () => {
        r#"        IF TG_OP = 'DELETE' THEN
            DELETE FROM search_text WHERE tid = OLD.tid AND side <> 'title';
            RETURN OLD;
        END IF;
        IF TG_OP = 'UPDATE' AND OLD.record = NEW.record AND OLD.sid = NEW.sid
           AND OLD.ord = NEW.ord THEN
            RETURN NEW;
        END IF;
"#
    };
}

/// The gateway's own tables and columns, on top of the journal's schema (`vis_store`'s
/// migrations: sessions with their home and seq high-water, events, egress, leases).
/// Numbered like the SQLite ones, recorded in `vis_gateway_migrations`.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the session record's columns, turns, extension state.
    r#"
    ALTER TABLE sessions
        ADD COLUMN channel TEXT NOT NULL DEFAULT '',
        ADD COLUMN title TEXT,
        ADD COLUMN external_id TEXT,
        ADD COLUMN workspace_id TEXT,
        ADD COLUMN root TEXT NOT NULL DEFAULT '',
        ADD COLUMN owner_id TEXT,
        ADD COLUMN modified_at BIGINT,
        ADD COLUMN last_active_at BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN turn_count BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN first_request TEXT,
        ADD COLUMN favorite_rank BIGINT,
        ADD COLUMN model_pref TEXT,
        ADD COLUMN last_status TEXT NOT NULL DEFAULT 'idle',
        ADD COLUMN queue_paused BOOLEAN NOT NULL DEFAULT false,
        ADD COLUMN cancel_floor BIGINT;
    CREATE TABLE turns (
        tid TEXT PRIMARY KEY,
        sid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        ord BIGINT NOT NULL,
        status TEXT NOT NULL,
        idempotency_key TEXT,
        record TEXT NOT NULL
    );
    CREATE INDEX turns_by_session ON turns(sid, ord);
    CREATE INDEX turns_by_status ON turns(status);
    CREATE UNIQUE INDEX turns_idempotency ON turns(sid, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    CREATE TABLE extension_state (
        extension TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (extension, key)
    );
    "#,
    // 2: produced files, push devices, settings, drafts and forks, the agent's memory,
    // learn mode's switches and policy changes (the SQLite migrations 3 to 6).
    r#"
    CREATE TABLE artifacts (
        id BIGSERIAL PRIMARY KEY,
        sid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        tid TEXT NOT NULL,
        iteration_id TEXT NOT NULL,
        idx BIGINT NOT NULL,
        tool_call_id TEXT,
        kind TEXT NOT NULL,
        filename TEXT NOT NULL,
        media_type TEXT NOT NULL,
        version BIGINT NOT NULL,
        size BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        data BYTEA NOT NULL,
        UNIQUE (sid, iteration_id, idx)
    );
    CREATE INDEX artifacts_by_session ON artifacts(sid, id);
    CREATE TABLE devices (
        n BIGSERIAL,
        token TEXT PRIMARY KEY,
        record TEXT NOT NULL
    );
    CREATE TABLE gateway_settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE drafts (
        id TEXT PRIMARY KEY,
        repo_root TEXT NOT NULL,
        label TEXT NOT NULL,
        state TEXT NOT NULL,
        session_id TEXT,
        created_at BIGINT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX drafts_by_repo ON drafts(repo_root, state, created_at);
    CREATE UNIQUE INDEX drafts_active_label ON drafts(repo_root, label) WHERE state = 'active';
    CREATE UNIQUE INDEX drafts_pinned ON drafts(session_id) WHERE session_id IS NOT NULL;
    CREATE TABLE forks (
        child TEXT PRIMARY KEY,
        parent TEXT NOT NULL,
        through_tid TEXT,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX forks_by_parent ON forks(parent, created_at);
    CREATE TABLE transcripts (
        sid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        tid TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (sid, tid)
    );
    CREATE TABLE compactions (
        sid TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        n BIGINT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (sid, n)
    );
    CREATE TABLE egress_modes (
        sid TEXT PRIMARY KEY,
        mode TEXT NOT NULL
    );
    CREATE TABLE policy_changes (
        id BIGSERIAL PRIMARY KEY,
        root TEXT NOT NULL,
        sid TEXT,
        applied_at BIGINT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX policy_changes_by_root ON policy_changes(root, id);
    "#,
    // 3: full-text search over titles and turn texts (SQLite's FTS5 of migration 2): one
    // row per title and per side of a turn, its `tsvector` kept by the table and its rows
    // by triggers on `sessions` and `turns`. `ord` orders turn texts newest first.
    r#"
    CREATE TABLE search_text (
        id BIGSERIAL PRIMARY KEY,
        sid TEXT NOT NULL,
        tid TEXT,
        side TEXT NOT NULL,
        at BIGINT,
        ord BIGINT NOT NULL DEFAULT 0,
        body TEXT NOT NULL,
        doc TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED
    );
    CREATE INDEX search_text_doc ON search_text USING GIN (doc);
    CREATE INDEX search_text_turn ON search_text (tid);
    CREATE INDEX search_text_session ON search_text (sid, side);
    CREATE FUNCTION search_turn_sync() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        r JSONB;
        at BIGINT;
    BEGIN
        IF TG_OP <> 'INSERT' THEN
            DELETE FROM search_text WHERE tid = OLD.tid AND side <> 'title';
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        r := NEW.record::JSONB;
        at := CASE WHEN jsonb_typeof(r->'created_at') = 'number'
                   THEN (r->>'created_at')::NUMERIC::BIGINT END;
        INSERT INTO search_text (sid, tid, side, at, ord, body)
        SELECT NEW.sid, NEW.tid, 'request', at, NEW.ord, b
        FROM (SELECT COALESCE(r->>'display_request', r->>'request') AS b) x
        WHERE b IS NOT NULL AND b <> '';
        INSERT INTO search_text (sid, tid, side, at, ord, body)
        SELECT NEW.sid, NEW.tid, 'reply', at, NEW.ord, b
        FROM (SELECT string_agg(e->>'markdown', E'\n') AS b
              FROM jsonb_array_elements(CASE WHEN jsonb_typeof(r->'content') = 'array'
                                             THEN r->'content' ELSE '[]'::JSONB END) e
              WHERE e->>'type' = 'prose') x
        WHERE b IS NOT NULL AND b <> '';
        INSERT INTO search_text (sid, tid, side, at, ord, body)
        SELECT NEW.sid, NEW.tid, 'thinking', at, NEW.ord, b
        FROM (SELECT string_agg(e->>'thinking', E'\n') AS b
              FROM jsonb_array_elements(CASE WHEN jsonb_typeof(r->'iterations') = 'array'
                                             THEN r->'iterations' ELSE '[]'::JSONB END) e
              WHERE COALESCE(e->>'thinking', '') <> '') x
        WHERE b IS NOT NULL AND b <> '';
        RETURN NEW;
    END $$;
    CREATE TRIGGER search_turn AFTER INSERT OR DELETE OR UPDATE OF record ON turns
        FOR EACH ROW EXECUTE FUNCTION search_turn_sync();
    CREATE FUNCTION search_title_sync() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'INSERT' THEN
            DELETE FROM search_text WHERE sid = OLD.id AND side = 'title';
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        IF NEW.title IS NOT NULL AND NEW.title <> '' THEN
            INSERT INTO search_text (sid, side, at, body)
            VALUES (NEW.id, 'title', NEW.created_at, NEW.title);
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER search_title AFTER INSERT OR DELETE OR UPDATE OF title ON sessions
        FOR EACH ROW EXECUTE FUNCTION search_title_sync();
    "#,
    // 4: a turn's record is written several times while it runs (queued, running, settled)
    // and its request rarely changes: a side whose text is unchanged keeps its row and its
    // index entries; only changed sides are replaced, and an unchanged record or title
    // (every session row write names the title) touches nothing.
    concat!(
        r#"
    CREATE OR REPLACE FUNCTION search_turn_sync() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        r JSONB;
        v_at BIGINT;
        v_side TEXT;
        v_body TEXT;
    BEGIN
"#,
        turn_write_early_returns!(),
        turn_sides!("NEW.record"),
        r#"        LOOP
            v_body := NULLIF(v_body, '');
            IF TG_OP = 'UPDATE' THEN
                CONTINUE WHEN v_body IS NOT NULL AND EXISTS (
                    SELECT 1 FROM search_text
                    WHERE tid = NEW.tid AND side = v_side AND sid = NEW.sid AND body = v_body
                      AND at IS NOT DISTINCT FROM v_at AND ord = NEW.ord);
                DELETE FROM search_text WHERE tid = NEW.tid AND side = v_side;
            END IF;
            IF v_body IS NOT NULL THEN
                INSERT INTO search_text (sid, tid, side, at, ord, body)
                VALUES (NEW.sid, NEW.tid, v_side, v_at, NEW.ord, v_body);
            END IF;
        END LOOP;
        RETURN NEW;
    END $$;
    CREATE OR REPLACE FUNCTION search_title_sync() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'UPDATE' AND OLD.title IS NOT DISTINCT FROM NEW.title THEN
            RETURN NEW;
        END IF;
        IF TG_OP <> 'INSERT' THEN
            DELETE FROM search_text WHERE sid = OLD.id AND side = 'title';
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        IF NEW.title IS NOT NULL AND NEW.title <> '' THEN
            INSERT INTO search_text (sid, side, at, body)
            VALUES (NEW.id, 'title', NEW.created_at, NEW.title);
        END IF;
        RETURN NEW;
    END $$;
    "#
    ),
    // 5: turn texts are indexed off the write path. A turn write only queues the turn in
    // `search_pending`; `search_index_pending` indexes the queue (the background indexer on
    // its own connection, and a search first, so it answers from an index in step with
    // every committed turn). `search_indexer`'s one row is the lock that lets one indexer
    // of the database work at a time.
    concat!(
        r#"
    CREATE TABLE search_pending (
        id BIGSERIAL PRIMARY KEY,
        tid TEXT NOT NULL
    );
    CREATE TABLE search_indexer (one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one));
    INSERT INTO search_indexer DEFAULT VALUES;
    CREATE FUNCTION search_turn_index(p_tid TEXT, p_sid TEXT, p_ord BIGINT, p_record TEXT)
    RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        r JSONB;
        v_at BIGINT;
        v_side TEXT;
        v_body TEXT;
    BEGIN
"#,
        turn_sides!("p_record"),
        r#"        LOOP
            v_body := NULLIF(v_body, '');
            CONTINUE WHEN v_body IS NOT NULL AND EXISTS (
                SELECT 1 FROM search_text
                WHERE tid = p_tid AND side = v_side AND sid = p_sid AND body = v_body
                  AND at IS NOT DISTINCT FROM v_at AND ord = p_ord);
            DELETE FROM search_text WHERE tid = p_tid AND side = v_side;
            IF v_body IS NOT NULL THEN
                INSERT INTO search_text (sid, tid, side, at, ord, body)
                VALUES (p_sid, p_tid, v_side, v_at, p_ord, v_body);
            END IF;
        END LOOP;
    END $$;
    -- Indexes up to `p_limit` queued writes (NULL: all); answers how many it took off the
    -- queue. With `p_wait` it waits for another indexer to finish, else it leaves at once.
    -- A turn row locked by a delete in progress is left queued (the delete may roll back);
    -- a turn that is gone leaves the queue. The indexer locks the turns it reads against
    -- deletion only, so it never waits for a writer and a delete waits for it.
    CREATE FUNCTION search_index_pending(p_limit INT, p_wait BOOLEAN)
    RETURNS INT LANGUAGE plpgsql AS $$
    DECLARE
        v_ids BIGINT[];
        v_tids TEXT[];
        v_done TEXT[] := '{}';
        v_taken INT;
        t RECORD;
    BEGIN
        IF p_wait THEN
            PERFORM 1 FROM search_indexer FOR UPDATE;
        ELSE
            PERFORM 1 FROM search_indexer FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                RETURN 0;
            END IF;
        END IF;
        SELECT array_agg(id), array_agg(DISTINCT tid) INTO v_ids, v_tids
        FROM (SELECT id, tid FROM search_pending ORDER BY id LIMIT p_limit) q;
        IF v_ids IS NULL THEN
            RETURN 0;
        END IF;
        FOR t IN SELECT tid, sid, ord, record FROM turns WHERE tid = ANY(v_tids)
                 FOR KEY SHARE SKIP LOCKED LOOP
            -- A record the index cannot read (a `\u0000` jsonb refuses, a number out of
            -- range) keeps the texts it had and leaves the queue: one turn never holds
            -- up the others, or a search.
            BEGIN
                PERFORM search_turn_index(t.tid, t.sid, t.ord, t.record);
            EXCEPTION WHEN OTHERS THEN
                RAISE WARNING 'turn % not indexed for search: %', t.tid, SQLERRM;
            END;
            v_done := v_done || t.tid;
        END LOOP;
        DELETE FROM search_pending q WHERE q.id = ANY(v_ids)
            AND (q.tid = ANY(v_done) OR NOT EXISTS (SELECT 1 FROM turns WHERE turns.tid = q.tid));
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        RETURN v_taken;
    END $$;
    CREATE OR REPLACE FUNCTION search_turn_sync() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
"#,
        turn_write_early_returns!(),
        r#"        INSERT INTO search_pending (tid) VALUES (NEW.tid);
        RETURN NEW;
    END $$;
    "#
    ),
    // 6: a turn's search rows by turn and side. The indexer's check and delete name both;
    // with only `(tid)` and `(sid, side)` to choose from, a table not yet analyzed was read
    // through the session's index, every turn of the session and side.
    r#"
    CREATE INDEX search_text_turn_side ON search_text (tid, side);
    DROP INDEX search_text_turn;
    "#,
    // 7: texts indexed word by word, as the search splits what the user types: the `simple`
    // parser read `/help`, `src/parser.rs` or `docs.example.org` as one token each, so none
    // of their words was found. Punctuation becomes a space before parsing (the stored
    // texts are unchanged). Rewrites the column and its index.
    r#"
    ALTER TABLE search_text DROP COLUMN doc;
    ALTER TABLE search_text ADD COLUMN doc TSVECTOR GENERATED ALWAYS AS
        (to_tsvector('simple', regexp_replace(body, '[[:punct:]]+', ' ', 'g'))) STORED;
    CREATE INDEX search_text_doc ON search_text USING GIN (doc);
    "#,
];

/// The store thread's PostgreSQL connection.
pub struct PgConn {
    rt: tokio::runtime::Runtime,
    client: Client,
    /// Statements prepared once per connection, by their text.
    prepared: HashMap<&'static str, Statement>,
    /// Inside a transaction the store thread began (a batch, or an atomic job on its own).
    in_tx: bool,
    /// The transaction's `BEGIN` is not sent yet: it goes out with the first statement (a
    /// batch that writes nothing sends none).
    begin_pending: bool,
    /// The running job's `SAVEPOINT` is not sent yet: it goes out with the job's first
    /// statement, in the same round trip (a job that writes nothing sends none).
    savepoint_pending: bool,
    /// No statement ran since the job's savepoint: an atomic unit opened now can use it.
    fresh: bool,
    /// The savepoint (the last job's, or the last event flush's) not released yet: its
    /// `RELEASE` goes out with the next request (a `COMMIT` releases it anyway), so a unit
    /// that succeeds costs no round trip of its own to close.
    release_pending: Option<&'static str>,
    /// The statements running now let the waiting events be (see
    /// [`PgConn::beside_events`]).
    beside_events: bool,
    /// Event writes of the batch waiting to go out together (`events.rs`).
    deferred: Vec<Deferred>,
    /// Jobs' only writes waiting to go out with them, in order (`events.rs`).
    deferred_writes: Vec<DeferredWrite>,
    /// The statements that write deferred events, prepared when the connection opens.
    event_statements: EventStatements,
    opts: PgOptions,
    /// This node's identity when nodes share the database: every event write checks that
    /// the session is homed here at this lease epoch (docs/decisions.md, C4).
    fence: Option<vis_store::Writer>,
}

impl PgConn {
    /// Connects and brings the schema up to date (the journal's migrations, then the
    /// gateway's). Call on the store thread: it makes the thread's own runtime.
    pub fn open(opts: &PgOptions, fence: Option<vis_store::Writer>) -> StoreResult<PgConn> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Other(format!("cannot start the PostgreSQL runtime: {e}")))?;
        let cfg = opts.config().map_err(StoreError::Journal)?;
        let schema = opts.schema.clone();
        let (client, event_statements) = rt.block_on(async move {
            let (mut client, connection) = cfg.connect(tokio_postgres::NoTls).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::error!(error = %e, "the PostgreSQL connection ended");
                }
            });
            vis_store::migrate_postgres(&mut client, schema.as_deref())
                .await
                .map_err(StoreError::Journal)?;
            vis_store::apply_postgres_migrations(
                &mut client,
                schema.as_deref(),
                "vis_gateway_migrations",
                MIGRATIONS,
            )
            .await
            .map_err(StoreError::Journal)?;
            let statements = EventStatements::prepare(&client).await?;
            Ok::<_, StoreError>((client, statements))
        })?;
        Ok(PgConn {
            rt,
            client,
            prepared: HashMap::new(),
            in_tx: false,
            begin_pending: false,
            savepoint_pending: false,
            fresh: false,
            release_pending: None,
            beside_events: false,
            deferred: Vec::new(),
            deferred_writes: Vec::new(),
            event_statements,
            opts: opts.clone(),
            fence,
        })
    }

    /// A new connection in place of one the server closed (the store thread calls this
    /// before a batch). The old one's prepared statements went with it.
    pub fn reconnect_if_closed(&mut self) -> StoreResult<()> {
        if self.client.is_closed() {
            *self = PgConn::open(&self.opts, self.fence.take())?;
        }
        Ok(())
    }

    /// The writer every event write is checked against, when nodes share the database.
    pub fn fence(&self) -> Option<&vis_store::Writer> {
        self.fence.as_ref()
    }

    /// Whether a transaction the store thread began is open.
    pub fn in_transaction(&self) -> bool {
        self.in_tx && !self.client.is_closed()
    }

    /// Opens a transaction; its `BEGIN` goes out with the first statement.
    pub fn begin(&mut self) -> StoreResult<()> {
        self.begin_pending = true;
        self.in_tx = true;
        Ok(())
    }

    /// Commits, after sending the deferred event writes. A transaction that sent nothing
    /// has nothing to commit.
    pub fn commit(&mut self) -> StoreResult<()> {
        self.send_deferred()?;
        self.in_tx = false;
        self.release_pending = None;
        if std::mem::take(&mut self.begin_pending) {
            return Ok(());
        }
        self.batch("COMMIT")
    }

    pub fn rollback(&mut self) -> StoreResult<()> {
        self.drop_deferred();
        self.in_tx = false;
        self.release_pending = None;
        if std::mem::take(&mut self.begin_pending) {
            return Ok(());
        }
        self.batch("ROLLBACK")
    }

    /// One store job inside the batch transaction: what its statements wrote stays, as on
    /// SQLite, but a statement that failed (which makes PostgreSQL refuse every later one
    /// in the transaction) is undone back to the job's start, so the batch's other jobs
    /// still commit. Outside a transaction each statement commits on its own. The job's
    /// savepoint rides with its first statement, so a one-statement job costs one round
    /// trip plus its `RELEASE`.
    pub fn job<T>(&mut self, f: impl FnOnce(&mut PgConn) -> StoreResult<T>) -> StoreResult<T> {
        if !self.in_tx {
            return f(self);
        }
        self.savepoint_pending = true;
        self.fresh = true;
        let out = f(self);
        let sent = !std::mem::take(&mut self.savepoint_pending);
        self.fresh = false;
        if !sent {
            return out;
        }
        if out.is_ok() {
            self.release_pending = Some("job");
            return out;
        }
        // A failed statement left the transaction refusing the RELEASE: undo the job. The
        // batch's waiting writes are not the job's: they stay waiting (sent now, inside the
        // job's savepoint, they would be undone with it).
        if self.batch_now("RELEASE SAVEPOINT job").is_err() {
            self.batch_now("ROLLBACK TO SAVEPOINT job; RELEASE SAVEPOINT job")?;
        }
        out
    }

    /// `f` as one unit: a savepoint inside a transaction (PostgreSQL aborts a whole
    /// transaction on a failed statement; the savepoint keeps the failure to this job),
    /// else a transaction of its own.
    pub fn atomically<T>(
        &mut self,
        f: impl FnOnce(&mut PgConn) -> StoreResult<T>,
    ) -> StoreResult<T> {
        if self.in_tx && self.fresh {
            // Nothing ran since the job's savepoint: it is this unit's start too.
            let out = f(self);
            if out.is_err() && !self.savepoint_pending {
                self.batch_now("ROLLBACK TO SAVEPOINT job")?;
                self.fresh = true;
            }
            return out;
        }
        if self.in_tx {
            self.batch("SAVEPOINT job")?;
            let out = f(self);
            match out {
                Ok(v) => self.batch_now("RELEASE SAVEPOINT job").map(|_| v),
                Err(e) => {
                    let _ = self.batch_now("ROLLBACK TO SAVEPOINT job; RELEASE SAVEPOINT job");
                    Err(e)
                }
            }
        } else {
            self.begin()?;
            match f(self) {
                Ok(v) => self.commit().map(|_| v),
                Err(e) => {
                    let _ = self.rollback();
                    Err(e)
                }
            }
        }
    }

    fn statement(&mut self, sql: &'static str) -> StoreResult<Statement> {
        // The batch's deferred writes go out before any other statement, its deferred
        // events before anything that could read them or depends on their order (the hot
        // path of a turn lets them wait); both before this job's savepoint (they are not
        // part of the job).
        if !self.deferred_writes.is_empty() || !self.beside_events {
            self.send_deferred()?;
        }
        if let Some(st) = self.prepared.get(sql) {
            return Ok(st.clone());
        }
        let text = dollar_placeholders(sql);
        // A statement that fails to prepare aborts the transaction: the job's savepoint
        // must be in place first.
        if self.take_savepoint() {
            self.batch("SAVEPOINT job")?;
        }
        let st = self.rt.block_on(self.client.prepare(&text))?;
        self.prepared.insert(sql, st.clone());
        Ok(st)
    }

    /// Runs one statement; answers how many rows it changed.
    pub fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<u64> {
        let (st, prefix) = self.ready(sql)?;
        pipelined(
            &self.rt,
            &self.client,
            prefix.as_deref(),
            self.client.execute(&st, params),
        )
    }

    /// Runs statements in order, sent together (one round trip, with the job's savepoint);
    /// answers each one's changed rows, or the first failure (PostgreSQL refuses the rest
    /// of a transaction after one).
    pub fn execute_all(
        &mut self,
        stmts: &[(&'static str, &[&(dyn ToSql + Sync)])],
    ) -> StoreResult<Vec<u64>> {
        let mut prepared = Vec::with_capacity(stmts.len());
        for (sql, _) in stmts {
            prepared.push(self.statement(sql)?);
        }
        let savepoint = self.take_savepoint();
        let prefix = self.control(savepoint);
        let client = &self.client;
        let all = futures::future::join_all(
            prepared
                .iter()
                .zip(stmts)
                .map(|(st, (_, params))| client.execute(st, params)),
        );
        let results = pipelined(&self.rt, client, prefix.as_deref(), async { Ok(all.await) })?;
        results
            .into_iter()
            .map(|r| r.map_err(StoreError::from))
            .collect()
    }

    pub fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<Row>> {
        let (st, prefix) = self.ready(sql)?;
        pipelined(
            &self.rt,
            &self.client,
            prefix.as_deref(),
            self.client.query(&st, params),
        )
    }

    /// The prepared statement, and what goes out before it (see [`PgConn::control`]).
    fn ready(&mut self, sql: &'static str) -> StoreResult<(Statement, Option<String>)> {
        let st = self.statement(sql)?;
        let savepoint = self.take_savepoint();
        Ok((st, self.control(savepoint)))
    }

    /// The transaction control owed before the next request, sent in the same round trip:
    /// the transaction's `BEGIN`, the last unit's deferred `RELEASE`, and (with
    /// `savepoint`) this job's `SAVEPOINT`.
    fn control(&mut self, savepoint: bool) -> Option<String> {
        let mut parts: Vec<String> = Vec::new();
        if std::mem::take(&mut self.begin_pending) {
            parts.push("BEGIN".into());
        }
        if let Some(name) = self.release_pending.take() {
            parts.push(format!("RELEASE SAVEPOINT {name}"));
        }
        if savepoint {
            parts.push("SAVEPOINT job".into());
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Whether the job's savepoint must go out now (and from here on, none is pending);
    /// a statement is about to run.
    fn take_savepoint(&mut self) -> bool {
        self.fresh = false;
        std::mem::take(&mut self.savepoint_pending)
    }

    /// Statements without parameters (transaction control), after the deferred events and
    /// the control owed (see [`PgConn::control`]).
    pub fn batch(&mut self, sql: &str) -> StoreResult<()> {
        self.send_deferred()?;
        self.batch_now(sql)
    }

    /// [`PgConn::batch`] without sending the deferred events first.
    fn batch_now(&mut self, sql: &str) -> StoreResult<()> {
        if let Some(control) = self.control(false) {
            let both = format!("{control}; {sql}");
            return Ok(self.rt.block_on(self.client.batch_execute(&both))?);
        }
        Ok(self.rt.block_on(self.client.batch_execute(sql))?)
    }
}

/// Runs `op`, after `prefix` (transaction control) if any: both requests go out together
/// (the client pipelines requests polled together), one round trip instead of two.
fn pipelined<R>(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    prefix: Option<&str>,
    op: impl std::future::Future<Output = Result<R, tokio_postgres::Error>>,
) -> StoreResult<R> {
    let Some(prefix) = prefix else {
        return Ok(rt.block_on(op)?);
    };
    let (sp, out) = rt.block_on(futures::future::join(client.batch_execute(prefix), op));
    sp?;
    Ok(out?)
}

/// `?N` placeholders as PostgreSQL's `$N` (a `?` not followed by a digit, as in jsonb's
/// `?|`, is left alone).
pub(super) fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_mark_placeholders_become_dollar_ones_and_jsonb_operators_stay() {
        assert_eq!(
            dollar_placeholders("SELECT a FROM t WHERE b = ?1 AND c ?| ?12"),
            "SELECT a FROM t WHERE b = $1 AND c ?| $12"
        );
    }
}
