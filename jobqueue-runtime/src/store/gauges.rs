//! The queue gauges: how many jobs wait, are blocked by a limit, run, are scheduled or
//! failed, per queue, and how
//! old the oldest ready job is. One worker of the fleet counts them per interval and writes
//! them to `job_queue_gauges`; every worker reads that small table.

use std::time::Duration;

use sqlx::Row;

use super::decode::text;
use super::errors::classify;
use super::*;
use crate::model::{JobStatus, QueueGauges};

/// The queues that have any job, for [`count_gauges_sql`]: a loose scan of the `(queue, id)`
/// index, one index dive per queue however many jobs each has.
pub const GAUGE_QUEUES: &str =
    "SELECT DISTINCT queue FROM job_queue FORCE INDEX (job_queue_list_queue)";

/// How many queues one [`count_gauges_sql`] statement counts.
pub(super) const GAUGE_QUEUES_PER_COUNT: usize = 128;

/// Counts per queue and status of `queues` queues (`?` each), with the oldest `run_at` of the
/// ready jobs (a waiting job's `status_at` is its `run_at`). It reads the entries of the
/// waiting, running and failed jobs of those queues in the `(queue, status, status_at, id)`
/// index and nothing else, never a row: 100,000 waiting and 20,000 failed jobs beside a
/// million done ones are counted in well under a tenth of a second, where reading the rows
/// took over a second. The index is forced: the optimizer may prefer the status-time index
/// and then read every row it counts.
pub fn count_gauges_sql(queues: usize) -> String {
    format!(
        "SELECT queue, CAST(status AS CHAR), COUNT(*), MIN(status_at) \
         FROM job_queue FORCE INDEX (job_queue_queue_status_at) \
         WHERE queue IN ({}) AND status IN ('scheduled', 'ready', 'blocked', 'running', 'failed') \
         GROUP BY queue, status",
        placeholders(queues)
    )
}

/// The jobs finished in `[?, ?)` per minute (by the server's clock), queue and kind, for the
/// kept throughput counts and the per-kind figures: a range of the `(status, status_at, id)`
/// index, then the rows (for `queue`, `kind` and the times), as many as finished since the
/// last count, read once for both. Per group: done, failed, the attempts beyond the first,
/// how many have a claim time, the sums of their runtimes (`finished_at - claimed_at`) and
/// waits (`claimed_at - run_at`) in microseconds (negative ones as zero), and the runtimes
/// per bucket of [`KIND_RUNTIME_BOUNDS`](crate::KIND_RUNTIME_BOUNDS) (`INTERVAL()` gives the bucket, -1 for a job
/// without a claim time; the same function on MySQL and MariaDB).
pub const COUNT_THROUGHPUT: &str = "SELECT minute, queue, kind, \
     CAST(SUM(done) AS SIGNED), CAST(SUM(failed) AS SIGNED), CAST(SUM(retries) AS SIGNED), \
     CAST(SUM(b >= 0) AS SIGNED), CAST(COALESCE(SUM(run_us), 0) AS SIGNED), \
     CAST(COALESCE(SUM(wait_us), 0) AS SIGNED), \
     CAST(SUM(b = 0) AS SIGNED), CAST(SUM(b = 1) AS SIGNED), CAST(SUM(b = 2) AS SIGNED), \
     CAST(SUM(b = 3) AS SIGNED), CAST(SUM(b = 4) AS SIGNED), CAST(SUM(b = 5) AS SIGNED), \
     CAST(SUM(b = 6) AS SIGNED), CAST(SUM(b = 7) AS SIGNED), CAST(SUM(b = 8) AS SIGNED), \
     CAST(SUM(b = 9) AS SIGNED), CAST(SUM(b = 10) AS SIGNED), CAST(SUM(b = 11) AS SIGNED) \
     FROM (SELECT DATE_FORMAT(status_at, '%Y-%m-%d %H:%i:00') AS minute, queue, kind, \
       status = 'done' AS done, status = 'failed' AS failed, GREATEST(attempts, 1) - 1 AS retries, \
       GREATEST(TIMESTAMPDIFF(MICROSECOND, claimed_at, finished_at), 0) AS run_us, \
       GREATEST(TIMESTAMPDIFF(MICROSECOND, run_at, claimed_at), 0) AS wait_us, \
       INTERVAL(TIMESTAMPDIFF(MICROSECOND, claimed_at, finished_at), 10000, 30000, 100000, 300000, \
         1000000, 3000000, 10000000, 30000000, 100000000, 300000000, 1000000000) AS b \
       FROM job_queue FORCE INDEX (job_queue_status_at) \
       WHERE status IN ('done', 'failed') AND status_at >= ? AND status_at < ?) t \
     GROUP BY minute, queue, kind";

/// How long the per-kind figures are kept, in hours.
pub(crate) const KIND_STATS_KEPT_HOURS: u32 = 48;

/// How many (bucket, queue, kind) rows one statement adds to `job_queue_kind_stats` (22
/// values each).
const KIND_ROWS_PER_INSERT: usize = 500;

