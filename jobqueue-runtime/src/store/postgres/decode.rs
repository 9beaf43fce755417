//! Reading job rows on PostgreSQL: the column lists and the decoders of the job record, the
//! summary and the detail (the twins of the MySQL `decode.rs`), and the reads of one job
//! (`Store::job`, `attempt_log`, `output`, `released_jobs` of the MySQL `admin.rs`).
//!
//! What differs from MySQL: text columns are always valid UTF-8 (TEXT cannot hold anything
//! else), so keys and names decode as `String` without a bytes fallback; unsigned integers are
//! signed columns, read as `i64` and converted; `status` and `unique_policy` are TEXT, read as
//! they are; JSONB columns decode as JSON (their text is PostgreSQL's, keys sorted, not the
//! text that was written).

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::postgres::{PgPool, PgRow};
use sqlx::Row;

use super::{db_id, id_of, Store};
use crate::error::Result;
use crate::model::{
    JobDetail, JobRecord, JobStatus, JobSummary, StoredText, Uniqueness, DETAIL_HISTORY_BYTES,
    DETAIL_TEXT_BYTES, SUMMARY_ERROR_CHARS,
};
use crate::store::decode::{history_of_log, JobLookup};

/// The columns [`record_from_pg_row`] reads (the MySQL `JOB_COLUMNS`). A released job's
/// `task_key` is not its key: its key is in `released_key`.
pub(crate) const PG_JOB_COLUMNS: &str = "id, queue, kind, COALESCE(released_key, task_key) AS task_key, payload, status, priority, run_at, \
    attempts, max_attempts, lease_owner, lease_until, cancel_requested, last_error, created_at, updated_at, finished_at, \
    lease_expiries, unrunnable_since, snoozes, unique_policy, \
    round(EXTRACT(EPOCH FROM (unique_until - created_at)) * 1000000)::bigint AS unique_us, \
    released_key IS NOT NULL AS key_released, \
    metadata, progress, progress_at, concurrency_key, concurrency_limit, rate_key, rate_limit, rate_window_ms";

/// The columns of a [`JobSummary`] (the MySQL `summary_columns`): none of the large ones,
/// and `last_error` cut by the server (`left()` counts characters, as MySQL's `LEFT` does).
// For the listings' and the job page's PostgreSQL statements.
#[allow(dead_code)]
pub(crate) fn pg_summary_columns() -> String {
    format!(
        "id, queue, kind, COALESCE(released_key, task_key) AS task_key, status, priority, \
         run_at, attempts, max_attempts, left(last_error, {SUMMARY_ERROR_CHARS}) AS last_error, \
         created_at, updated_at, finished_at, lease_until"
    )
}

/// A large column read for a person: its size in bytes, and its first `max` bytes as bytes
/// (`bytea`). JSONB columns are read as their text.
fn pg_stored_columns(column: &str, json: bool, max: usize) -> String {
    let text = if json {
        format!("{column}::text")
    } else {
        column.to_owned()
    };
    format!(
        "octet_length({text}) AS {column}_bytes, \
         substring(convert_to({text}, 'UTF8') FROM 1 FOR {max}) AS {column}_head"
    )
}

/// One job by id (`$1`) for a person: the columns of [`JobDetail`] (the MySQL
/// `job_detail_sql`). Every large column is read capped, so that no stored value can make the
/// read large.
// For the listings' and the job page's PostgreSQL statements.
#[allow(dead_code)]
pub(crate) fn pg_job_detail_sql() -> String {
    let large = [
        pg_stored_columns("payload", true, DETAIL_TEXT_BYTES),
        pg_stored_columns("metadata", true, DETAIL_TEXT_BYTES),
        pg_stored_columns("progress", true, DETAIL_TEXT_BYTES),
        pg_stored_columns("output", false, DETAIL_TEXT_BYTES),
        pg_stored_columns("last_error", false, DETAIL_TEXT_BYTES),
        pg_stored_columns("attempt_log", false, DETAIL_HISTORY_BYTES),
    ]
    .join(", ");
    format!(
        "SELECT id, queue, kind, COALESCE(released_key, task_key) AS task_key, status, \
         priority, run_at, attempts, max_attempts, lease_owner, lease_until, cancel_requested, \
         created_at, updated_at, finished_at, lease_expiries, unrunnable_since, snoozes, \
         released_key IS NOT NULL AS key_released, progress_at, {large} \
         FROM job_queue WHERE id = $1"
    )
}

