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
pub(crate) async fn complete_in(
    conn: &mut MySqlConnection,
    id: u64,
    owner: &str,
    attempt: u32,
) -> Result<Option<String>> {
    let matched = sqlx::query(&complete_in_sql())
        .bind(id)
        .bind(owner)
        .bind(attempt)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if matched == 1 {
        // The claim's concurrency slot is freed with the completion: both commit with the
        // caller's transaction, or neither does.
        super::limits::release_claims(conn, &[(id, attempt)]).await?;
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
