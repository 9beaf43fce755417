//! Enqueue on PostgreSQL: one job, or many, on a connection of the caller's or of the store.

use sqlx::postgres::PgConnection;

use crate::error::{Error, Result};
use crate::model::{Enqueued, NewJob};

/// Inserts one job (see the MySQL `insert`).
pub(crate) async fn insert(_conn: &mut PgConnection, _job: &NewJob) -> Result<Enqueued> {
    Err(Error::Unsupported {
        backend: crate::Backend::Postgres,
    })
}

/// Inserts many jobs (see the MySQL `insert_many`).
pub(crate) async fn insert_many(
    _conn: &mut PgConnection,
    _jobs: &[NewJob],
) -> Result<Vec<Enqueued>> {
    Err(Error::Unsupported {
        backend: crate::Backend::Postgres,
    })
}
