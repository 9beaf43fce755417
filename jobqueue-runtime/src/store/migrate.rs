//! The embedded migrations of this crate's `migrations/mysql/` folder, and their own
//! history table; the PostgreSQL ones are in `store/postgres/migrate.rs`. The functions the
//! queue calls take either pool and go to the one of its database.
//!
//! jobqueue records what it applied in `job_queue_migrations`, not in sqlx's
//! `_sqlx_migrations`: an application's own sqlx migrator (or Flyway, Liquibase...) fails on
//! versions it does not know, so two migrators cannot share one history table. A database
//! migrated by jobqueue 0.1 (whose rows are in `_sqlx_migrations`) is adopted: its rows are
//! copied, and its DDL is not run again.
//!
//! Concurrent `migrate` calls take a named lock (`GET_LOCK`) on the database, so N processes
//! starting at once apply each migration once.

use std::time::{Duration, Instant};

use sqlx::mysql::MySqlConnection;
use sqlx::{Executor, Row};

use super::errors::{classify, DbErrorKind};
use super::postgres::migrate as pg;
use crate::backend::{Backend, DatabasePool};
use crate::error::{Error, Result};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/mysql");

/// How long `migrate` waits for another process's migration before it gives up.
const LOCK_WAIT: Duration = Duration::from_secs(120);

/// The history table. Its DDL is also printed by [`script`], so that a team applying the
/// SQL with its own tool leaves the same record a `migrate` call would.
const HISTORY_TABLE: &str = "CREATE TABLE IF NOT EXISTS job_queue_migrations (\n    \
    version      BIGINT NOT NULL,\n    \
    description  VARCHAR(255) NOT NULL,\n    \
    checksum     VARBINARY(64) NOT NULL,\n    \
    installed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),\n    \
    execution_ms BIGINT NOT NULL DEFAULT 0,\n    \
    PRIMARY KEY (version)\n\
) ENGINE = InnoDB";

/// The newest schema version this library knows, and needs, on `backend`.
pub(crate) fn latest_version(backend: Backend) -> i64 {
    let migrator = match backend {
        Backend::MySql => &MIGRATOR,
        Backend::Postgres => &pg::MIGRATOR,
    };
    migrator.iter().map(|m| m.version).max().unwrap_or(0)
}

/// What the database says about its jobqueue schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SchemaState {
    /// Every migration this library knows is recorded (newer ones may be too).
    Current,
    /// No migration of jobqueue's recorded.
    Missing,
    /// Migrated up to this version; newer ones are pending (the newest this library knows
    /// is the second).
    Behind(i64, i64),
}

impl SchemaState {
    /// The error for a schema the queue cannot run on, with the fix.
    pub(crate) fn error(self) -> Option<Error> {
        match self {
            SchemaState::Current => None,
            SchemaState::Missing => Some(Error::SchemaMissing),
            SchemaState::Behind(version, needed) => Some(Error::SchemaTooOld { version, needed }),
        }
    }
}

