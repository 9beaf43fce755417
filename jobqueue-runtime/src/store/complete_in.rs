//! A job's completion written inside the caller's transaction, fenced like every outcome.

use sqlx::Row;

use super::*;

/// Marks the claim (`id`, `attempt`, `owner`) done on `conn`, inside the caller's open
/// transaction: the row becomes final when, and only if, that transaction commits. Returns
/// `None` when the row matched, or why it did not.
///
/// The fence is the outcome writer's (`status = 'running'`, owner and attempt) plus
/// `cancel_requested = 0`: a job an operator asked to cancel commits none of its effects.
/// The statement is not retried: a deadlock (1213) has already rolled back the caller's whole
/// transaction, which only the caller can run again. It goes by primary key, forced: left to
/// itself the optimizer may scan a status index, and under the caller's isolation level
/// (REPEATABLE READ by default) a locking scan keeps every record it passes locked until the
/// caller commits, other running jobs' included. By primary key it locks the one row, with no
/// gap lock, at any level. The same on MySQL 8.0 and MariaDB 10.6+.
///
/// This is the one place where a job's row becomes final inside a transaction of the job's
/// own; whatever must change together with a completion (as [`Store::complete`] writes it)
/// belongs in this statement too.
///
/// `holds_slot`: whether the claim holds a concurrency slot (the claim knows). Only then is
/// a slot freed, by primary key (see [`SLOT_OF_CLAIM`] and [`SLOT_RELEASE`]), so that the
/// caller's transaction locks the job's row, that one slot row, and no gap; waking a
/// blocked job of the key is left to the worker once it sees the commit
/// ([`Store::wake_after_commit`]), or to maintenance.
/// [`complete_in`] on a transaction of either database.
pub(crate) async fn complete_in_on(
    conn: crate::backend::ConnRef<'_>,
    id: u64,
    owner: &str,
    attempt: u32,
    holds_slot: bool,
) -> Result<Option<String>> {
    match conn {
        crate::backend::ConnRef::MySql(conn) => {
            complete_in(conn, id, owner, attempt, holds_slot).await
        }
        crate::backend::ConnRef::Postgres(conn) => {
            super::postgres::complete_in::complete_in(conn, id, owner, attempt, holds_slot).await
        }
    }
}

