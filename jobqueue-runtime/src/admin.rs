//! Operator actions: cancel, retry, pause, prune, and the read-only views the CLI shows.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::Row;

use crate::error::{Error, Result};
use crate::key::validate_queue;
use crate::queue::{JobRecord, JobStatus, Queue};
use crate::store::{self, text};

/// What [`Queue::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// The job had not started: it is `cancelled` now and will never run.
    Cancelled,
    /// The job is running: its worker will cancel its context within a third of its lease;
    /// the job decides how to stop, and ends `cancelled` (or `done`, if it finished anyway).
    Requested,
    /// The job had already ended with this status; nothing changed.
    AlreadyFinished(JobStatus),
}

/// A filter for [`Queue::list`] and the bulk actions.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct JobFilter {
    /// Only this status.
    pub status: Option<JobStatus>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
}

impl JobFilter {
    /// Only jobs with this status.
    pub fn status(mut self, status: JobStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only jobs of this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Only jobs of this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    fn where_clause(&self) -> (String, Vec<String>) {
        let mut conds = Vec::new();
        let mut args = Vec::new();
        if let Some(s) = self.status {
            conds.push("status = ?");
            args.push(s.as_str().to_owned());
        }
        if let Some(q) = &self.queue {
            conds.push("queue = ?");
            args.push(q.clone());
        }
        if let Some(k) = &self.kind {
            conds.push("kind = ?");
            args.push(k.clone());
        }
        if conds.is_empty() {
            (String::new(), args)
        } else {
            (format!("WHERE {}", conds.join(" AND ")), args)
        }
    }
}

/// One queue's figures, as `jobqueue status` shows them.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct QueueStats {
    /// The queue's name.
    pub queue: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Jobs per status.
    pub scheduled: u64,
    /// Ready jobs.
    pub ready: u64,
    /// Running jobs.
    pub running: u64,
    /// Done jobs (not yet pruned).
    pub done: u64,
    /// Failed jobs.
    pub failed: u64,
    /// Cancelled jobs.
    pub cancelled: u64,
    /// Age of the oldest ready job, in seconds (how far behind the queue is).
    pub oldest_ready_secs: Option<f64>,
    /// Running jobs whose lease has expired: they wait for a reclaim.
    pub expired_leases: u64,
    /// Scheduled jobs that wait for a worker that can run them: a worker found their kind
    /// unknown or their payload unfit (another release, during a rolling deploy). A count
    /// that stays above zero means no deployed worker can run them.
    pub unrunnable: u64,
    /// Jobs that failed in the last hour.
    pub failed_last_hour: u64,
    /// Jobs done in the last minute.
    pub done_last_minute: u64,
}

/// A running job and its lease, as `jobqueue status` shows them.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct RunningJob {
    /// The job's id.
    pub id: u64,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// The worker holding it.
    pub lease_owner: String,
    /// Seconds its lease has left (negative: expired, waiting for reclaim).
    pub lease_left_secs: f64,
    /// Its attempt number.
    pub attempts: u32,
}

