//! Reading rows: the job record, and text columns that the driver may report as bytes.

use sqlx::mysql::{MySqlPool, MySqlRow};
use sqlx::Row;

use crate::error::Result;
use chrono::{DateTime, NaiveDateTime, Utc};

use crate::model::{
    Attempt, AttemptOutcome, JobDetail, JobRecord, JobStatus, JobSummary, StoredText, Uniqueness,
    DETAIL_HISTORY_BYTES, DETAIL_TEXT_BYTES, MAX_ATTEMPT_ERROR_BYTES, MAX_ATTEMPT_HISTORY,
    SUMMARY_ERROR_CHARS,
};

/// Which row [`fetch_job`] reads.
#[derive(Debug)]
pub(crate) enum JobLookup<'a> {
    Id(u64),
    Key(&'a str),
}

/// A released job's `task_key` is not its key: its key is in `released_key`.
pub(crate) const JOB_COLUMNS: &str = "id, queue, kind, COALESCE(released_key, task_key) AS task_key, payload, CAST(status AS CHAR) AS status, priority, run_at, \
    attempts, max_attempts, lease_owner, lease_until, cancel_requested, last_error, created_at, updated_at, finished_at, \
    lease_expiries, unrunnable_since, snoozes, CAST(unique_policy AS CHAR) AS unique_policy, \
    TIMESTAMPDIFF(MICROSECOND, created_at, unique_until) AS unique_us, released_key IS NOT NULL AS key_released, \
    metadata, progress, progress_at, concurrency_key, concurrency_limit, rate_key, rate_limit, rate_window_ms";

/// The columns of a [`JobSummary`]: none of the large ones, and `last_error` cut by the
/// server.
pub(crate) fn summary_columns() -> String {
    format!(
        "id, queue, kind, COALESCE(released_key, task_key) AS task_key, \
         CAST(status AS CHAR) AS status, priority, run_at, attempts, max_attempts, \
         LEFT(last_error, {SUMMARY_ERROR_CHARS}) AS last_error, created_at, updated_at, finished_at, \
         lease_until"
    )
}

pub(crate) fn summary_from_row(r: &MySqlRow) -> Result<JobSummary> {
    Ok(JobSummary {
        id: r.try_get("id")?,
        queue: text(r, "queue")?,
        kind: text(r, "kind")?,
        task_key: key_text(r, "task_key")?,
        status: text(r, "status")?.parse::<JobStatus>()?,
        priority: r.try_get("priority")?,
        run_at: utc(r, "run_at")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        last_error: opt_text_lossy(r, "last_error")?,
        created_at: utc(r, "created_at")?,
        updated_at: utc(r, "updated_at")?,
        finished_at: opt_utc(r, "finished_at")?,
        lease_until: opt_utc(r, "lease_until")?,
    })
}

/// A large column read for a person: its size, and its first `max` bytes as bytes (so that
/// the cut is the same on every server, whatever the column's type and character set).
fn stored_columns(column: &str, max: usize) -> String {
    format!(
        "LENGTH({column}) AS {column}_bytes, \
         SUBSTRING(CAST({column} AS BINARY), 1, {max}) AS {column}_head"
    )
}

/// One job by id for a person: the columns of [`JobDetail`]. Every large column is read
/// capped, as text, so that no stored value can fail the read or make it large.
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
        "SELECT id, queue, kind, COALESCE(released_key, task_key) AS task_key, \
         CAST(status AS CHAR) AS status, priority, run_at, attempts, max_attempts, lease_owner, \
         lease_until, cancel_requested, created_at, updated_at, finished_at, lease_expiries, \
         unrunnable_since, snoozes, released_key IS NOT NULL AS key_released, progress_at, {large} \
         FROM job_queue WHERE id = ?"
    )
}

