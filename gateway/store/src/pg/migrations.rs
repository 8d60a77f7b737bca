//! The PostgreSQL schema: numbered migrations, each applied once and recorded in
//! `vis_store_migrations`, under an advisory lock so nodes starting together apply them once.

use crate::StoreResult;

const MIGRATIONS: &[&str] = &[
    // 1: sessions with their home and seq high-water, the journal, egress rows, leases.
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        home_node TEXT,
        home_epoch BIGINT NOT NULL DEFAULT 0,
        last_seq BIGINT NOT NULL DEFAULT 0,
        trimmed_through BIGINT NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX sessions_by_home ON sessions(home_node);
    CREATE TABLE events (
        sid TEXT NOT NULL,
        seq BIGINT NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (sid, seq)
    );
    CREATE TABLE egress (
        sid TEXT NOT NULL,
        seq BIGINT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (sid, seq)
    );
    CREATE TABLE leases (
        node TEXT PRIMARY KEY,
        address TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
    );",
];

/// Creates the schema if one is named, then applies the store's migrations not recorded
/// yet, all in one transaction.
pub async fn apply(client: &mut tokio_postgres::Client, schema: Option<&str>) -> StoreResult<()> {
    apply_list(client, schema, "vis_store_migrations", MIGRATIONS).await
}

/// Applies the numbered migrations in `list` not yet recorded in `table` (created if
/// absent), in one transaction under an advisory lock on the schema, so nodes starting
/// together apply each once. A program that extends this store's schema (the gateway's
/// own tables) applies its own list with its own table, after [`apply`].
pub async fn apply_list(
    client: &mut tokio_postgres::Client,
    schema: Option<&str>,
    table: &str,
    list: &[&str],
) -> StoreResult<()> {
    if !super::plain_identifier(table) {
        return Err(super::config_error(format!("bad table name {table:?}")));
    }
    let tx = client.transaction().await?;
    let key = schema.unwrap_or("public");
    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&key])
        .await?;
    if let Some(schema) = schema {
        if !super::plain_identifier(schema) {
            return Err(super::config_error(format!("bad schema name {schema:?}")));
        }
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
            .await?;
    }
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (
            version INTEGER PRIMARY KEY,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )"
    ))
    .await?;
    let current: i32 = tx
        .query_one(
            &format!("SELECT COALESCE(MAX(version), 0) FROM {table}"),
            &[],
        )
        .await?
        .get(0);
    for (i, sql) in list.iter().enumerate() {
        let version = i as i32 + 1;
        if version > current {
            tx.batch_execute(sql).await?;
            tx.execute(
                &format!("INSERT INTO {table} (version) VALUES ($1)"),
                &[&version],
            )
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}
