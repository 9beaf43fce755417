//! Operator queries: read jobs and figures, cancel, retry, pause, resume, count what pruning
//! would delete. They run on the queue's pool as single statements or one short transaction,
//! without the worker's conflict retries (an operator sees an error and tries again), but
//! for the cancel, which can meet a wake of a blocked job's key and retries as it does.

use chrono::NaiveDateTime;
use sqlx::Row;

use super::dashboard::{bind_all, conditions, where_clause as dashboard_where, Arg};
use super::*;
use crate::model::{
    BulkProgress, CancelOutcome, JobFilter, JobRecord, JobStatus, QueueStats, RunningJob,
};

// An operator's retry is a fresh start: one more attempt, and the bounds on expired leases,
// on waiting for a worker that can run the job and on snoozes count again from zero.
const RETRY_SET: &str = "UPDATE job_queue SET status = 'ready', run_at = UTC_TIMESTAMP(6), \
     max_attempts = GREATEST(max_attempts, attempts + 1), cancel_requested = 0, \
     lease_expiries = 0, unrunnable_since = NULL, snoozes = 0, \
     lease_owner = NULL, lease_until = NULL, finished_at = NULL, updated_at = UTC_TIMESTAMP(6)";

/// A job's attempt history, by primary key.
pub const ATTEMPT_LOG_SELECT: &str = "SELECT attempt_log FROM job_queue WHERE id = ?";

/// A job's kind, status and output, by primary key.
pub const OUTPUT_SELECT: &str =
    "SELECT kind, CAST(status AS CHAR), output FROM job_queue WHERE id = ?";

impl Store {
    /// Cancels job `id`: at once if it has not started, by request if it is running.
    /// `None`: no such job.
    ///
    /// A blocked job's waiting row is deleted first, by its primary key (found by a plain
    /// read), and the job row locked after: the order a wake takes them in, which locks the
    /// waiting row and then updates the job. The other order deadlocks with a wake of the
    /// job's key. Conflicts that remain possible (a claim blocking the job meanwhile) are
    /// retried, as for the worker's transactions.
    pub(crate) async fn cancel(&self, id: u64) -> Result<Option<CancelOutcome>> {
        let status: Option<String> = transaction!(self, |conn| {
            let (status, unblocked) = unblock_and_lock(&mut *conn, id).await?;
            match status.as_deref() {
                Some("scheduled" | "ready" | "blocked") => {
                    sqlx::query(
                        "UPDATE job_queue SET status = 'cancelled', finished_at = UTC_TIMESTAMP(6), \
                         updated_at = UTC_TIMESTAMP(6), last_error = 'cancelled by an operator before it ran' \
                         WHERE id = ?",
                    )
                    .bind(id)
                    .execute(&mut *conn)
                    .await?;
                    if status.as_deref() == Some("blocked") && !unblocked {
                        // Blocked since the read above: its waiting row goes with it, so
                        // that the next wake of its key does not spend a round on it.
                        sqlx::query(BLOCKED_DELETE_JOB)
                            .bind(id)
                            .execute(&mut *conn)
                            .await?;
                    }
                }
                Some("running") => {
                    sqlx::query(
                        "UPDATE job_queue SET cancel_requested = 1, updated_at = UTC_TIMESTAMP(6) \
                         WHERE id = ?",
                    )
                    .bind(id)
                    .execute(&mut *conn)
                    .await?;
                }
                _ => {}
            }
            Ok((status, true))
        })?;
        let Some(status) = status else {
            return Ok(None);
        };
        Ok(Some(match status.parse::<JobStatus>()? {
            JobStatus::Scheduled | JobStatus::Ready | JobStatus::Blocked => {
                CancelOutcome::Cancelled
            }
            JobStatus::Running => CancelOutcome::Requested,
            other => CancelOutcome::AlreadyFinished(other),
        }))
    }

    /// Puts job `id` back to `ready` if it is `failed` or `cancelled`. Returns the rows
    /// changed (0 or 1).
    pub(crate) async fn retry(&self, id: u64) -> Result<u64> {
        Ok(sqlx::query(&format!(
            "{RETRY_SET} WHERE id = ? AND status IN ('failed', 'cancelled')"
        ))
        .bind(id)
        .execute(self.mysql_pool()?)
        .await?
        .rows_affected())
    }

    /// Puts every `failed` or `cancelled` job matching `filter` back to `ready`, a batch at a
    /// time, within `bound`.
    pub(crate) async fn retry_matching(
        &self,
        filter: &JobFilter,
        bound: BulkBound,
    ) -> Result<BulkProgress> {
        self.bulk(
            RETRY_SET,
            filter,
            &[JobStatus::Failed, JobStatus::Cancelled],
            bound,
        )
        .await
    }