/// The most expired rows of `job_queue_kind_stats` one count deletes: a count after a long
/// stop of the fleet leaves the rest to the next ones, rather than hold its transaction
/// open for all of them.
pub(super) const KIND_STATS_DELETE_LIMIT: u32 = 10_000;

/// Whether a count of this process found it may not write `job_queue_kind_stats` (logged
/// at INFO the first time only).
pub(super) static KIND_STATS_DENIED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The per-kind figures of one (bucket, queue, kind), as the count adds them up.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct KindCounts {
    pub(super) done: i64,
    pub(super) failed: i64,
    pub(super) retries: i64,
    pub(super) timed: i64,
    pub(super) run_us: i64,
    pub(super) wait_us: i64,
    pub(super) histogram: [i64; 12],
}

/// How far behind the server's now a throughput count stops, in seconds: a job's `finished_at` is written inside its outcome's transaction,
/// which commits after it, and a job's own transaction (`JobContext::complete_in`) may stay
/// open for seconds after it. The jobs finished since are read at each look instead.
pub(super) const THROUGHPUT_MARGIN_SECS: u32 = 15;

/// How many (minute, queue) rows one statement adds to `job_queue_throughput`.
pub(super) const THROUGHPUT_ROWS_PER_INSERT: usize = 1_000;

