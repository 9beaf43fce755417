//! The queue gauges: how many jobs wait, are blocked by a limit, run, are scheduled or
//! failed, per queue, and how
//! old the oldest ready job is. One worker of the fleet counts them per interval and writes
//! them to `job_queue_gauges`; every worker reads that small table.

use std::time::Duration;

use sqlx::Row;

use super::decode::text;
use super::*;
use crate::model::{JobStatus, QueueGauges};

/// Counts per queue and status, with the oldest `run_at` of the ready jobs. It reads every
/// active and failed row (over the `(status, status_at, id)` index, then the rows): about
/// 0.1-0.2 s for 80,000 such rows, which is why one worker per interval runs it. The index
/// is forced: left to itself the optimizer may read the whole table, done rows included
/// (seen: 226,000 rows examined for 20,000 waiting ones).
pub const COUNT_GAUGES: &str = "SELECT queue, CAST(status AS CHAR), COUNT(*), MIN(run_at) \
     FROM job_queue FORCE INDEX (job_queue_status_at) \
     WHERE status IN ('scheduled', 'ready', 'blocked', 'running', 'failed') \
     GROUP BY queue, status";

/// The jobs finished in `[?, ?)` per minute (by the server's clock) and queue, for the kept
/// throughput counts: a range of the `(status, status_at, id)` index, then the rows (for
/// `queue`), as many as finished since the last count.
pub const COUNT_THROUGHPUT: &str = "SELECT DATE_FORMAT(status_at, '%Y-%m-%d %H:%i:00'), queue, \
     CAST(SUM(status = 'done') AS SIGNED), CAST(SUM(status = 'failed') AS SIGNED) \
     FROM job_queue FORCE INDEX (job_queue_status_at) \
     WHERE status IN ('done', 'failed') AND status_at >= ? AND status_at < ? \
     GROUP BY 1, 2";

/// How far behind the server's now a throughput count stops, in seconds: a job's `finished_at` is written inside its outcome's transaction,
/// which commits after it, and a job's own transaction (`JobContext::complete_in`) may stay
/// open for seconds after it. The jobs finished since are read at each look instead.
const THROUGHPUT_MARGIN_SECS: u32 = 15;

/// How many (minute, queue) rows one statement adds to `job_queue_throughput`.
const THROUGHPUT_ROWS_PER_INSERT: usize = 1_000;

impl Store {
    /// Takes the turn to count the gauges if nobody has within `every`: moves the one
    /// `refreshed_at` forward, which only one of many workers racing for it can do.
    pub async fn take_gauge_turn(&self, every: Duration) -> Result<bool> {
        let us = i64::try_from(every.as_micros()).unwrap_or(i64::MAX);
        let taken = on_connection!(self, |conn| sqlx::query(
            "UPDATE job_queue_gauge_refresh SET refreshed_at = UTC_TIMESTAMP(6) \
             WHERE id = 1 AND refreshed_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
        )
        .bind(us)
        .execute(&mut *conn))
        .await?
        .rows_affected();
        Ok(taken == 1)
    }

    /// Counts the gauges over `job_queue` and replaces the contents of `job_queue_gauges`
    /// with them, in one transaction: readers see the old counts or the new ones.
    pub(crate) async fn count_gauges(&self) -> Result<()> {
        let rows =
            on_connection!(self, |conn| sqlx::query(COUNT_GAUGES).fetch_all(&mut *conn)).await?;
        let mut counted = Vec::with_capacity(rows.len());
        for r in &rows {
            let queue = text(r, 0)?;
            let status = text(r, 1)?;
            let jobs = r.try_get::<i64, _>(2)?.max(0);
            let oldest: Option<chrono::NaiveDateTime> = r.try_get(3)?;
            let oldest = if status == JobStatus::Ready.as_str() {
                oldest
            } else {
                None
            };
            counted.push((queue, status, jobs, oldest));
        }
        transaction!(self, |conn| {
            sqlx::query("DELETE FROM job_queue_gauges")
                .execute(&mut *conn)
                .await?;
            // In rows of at most 1,000: a statement takes at most 65,535 values, and a
            // fleet may have more than 16,383 queues and statuses.
            for chunk in counted.chunks(1000) {
                let sql = format!(
                    "INSERT INTO job_queue_gauges (queue, status, jobs, oldest_run_at) VALUES {}",
                    vec!["(?, ?, ?, ?)"; chunk.len()].join(", ")
                );
                // One arity per number of queues: not kept prepared, so that arities cannot
                // pile up on the server.
                let mut q = sqlx::query(&sql).persistent(false);
                for (queue, status, jobs, oldest) in chunk {
                    q = q.bind(queue).bind(status).bind(jobs).bind(oldest);
                }
                q.execute(&mut *conn).await?;
            }
            Ok(((), true))
        })
    }