pub(crate) async fn complete_in(
    conn: &mut MySqlConnection,
    id: u64,
    owner: &str,
    attempt: u32,
    holds_slot: bool,
) -> Result<Option<String>> {
    let matched = match sqlx::query(&complete_in_sql())
        .bind(id)
        .bind(owner)
        .bind(attempt)
        .execute(&mut *conn)
        .await
    {
        Ok(done) => done.rows_affected(),
        // MariaDB's `innodb_snapshot_isolation` (on by default from 11.6.2) refuses, under
        // REPEATABLE READ, to lock a row changed since the transaction's snapshot was taken:
        // every renewal of the lease changes the job's row, so a transaction that read
        // before the last renewal can never complete the job. The server has rolled it back.
        Err(e) if classify(&e) == Some(DbErrorKind::SnapshotConflict) => {
            return Ok(Some(
                "the transaction's snapshot is older than the job row's last change (a lease \
                 renewal, every quarter of the lease, or a progress write), and the server \
                 (innodb_snapshot_isolation) refuses to lock a row changed since; it rolled \
                 the transaction back. Call `complete_in` first in the transaction, \
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
    // Why not, for the error: a plain read of the row, which takes no lock. Under REPEATABLE
    // READ it may show the caller's snapshot rather than the latest row; the messages below
    // stay true either way.
    let row = sqlx::query(
        "SELECT CAST(status AS CHAR), attempts, lease_owner <=> ?, cancel_requested \
         FROM job_queue WHERE id = ?",
    )
    .persistent(false)
    .bind(owner)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(Some("the job no longer exists (it was deleted)".into()));
    };
    let status = text(&row, 0)?;
    let attempts: u32 = row.try_get(1)?;
    let ours: bool = row.try_get(2)?;
    let cancel_requested: bool = row.try_get(3)?;
    Ok(Some(match (status.as_str(), attempts == attempt) {
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
    }))
}

/// The concurrency slot a claim holds: a plain (consistent, non-locking) read, over the
/// holder index. It takes no lock at any isolation level, so it cannot hold up claims of
/// other jobs until the caller commits; the slot was taken by the claim, which committed
/// before the job ran, so the caller's snapshot sees it.
pub const SLOT_OF_CLAIM: &str = "SELECT slot_key, slot_no FROM job_queue_slot \
     FORCE INDEX (job_queue_slot_holder) WHERE job_id = ? AND attempt = ?";

/// Frees one slot by its primary key, fenced by the claim holding it: an equality match on
/// the whole primary key locks that one record and no gap, at any isolation level (MySQL
/// 8.0 and MariaDB 10.6+ alike). Forced: left to itself the optimizer may go by the holder
/// index (`job_id = ?`), whose range read under REPEATABLE READ locks the gaps around the
/// entry, where other claims insert theirs.
pub const SLOT_RELEASE: &str = "UPDATE job_queue_slot FORCE INDEX (PRIMARY) \
     SET job_id = NULL, attempt = NULL \
     WHERE slot_key = ? AND slot_no = ? AND job_id = ? AND attempt = ?";

/// Writes the output of a job whose completion committed in its own transaction, once the
/// worker has seen the commit: by primary key, fenced by the attempt that completed it and
/// written once.
pub const OUTPUT_AFTER_COMMIT: &str = "UPDATE job_queue SET output = ? \
     WHERE id = ? AND attempts = ? AND status = 'done' AND output IS NULL";

/// The concurrency key of a job, to wake a blocked job of that key after its completion
/// committed. By primary key.
pub const CONCURRENCY_KEY_OF_JOB: &str =
    "SELECT concurrency_key, concurrency_limit FROM job_queue WHERE id = ?";

/// Frees the concurrency slot of claim (`id`, `attempt`) inside the caller's transaction,
/// locking only that slot's row.
async fn release_slot(conn: &mut MySqlConnection, id: u64, attempt: u32) -> Result<()> {
    let slots = sqlx::query(SLOT_OF_CLAIM)
        .bind(id)
        .bind(attempt)
        .fetch_all(&mut *conn)
        .await?;
    for r in &slots {
        let (key, no): (Vec<u8>, u32) = (r.try_get(0)?, r.try_get(1)?);
        sqlx::query(SLOT_RELEASE)
            .bind(key)
            .bind(no)
            .bind(id)
            .bind(attempt)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

impl Store {
    /// Writes `output` (JSON) for job `id`, whose completion at `attempt` committed in the
    /// job's own transaction. Returns false when nothing was written: the row is not done at
    /// that attempt, or it has an output already.
    pub(crate) async fn write_committed_output(
        &self,
        id: u64,
        attempt: u32,
        output: &str,
    ) -> Result<bool> {
        on_postgres!(
            self,
            complete_in::write_committed_output(id, attempt, output)
        );
        let done = autocommit!(self, |conn| sqlx::query(OUTPUT_AFTER_COMMIT)
            .bind(output)
            .bind(id)
            .bind(attempt)
            .execute(&mut *conn))?;
        Ok(done.rows_affected() == 1)
    }

    /// Wakes the first blocked job of job `id`'s concurrency key, after the job's completion
    /// freed a slot of that key in the job's own transaction (which leaves the wake out, to
    /// lock nothing more there). A job woken while the slot was taken again meanwhile is
    /// blocked again by its claim. Returns how many jobs were woken (0 or 1).
    pub(crate) async fn wake_after_commit(&self, id: u64) -> Result<u32> {
        on_postgres!(self, complete_in::wake_after_commit(id));
        let row = on_connection!(self, |conn| sqlx::query(CONCURRENCY_KEY_OF_JOB)
            .bind(id)
            .fetch_optional(&mut *conn))
        .await?;
        let Some(row) = row else { return Ok(0) };
        let (key, limit): (Option<Vec<u8>>, u32) = (row.try_get(0)?, row.try_get(1)?);
        let Some(key) = key.filter(|_| limit > 0) else {
            return Ok(0);
        };
        let mut slot_key = b"c:".to_vec();
        slot_key.extend_from_slice(&key);
        transaction!(self, |conn| {
            let n = super::limits::wake(
                conn,
                &slot_key,
                1,
                super::limits::WAKE_MAX_LEFTOVERS_IN_OUTCOME,
            )
            .await?;
            Ok((n, n > 0))
        })
    }
}

/// The statement of a job's completion in its own transaction (for the EXPLAIN test: it
/// goes by primary key). Like every outcome write it appends the attempt to the job's
/// history, in the same statement.
pub fn complete_in_sql() -> String {
    format!(
        "UPDATE job_queue FORCE INDEX (PRIMARY) SET {log}, status = 'done', lease_owner = NULL, \
         lease_until = NULL, finished_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) \
         WHERE id = ? AND status = 'running' AND lease_owner = ? AND attempts = ? \
           AND cancel_requested = 0",
        log = super::outcome::log_attempt("'done'", "NULL"),
    )
}
