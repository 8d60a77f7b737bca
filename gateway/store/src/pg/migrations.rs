//! The PostgreSQL schema: numbered migrations, each applied once and recorded in
//! `vis_store_migrations`, under an advisory lock so nodes starting together apply them once.

use crate::StoreResult;
use deadpool_postgres::Client;

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

/// Creates the schema if one is named, then applies the migrations not recorded yet, all in
/// one transaction.
pub async fn apply(client: &mut Client, schema: Option<&str>) -> StoreResult<()> {
    let tx = client.transaction().await?;
    let key = schema.unwrap_or("public");
    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&key])
        .await?;
    if let Some(schema) = schema {
        // The name was checked to be a plain identifier (`PgOptions::schema`).
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
            .await?;
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS vis_store_migrations (
            version INTEGER PRIMARY KEY,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await?;
    let current: i32 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM vis_store_migrations",
            &[],
        )
        .await?
        .get(0);
    for (i, sql) in MIGRATIONS.iter().enumerate() {
        let version = i as i32 + 1;
        if version > current {
            tx.batch_execute(sql).await?;
            tx.execute(
                "INSERT INTO vis_store_migrations (version) VALUES ($1)",
                &[&version],
            )
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}
