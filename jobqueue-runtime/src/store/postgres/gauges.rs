//! The queue gauges and the kept throughput on PostgreSQL (see the MySQL `store/gauges.rs`).
//! What differs:
//! - Upserts are `INSERT ... ON CONFLICT (...) DO UPDATE` from arrays (`unnest`), one
//!   statement per chunk without a statement text per arity.
//! - The runtime buckets are `width_bucket` over the bounds (MySQL's `INTERVAL()`), the
//!   per-bucket sums `COUNT(*) FILTER (WHERE ...)`.
//! - The per-kind figures are written under a savepoint: on PostgreSQL a failed statement
//!   aborts the transaction, so a refused `job_queue_kind_stats` is rolled back to the
//!   savepoint, and the throughput is kept all the same, as on MySQL.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Row;

use super::{micros, Store};
use crate::error::Result;
use crate::model::{JobStatus, QueueGauges};
use crate::store::errors::classify;
use crate::store::gauges::{
    add_gauge, five_minute_bucket, KindCounts, KIND_STATS_DELETE_LIMIT, KIND_STATS_DENIED,
    KIND_STATS_KEPT_HOURS, THROUGHPUT_MARGIN_SECS, THROUGHPUT_ROWS_PER_INSERT,
};
use crate::store::DbErrorKind;

/// Microseconds from `$a` to `$b`, as `BIGINT` (NULL when either is).
macro_rules! us_between {
    ($a:literal, $b:literal) => {
        concat!(
            "(EXTRACT(EPOCH FROM (",
            $b,
            " - ",
            $a,
            ")) * 1000000)::bigint"
        )
    };
}

/// The MySQL `count_gauges_sql`: per queue and status, over the `(status, status_at, id)`
/// index and the rows (not yet from the queue-status index alone, as on MySQL).
pub(crate) const PG_COUNT_GAUGES: &str = "SELECT queue::text, status, COUNT(*), MIN(run_at) \
     FROM job_queue \
     WHERE status IN ('scheduled', 'ready', 'blocked', 'running', 'failed') \
     GROUP BY queue, status";

/// The MySQL `COUNT_THROUGHPUT`: the jobs finished in `[$1, $2)` per minute (as text,
/// `YYYY-MM-DD HH:MM:00`), queue and kind. `b` is the runtime's bucket of
/// [`KIND_RUNTIME_BOUNDS`](crate::KIND_RUNTIME_BOUNDS), -1 without a claim time.
pub(crate) const PG_COUNT_THROUGHPUT: &str = concat!(
    "SELECT minute, queue, kind, SUM(done)::bigint, SUM(failed)::bigint, SUM(retries)::bigint, \
     COUNT(*) FILTER (WHERE b >= 0), COALESCE(SUM(run_us), 0)::bigint, \
     COALESCE(SUM(wait_us), 0)::bigint, \
     COUNT(*) FILTER (WHERE b = 0), COUNT(*) FILTER (WHERE b = 1), COUNT(*) FILTER (WHERE b = 2), \
     COUNT(*) FILTER (WHERE b = 3), COUNT(*) FILTER (WHERE b = 4), COUNT(*) FILTER (WHERE b = 5), \
     COUNT(*) FILTER (WHERE b = 6), COUNT(*) FILTER (WHERE b = 7), COUNT(*) FILTER (WHERE b = 8), \
     COUNT(*) FILTER (WHERE b = 9), COUNT(*) FILTER (WHERE b = 10), COUNT(*) FILTER (WHERE b = 11) \
     FROM (SELECT to_char(status_at, 'YYYY-MM-DD HH24:MI:00') AS minute, queue::text AS queue, \
       kind::text AS kind, (status = 'done')::int AS done, (status = 'failed')::int AS failed, \
       GREATEST(attempts, 1) - 1 AS retries, \
       GREATEST(",
    us_between!("claimed_at", "finished_at"),
    ", 0) AS run_us, GREATEST(",
    us_between!("run_at", "claimed_at"),
    ", 0) AS wait_us, COALESCE(width_bucket(",
    us_between!("claimed_at", "finished_at"),
    ", ARRAY[10000, 30000, 100000, 300000, 1000000, 3000000, 10000000, 30000000, \
       100000000, 300000000, 1000000000]::bigint[]), -1) AS b \
       FROM job_queue \
       WHERE status IN ('done', 'failed') AND status_at >= $1 AND status_at < $2) t \
     GROUP BY minute, queue, kind"
);

/// See the MySQL `take_gauge_turn`.
pub(crate) async fn take_gauge_turn(store: &Store, pool: &PgPool, every: Duration) -> Result<bool> {
    let taken = pg_autocommit!(store, pool, |conn| sqlx::query(
        "UPDATE job_queue_gauge_refresh SET refreshed_at = job_queue_now() \
         WHERE id = 1 AND refreshed_at <= job_queue_now() - $1 * INTERVAL '1 microsecond'",
    )
    .bind(micros(every))
    .execute(&mut *conn))?;
    Ok(taken.rows_affected() == 1)
}

