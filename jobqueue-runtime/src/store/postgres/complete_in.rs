//! A job completed inside a transaction of its own, on PostgreSQL, and what the worker does
//! once that transaction committed: the twins of the MySQL `complete_in.rs`.
//!
//! What differs: PostgreSQL has no gap locks, so the statements need no forced index to lock
//! only their rows; an `UPDATE` by primary key, or by the slot holder index, locks the rows it
//! changes and nothing else, at any isolation level. The slot of a claim is freed with one
//! `UPDATE` by its holder (no read first). Every expression of an `UPDATE`'s `SET` reads the
//! row as it was (MySQL reads the columns already assigned), so the order of the assignments
//! does not matter here.

use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Row;

use super::{db_id, Store};
use crate::error::Result;
use crate::model::MAX_ATTEMPT_HISTORY;
use crate::store::errors::{classify, DbErrorKind};

/// The `SET` of `attempt_log` that appends one attempt to the job's history (the MySQL
/// `outcome::log_attempt`): the history is TEXT holding a JSON array, at most
/// [`MAX_ATTEMPT_HISTORY`] entries, oldest dropped first. `outcome` and `error` are SQL
/// expressions (a quoted name, `NULL`, or a placeholder). Times are written as MySQL writes
/// them (`2026-12-03 09:00:00.000000`), which `decode::attempts_from_log` reads.
pub(crate) fn pg_log_attempt(outcome: &str, error: &str) -> String {
    format!(
        "attempt_log = ((CASE WHEN jsonb_array_length(COALESCE(attempt_log, '[]')::jsonb) >= {MAX_ATTEMPT_HISTORY} \
              THEN COALESCE(attempt_log, '[]')::jsonb - 0 \
              ELSE COALESCE(attempt_log, '[]')::jsonb END) \
           || jsonb_build_array(jsonb_build_object('attempt', attempts, \
             'started_at', to_char(claimed_at, 'YYYY-MM-DD HH24:MI:SS.US'), \
             'ended_at', to_char(job_queue_now(), 'YYYY-MM-DD HH24:MI:SS.US'), \
             'worker', lease_owner, 'outcome', {outcome}::text, 'error', {error}::text)))::text"
    )
}

/// The completion of claim (`$1` id, `$2` owner, `$3` attempt) in the caller's transaction
/// (the MySQL `complete_in_sql`), fenced like every outcome and by `cancel_requested`.
pub(crate) fn pg_complete_in_sql() -> String {
    format!(
        "UPDATE job_queue SET {log}, status = 'done', lease_owner = NULL, lease_until = NULL, \
         finished_at = job_queue_now(), updated_at = job_queue_now() \
         WHERE id = $1 AND status = 'running' AND lease_owner = $2 AND attempts = $3 \
           AND cancel_requested = FALSE",
        log = pg_log_attempt("'done'", "NULL"),
    )
}

/// Frees the concurrency slot of claim (`$1` job id, `$2` attempt): by the holder index,
/// fenced by the claim, locking only the slot row it frees.
pub(crate) const PG_SLOT_RELEASE: &str = "UPDATE job_queue_slot SET job_id = NULL, attempt = NULL \
     WHERE job_id = $1 AND attempt = $2";

/// See the MySQL `complete_in`: `None` when the row was completed, else why not.
///
/// Under REPEATABLE READ or SERIALIZABLE, PostgreSQL refuses to update a row changed since
/// the transaction's snapshot (SQLSTATE 40001, as MariaDB's `innodb_snapshot_isolation`
/// does), and the caller's transaction is then aborted: that is reported as a reason, as on
/// MariaDB. A duplicate or any other error aborts the transaction too; this function runs
/// no statement that can fail for a reason of the data.
pub(crate) async fn complete_in(
    conn: &mut PgConnection,
    id: u64,
    owner: &str,
    attempt: u32,
    holds_slot: bool,
) -> Result<Option<String>> {
    let matched = match sqlx::query(&pg_complete_in_sql())
        .bind(db_id(id))
        .bind(owner)
        .bind(i64::from(attempt))
        .execute(&mut *conn)
        .await
    {
        Ok(done) => done.rows_affected(),
        Err(e) if classify(&e) == Some(DbErrorKind::SnapshotConflict) => {
            return Ok(Some(
                "the transaction's snapshot is older than the job row's last change (a lease \
                 renewal, every quarter of the lease, or a progress write), and PostgreSQL \
                 refuses under REPEATABLE READ or SERIALIZABLE to update a row changed since; \
                 the transaction is aborted. Call `complete_in` first in the transaction, \
                 or run the transaction at READ COMMITTED"
                    .into(),
            ))
        }
        Err(e) => return Err(e.into()),
    };
    if matched == 1 {
        // The claim's concurrency slot is freed with the completion: both commit with the
        // caller's transaction, or neither does.
        if holds_slot {
            release_slot(conn, id, attempt).await?;
        }
        return Ok(None);
    }
    // Why not, for the error: a plain read of the row, which takes no lock.
    let row = sqlx::query(
        "SELECT status, attempts, lease_owner IS NOT DISTINCT FROM $1, cancel_requested \
         FROM job_queue WHERE id = $2",
    )
    .bind(owner)
    .bind(db_id(id))
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(Some("the job no longer exists (it was deleted)".into()));
    };
    let status: String = row.try_get(0)?;
    let attempts: i64 = row.try_get(1)?;
    let ours: bool = row.try_get(2)?;
    let cancel_requested: bool = row.try_get(3)?;
    Ok(Some(
        match (status.as_str(), attempts == i64::from(attempt)) {
            ("running", true) if ours && cancel_requested => {
                "an operator asked to cancel it, so none of its effects may commit; it ends cancelled"
                    .into()
            }
            ("done", true) => {
                "this attempt has completed it already (`complete_in` completes a job once)".into()
            }
            ("running", true) if ours => "this attempt no longer holds the job's lease".into(),
            _ => format!(
                "this attempt no longer holds the job's lease: its lease ran out and the job was taken \
                 back (it is now {status} at attempt {attempts}), so another attempt does its work"
            ),
        },
    ))
}

