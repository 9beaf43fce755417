//! Reading a job's row on PostgreSQL: the record, the summary and the detail.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::Result;
use crate::model::{
    JobDetail, JobRecord, JobStatus, JobSummary, StoredText, Uniqueness, DETAIL_HISTORY_BYTES,
    DETAIL_TEXT_BYTES, MAX_ATTEMPT_HISTORY, SUMMARY_ERROR_CHARS,
};
use crate::store::attempts_from_log;

/// The columns of a [`JobRecord`]; a released job's key is in `released_key`.
pub(crate) const JOB_COLUMNS: &str = "id, queue::text AS queue, kind::text AS kind, \
    COALESCE(released_key, task_key)::text AS task_key, payload::text AS payload, status, \
    priority, run_at, attempts, max_attempts, lease_owner::text AS lease_owner, lease_until, \
    cancel_requested, last_error, created_at, updated_at, finished_at, lease_expiries, \
    unrunnable_since, snoozes, unique_policy, \
    CAST(EXTRACT(EPOCH FROM (unique_until - created_at)) * 1000000 AS BIGINT) AS unique_us, \
    released_key IS NOT NULL AS key_released, metadata::text AS metadata, \
    progress::text AS progress, progress_at, concurrency_key::text AS concurrency_key, \
    concurrency_limit, rate_key::text AS rate_key, rate_limit, rate_window_ms";

/// The columns of a [`JobSummary`]: none of the large ones, `last_error` cut by the server.
pub(crate) fn summary_columns() -> String {
    format!(
        "id, queue::text AS queue, kind::text AS kind, \
         COALESCE(released_key, task_key)::text AS task_key, status, priority, run_at, \
         attempts, max_attempts, LEFT(last_error, {SUMMARY_ERROR_CHARS}) AS last_error, \
         created_at, updated_at, finished_at, lease_until"
    )
}

fn utc(r: &PgRow, c: &str) -> sqlx::Result<DateTime<Utc>> {
    Ok(r.try_get::<NaiveDateTime, _>(c)?.and_utc())
}

fn opt_utc(r: &PgRow, c: &str) -> sqlx::Result<Option<DateTime<Utc>>> {
    Ok(r.try_get::<Option<NaiveDateTime>, _>(c)?
        .map(|t| t.and_utc()))
}

fn u32_of(r: &PgRow, c: &str) -> sqlx::Result<u32> {
    Ok(u32::try_from(r.try_get::<i64, _>(c)?.max(0)).unwrap_or(u32::MAX))
}

fn opt_json(r: &PgRow, c: &str) -> Result<Option<serde_json::Value>> {
    let t: Option<String> = r.try_get(c)?;
    Ok(t.and_then(|t| serde_json::from_str(&t).ok()))
}

/// A row of [`JOB_COLUMNS`].
pub(crate) fn record_from_row(r: &PgRow) -> Result<JobRecord> {
    let payload: String = r.try_get("payload")?;
    Ok(JobRecord {
        id: super::id_of(r.try_get("id")?),
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        task_key: r.try_get("task_key")?,
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        status: r.try_get::<String, _>("status")?.parse::<JobStatus>()?,
        priority: r.try_get("priority")?,
        run_at: utc(r, "run_at")?,
        attempts: u32_of(r, "attempts")?,
        max_attempts: u32_of(r, "max_attempts")?,
        lease_owner: r.try_get("lease_owner")?,
        lease_until: opt_utc(r, "lease_until")?,
        cancel_requested: r.try_get("cancel_requested")?,
        last_error: r.try_get("last_error")?,
        created_at: utc(r, "created_at")?,
        updated_at: utc(r, "updated_at")?,
        finished_at: opt_utc(r, "finished_at")?,
        lease_expiries: u32_of(r, "lease_expiries")?,
        unrunnable_since: opt_utc(r, "unrunnable_since")?,
        unique: match r.try_get::<String, _>("unique_policy")?.as_str() {
            "while_active" => Uniqueness::WhileActive,
            "for_period" => Uniqueness::For(std::time::Duration::from_micros(
                r.try_get::<Option<i64>, _>("unique_us")?
                    .unwrap_or(0)
                    .max(0) as u64,
            )),
            _ => Uniqueness::UntilPruned,
        },
        key_released: r.try_get("key_released")?,
        metadata: opt_json(r, "metadata")?,
        progress: opt_json(r, "progress")?,
        progress_at: opt_utc(r, "progress_at")?,
        snoozes: u32_of(r, "snoozes")?,
        concurrency_key: r.try_get("concurrency_key")?,
        concurrency_limit: u32_of(r, "concurrency_limit")?,
        rate_key: r.try_get("rate_key")?,
        rate_limit: u32_of(r, "rate_limit")?,
        rate_window_ms: u32_of(r, "rate_window_ms")?,
    })
}