/// See the MySQL `gauged_jobs`.
pub(crate) async fn gauged_jobs(store: &Store, pool: &PgPool) -> Result<u64> {
    let n: i64 = pg_autocommit!(store, pool, |conn| sqlx::query_scalar(
        "SELECT COALESCE(SUM(jobs), 0)::bigint FROM job_queue_gauges"
    )
    .fetch_one(&mut *conn))?;
    Ok(n.max(0) as u64)
}

/// See the MySQL `count_gauges`.
pub(crate) async fn count_gauges(store: &Store, pool: &PgPool) -> Result<()> {
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(PG_COUNT_GAUGES)
        .fetch_all(&mut *conn))?;
    let (mut queues, mut statuses, mut jobs, mut oldest) = (vec![], vec![], vec![], vec![]);
    for r in &rows {
        let status: String = r.try_get(1)?;
        let first: Option<NaiveDateTime> = r.try_get(3)?;
        oldest.push(if status == JobStatus::Ready.as_str() {
            first
        } else {
            None
        });
        queues.push(r.try_get::<String, _>(0)?);
        statuses.push(status);
        jobs.push(r.try_get::<i64, _>(2)?.max(0));
    }
    pg_transaction!(store, pool, |conn| {
        sqlx::query("DELETE FROM job_queue_gauges")
            .execute(&mut *conn)
            .await?;
        sqlx::query(
            "INSERT INTO job_queue_gauges (queue, status, jobs, oldest_run_at) \
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamp[])",
        )
        .bind(&queues)
        .bind(&statuses)
        .bind(&jobs)
        .bind(&oldest)
        .execute(&mut *conn)
        .await?;
        Ok(((), true))
    })
}

/// See the MySQL `count_throughput`.
pub(crate) async fn count_throughput(store: &Store, pool: &PgPool) -> Result<()> {
    pg_transaction!(store, pool, |conn| {
        let (from, to): (NaiveDateTime, NaiveDateTime) = sqlx::query_as(
            "SELECT GREATEST(counted_to, job_queue_now() - INTERVAL '61 minutes'), \
             job_queue_now() - $1 * INTERVAL '1 second' \
             FROM job_queue_throughput_mark WHERE id = 1 FOR UPDATE",
        )
        .bind(i64::from(THROUGHPUT_MARGIN_SECS))
        .fetch_one(&mut *conn)
        .await?;
        if from >= to {
            return Ok(((), false));
        }
        let rows = sqlx::query(PG_COUNT_THROUGHPUT)
            .bind(from)
            .bind(to)
            .fetch_all(&mut *conn)
            .await?;
        let mut minutes: std::collections::BTreeMap<(String, String), (i64, i64)> =
            Default::default();
        let mut kinds: std::collections::BTreeMap<(String, String, String), KindCounts> =
            Default::default();
        for r in &rows {
            let minute: String = r.try_get(0)?;
            let queue: String = r.try_get(1)?;
            let kind: String = r.try_get(2)?;
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
            let minute: Vec<&str> = chunk.iter().map(|((m, _), _)| m.as_str()).collect();
            let queue: Vec<&str> = chunk.iter().map(|((_, q), _)| q.as_str()).collect();
            let done: Vec<i64> = chunk.iter().map(|(_, c)| c.0).collect();
            let failed: Vec<i64> = chunk.iter().map(|(_, c)| c.1).collect();
            sqlx::query(
                "INSERT INTO job_queue_throughput (minute, queue, done, failed) \
                 SELECT * FROM unnest($1::text[]::timestamp[], $2::text[], $3::bigint[], $4::bigint[]) \
                 ON CONFLICT (minute, queue) DO UPDATE SET \
                 done = job_queue_throughput.done + EXCLUDED.done, \
                 failed = job_queue_throughput.failed + EXCLUDED.failed",
            )
            .bind(&minute)
            .bind(&queue)
            .bind(&done)
            .bind(&failed)
            .execute(&mut *conn)
            .await?;
        }
        let kinds: Vec<_> = kinds.into_iter().collect();
        // A savepoint: a refused statement aborts the whole transaction on PostgreSQL.
        sqlx::query("SAVEPOINT kind_stats")
            .execute(&mut *conn)
            .await?;
        match add_kind_stats(conn, &kinds).await {
            Ok(()) => {
                sqlx::query("RELEASE SAVEPOINT kind_stats")
                    .execute(&mut *conn)
                    .await?;
            }
            Err(e) => match classify(&e) {
                Some(DbErrorKind::TableDenied | DbErrorKind::MissingTable) => {
                    sqlx::query("ROLLBACK TO SAVEPOINT kind_stats")
                        .execute(&mut *conn)
                        .await?;
                    if !KIND_STATS_DENIED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        tracing::info!(error = %e, "the per-kind figures (`job_queue_kind_stats`) cannot be kept, so the dashboard's kinds page stays empty; apply the migrations, and grant the table as the deployment guide's least-privilege section shows");
                    } else {
                        tracing::debug!(error = %e, "the per-kind figures cannot be kept");
                    }
                }
                _ => return Err(e),
            },
        }
        sqlx::query("UPDATE job_queue_throughput_mark SET counted_to = $1 WHERE id = 1")
            .bind(to)
            .execute(&mut *conn)
            .await?;
        sqlx::query(
            "DELETE FROM job_queue_throughput \
             WHERE minute < date_trunc('second', job_queue_now()) - INTERVAL '2 hours'",
        )
        .execute(&mut *conn)
        .await?;
        Ok(((), true))
    })
}

