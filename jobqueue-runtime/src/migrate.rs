//! The embedded migrations of `migrations/`.

use sqlx::mysql::MySqlPool;

use crate::error::{Error, Result};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

pub(crate) async fn run(pool: &MySqlPool) -> Result<()> {
    MIGRATOR.run(pool).await.map_err(|e| {
        let denied = match &e {
            sqlx::migrate::MigrateError::Execute(db) | sqlx::migrate::MigrateError::ExecuteMigration(db, _) => {
                matches!(crate::error::server_code(db), Some(1142 | 1044 | 1045 | 1227))
            }
            _ => false,
        };
        if denied {
            Error::Config(format!(
                "migrate needs DDL rights (CREATE, ALTER, INDEX, DROP) on the database, which this user lacks: {e}; run `migrate` as the migration user, and give workers only SELECT, INSERT, UPDATE, DELETE"
            ))
        } else {
            Error::Migrate(e)
        }
    })
}

/// The migrations not yet applied to the database, by version and description.
pub(crate) async fn pending(pool: &MySqlPool) -> Result<Vec<(i64, String)>> {
    use sqlx::Row;
    let applied: Vec<i64> =
        match sqlx::query("SELECT version FROM _sqlx_migrations WHERE success = 1")
            .fetch_all(pool)
            .await
        {
            Ok(rows) => rows.iter().map(|r| r.get::<i64, _>(0)).collect(),
            Err(e) if crate::error::server_code(&e) == Some(1146) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
    Ok(MIGRATOR
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| (m.version, m.description.to_string()))
        .collect())
}