/// Reads the schema version from the history table (or from a 0.1 database's
/// `_sqlx_migrations`).
pub(crate) async fn state(pool: &DatabasePool) -> Result<SchemaState> {
    let pool = match pool {
        DatabasePool::MySql(pool) => pool,
        DatabasePool::Postgres(pool) => return pg::state(pool).await,
    };
    let mut conn = pool.acquire().await?;
    let applied = applied(&mut conn).await?;
    let latest = latest_version(Backend::MySql);
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

/// One row of the history.
#[derive(Debug)]
struct Applied {
    version: i64,
    checksum: Vec<u8>,
    /// Found in `_sqlx_migrations` only (a 0.1 database not yet adopted).
    adopted: bool,
}

/// The migrations recorded as applied: the history table's rows, or, where that table does
/// not exist or is empty, jobqueue's own rows of `_sqlx_migrations` (a database migrated by
/// 0.1). A row there counts only with this library's version and checksum, so an
/// application's migration that happens to share a version number is never taken for one.
async fn applied(conn: &mut MySqlConnection) -> Result<Vec<Applied>> {
    let own = match sqlx::query("SELECT version, checksum FROM job_queue_migrations")
        .fetch_all(&mut *conn)
        .await
    {
        Ok(rows) => rows
            .iter()
            .map(|r| {
                Ok(Applied {
                    version: r.try_get(0)?,
                    checksum: r.try_get(1)?,
                    adopted: false,
                })
            })
            .collect::<sqlx::Result<Vec<_>>>()?,
        Err(e) if classify(&e) == Some(DbErrorKind::MissingTable) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    if !own.is_empty() {
        return Ok(own);
    }
    let legacy =
        match sqlx::query("SELECT version, checksum FROM _sqlx_migrations WHERE success = 1")
            .fetch_all(&mut *conn)
            .await
        {
            Ok(rows) => rows,
            Err(e) if classify(&e) == Some(DbErrorKind::MissingTable) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
    let mut adopted = Vec::new();
    for r in &legacy {
        let version: i64 = r.try_get(0)?;
        let checksum: Vec<u8> = r.try_get(1)?;
        if MIGRATOR
            .iter()
            .any(|m| m.version == version && *m.checksum == *checksum)
        {
            adopted.push(Applied {
                version,
                checksum,
                adopted: true,
            });
        }
    }
    Ok(adopted)
}

/// Waits while another session holds the migration lock of this database.
pub(crate) async fn wait_for_migration(pool: &DatabasePool) -> Result<()> {
    let pool = match pool {
        DatabasePool::MySql(pool) => pool,
        DatabasePool::Postgres(pool) => return pg::wait_for_migration(pool).await,
    };
    let mut conn = pool.acquire().await?;
    let busy: Option<i64> =
        sqlx::query_scalar("SELECT IS_USED_LOCK(CONCAT('jobqueue:migrate:', SHA1(DATABASE())))")
            .fetch_one(&mut *conn)
            .await?;
    if busy.is_none() {
        return Ok(());
    }
    tracing::info!("another process is migrating the database; waiting for it");
    let locked: Option<i64> =
        sqlx::query_scalar("SELECT GET_LOCK(CONCAT('jobqueue:migrate:', SHA1(DATABASE())), ?)")
            .bind(LOCK_WAIT.as_secs())
            .fetch_one(&mut *conn)
            .await?;
    if locked == Some(1) {
        sqlx::query("SELECT RELEASE_LOCK(CONCAT('jobqueue:migrate:', SHA1(DATABASE())))")
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Applies the pending migrations under a named lock, adopting a 0.1 history first.
///
/// A schema that is already up to date is only read: no lock, no DDL, so that every replica
/// may call `migrate` at start-up with a user that has DML rights and `SELECT` on
/// `job_queue_migrations`.
pub(crate) async fn run(pool: &DatabasePool) -> Result<()> {
    let pool = match pool {
        DatabasePool::MySql(pool) => pool,
        DatabasePool::Postgres(pool) => return pg::run(pool).await.map_err(denied_hint),
    };
    let mut conn = pool.acquire().await?;
    if up_to_date(&mut conn).await.map_err(denied_hint)? {
        return Ok(());
    }
    // Lock names are server-wide and at most 64 characters: one per database, hashed.
    let locked: Option<i64> =
        sqlx::query_scalar("SELECT GET_LOCK(CONCAT('jobqueue:migrate:', SHA1(DATABASE())), ?)")
            .bind(LOCK_WAIT.as_secs())
            .fetch_one(&mut *conn)
            .await?;
    if locked != Some(1) {
        return Err(Error::Schema(format!(
            "another process has been migrating this database for over {}s (it holds the lock `jobqueue:migrate:<sha1 of the database name>`); wait for it to finish, or find it with `SELECT * FROM performance_schema.metadata_locks` and stop it",
            LOCK_WAIT.as_secs()
        )));
    }
    let outcome = run_locked(&mut conn).await;
    // A failed release only leaves the lock to the end of the session, which the pool ends
    // soon enough; the migration's outcome is what matters.
    let _ = sqlx::query("SELECT RELEASE_LOCK(CONCAT('jobqueue:migrate:', SHA1(DATABASE())))")
        .execute(&mut *conn)
        .await;
    outcome.map_err(denied_hint)
}

/// Whether the history table records every embedded migration, each with the checksum this
/// library embeds. Rows only in a 0.1 `_sqlx_migrations` (to adopt) or a checksum that
/// differs leave the answer to the locked path, which says what to do. A concurrent
/// `migrate` records a version only after its DDL, so every version recorded is applied.
async fn up_to_date(conn: &mut MySqlConnection) -> Result<bool> {
    let applied = applied(conn).await?;
    Ok(MIGRATOR.iter().all(|m| {
        applied
            .iter()
            .any(|a| !a.adopted && a.version == m.version && *a.checksum == *m.checksum)
    }))
}

async fn run_locked(conn: &mut MySqlConnection) -> Result<()> {
    let applied = applied(conn).await?;
    conn.execute(HISTORY_TABLE).await?;
    for a in applied.iter().filter(|a| a.adopted) {
        let m = MIGRATOR
            .iter()
            .find(|m| m.version == a.version)
            .expect("adopted rows match an embedded migration");
        sqlx::query(
            "INSERT INTO job_queue_migrations (version, description, checksum) VALUES (?, ?, ?)",
        )
        .bind(m.version)
        .bind(&*m.description)
        .bind(&*m.checksum)
        .execute(&mut *conn)
        .await?;
        tracing::info!(
            version = m.version,
            "adopted a migration recorded in _sqlx_migrations by jobqueue 0.1; its DDL was not run again"
        );
    }
    for m in MIGRATOR.iter() {
        if let Some(a) = applied.iter().find(|a| a.version == m.version) {
            if *a.checksum != *m.checksum {
                return Err(Error::Schema(format!(
                    "migration {} ({}) was applied from a different SQL text than this library embeds; the recorded schema may differ from what the library expects: compare the table with `jobqueue migrate --print-sql`, then fix the checksum in `job_queue_migrations` by hand",
                    m.version, m.description
                )));
            }
            continue;
        }
        let start = Instant::now();
        conn.execute(&*m.sql).await.map_err(|e| {
            if classify(&e).is_some_and(ddl_denied) {
                return Error::Database(e);
            }
            Error::Schema(format!(
                "migration {} ({}) failed: {e}; MySQL commits DDL statement by statement, so part of it may be applied: check the table against `jobqueue migrate --print-sql` before running `migrate` again",
                m.version, m.description
            ))
        })?;
        sqlx::query(
            "INSERT INTO job_queue_migrations (version, description, checksum, execution_ms) \
             VALUES (?, ?, ?, ?)",
        )
        .bind(m.version)
        .bind(&*m.description)
        .bind(&*m.checksum)
        .bind(start.elapsed().as_millis() as i64)
        .execute(&mut *conn)
        .await?;
        tracing::info!(version = m.version, description = %m.description, "applied migration");
    }
    Ok(())
}

/// Whether a refusal says that the user may not change the schema (rather than that a
/// migration's SQL failed).
pub(crate) fn ddl_denied(class: DbErrorKind) -> bool {
    use DbErrorKind::*;
    matches!(
        class,
        TableDenied | DatabaseDenied | LoginDenied | PrivilegeDenied
    )
}

pub(crate) fn denied_hint(e: Error) -> Error {
    if e.database_class().is_some_and(ddl_denied) {
        Error::MigratePermission {
            source: Box::new(e),
        }
    } else {
        e
    }
}

/// The migrations not yet applied to the database, by version and description.
pub(crate) async fn pending(pool: &DatabasePool) -> Result<Vec<(i64, String)>> {
    let pool = match pool {
        DatabasePool::MySql(pool) => pool,
        DatabasePool::Postgres(pool) => return pg::pending(pool).await,
    };
    let mut conn = pool.acquire().await?;
    let applied = applied(&mut conn).await?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| !applied.iter().any(|a| a.version == m.version))
        .map(|m| (m.version, m.description.to_string()))
        .collect())
}

/// The whole schema of `backend` as one SQL script: the history table, then each migration
/// followed by the row that records it. What `jobqueue migrate --print-sql` prints.
pub(crate) fn script(backend: Backend) -> String {
    if backend == Backend::Postgres {
        return pg::script();
    }
    let mut out = String::from(
        "-- jobqueue schema. Apply each version once, in order, with your migration tool;\n\
         -- the INSERT after each records it, so that `Queue::check_schema` and\n\
         -- `jobqueue migrate` see what was applied.\n\n",
    );
    out.push_str(HISTORY_TABLE);
    out.push_str(";\n");
    for m in MIGRATOR.iter() {
        let checksum: String = m.checksum.iter().map(|b| format!("{b:02x}")).collect();
        out.push_str(&format!(
            "\n-- version {} ({})\n{}\n",
            m.version,
            m.description,
            m.sql.trim_end()
        ));
        out.push_str(&format!(
            "INSERT INTO job_queue_migrations (version, description, checksum) VALUES ({}, '{}', UNHEX('{checksum}'));\n",
            m.version,
            m.description.replace('\'', "''")
        ));
    }
    out
}