    /// Adds the jobs finished since the kept throughput counts stop (at most the last 61
    /// minutes) to `job_queue_throughput`, up to `THROUGHPUT_MARGIN_SECS` before the
    /// server's now, and moves `counted_to` there; deletes counts older than two hours.
    /// One transaction, which holds the mark's row locked, so two counts never add the same
    /// jobs. A job whose outcome commits later than that after its `finished_at` is missed.
    pub async fn count_throughput(&self) -> Result<()> {
        transaction!(self, |conn| {
            let (from, to): (chrono::NaiveDateTime, chrono::NaiveDateTime) = sqlx::query_as(
                "SELECT GREATEST(counted_to, UTC_TIMESTAMP(6) - INTERVAL 61 MINUTE), \
                 UTC_TIMESTAMP(6) - INTERVAL ? SECOND \
                 FROM job_queue_throughput_mark WHERE id = 1 FOR UPDATE",
            )
            .bind(THROUGHPUT_MARGIN_SECS)
            .fetch_one(&mut *conn)
            .await?;
            if from >= to {
                return Ok(((), false));
            }
            let rows = sqlx::query(COUNT_THROUGHPUT)
                .bind(from)
                .bind(to)
                .fetch_all(&mut *conn)
                .await?;
            let mut counted = Vec::with_capacity(rows.len());
            for r in &rows {
                let minute = text(r, 0)?;
                let queue = text(r, 1)?;
                let done = r.try_get::<i64, _>(2)?.max(0);
                let failed = r.try_get::<i64, _>(3)?.max(0);
                counted.push((minute, queue, done, failed));
            }
            for chunk in counted.chunks(THROUGHPUT_ROWS_PER_INSERT) {
                // `VALUES(col)` in ON DUPLICATE KEY UPDATE: MySQL 8.0.20+ deprecates it (a
                // warning) for a row alias that MariaDB does not have; both run this form.
                let sql = format!(
                    "INSERT INTO job_queue_throughput (minute, queue, done, failed) VALUES {} \
                     ON DUPLICATE KEY UPDATE done = done + VALUES(done), \
                     failed = failed + VALUES(failed)",
                    vec!["(?, ?, ?, ?)"; chunk.len()].join(", ")
                );
                // One arity per number of rows: not kept prepared.
                let mut q = sqlx::query(&sql).persistent(false);
                for (minute, queue, done, failed) in chunk {
                    q = q.bind(minute).bind(queue).bind(done).bind(failed);
                }
                q.execute(&mut *conn).await?;
            }
            sqlx::query("UPDATE job_queue_throughput_mark SET counted_to = ? WHERE id = 1")
                .bind(to)
                .execute(&mut *conn)
                .await?;
            sqlx::query(
                "DELETE FROM job_queue_throughput WHERE minute < UTC_TIMESTAMP() - INTERVAL 2 HOUR",
            )
            .execute(&mut *conn)
            .await?;
            Ok(((), true))
        })
    }

    /// The gauges last counted, with each queue's lag measured now.
    pub(crate) async fn queue_gauges(&self) -> Result<Vec<QueueGauges>> {
        let rows = on_connection!(self, |conn| sqlx::query(
            "SELECT queue, CAST(status AS CHAR), jobs, \
             TIMESTAMPDIFF(MICROSECOND, oldest_run_at, UTC_TIMESTAMP(6)) FROM job_queue_gauges",
        )
        .fetch_all(&mut *conn))
        .await?;
        let mut out: Vec<QueueGauges> = Vec::new();
        for r in &rows {
            let queue = text(r, 0)?;
            let status: JobStatus = text(r, 1)?.parse()?;
            let n = r.try_get::<u64, _>(2)?;
            let oldest: Option<i64> = r.try_get(3)?;
            add_gauge(&mut out, queue, status, n, oldest);
        }
        Ok(out)
    }
}

/// Adds the count `n` of `queue`'s jobs in `status` to `gauges` (a row of a read of
/// `job_queue_gauges`), with the queue's lag when `status` is ready (`oldest_ready_us`: the
/// age of its oldest ready job, in microseconds).
pub(super) fn add_gauge(
    gauges: &mut Vec<QueueGauges>,
    queue: String,
    status: JobStatus,
    n: u64,
    oldest_ready_us: Option<i64>,
) {
    let i = match gauges.iter().position(|g| g.queue == queue) {
        Some(i) => i,
        None => {
            gauges.push(QueueGauges {
                queue,
                ..Default::default()
            });
            gauges.len() - 1
        }
    };
    let g = &mut gauges[i];
    match status {
        JobStatus::Scheduled => g.scheduled = n,
        JobStatus::Ready => {
            g.ready = n;
            g.oldest_ready_secs = oldest_ready_us.map(|us| us.max(0) as f64 / 1e6);
        }
        JobStatus::Blocked => g.blocked = n,
        JobStatus::Running => g.running = n,
        JobStatus::Failed => g.failed = n,
        JobStatus::Done | JobStatus::Cancelled => {}
    }
}
