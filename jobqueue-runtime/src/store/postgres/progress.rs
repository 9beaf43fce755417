//! Progress on PostgreSQL: the latest value a running job reported, fenced by its claim (the
//! twin of the MySQL `progress.rs`).

use sqlx::postgres::PgPool;

use super::{db_id, Store};
use crate::error::Result;

/// The MySQL `PROGRESS_UPDATE` in PostgreSQL's SQL: `$1` the value (JSON text, stored as
/// JSONB), `$2` id, `$3` owner, `$4` attempt. A row `done` at this attempt matches too (see
/// the MySQL statement).
pub(crate) const PG_PROGRESS_UPDATE: &str =
    "UPDATE job_queue SET progress = $1::jsonb, progress_at = job_queue_now() \
     WHERE id = $2 AND (lease_owner = $3 AND status = 'running' OR status = 'done') \
       AND attempts = $4";

/// `Store::write_progress` on PostgreSQL: false when the claim is no longer held and nothing
/// was written. Retried after a conflict, unlike on MySQL: the write is fenced and writes
/// the same value again, so a retry is harmless.
pub(crate) async fn write_progress(
    store: &Store,
    pool: &PgPool,
    id: u64,
    owner: &str,
    attempt: u32,
    json: &str,
) -> Result<bool> {
    let done = pg_autocommit!(store, pool, |conn| sqlx::query(PG_PROGRESS_UPDATE)
        .bind(json)
        .bind(db_id(id))
        .bind(owner)
        .bind(i64::from(attempt))
        .execute(&mut *conn))?;
    let held = done.rows_affected() == 1;
    if held {
        store.metrics.progress_writes(1);
    }
    Ok(held)
}