impl Store {
    /// Takes the turn to count the gauges if nobody has within `every`: moves the one
    /// `refreshed_at` forward, which only one of many workers racing for it can do.
    pub async fn take_gauge_turn(&self, every: Duration) -> Result<bool> {
        on_postgres!(self, gauges::take_gauge_turn(every));
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

    /// How many jobs the gauges last counted, over every queue and status.
    pub(crate) async fn gauged_jobs(&self) -> Result<u64> {
        on_postgres!(self, gauges::gauged_jobs());
        let n: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(jobs), 0) AS SIGNED) FROM job_queue_gauges",
        )
        .fetch_one(self.mysql_pool()?)
        .await?;
        Ok(n.max(0) as u64)
    }

    /// Counts the gauges over `job_queue` and replaces the contents of `job_queue_gauges`
    /// with them, in one transaction: readers see the old counts or the new ones.
    pub(crate) async fn count_gauges(&self) -> Result<()> {
        on_postgres!(self, gauges::count_gauges());
        let rows = on_connection!(self, |conn| async {
            let queues = sqlx::query(GAUGE_QUEUES)
                .fetch_all(&mut *conn)
                .await?
                .iter()
                .map(|r| text(r, 0))
                .collect::<sqlx::Result<Vec<String>>>()?;
            let mut rows = Vec::new();
            for chunk in queues.chunks(GAUGE_QUEUES_PER_COUNT) {
                let sql = count_gauges_sql(padded_len(chunk.len()));
                let mut q = sqlx::query(&sql);
                for queue in padded(chunk) {
                    q = q.bind(queue);
                }
                rows.extend(q.fetch_all(&mut *conn).await?);
            }
            Ok::<_, sqlx::Error>(rows)
        })
        .await?;
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
    /// minutes) to `job_queue_throughput` and `job_queue_kind_stats` (the per-kind figures),
    /// up to `THROUGHPUT_MARGIN_SECS` before the server's now, and moves `counted_to` there;
    /// deletes throughput counts older than two hours and per-kind figures older than
    /// [`KIND_STATS_KEPT_HOURS`].
    /// One transaction, which holds the mark's row locked, so two counts never add the same
    /// jobs. A job whose outcome commits later than that after its `finished_at` is missed.
    pub async fn count_throughput(&self) -> Result<()> {
        on_postgres!(self, gauges::count_throughput());
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
            // One read of the finished jobs gives both: per minute and queue for the
            // throughput, per 5-minute bucket, queue and kind for the kinds page.
            let mut minutes: std::collections::BTreeMap<(String, String), (i64, i64)> =
                Default::default();
            let mut kinds: std::collections::BTreeMap<(String, String, String), KindCounts> =
                Default::default();
            for r in &rows {
                let minute = text(r, 0)?;
                let queue = text(r, 1)?;
                let kind = text(r, 2)?;
                let n = |i: usize| -> sqlx::Result<i64> {
                    Ok(r.try_get::<Option<i64>, _>(i)?.unwrap_or(0).max(0))
                };
                let (done, failed) = (n(3)?, n(4)?);
                let m = minutes.entry((minute.clone(), queue.clone())).or_default();
                m.0 += done;
                m.1 += failed;
                let k = kinds
                    .entry((five_minute_bucket(&minute), queue, kind))
                    .or_default();
                k.done += done;
                k.failed += failed;
                k.retries += n(5)?;
                k.timed += n(6)?;
                k.run_us = k.run_us.saturating_add(n(7)?);
                k.wait_us = k.wait_us.saturating_add(n(8)?);
                for (i, h) in k.histogram.iter_mut().enumerate() {
                    *h += n(9 + i)?;
                }
            }
            let counted: Vec<_> = minutes.into_iter().collect();
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
                for ((minute, queue), (done, failed)) in chunk {
                    q = q.bind(minute).bind(queue).bind(done).bind(failed);
                }
                q.execute(&mut *conn).await?;
            }
            let kinds: Vec<_> = kinds.into_iter().collect();
            if let Err(e) = add_kind_stats(conn, &kinds).await {
                // A user granted the tables of an earlier release only, or a database not
                // migrated yet: the throughput is kept all the same (a failed statement does
                // not end the transaction), the kinds page stays empty. Logged once per
                // process at INFO, then at DEBUG: each count tries again, so a grant or a
                // migration takes effect without a restart.
                match classify(&e) {
                    Some(DbErrorKind::TableDenied | DbErrorKind::MissingTable) => {
                        if !KIND_STATS_DENIED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                            tracing::info!(error = %e, "the per-kind figures (`job_queue_kind_stats`) cannot be kept, so the dashboard's kinds page stays empty; apply the migrations, and grant the table as the deployment guide's least-privilege section shows");
                        } else {
                            tracing::debug!(error = %e, "the per-kind figures cannot be kept");
                        }
                    }
                    _ => return Err(e),
                }
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
        on_postgres!(self, gauges::queue_gauges());
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

/// The start of the 5-minute bucket of `minute` (`YYYY-MM-DD HH:MM:00`).
pub(super) fn five_minute_bucket(minute: &str) -> String {
    match minute.get(14..16).and_then(|m| m.parse::<u32>().ok()) {
        Some(m) => format!("{}{:02}:00", &minute[..14], m - m % 5),
        None => minute.to_owned(),
    }
}

/// Adds `kinds` to `job_queue_kind_stats` and deletes its buckets older than
/// [`KIND_STATS_KEPT_HOURS`], in the count's transaction.
async fn add_kind_stats(
    conn: &mut sqlx::mysql::MySqlConnection,
    kinds: &[((String, String, String), KindCounts)],
) -> sqlx::Result<()> {
    for chunk in kinds.chunks(KIND_ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO job_queue_kind_stats (bucket, queue, kind, done, failed, retries, timed, \
             run_us, wait_us, h00, h01, h02, h03, h04, h05, h06, h07, h08, h09, h10, h11) VALUES {} \
             ON DUPLICATE KEY UPDATE done = done + VALUES(done), failed = failed + VALUES(failed), \
             retries = retries + VALUES(retries), timed = timed + VALUES(timed), \
             run_us = run_us + VALUES(run_us), wait_us = wait_us + VALUES(wait_us), \
             h00 = h00 + VALUES(h00), h01 = h01 + VALUES(h01), h02 = h02 + VALUES(h02), \
             h03 = h03 + VALUES(h03), h04 = h04 + VALUES(h04), h05 = h05 + VALUES(h05), \
             h06 = h06 + VALUES(h06), h07 = h07 + VALUES(h07), h08 = h08 + VALUES(h08), \
             h09 = h09 + VALUES(h09), h10 = h10 + VALUES(h10), h11 = h11 + VALUES(h11)",
            vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"; chunk.len()]
                .join(", ")
        );
        // One arity per number of rows: not kept prepared.
        let mut q = sqlx::query(&sql).persistent(false);
        for ((bucket, queue, kind), k) in chunk {
            q = q
                .bind(bucket)
                .bind(queue)
                .bind(kind)
                .bind(k.done)
                .bind(k.failed)
                .bind(k.retries)
                .bind(k.timed)
                .bind(k.run_us)
                .bind(k.wait_us);
            for h in k.histogram {
                q = q.bind(h);
            }
        }
        q.execute(&mut *conn).await?;
    }
    sqlx::query(
        "DELETE FROM job_queue_kind_stats WHERE bucket < UTC_TIMESTAMP() - INTERVAL ? HOUR LIMIT ?",
    )
    .bind(KIND_STATS_KEPT_HOURS)
    .bind(KIND_STATS_DELETE_LIMIT)
    .execute(&mut *conn)
    .await?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_buckets_runtimes_at_the_documented_bounds() {
        let bounds: Vec<String> = crate::model::KIND_RUNTIME_BOUNDS
            .iter()
            .map(|b| b.as_micros().to_string())
            .collect();
        let interval = format!(
            "INTERVAL(TIMESTAMPDIFF(MICROSECOND, claimed_at, finished_at), {})",
            bounds.join(", ")
        );
        let sql = COUNT_THROUGHPUT
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(sql.contains(&interval), "{sql}\n{interval}");
        assert!(sql.contains("SUM(b = 11)") && !sql.contains("SUM(b = 12)"));
    }

    #[test]
    fn minutes_fall_into_five_minute_buckets() {
        assert_eq!(
            five_minute_bucket("2026-12-02 12:04:00"),
            "2026-12-02 12:00:00"
        );
        assert_eq!(
            five_minute_bucket("2026-12-02 12:05:00"),
            "2026-12-02 12:05:00"
        );
        assert_eq!(
            five_minute_bucket("2026-12-02 23:59:00"),
            "2026-12-02 23:55:00"
        );
    }
}