/// See the MySQL `queue_gauges`.
pub(crate) async fn queue_gauges(store: &Store, pool: &PgPool) -> Result<Vec<QueueGauges>> {
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(concat!(
        "SELECT queue::text, status, jobs, ",
        us_between!("oldest_run_at", "job_queue_now()"),
        " FROM job_queue_gauges"
    ))
    .fetch_all(&mut *conn))?;
    let mut out: Vec<QueueGauges> = Vec::new();
    for r in &rows {
        let queue: String = r.try_get(0)?;
        let status: JobStatus = r.try_get::<String, _>(1)?.parse()?;
        let n = r.try_get::<i64, _>(2)?.max(0) as u64;
        let oldest: Option<i64> = r.try_get(3)?;
        add_gauge(&mut out, queue, status, n, oldest);
    }
    Ok(out)
}

/// See the MySQL `add_kind_stats`; the expired buckets go in batches of
/// `KIND_STATS_DELETE_LIMIT` (PostgreSQL's `DELETE` has no `LIMIT`: the batch is a key range
/// read first).
async fn add_kind_stats(
    conn: &mut PgConnection,
    kinds: &[((String, String, String), KindCounts)],
) -> sqlx::Result<()> {
    for chunk in kinds.chunks(THROUGHPUT_ROWS_PER_INSERT) {
        let col = |f: &dyn Fn(&KindCounts) -> i64| -> Vec<i64> {
            chunk.iter().map(|(_, k)| f(k)).collect()
        };
        let bucket: Vec<&str> = chunk.iter().map(|((b, _, _), _)| b.as_str()).collect();
        let queue: Vec<&str> = chunk.iter().map(|((_, q, _), _)| q.as_str()).collect();
        let kind: Vec<&str> = chunk.iter().map(|((_, _, k), _)| k.as_str()).collect();
        let mut q = sqlx::query(
            "INSERT INTO job_queue_kind_stats AS s (bucket, queue, kind, done, failed, retries, timed, \
             run_us, wait_us, h00, h01, h02, h03, h04, h05, h06, h07, h08, h09, h10, h11) \
             SELECT * FROM unnest($1::text[]::timestamp[], $2::text[], $3::text[], $4::bigint[], \
               $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], \
               $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], \
               $16::bigint[], $17::bigint[], $18::bigint[], $19::bigint[], $20::bigint[], $21::bigint[]) \
             ON CONFLICT (bucket, queue, kind) DO UPDATE SET \
             done = s.done + EXCLUDED.done, failed = s.failed + EXCLUDED.failed, \
             retries = s.retries + EXCLUDED.retries, timed = s.timed + EXCLUDED.timed, \
             run_us = s.run_us + EXCLUDED.run_us, wait_us = s.wait_us + EXCLUDED.wait_us, \
             h00 = s.h00 + EXCLUDED.h00, h01 = s.h01 + EXCLUDED.h01, h02 = s.h02 + EXCLUDED.h02, \
             h03 = s.h03 + EXCLUDED.h03, h04 = s.h04 + EXCLUDED.h04, h05 = s.h05 + EXCLUDED.h05, \
             h06 = s.h06 + EXCLUDED.h06, h07 = s.h07 + EXCLUDED.h07, h08 = s.h08 + EXCLUDED.h08, \
             h09 = s.h09 + EXCLUDED.h09, h10 = s.h10 + EXCLUDED.h10, h11 = s.h11 + EXCLUDED.h11",
        )
        .bind(bucket)
        .bind(queue)
        .bind(kind)
        .bind(col(&|k| k.done))
        .bind(col(&|k| k.failed))
        .bind(col(&|k| k.retries))
        .bind(col(&|k| k.timed))
        .bind(col(&|k| k.run_us))
        .bind(col(&|k| k.wait_us));
        for i in 0..12 {
            q = q.bind(col(&|k| k.histogram[i]));
        }
        q.execute(&mut *conn).await?;
    }
    sqlx::query(
        "DELETE FROM job_queue_kind_stats WHERE (bucket, queue, kind) IN (\
           SELECT bucket, queue, kind FROM job_queue_kind_stats \
           WHERE bucket < date_trunc('second', job_queue_now()) - $1 * INTERVAL '1 hour' \
           ORDER BY bucket LIMIT $2)",
    )
    .bind(i64::from(KIND_STATS_KEPT_HOURS))
    .bind(i64::from(KIND_STATS_DELETE_LIMIT))
    .execute(&mut *conn)
    .await?;
    Ok(())
}