/// Frees the concurrency slot of claim (`id`, `attempt`) inside the caller's transaction,
/// locking only that slot's row (see the MySQL `release_slot`, which reads it first to go by
/// primary key and take no gap lock; PostgreSQL takes none either way).
pub(crate) async fn release_slot(conn: &mut PgConnection, id: u64, attempt: u32) -> Result<()> {
    sqlx::query(PG_SLOT_RELEASE)
        .bind(db_id(id))
        .bind(i64::from(attempt))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// `Store::write_committed_output` on PostgreSQL: writes `output` for job `id`, done at
/// `attempt` in its own transaction, once; false when nothing was written.
pub(crate) async fn write_committed_output(
    store: &Store,
    pool: &PgPool,
    id: u64,
    attempt: u32,
    output: &str,
) -> Result<bool> {
    let done = pg_autocommit!(store, pool, |conn| sqlx::query(
        "UPDATE job_queue SET output = $1 \
         WHERE id = $2 AND attempts = $3 AND status = 'done' AND output IS NULL"
    )
    .bind(output)
    .bind(db_id(id))
    .bind(i64::from(attempt))
    .execute(&mut *conn))?;
    Ok(done.rows_affected() == 1)
}

/// `Store::wake_after_commit` on PostgreSQL: wakes the first blocked job of job `id`'s
/// concurrency key, after the job's own transaction freed a slot of it. Returns how many
/// jobs were woken (0 or 1).
pub(crate) async fn wake_after_commit(store: &Store, pool: &PgPool, id: u64) -> Result<u32> {
    let row = pg_autocommit!(store, pool, |conn| sqlx::query(
        "SELECT concurrency_key, concurrency_limit FROM job_queue WHERE id = $1"
    )
    .bind(db_id(id))
    .fetch_optional(&mut *conn))?;
    let Some(row) = row else { return Ok(0) };
    let (key, limit): (Option<String>, i64) = (row.try_get(0)?, row.try_get(1)?);
    let Some(key) = key.filter(|_| limit > 0) else {
        return Ok(0);
    };
    let slot_key = format!("c:{key}");
    pg_transaction!(store, pool, |conn| {
        let n = wake_one(
            conn,
            &slot_key,
            crate::store::limits::WAKE_MAX_LEFTOVERS_IN_OUTCOME,
        )
        .await?;
        Ok((n, n > 0))
    })
}

/// Puts the first blocked job of `slot_key` back to `ready`, skipping waiting rows another
/// transaction holds, and deletes on the way the waiting rows of jobs no longer blocked (at
/// most `max_leftovers`, read a hundred at a time once met): the one-job case of the MySQL
/// `limits::wake`, in PostgreSQL's SQL.
async fn wake_one(
    conn: &mut PgConnection,
    slot_key: &str,
    max_leftovers: u32,
) -> sqlx::Result<u32> {
    let mut leftovers = 0u32;
    while leftovers < max_leftovers {
        let read: i64 = if leftovers == 0 { 1 } else { 100 };
        // The waiting rows, first in claim order, locked; with their job's status by a plain
        // read (the job's row is updated below, fenced by that status).
        let rows = sqlx::query(
            "SELECT b.job_id, j.status = 'blocked' AS blocked \
             FROM job_queue_blocked b LEFT JOIN job_queue j ON j.id = b.job_id \
             WHERE b.slot_key = $1 ORDER BY b.priority, b.job_id LIMIT $2 \
             FOR UPDATE OF b SKIP LOCKED",
        )
        .bind(slot_key)
        .bind(read)
        .fetch_all(&mut *conn)
        .await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let mut done: Vec<i64> = Vec::with_capacity(rows.len());
        let mut woken = 0;
        for r in &rows {
            let job: i64 = r.try_get(0)?;
            let blocked: Option<bool> = r.try_get(1)?;
            done.push(job);
            if blocked == Some(true) {
                woken = sqlx::query(
                    "UPDATE job_queue SET status = 'ready', updated_at = job_queue_now() \
                     WHERE id = $1 AND status = 'blocked'",
                )
                .bind(job)
                .execute(&mut *conn)
                .await?
                .rows_affected() as u32;
                if woken == 1 {
                    break;
                }
            }
        }
        leftovers += done.len() as u32 - woken;
        sqlx::query("DELETE FROM job_queue_blocked WHERE slot_key = $1 AND job_id = ANY($2)")
            .bind(slot_key)
            .bind(&done)
            .execute(&mut *conn)
            .await?;
        if woken == 1 {
            return Ok(1);
        }
    }
    Ok(0)
}