    /// One job, by id or by task key.
    pub(crate) async fn job(&self, lookup: JobLookup<'_>) -> Result<Option<JobRecord>> {
        on_postgres!(self, decode::job(lookup));
        fetch_job(self.mysql_pool()?, lookup).await
    }

    /// The jobs that gave `key` up to a newer job, newest first, at most `limit`.
    pub(crate) async fn released_jobs(&self, key: &str, limit: u32) -> Result<Vec<JobRecord>> {
        on_postgres!(self, decode::released_jobs(key, limit));
        let (low, high) = super::enqueue::released_range(key);
        let rows = sqlx::query(&key_history_sql())
            .bind(low)
            .bind(high)
            .bind(key)
            .bind(limit)
            .fetch_all(self.mysql_pool()?)
            .await?;
        rows.iter().map(record_from_row).collect()
    }

    /// A job's attempt history (`attempt_log`, JSON text) by id: `None` when there is no
    /// such job, `Some(None)` when no attempt has ended yet.
    pub(crate) async fn attempt_log(&self, id: u64) -> Result<Option<Option<String>>> {
        on_postgres!(self, decode::attempt_log(id));
        let row = sqlx::query(ATTEMPT_LOG_SELECT)
            .bind(id)
            .fetch_optional(self.mysql_pool()?)
            .await?;
        row.map(|r| opt_text(&r, 0).map_err(Into::into)).transpose()
    }

    /// A job's kind, status and output (JSON text), by id.
    pub(crate) async fn output(
        &self,
        id: u64,
    ) -> Result<Option<(String, JobStatus, Option<String>)>> {
        on_postgres!(self, decode::output(id));
        let row = sqlx::query(OUTPUT_SELECT)
            .bind(id)
            .fetch_optional(self.mysql_pool()?)
            .await?;
        let Some(r) = row else {
            return Ok(None);
        };
        Ok(Some((
            text(&r, 0)?,
            text(&r, 1)?.parse()?,
            opt_text(&r, 2)?,
        )))
    }

    /// Jobs per status in one queue (all queues with `None`).
    pub(crate) async fn counts(&self, queue: Option<&str>) -> Result<Vec<(JobStatus, u64)>> {
        let rows = match queue {
            Some(q) => {
                sqlx::query(
                    "SELECT CAST(status AS CHAR) AS s, COUNT(*) AS n FROM job_queue WHERE queue = ? GROUP BY status",
                )
                .bind(q)
                .fetch_all(self.mysql_pool()?)
                .await?
            }
            None => {
                sqlx::query(
                    "SELECT CAST(status AS CHAR) AS s, COUNT(*) AS n FROM job_queue GROUP BY status",
                )
                .fetch_all(self.mysql_pool()?)
                .await?
            }
        };
        rows.iter()
            .map(|r| {
                let s = text(r, "s")?;
                let n: i64 = r.try_get("n")?;
                Ok((s.parse()?, n as u64))
            })
            .collect()
    }

    /// Pauses `queue`. Returns false if it was paused already.
    pub(crate) async fn pause(&self, queue: &str) -> Result<bool> {
        let inserted = sqlx::query(
            "INSERT INTO job_queue_pause (queue, paused_at) VALUES (?, UTC_TIMESTAMP(6))",
        )
        .bind(queue)
        .execute(self.mysql_pool()?)
        .await;
        match inserted {
            Err(e) if is_key_conflict(&e) => Ok(false),
            other => other.map(|_| true).map_err(Error::from),
        }
    }

    /// Resumes `queue` (nothing happens if it was not paused).
    pub(crate) async fn resume(&self, queue: &str) -> Result<()> {
        sqlx::query("DELETE FROM job_queue_pause WHERE queue = ?")
            .bind(queue)
            .execute(self.mysql_pool()?)
            .await?;
        Ok(())
    }

    /// The paused queues, by name.
    pub(crate) async fn paused_queues_sorted(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT queue FROM job_queue_pause ORDER BY queue")
            .fetch_all(self.mysql_pool()?)
            .await?;
        rows.iter().map(|r| Ok(text(r, 0)?)).collect()
    }