pub(crate) fn detail_from_row(r: &MySqlRow) -> Result<JobDetail> {
    let attempt_log = stored_text(r, "attempt_log")?;
    let history = history_of_log(attempt_log.as_ref());
    Ok(JobDetail {
        id: r.try_get("id")?,
        queue: text(r, "queue")?,
        kind: text(r, "kind")?,
        task_key: key_text(r, "task_key")?,
        status: text(r, "status")?.parse::<JobStatus>()?,
        priority: r.try_get("priority")?,
        run_at: utc(r, "run_at")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        lease_owner: opt_text_lossy(r, "lease_owner")?,
        lease_until: opt_utc(r, "lease_until")?,
        cancel_requested: r.try_get("cancel_requested")?,
        created_at: utc(r, "created_at")?,
        updated_at: utc(r, "updated_at")?,
        finished_at: opt_utc(r, "finished_at")?,
        lease_expiries: r.try_get("lease_expiries")?,
        unrunnable_since: opt_utc(r, "unrunnable_since")?,
        snoozes: r.try_get("snoozes")?,
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

/// A job's attempts for a person, newest first, from its `attempt_log` as read by
/// [`stored_columns`] (on either database), or why they cannot be shown.
pub(crate) fn history_of_log(
    attempt_log: Option<&StoredText>,
) -> std::result::Result<Vec<Attempt>, String> {
    match attempt_log {
        None => Ok(Vec::new()),
        Some(log) if log.is_cut() => Err(format!(
            "it is {} bytes, longer than this library writes",
            log.bytes
        )),
        Some(log) => attempts_from_log(&log.text).map(|mut attempts| {
            attempts.reverse();
            attempts.truncate(MAX_ATTEMPT_HISTORY);
            for a in &mut attempts {
                if let Some(e) = &mut a.error {
                    cut_at_char(e, MAX_ATTEMPT_ERROR_BYTES);
                }
            }
            attempts
        }),
    }
}

/// A column read by [`stored_columns`]: `None` when it is NULL.
fn stored_text(r: &MySqlRow, column: &str) -> Result<Option<StoredText>> {
    let bytes: Option<i64> = r.try_get(format!("{column}_bytes").as_str())?;
    let head: Option<Vec<u8>> = r.try_get(format!("{column}_head").as_str())?;
    Ok(match (bytes, head) {
        (Some(bytes), Some(head)) => Some(StoredText {
            text: text_of_head(head),
            bytes: bytes.max(0) as u64,
        }),
        _ => None,
    })
}

/// The first bytes of a column as text: a character cut at the end is left out, any other
/// byte sequence that is not UTF-8 reads as U+FFFD.
pub(crate) fn text_of_head(head: Vec<u8>) -> String {
    match String::from_utf8(head) {
        Ok(s) => s,
        Err(e) => {
            let utf8 = e.utf8_error();
            let mut bytes = e.into_bytes();
            if utf8.error_len().is_none() {
                bytes.truncate(utf8.valid_up_to());
            }
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }
}

/// Cuts `s` to at most `max` bytes, at a character boundary.
fn cut_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// A nullable text column, lossily if it is not UTF-8: a person reads it, and a bad byte
/// must not hide the rest of the row.
fn opt_text_lossy(r: &MySqlRow, column: &str) -> sqlx::Result<Option<String>> {
    match r.try_get::<Option<String>, _>(column) {
        Ok(s) => Ok(s),
        Err(_) => {
            let bytes: Option<Vec<u8>> = r.try_get(column)?;
            Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
        }
    }
}

pub(crate) async fn fetch_job(
    pool: &MySqlPool,
    lookup: JobLookup<'_>,
) -> Result<Option<JobRecord>> {
    let row = match lookup {
        JobLookup::Id(id) => {
            sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM job_queue WHERE id = ?"))
                .bind(id)
                .fetch_optional(pool)
                .await?
        }
        JobLookup::Key(key) => {
            sqlx::query(&format!(
                "SELECT {JOB_COLUMNS} FROM job_queue WHERE task_key = ?"
            ))
            .bind(key)
            .fetch_optional(pool)
            .await?
        }
    };
    row.as_ref().map(record_from_row).transpose()
}

pub(crate) fn record_from_row(r: &MySqlRow) -> Result<JobRecord> {
    let status = text(r, "status")?;
    Ok(JobRecord {
        id: r.try_get("id")?,
        queue: text(r, "queue")?,
        kind: text(r, "kind")?,
        task_key: key_text(r, "task_key")?,
        payload: r
            .try_get::<sqlx::types::Json<serde_json::Value>, _>("payload")
            .map(|j| j.0)?,
        status: status.parse::<JobStatus>()?,
        priority: r.try_get("priority")?,
        run_at: utc(r, "run_at")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        lease_owner: opt_text(r, "lease_owner")?,
        lease_until: opt_utc(r, "lease_until")?,
        cancel_requested: r.try_get("cancel_requested")?,
        last_error: opt_text(r, "last_error")?,
        created_at: utc(r, "created_at")?,
        updated_at: utc(r, "updated_at")?,
        finished_at: opt_utc(r, "finished_at")?,
        lease_expiries: r.try_get("lease_expiries")?,
        unrunnable_since: opt_utc(r, "unrunnable_since")?,
        unique: match text(r, "unique_policy")?.as_str() {
            "while_active" => Uniqueness::WhileActive,
            "for_period" => Uniqueness::For(std::time::Duration::from_micros(
                r.try_get::<Option<i64>, _>("unique_us")?
                    .unwrap_or(0)
                    .max(0) as u64,
            )),
            _ => Uniqueness::UntilPruned,
        },
        key_released: r.try_get("key_released")?,
        metadata: json(r, "metadata")?,
        progress: json(r, "progress")?,
        progress_at: opt_utc(r, "progress_at")?,
        snoozes: r.try_get("snoozes")?,
        concurrency_key: opt_key_text(r, "concurrency_key")?,
        concurrency_limit: r.try_get("concurrency_limit")?,
        rate_key: opt_key_text(r, "rate_key")?,
        rate_limit: r.try_get("rate_limit")?,
        rate_window_ms: r.try_get("rate_window_ms")?,
    })
}

/// A time column: the server's UTC time, stored without a zone.
pub(crate) fn utc<I>(r: &MySqlRow, column: I) -> sqlx::Result<DateTime<Utc>>
where
    I: sqlx::ColumnIndex<MySqlRow>,
{
    Ok(r.try_get::<NaiveDateTime, _>(column)?.and_utc())
}

/// A nullable time column (see [`utc`]).
pub(crate) fn opt_utc<I>(r: &MySqlRow, column: I) -> sqlx::Result<Option<DateTime<Utc>>>
where
    I: sqlx::ColumnIndex<MySqlRow>,
{
    Ok(r.try_get::<Option<NaiveDateTime>, _>(column)?
        .map(|t| t.and_utc()))
}

/// A nullable JSON column.
fn json(r: &MySqlRow, name: &str) -> sqlx::Result<Option<serde_json::Value>> {
    Ok(
        r.try_get::<Option<sqlx::types::Json<serde_json::Value>>, _>(name)?
            .map(|j| j.0),
    )
}

/// The attempts of a job's `attempt_log` (a JSON array the outcome writes append to).
pub(crate) fn attempts_from_log(log: &str) -> std::result::Result<Vec<Attempt>, String> {
    #[derive(serde::Deserialize)]
    struct Entry {
        attempt: u32,
        started_at: Option<String>,
        ended_at: String,
        worker: Option<String>,
        outcome: AttemptOutcome,
        error: Option<String>,
    }
    fn time(s: &str) -> std::result::Result<DateTime<Utc>, String> {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
            .map(|t| t.and_utc())
            .map_err(|e| format!("bad time {s:?} in the attempt history: {e}"))
    }
    let entries: Vec<Entry> = serde_json::from_str(log)
        .map_err(|e| format!("the attempt history is not the JSON this library writes: {e}"))?;
    entries
        .into_iter()
        .map(|e| {
            Ok(Attempt {
                attempt: e.attempt,
                started_at: e.started_at.as_deref().map(time).transpose()?,
                ended_at: time(&e.ended_at)?,
                worker: e.worker,
                outcome: e.outcome,
                error: e.error,
            })
        })
        .collect()
}

/// A limit key column (bytes), as text.
fn opt_key_text(r: &MySqlRow, column: &str) -> Result<Option<String>> {
    let bytes: Option<Vec<u8>> = r.try_get(column)?;
    Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// A text column. Columns with a binary collation (`utf8mb4_bin`, `ascii_bin`: keys and
/// queue names compare byte for byte) are reported as VARBINARY by the driver, so they are
/// read as bytes when the string decode refuses them.
pub(crate) fn text<I: sqlx::ColumnIndex<MySqlRow> + Copy>(
    r: &MySqlRow,
    i: I,
) -> sqlx::Result<String> {
    match r.try_get::<String, _>(i) {
        Ok(s) => Ok(s),
        Err(_) => {
            let bytes: Vec<u8> = r.try_get(i)?;
            String::from_utf8(bytes).map_err(|e| sqlx::Error::Decode(Box::new(e)))
        }
    }
}

/// A task key: bytes in the table, and a producer writing SQL may store any. A key that is
/// not UTF-8 is read lossily (U+FFFD for each bad sequence) rather than failing the read:
/// failing it would fail every claim that meets the row, and stop its queue.
fn key_text<I: sqlx::ColumnIndex<MySqlRow> + Copy>(r: &MySqlRow, i: I) -> sqlx::Result<String> {
    let bytes: Vec<u8> = r.try_get(i)?;
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// A nullable text column; see [`text`].
pub(crate) fn opt_text<I: sqlx::ColumnIndex<MySqlRow> + Copy>(
    r: &MySqlRow,
    i: I,
) -> sqlx::Result<Option<String>> {
    match r.try_get::<Option<String>, _>(i) {
        Ok(s) => Ok(s),
        Err(_) => {
            let bytes: Option<Vec<u8>> = r.try_get(i)?;
            bytes
                .map(|b| String::from_utf8(b).map_err(|e| sqlx::Error::Decode(Box::new(e))))
                .transpose()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_column_loses_only_its_cut_last_character() {
        // "é" is two bytes: a head of 3 bytes of "aéb" ends in the middle of nothing, one of
        // 2 bytes in the middle of "é".
        assert_eq!(text_of_head("aéb".as_bytes()[..3].to_vec()), "aé");
        assert_eq!(text_of_head("aéb".as_bytes()[..2].to_vec()), "a");
        // A byte that is not UTF-8 inside the text reads as U+FFFD, the rest as it is.
        assert_eq!(text_of_head(b"a\xffb".to_vec()), "a\u{fffd}b");
    }

    #[test]
    fn an_error_is_cut_at_a_character_boundary() {
        let mut e = "ab€".to_owned();
        cut_at_char(&mut e, 3);
        assert_eq!(e, "ab");
        let mut short = "ab".to_owned();
        cut_at_char(&mut short, 3);
        assert_eq!(short, "ab");
    }
}