/// A job record from a row of [`PG_JOB_COLUMNS`].
pub(crate) fn record_from_pg_row(r: &PgRow) -> Result<JobRecord> {
    let policy: String = r.try_get("unique_policy")?;
    Ok(JobRecord {
        id: pg_id(r, "id")?,
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        task_key: r.try_get("task_key")?,
        payload: r
            .try_get::<sqlx::types::Json<serde_json::Value>, _>("payload")
            .map(|j| j.0)?,
        status: pg_status(r, "status")?,
        priority: r.try_get("priority")?,
        run_at: pg_utc(r, "run_at")?,
        attempts: pg_u32(r, "attempts")?,
        max_attempts: pg_u32(r, "max_attempts")?,
        lease_owner: r.try_get("lease_owner")?,
        lease_until: pg_opt_utc(r, "lease_until")?,
        cancel_requested: r.try_get("cancel_requested")?,
        last_error: r.try_get("last_error")?,
        created_at: pg_utc(r, "created_at")?,
        updated_at: pg_utc(r, "updated_at")?,
        finished_at: pg_opt_utc(r, "finished_at")?,
        lease_expiries: pg_u32(r, "lease_expiries")?,
        unrunnable_since: pg_opt_utc(r, "unrunnable_since")?,
        unique: match policy.as_str() {
            "while_active" => Uniqueness::WhileActive,
            "for_period" => Uniqueness::For(std::time::Duration::from_micros(
                r.try_get::<Option<i64>, _>("unique_us")?
                    .unwrap_or(0)
                    .max(0) as u64,
            )),
            _ => Uniqueness::UntilPruned,
        },
        key_released: r.try_get("key_released")?,
        metadata: pg_json(r, "metadata")?,
        progress: pg_json(r, "progress")?,
        progress_at: pg_opt_utc(r, "progress_at")?,
        snoozes: pg_u32(r, "snoozes")?,
        concurrency_key: r.try_get("concurrency_key")?,
        concurrency_limit: pg_u32(r, "concurrency_limit")?,
        rate_key: r.try_get("rate_key")?,
        rate_limit: pg_u32(r, "rate_limit")?,
        rate_window_ms: pg_u32(r, "rate_window_ms")?,
    })
}

/// A job summary from a row of [`pg_summary_columns`].
// For the listings' and the job page's PostgreSQL statements.
#[allow(dead_code)]
pub(crate) fn summary_from_pg_row(r: &PgRow) -> Result<JobSummary> {
    Ok(JobSummary {
        id: pg_id(r, "id")?,
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        task_key: r.try_get("task_key")?,
        status: pg_status(r, "status")?,
        priority: r.try_get("priority")?,
        run_at: pg_utc(r, "run_at")?,
        attempts: pg_u32(r, "attempts")?,
        max_attempts: pg_u32(r, "max_attempts")?,
        last_error: r.try_get("last_error")?,
        created_at: pg_utc(r, "created_at")?,
        updated_at: pg_utc(r, "updated_at")?,
        finished_at: pg_opt_utc(r, "finished_at")?,
        lease_until: pg_opt_utc(r, "lease_until")?,
    })
}

/// A job detail from the row of [`pg_job_detail_sql`].
// For the listings' and the job page's PostgreSQL statements.
#[allow(dead_code)]
pub(crate) fn detail_from_pg_row(r: &PgRow) -> Result<JobDetail> {
    let attempt_log = pg_stored_text(r, "attempt_log")?;
    let history = history_of_log(attempt_log.as_ref());
    Ok(JobDetail {
        id: pg_id(r, "id")?,
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        task_key: r.try_get("task_key")?,
        status: pg_status(r, "status")?,
        priority: r.try_get("priority")?,
        run_at: pg_utc(r, "run_at")?,
        attempts: pg_u32(r, "attempts")?,
        max_attempts: pg_u32(r, "max_attempts")?,
        lease_owner: r.try_get("lease_owner")?,
        lease_until: pg_opt_utc(r, "lease_until")?,
        cancel_requested: r.try_get("cancel_requested")?,
        created_at: pg_utc(r, "created_at")?,
        updated_at: pg_utc(r, "updated_at")?,
        finished_at: pg_opt_utc(r, "finished_at")?,
        lease_expiries: pg_u32(r, "lease_expiries")?,
        unrunnable_since: pg_opt_utc(r, "unrunnable_since")?,
        snoozes: pg_u32(r, "snoozes")?,
        key_released: r.try_get("key_released")?,
        progress_at: pg_opt_utc(r, "progress_at")?,
        payload: pg_stored_text(r, "payload")?.unwrap_or(StoredText {
            text: String::new(),
            bytes: 0,
        }),
        metadata: pg_stored_text(r, "metadata")?,
        progress: pg_stored_text(r, "progress")?,
        output: pg_stored_text(r, "output")?,
        last_error: pg_stored_text(r, "last_error")?,
        attempt_log,
        history,
    })
}

/// A column read by [`pg_stored_columns`]: `None` when it is NULL.
fn pg_stored_text(r: &PgRow, column: &str) -> Result<Option<StoredText>> {
    let bytes: Option<i32> = r.try_get(format!("{column}_bytes").as_str())?;
    let head: Option<Vec<u8>> = r.try_get(format!("{column}_head").as_str())?;
    Ok(match (bytes, head) {
        (Some(bytes), Some(head)) => Some(StoredText {
            text: crate::store::decode::text_of_head(head),
            bytes: bytes.max(0) as u64,
        }),
        _ => None,
    })
}