impl Queue {
    /// Cancels a job: at once if it has not started, by request if it is running.
    pub async fn cancel(&self, id: u64) -> Result<CancelOutcome> {
        let mut tx = self.inner.pool.begin().await?;
        let status: Option<String> =
            sqlx::query("SELECT CAST(status AS CHAR) FROM job_queue WHERE id = ? FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| text(&r, 0))
                .transpose()?;
        let Some(status) = status else {
            return Err(Error::NotFound(format!("with id {id}")));
        };
        let outcome = match status.parse::<JobStatus>()? {
            JobStatus::Scheduled | JobStatus::Ready => {
                sqlx::query(
                    "UPDATE job_queue SET status = 'cancelled', finished_at = UTC_TIMESTAMP(6), \
                     updated_at = UTC_TIMESTAMP(6), last_error = 'cancelled by an operator before it ran' \
                     WHERE id = ?",
                )
                .bind(id)
                .execute(&mut *tx)
                .await?;
                CancelOutcome::Cancelled
            }
            JobStatus::Running => {
                sqlx::query("UPDATE job_queue SET cancel_requested = 1, updated_at = UTC_TIMESTAMP(6) WHERE id = ?")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                CancelOutcome::Requested
            }
            other => CancelOutcome::AlreadyFinished(other),
        };
        tx.commit().await?;
        tracing::info!(job.id = id, outcome = ?outcome, "cancel");
        Ok(outcome)
    }

    /// Puts a `failed` or `cancelled` job back to `ready`, to run again now. Its history
    /// stays readable: `attempts` is never reset (it fences every write of every claim), and
    /// `last_error` keeps the last failure until the next one. A job that had used all its
    /// attempts gets one more (`max_attempts = attempts + 1`). Returns false if the job is
    /// in another status (nothing changed).
    pub async fn retry(&self, id: u64) -> Result<bool> {
        let matched = sqlx::query(&format!(
            "{RETRY_SET} WHERE id = ? AND status IN ('failed', 'cancelled')"
        ))
        .bind(id)
        .execute(&self.inner.pool)
        .await?
        .rows_affected();
        if matched == 0 && self.job(id).await?.is_none() {
            return Err(Error::NotFound(format!("with id {id}")));
        }
        if matched == 1 {
            self.wake_workers();
        }
        Ok(matched == 1)
    }

    /// [`Queue::retry`] for every job matching `filter` whose status is `failed` (the
    /// filter's status is ignored). Returns how many jobs changed.
    pub async fn retry_failed(&self, filter: &JobFilter) -> Result<u64> {
        let filter = JobFilter {
            status: Some(JobStatus::Failed),
            ..filter.clone()
        };
        let (cond, args) = filter.where_clause();
        let sql = format!("{RETRY_SET} {cond} LIMIT 1000");
        let mut total = 0;
        loop {
            let mut q = sqlx::query(&sql);
            for a in &args {
                q = q.bind(a);
            }
            let n = q.execute(&self.inner.pool).await?.rows_affected();
            total += n;
            if n < 1000 {
                break;
            }
        }
        if total > 0 {
            self.wake_workers();
        }
        Ok(total)
    }

    /// How many jobs match `filter`.
    pub async fn count(&self, filter: &JobFilter) -> Result<u64> {
        let (cond, args) = filter.where_clause();
        let sql = format!("SELECT COUNT(*) FROM job_queue {cond}");
        let mut q = sqlx::query_scalar::<_, i64>(&sql);
        for a in &args {
            q = q.bind(a);
        }
        Ok(q.fetch_one(&self.inner.pool).await? as u64)
    }

    /// Jobs matching `filter`, newest first, at most `limit`.
    pub async fn list(&self, filter: &JobFilter, limit: u32) -> Result<Vec<JobRecord>> {
        let (cond, args) = filter.where_clause();
        let sql = format!(
            "SELECT {} FROM job_queue {cond} ORDER BY id DESC LIMIT ?",
            store::JOB_COLUMNS
        );
        let mut q = sqlx::query(&sql);
        for a in &args {
            q = q.bind(a);
        }
        let rows = q.bind(limit).fetch_all(&self.inner.pool).await?;
        rows.iter().map(store::record_from_row).collect()
    }

    /// Pauses a queue: no worker claims from it until [`Queue::resume`]. Jobs can still be
    /// enqueued; running jobs go on.
    pub async fn pause(&self, queue: &str) -> Result<()> {
        validate_queue(queue)?;
        let inserted = sqlx::query(
            "INSERT INTO job_queue_pause (queue, paused_at) VALUES (?, UTC_TIMESTAMP(6))",
        )
        .bind(queue)
        .execute(&self.inner.pool)
        .await;
        match inserted {
            // Already paused: pausing again changes nothing.
            Err(e) if crate::error::server_code(&e) == Some(1062) => {}
            other => {
                other?;
            }
        }
        tracing::info!(queue, "queue paused");
        Ok(())
    }

    /// Resumes a paused queue.
    pub async fn resume(&self, queue: &str) -> Result<()> {
        sqlx::query("DELETE FROM job_queue_pause WHERE queue = ?")
            .bind(queue)
            .execute(&self.inner.pool)
            .await?;
        tracing::info!(queue, "queue resumed");
        self.wake_workers();
        Ok(())
    }

    /// The paused queues.
    pub async fn paused_queues(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT queue FROM job_queue_pause ORDER BY queue")
            .fetch_all(&self.inner.pool)
            .await?;
        rows.iter().map(|r| Ok(text(r, 0)?)).collect()
    }

    /// Deletes jobs with `status` (done, failed or cancelled) that finished more than
    /// `older_than` ago, in batches of 500 locked with SKIP LOCKED, so it never blocks
    /// claims. Returns how many rows were deleted. A pruned job's task key can be enqueued
    /// again.
    pub async fn prune(&self, status: JobStatus, older_than: Duration) -> Result<u64> {
        self.prune_batches(status, older_than, u64::MAX).await
    }

    /// How many jobs [`Queue::prune`] would delete now.
    pub async fn prunable(&self, status: JobStatus, older_than: Duration) -> Result<u64> {
        check_prunable(status)?;
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM job_queue WHERE status = ? AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
        )
        .bind(status.as_str())
        .bind(micros(older_than))
        .fetch_one(&self.inner.pool)
        .await?;
        Ok(n as u64)
    }