    /// How many `status` jobs finished more than `older_than_us` microseconds ago.
    pub(crate) async fn prunable(&self, status: JobStatus, older_than_us: i64) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM job_queue WHERE status = ? AND status_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
        )
        .bind(status.as_str())
        .bind(older_than_us)
        .fetch_one(self.mysql_pool()?)
        .await?;
        Ok(n as u64)
    }

    /// How many jobs match `query` (whose status is a finished one) and finished more than
    /// `older_than_us` microseconds ago: the statement of [`prune_matching_count`].
    pub(crate) async fn prunable_matching(
        &self,
        query: &JobFilter,
        older_than_us: i64,
    ) -> Result<u64> {
        let (sql, args) = prune_matching_count(query, older_than_us);
        let n: i64 = bind_all(sqlx::query(&sql), &args)
            .fetch_one(self.mysql_pool()?)
            .await?
            .try_get(0)?;
        Ok(n as u64)
    }

    /// Deletes up to `limit` jobs matching `query` (whose status is a finished one) that
    /// finished more than `older_than_us` microseconds ago and not before `from`, oldest
    /// first; rows locked by anyone else are skipped. Returns how many rows were deleted and
    /// the finish time of the last one selected: the `from` of the next batch, so that no
    /// batch reads again the rows of other queues or kinds an earlier one went past.
    pub(crate) async fn prune_matching_batch(
        &self,
        query: &JobFilter,
        older_than_us: i64,
        from: Option<NaiveDateTime>,
        limit: u64,
    ) -> Result<(u64, Option<NaiveDateTime>)> {
        let (sql, args) = prune_matching_select(query, older_than_us, from, limit);
        let status = query.status.map(JobStatus::as_str).unwrap_or_default();
        transaction!(self, |conn| {
            let rows = bind_all(sqlx::query(&sql).persistent(false), &args)
                .fetch_all(&mut *conn)
                .await?
                .iter()
                .map(|r| Ok((r.try_get::<u64, _>(0)?, r.try_get::<NaiveDateTime, _>(1)?)))
                .collect::<sqlx::Result<Vec<_>>>()?;
            let Some(&(_, last)) = rows.last() else {
                return Ok(((0, None), false));
            };
            let ids: Vec<u64> = rows.iter().map(|(id, _)| *id).collect();
            let delete = format!(
                "DELETE FROM job_queue WHERE id IN ({}) AND status = ?",
                placeholders(padded_len(ids.len()))
            );
            let mut q = sqlx::query(&delete).persistent(false);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            let n = q.bind(status).execute(&mut *conn).await?.rows_affected();
            Ok(((n, Some(last)), true))
        })
    }

    /// Figures per queue (every queue with at least one job, plus paused ones).
    pub(crate) async fn stats(&self) -> Result<Vec<QueueStats>> {
        let rows = sqlx::query(
            "SELECT queue, CAST(status AS CHAR), COUNT(*) FROM job_queue GROUP BY queue, status ORDER BY queue",
        )
        .fetch_all(self.mysql_pool()?)
        .await?;
        // By name in a map: a scan of the list per row is quadratic in the queues.
        let mut by_name: std::collections::BTreeMap<String, QueueStats> = Default::default();
        fn entry(
            by_name: &mut std::collections::BTreeMap<String, QueueStats>,
            q: String,
        ) -> &mut QueueStats {
            by_name.entry(q).or_insert_with_key(|q| QueueStats {
                queue: q.clone(),
                ..Default::default()
            })
        }
        for r in &rows {
            let q = text(r, 0)?;
            let status: JobStatus = text(r, 1)?.parse()?;
            let n: i64 = r.try_get(2)?;
            entry(&mut by_name, q).counts.set(status, n as u64);
        }
        for q in self.paused_queues_sorted().await? {
            entry(&mut by_name, q).paused = true;
        }
        let mut out: Vec<QueueStats> = by_name.into_values().collect();
        for s in &mut out {
            let r = sqlx::query(
                "SELECT \
                   (SELECT TIMESTAMPDIFF(MICROSECOND, MIN(run_at), UTC_TIMESTAMP(6)) FROM job_queue WHERE queue = ? AND status = 'ready'), \
                   (SELECT COUNT(*) FROM job_queue WHERE queue = ? AND status = 'running' AND status_at < UTC_TIMESTAMP(6)), \
                   (SELECT COUNT(*) FROM job_queue WHERE queue = ? AND status = 'failed' AND status_at > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR), \
                   (SELECT COUNT(*) FROM job_queue WHERE queue = ? AND status = 'done' AND status_at > UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE), \
                   (SELECT COUNT(*) FROM job_queue WHERE queue = ? AND status = 'scheduled' AND unrunnable_since IS NOT NULL)",
            )
            .bind(&s.queue)
            .bind(&s.queue)
            .bind(&s.queue)
            .bind(&s.queue)
            .bind(&s.queue)
            .fetch_one(self.mysql_pool()?)
            .await?;
            let age: Option<i64> = r.try_get(0)?;
            s.oldest_ready_secs = age.map(|us| us.max(0) as f64 / 1e6);
            s.expired_leases = r.try_get::<i64, _>(1)? as u64;
            s.failed_last_hour = r.try_get::<i64, _>(2)? as u64;
            s.done_last_minute = r.try_get::<i64, _>(3)? as u64;
            s.unrunnable = r.try_get::<i64, _>(4)? as u64;
        }
        Ok(out)
    }

    /// Running jobs with their owners and lease time left, oldest lease first.
    pub(crate) async fn running(&self, queue: Option<&str>, limit: u32) -> Result<Vec<RunningJob>> {
        let sql = format!(
            "SELECT id, queue, kind, COALESCE(lease_owner, ''), \
             TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until), attempts \
             FROM job_queue WHERE status = 'running'{} ORDER BY status_at LIMIT ?",
            if queue.is_some() {
                " AND queue = ?"
            } else {
                ""
            }
        );
        let mut q = sqlx::query(&sql);
        if let Some(name) = queue {
            q = q.bind(name);
        }
        let rows = q.bind(limit).fetch_all(self.mysql_pool()?).await?;
        rows.iter()
            .map(|r| {
                Ok(RunningJob {
                    id: r.try_get(0)?,
                    queue: text(r, 1)?,
                    kind: text(r, 2)?,
                    lease_owner: text(r, 3)?,
                    lease_left_secs: r.try_get::<Option<i64>, _>(4)?.unwrap_or(0) as f64 / 1e6,
                    attempts: r.try_get(5)?,
                })
            })
            .collect()
    }
}