/// An id column (`BIGINT`) as the library's `u64`.
pub(crate) fn pg_id(r: &PgRow, column: &str) -> sqlx::Result<u64> {
    Ok(id_of(r.try_get::<i64, _>(column)?))
}

/// An unsigned 32-bit column (a `BIGINT` with a CHECK of the `u32` range).
pub(crate) fn pg_u32(r: &PgRow, column: &str) -> sqlx::Result<u32> {
    let v: i64 = r.try_get(column)?;
    u32::try_from(v).map_err(|e| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: Box::new(e),
    })
}

/// A status column (TEXT).
pub(crate) fn pg_status(r: &PgRow, column: &str) -> Result<JobStatus> {
    Ok(r.try_get::<String, _>(column)?.parse::<JobStatus>()?)
}

/// A time column: the server's UTC time, stored without a zone.
pub(crate) fn pg_utc(r: &PgRow, column: &str) -> sqlx::Result<DateTime<Utc>> {
    Ok(r.try_get::<NaiveDateTime, _>(column)?.and_utc())
}

/// A nullable time column (see [`pg_utc`]).
pub(crate) fn pg_opt_utc(r: &PgRow, column: &str) -> sqlx::Result<Option<DateTime<Utc>>> {
    Ok(r.try_get::<Option<NaiveDateTime>, _>(column)?
        .map(|t| t.and_utc()))
}

/// A nullable JSONB column.
pub(crate) fn pg_json(r: &PgRow, column: &str) -> sqlx::Result<Option<serde_json::Value>> {
    Ok(
        r.try_get::<Option<sqlx::types::Json<serde_json::Value>>, _>(column)?
            .map(|j| j.0),
    )
}

/// One job by id or by task key (the MySQL `fetch_job`).
pub(crate) async fn fetch_job(pool: &PgPool, lookup: JobLookup<'_>) -> Result<Option<JobRecord>> {
    let row = match lookup {
        JobLookup::Id(id) => {
            sqlx::query(&format!(
                "SELECT {PG_JOB_COLUMNS} FROM job_queue WHERE id = $1"
            ))
            .bind(db_id(id))
            .fetch_optional(pool)
            .await?
        }
        JobLookup::Key(key) => {
            sqlx::query(&format!(
                "SELECT {PG_JOB_COLUMNS} FROM job_queue WHERE task_key = $1"
            ))
            .bind(key)
            .fetch_optional(pool)
            .await?
        }
    };
    row.as_ref().map(record_from_pg_row).transpose()
}

/// `Store::job` on PostgreSQL: one job, by id or by task key.
pub(crate) async fn job(
    _store: &Store,
    pool: &PgPool,
    lookup: JobLookup<'_>,
) -> Result<Option<JobRecord>> {
    fetch_job(pool, lookup).await
}

/// The released jobs of `key`, newest first (the MySQL `key_history_sql`): the range of
/// `task_key` that holds them (`$1` to `$2`, see `enqueue::released_range`), confirmed by
/// `released_key`.
pub(crate) fn pg_key_history_sql() -> String {
    format!(
        "SELECT {PG_JOB_COLUMNS} FROM job_queue \
         WHERE task_key >= $1 AND task_key < $2 AND released_key = $3 \
         ORDER BY job_queue.task_key DESC LIMIT $4"
    )
}

/// `Store::released_jobs` on PostgreSQL: the jobs that gave `key` up to a newer job, newest
/// first, at most `limit`.
pub(crate) async fn released_jobs(
    _store: &Store,
    pool: &PgPool,
    key: &str,
    limit: u32,
) -> Result<Vec<JobRecord>> {
    let (low, high) = super::enqueue::released_range(key);
    let rows = sqlx::query(&pg_key_history_sql())
        .bind(low)
        .bind(high)
        .bind(key)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    rows.iter().map(record_from_pg_row).collect()
}

/// `Store::attempt_log` on PostgreSQL: `None` when there is no such job, `Some(None)` when
/// no attempt has ended yet.
pub(crate) async fn attempt_log(
    _store: &Store,
    pool: &PgPool,
    id: u64,
) -> Result<Option<Option<String>>> {
    Ok(
        sqlx::query_scalar::<_, Option<String>>("SELECT attempt_log FROM job_queue WHERE id = $1")
            .bind(db_id(id))
            .fetch_optional(pool)
            .await?,
    )
}

/// `Store::output` on PostgreSQL: a job's kind, status and output (JSON text), by id.
pub(crate) async fn output(
    _store: &Store,
    pool: &PgPool,
    id: u64,
) -> Result<Option<(String, JobStatus, Option<String>)>> {
    let row = sqlx::query("SELECT kind, status, output FROM job_queue WHERE id = $1")
        .bind(db_id(id))
        .fetch_optional(pool)
        .await?;
    let Some(r) = row else {
        return Ok(None);
    };
    Ok(Some((
        r.try_get(0)?,
        r.try_get::<String, _>(1)?.parse()?,
        r.try_get(2)?,
    )))
}