/// A row of [`summary_columns`].
pub(crate) fn summary_from_row(r: &PgRow) -> Result<JobSummary> {
    Ok(JobSummary {
        id: super::id_of(r.try_get("id")?),
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        task_key: r.try_get("task_key")?,
        status: r.try_get::<String, _>("status")?.parse::<JobStatus>()?,
        priority: r.try_get("priority")?,
        run_at: utc(r, "run_at")?,
        attempts: u32_of(r, "attempts")?,
        max_attempts: u32_of(r, "max_attempts")?,
        last_error: r.try_get("last_error")?,
        created_at: utc(r, "created_at")?,
        updated_at: utc(r, "updated_at")?,
        finished_at: opt_utc(r, "finished_at")?,
        lease_until: opt_utc(r, "lease_until")?,
    })
}

/// A large column read capped: its size in bytes and its first `max` bytes.
fn stored_columns(column: &str, max: usize) -> String {
    format!(
        "octet_length({column}::text) AS {column}_bytes, \
         substring(convert_to({column}::text, 'UTF8') from 1 for {max}) AS {column}_head"
    )
}

/// One job by id (`$1`) for a person: the columns of [`JobDetail`].
pub(crate) fn job_detail_sql() -> String {
    let large = [
        stored_columns("payload", DETAIL_TEXT_BYTES),
        stored_columns("metadata", DETAIL_TEXT_BYTES),
        stored_columns("progress", DETAIL_TEXT_BYTES),
        stored_columns("output", DETAIL_TEXT_BYTES),
        stored_columns("last_error", DETAIL_TEXT_BYTES),
        stored_columns("attempt_log", DETAIL_HISTORY_BYTES),
    ]
    .join(", ");
    format!(
        "SELECT id, queue::text AS queue, kind::text AS kind, \
         COALESCE(released_key, task_key)::text AS task_key, status, priority, run_at, \
         attempts, max_attempts, lease_owner::text AS lease_owner, lease_until, \
         cancel_requested, created_at, updated_at, finished_at, lease_expiries, \
         unrunnable_since, snoozes, released_key IS NOT NULL AS key_released, progress_at, \
         {large} FROM job_queue WHERE id = $1"
    )
}

fn stored_text(r: &PgRow, column: &str) -> Result<Option<StoredText>> {
    let bytes: Option<i32> = r.try_get(format!("{column}_bytes").as_str())?;
    let head: Option<Vec<u8>> = r.try_get(format!("{column}_head").as_str())?;
    Ok(match (bytes, head) {
        (Some(bytes), Some(head)) => Some(StoredText {
            text: match String::from_utf8(head) {
                Ok(s) => s,
                Err(e) => {
                    let valid = e.utf8_error().valid_up_to();
                    let mut b = e.into_bytes();
                    b.truncate(valid);
                    String::from_utf8_lossy(&b).into_owned()
                }
            },
            bytes: bytes.max(0) as u64,
        }),
        _ => None,
    })
}

/// A row of [`job_detail_sql`].
pub(crate) fn detail_from_row(r: &PgRow) -> Result<JobDetail> {
    let attempt_log = stored_text(r, "attempt_log")?;
    let history = match &attempt_log {
        None => Ok(Vec::new()),
        Some(log) if log.is_cut() => Err(format!(
            "it is {} bytes, longer than this library writes",
            log.bytes
        )),
        Some(log) => attempts_from_log(&log.text).map(|mut attempts| {
            attempts.reverse();
            attempts.truncate(MAX_ATTEMPT_HISTORY);
            attempts
        }),
    };
    Ok(JobDetail {
        id: super::id_of(r.try_get("id")?),
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        task_key: r.try_get("task_key")?,
        status: r.try_get::<String, _>("status")?.parse::<JobStatus>()?,
        priority: r.try_get("priority")?,
        run_at: utc(r, "run_at")?,
        attempts: u32_of(r, "attempts")?,
        max_attempts: u32_of(r, "max_attempts")?,
        lease_owner: r.try_get("lease_owner")?,
        lease_until: opt_utc(r, "lease_until")?,
        cancel_requested: r.try_get("cancel_requested")?,
        created_at: utc(r, "created_at")?,
        updated_at: utc(r, "updated_at")?,
        finished_at: opt_utc(r, "finished_at")?,
        lease_expiries: u32_of(r, "lease_expiries")?,
        unrunnable_since: opt_utc(r, "unrunnable_since")?,
        snoozes: u32_of(r, "snoozes")?,
        key_released: r.try_get("key_released")?,
        progress_at: opt_utc(r, "progress_at")?,
        payload: stored_text(r, "payload")?.unwrap_or(StoredText {
            text: String::new(),
            bytes: 0,
        }),
        metadata: stored_text(r, "metadata")?,
        progress: stored_text(r, "progress")?,
        output: stored_text(r, "output")?,
        last_error: stored_text(r, "last_error")?,
        attempt_log,
        history,
    })
}