    pub(crate) async fn prune_batches(
        &self,
        status: JobStatus,
        older_than: Duration,
        max_batches: u64,
    ) -> Result<u64> {
        check_prunable(status)?;
        let store = self.store();
        let mut total = 0;
        for _ in 0..max_batches {
            let n = store.prune_batch(status, micros(older_than), 500).await?;
            total += n;
            if n < 500 {
                break;
            }
        }
        Ok(total)
    }

    /// Figures per queue (every queue with at least one job, plus paused ones).
    pub async fn stats(&self) -> Result<Vec<QueueStats>> {
        let rows = sqlx::query(
            "SELECT queue, CAST(status AS CHAR), COUNT(*) FROM job_queue GROUP BY queue, status ORDER BY queue",
        )
        .fetch_all(&self.inner.pool)
        .await?;
        let mut out: Vec<QueueStats> = Vec::new();
        fn entry<'a>(out: &'a mut Vec<QueueStats>, q: &str) -> &'a mut QueueStats {
            if let Some(i) = out.iter().position(|s| s.queue == q) {
                return &mut out[i];
            }
            out.push(QueueStats {
                queue: q.to_owned(),
                ..Default::default()
            });
            out.last_mut().expect("just pushed")
        }
        for r in &rows {
            let q = text(r, 0)?;
            let status: JobStatus = text(r, 1)?.parse()?;
            let n: i64 = r.try_get(2)?;
            let s = entry(&mut out, &q);
            let n = n as u64;
            match status {
                JobStatus::Scheduled => s.scheduled = n,
                JobStatus::Ready => s.ready = n,
                JobStatus::Running => s.running = n,
                JobStatus::Done => s.done = n,
                JobStatus::Failed => s.failed = n,
                JobStatus::Cancelled => s.cancelled = n,
            }
        }
        for q in self.paused_queues().await? {
            entry(&mut out, &q).paused = true;
        }
        for s in &mut out {
            let r = sqlx::query(
                "SELECT \
                   (SELECT TIMESTAMPDIFF(MICROSECOND, MIN(run_at), UTC_TIMESTAMP(6)) FROM job_queue WHERE queue = ? AND status = 'ready'), \
                   (SELECT COUNT(*) FROM job_queue WHERE queue = ? AND status = 'running' AND lease_until < UTC_TIMESTAMP(6)), \
                   (SELECT COUNT(*) FROM job_queue WHERE queue = ? AND status = 'failed' AND finished_at > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR), \
                   (SELECT COUNT(*) FROM job_queue WHERE queue = ? AND status = 'done' AND finished_at > UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE), \
                   (SELECT COUNT(*) FROM job_queue WHERE queue = ? AND status = 'scheduled' AND unrunnable_since IS NOT NULL)",
            )
            .bind(&s.queue)
            .bind(&s.queue)
            .bind(&s.queue)
            .bind(&s.queue)
            .bind(&s.queue)
            .fetch_one(&self.inner.pool)
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
    pub async fn running(&self, queue: Option<&str>, limit: u32) -> Result<Vec<RunningJob>> {
        let sql = format!(
            "SELECT id, queue, kind, COALESCE(lease_owner, ''), \
             TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until), attempts \
             FROM job_queue WHERE status = 'running'{} ORDER BY lease_until LIMIT ?",
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
        let rows = q.bind(limit).fetch_all(&self.inner.pool).await?;
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

    /// The database's clock now (UTC).
    pub async fn now(&self) -> Result<NaiveDateTime> {
        Ok(sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
            .fetch_one(&self.inner.pool)
            .await?)
    }
}

// An operator's retry is a fresh start: one more attempt, and the bounds on expired leases
// and on waiting for a worker that can run the job count again from zero.
pub(crate) const RETRY_SET: &str =
    "UPDATE job_queue SET status = 'ready', run_at = UTC_TIMESTAMP(6), \
     max_attempts = GREATEST(max_attempts, attempts + 1), cancel_requested = 0, \
     lease_expiries = 0, unrunnable_since = NULL, \
     lease_owner = NULL, lease_until = NULL, finished_at = NULL, updated_at = UTC_TIMESTAMP(6)";

fn check_prunable(status: JobStatus) -> Result<()> {
    match status {
        JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled => Ok(()),
        other => Err(Error::Config(format!(
            "only done, failed or cancelled jobs can be pruned, not {other} ones"
        ))),
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
