//! The embedded PostgreSQL migrations (`migrations/postgres/`) and their history table, the
//! same `job_queue_migrations` as on MySQL. PostgreSQL runs DDL inside transactions, so each
//! migration is applied together with the row that records it, or not at all; concurrent
//! `migrate` calls take turns on an advisory lock of the database.

use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnection, PgPool};
use sqlx::{Executor, Row};

use crate::error::{Error, Result};
use crate::store::errors::{classify, DbErrorKind};
use crate::store::migrate::SchemaState;

pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The advisory lock `migrate` holds: one key per database (advisory locks belong to the
/// database they are taken in), "jq:migrate" in ASCII.
const LOCK_KEY: i64 = 0x6a71_3a6d_6967_7261;

/// How long `migrate` waits for another process's migration before it gives up.
const LOCK_WAIT: Duration = Duration::from_secs(120);

/// The history table, as on MySQL.
const HISTORY_TABLE: &str = "CREATE TABLE IF NOT EXISTS job_queue_migrations (\n    \
    version      BIGINT NOT NULL,\n    \
    description  VARCHAR(255) NOT NULL,\n    \
    checksum     BYTEA NOT NULL,\n    \
    installed_at TIMESTAMP(6) NOT NULL DEFAULT (statement_timestamp() AT TIME ZONE 'UTC'),\n    \
    execution_ms BIGINT NOT NULL DEFAULT 0,\n    \
    PRIMARY KEY (version)\n\
)";

/// One row of the history.
struct Applied {
    version: i64,
    checksum: Vec<u8>,
}

async fn applied(conn: &mut PgConnection) -> Result<Vec<Applied>> {
    match sqlx::query("SELECT version, checksum FROM job_queue_migrations")
        .fetch_all(&mut *conn)
        .await
    {
        Ok(rows) => rows
            .iter()
            .map(|r| {
                Ok(Applied {
                    version: r.try_get(0)?,
                    checksum: r.try_get(1)?,
                })
            })
            .collect::<sqlx::Result<Vec<_>>>()
            .map_err(Into::into),
        Err(e) if classify(&e) == Some(DbErrorKind::MissingTable) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// Reads the schema version from the history table.
pub(crate) async fn state(pool: &PgPool) -> Result<SchemaState> {
    let mut conn = pool.acquire().await?;
    let applied = applied(&mut conn).await?;
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    if applied.is_empty() {
        return Ok(SchemaState::Missing);
    }
    if MIGRATOR
        .iter()
        .all(|m| applied.iter().any(|a| a.version == m.version))
    {
        return Ok(SchemaState::Current);
    }
    let newest_known = applied
        .iter()
        .map(|a| a.version)
        .filter(|v| *v <= latest)
        .max()
        .unwrap_or(0);
    Ok(SchemaState::Behind(newest_known, latest))
}

/// Waits while another session holds the migration lock of this database.
pub(crate) async fn wait_for_migration(pool: &PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LOCK_KEY)
        .fetch_one(&mut *conn)
        .await?;
    if !free {
        tracing::info!("another process is migrating the database; waiting for it");
        lock(&mut conn).await?;
    }
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Takes the migration lock, waiting up to [`LOCK_WAIT`].
async fn lock(conn: &mut PgConnection) -> Result<()> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(LOCK_KEY)
            .fetch_one(&mut *conn)
            .await?;
        if got {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Schema(format!(
                "another process has been migrating this database for over {}s (it holds the advisory lock {LOCK_KEY}); wait for it to finish, or find it with `SELECT pid FROM pg_locks WHERE locktype = 'advisory'` and stop it",
                LOCK_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Applies the pending migrations under the advisory lock, each in a transaction with the
/// row that records it. A schema already up to date is only read.
pub(crate) async fn run(pool: &PgPool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let applied_now = applied(&mut conn).await?;
    if up_to_date(&applied_now) {
        return Ok(());
    }
    lock(&mut conn).await?;
    let outcome = run_locked(&mut conn).await;
    let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *conn)
        .await;
    outcome
}

fn up_to_date(applied: &[Applied]) -> bool {
    MIGRATOR.iter().all(|m| {
        applied
            .iter()
            .any(|a| a.version == m.version && *a.checksum == *m.checksum)
    })
}

async fn run_locked(conn: &mut PgConnection) -> Result<()> {
    conn.execute(HISTORY_TABLE).await?;
    let applied = applied(conn).await?;
    for m in MIGRATOR.iter() {
        if let Some(a) = applied.iter().find(|a| a.version == m.version) {
            if *a.checksum != *m.checksum {
                return Err(Error::Schema(format!(
                    "migration {} ({}) was applied from a different SQL text than this library embeds; the recorded schema may differ from what the library expects: compare the tables with `jobqueue migrate --print-sql`, then fix the checksum in `job_queue_migrations` by hand",
                    m.version, m.description
                )));
            }
            continue;
        }
        let start = Instant::now();
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        tx.execute(&*m.sql).await.map_err(|e| {
            if classify(&e).is_some_and(crate::store::migrate::ddl_denied) {
                return Error::Database(e);
            }
            Error::Schema(format!(
                "migration {} ({}) failed: {e}; nothing of it was applied (PostgreSQL runs it in one transaction)",
                m.version, m.description
            ))
        })?;
        sqlx::query(
            "INSERT INTO job_queue_migrations (version, description, checksum, execution_ms) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(m.version)
        .bind(&*m.description)
        .bind(&*m.checksum)
        .bind(start.elapsed().as_millis() as i64)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::info!(version = m.version, description = %m.description, "applied migration");
    }
    Ok(())
}

/// The migrations not yet applied to the database, by version and description.
pub(crate) async fn pending(pool: &PgPool) -> Result<Vec<(i64, String)>> {
    let mut conn = pool.acquire().await?;
    let applied = applied(&mut conn).await?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| !applied.iter().any(|a| a.version == m.version))
        .map(|m| (m.version, m.description.to_string()))
        .collect())
}

/// The whole PostgreSQL schema as one SQL script, each migration in a transaction with the
/// row that records it: what `jobqueue migrate --print-sql` prints for a PostgreSQL URL.
pub(crate) fn script() -> String {
    let mut out = String::from(
        "-- jobqueue schema (PostgreSQL). Apply each version once, in order, with your migration\n\
         -- tool; the INSERT after each records it, so that `Queue::check_schema` and\n\
         -- `jobqueue migrate` see what was applied.\n\n",
    );
    out.push_str(HISTORY_TABLE);
    out.push_str(";\n");
    for m in MIGRATOR.iter() {
        let checksum: String = m.checksum.iter().map(|b| format!("{b:02x}")).collect();
        out.push_str(&format!(
            "\n-- version {} ({})\nBEGIN;\n{}\n",
            m.version,
            m.description,
            m.sql.trim_end()
        ));
        out.push_str(&format!(
            "INSERT INTO job_queue_migrations (version, description, checksum) VALUES ({}, '{}', '\\x{checksum}'::bytea);\nCOMMIT;\n",
            m.version,
            m.description.replace('\'', "''")
        ));
    }
    out
}