/// The released jobs of a key, newest first: a range of the `task_key` index (a released
/// job's `task_key` is its key's prefix, 0x00 and its id in 20 digits, so index order is id
/// order), confirmed by `released_key`. The ORDER BY names the table: a bare `task_key`
/// would be the select list's alias, the key itself. Binds: the range's low and high ends, the key, the
/// limit.
pub fn key_history_sql() -> String {
    format!(
        "SELECT {JOB_COLUMNS} FROM job_queue \
         WHERE task_key >= ? AND task_key < ? AND released_key = ? ORDER BY job_queue.task_key DESC LIMIT ?"
    )
}

/// The conditions of a prune over `filter`: its own (the status among them), and the finish
/// time before the retention. Every statement of the prune goes through
/// `job_queue_status_at (status, status_at, id)`: a range of one status's finished jobs,
/// oldest first; the filter's other fields (queue, kind...) are tested on the rows of that
/// range.
fn prune_conditions(filter: &JobFilter, older_than_us: i64) -> (Vec<&'static str>, Vec<Arg>) {
    let (mut conds, mut args) = conditions(filter);
    conds.push("status_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND");
    args.push(Arg::Int(older_than_us.max(0) as u64));
    (conds, args)
}

/// The count of `Queue::prunable_matching`, with its arguments.
pub fn prune_matching_count(filter: &JobFilter, older_than_us: i64) -> (String, Vec<Arg>) {
    let (conds, args) = prune_conditions(filter, older_than_us);
    (
        format!(
            "SELECT COUNT(*) FROM job_queue FORCE INDEX (job_queue_status_at) {}",
            dashboard_where(&conds)
        ),
        args,
    )
}

/// The locking read of one batch of `Queue::prune_matching`, with its arguments.
pub fn prune_matching_select(
    filter: &JobFilter,
    older_than_us: i64,
    from: Option<NaiveDateTime>,
    limit: u64,
) -> (String, Vec<Arg>) {
    let (mut conds, mut args) = prune_conditions(filter, older_than_us);
    if let Some(t) = from {
        conds.push("status_at >= ?");
        args.push(Arg::Time(t));
    }
    args.push(Arg::Int(limit));
    (
        format!(
            "SELECT id, status_at FROM job_queue FORCE INDEX (job_queue_status_at) {} \
             ORDER BY status_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
            dashboard_where(&conds)
        ),
        args,
    )
}

/// The first steps of an operator's cancel or delete of job `id`, in the order that cannot
/// deadlock with a wake or a claim: a blocked job's waiting rows are found by a plain read
/// and deleted by primary key, then the job's row is locked. Returns its status (None: no
/// such job), and whether it had waiting rows. The limits' tables are read only for a job that is blocked, so that a user
/// without rights on them (kept from a release before limits) acts on the others.
pub(super) async fn unblock_and_lock(
    conn: &mut sqlx::MySqlConnection,
    id: u64,
) -> sqlx::Result<(Option<String>, bool)> {
    let blocked: Option<bool> =
        sqlx::query_scalar("SELECT status = 'blocked' FROM job_queue WHERE id = ?")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
    let mut waiting: Vec<(Vec<u8>, i16)> = Vec::new();
    if blocked == Some(true) {
        waiting =
            sqlx::query_as("SELECT slot_key, priority FROM job_queue_blocked WHERE job_id = ?")
                .bind(id)
                .fetch_all(&mut *conn)
                .await?;
    }
    for (key, priority) in &waiting {
        sqlx::query(
            "DELETE FROM job_queue_blocked WHERE slot_key = ? AND priority = ? AND job_id = ?",
        )
        .bind(key)
        .bind(priority)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    }
    let status = sqlx::query("SELECT CAST(status AS CHAR) FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .map(|r| text(&r, 0))
        .transpose()?;
    Ok((status, !waiting.is_empty()))
}
