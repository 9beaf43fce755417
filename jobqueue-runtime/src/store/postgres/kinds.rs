//! The dashboard's per-kind figures and periodic schedules on PostgreSQL (see the MySQL
//! `store/kinds.rs`). What differs: sums are cast to `BIGINT` (`SUM` of a `BIGINT` is
//! `NUMERIC` on PostgreSQL); a status and a key are text already; the error's first line is
//! `split_part(last_error, chr(10), 1)`; no index hints (the `(kind, id)` index serves
//! `WHERE kind = $1 ORDER BY id DESC`).

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::postgres::PgPool;
use sqlx::Row;

use super::decode::{pg_opt_utc, pg_utc};
use super::{id_of, Store};
use crate::error::Result;
use crate::model::{JobLimits, KindStats, NewJob, TickJob, Uniqueness, RUN_NOW_SUFFIX};

/// The MySQL `KIND_STATS_SQL`: a range of the primary key `(bucket, queue, kind)`.
const PG_KIND_STATS_SQL: &str = "\
    SELECT queue::text, kind::text, SUM(done)::bigint, SUM(failed)::bigint, \
      SUM(retries)::bigint, SUM(timed)::bigint, SUM(run_us)::bigint, SUM(wait_us)::bigint, \
      SUM(h00)::bigint, SUM(h01)::bigint, SUM(h02)::bigint, SUM(h03)::bigint, \
      SUM(h04)::bigint, SUM(h05)::bigint, SUM(h06)::bigint, SUM(h07)::bigint, \
      SUM(h08)::bigint, SUM(h09)::bigint, SUM(h10)::bigint, SUM(h11)::bigint \
    FROM job_queue_kind_stats \
    WHERE bucket > date_trunc('second', job_queue_now()) - $1 * INTERVAL '1 hour' \
      - INTERVAL '5 minutes' \
    GROUP BY queue, kind";

/// The MySQL `RECENT_OF_KIND_SQL`.
const PG_RECENT_OF_KIND_SQL: &str = "\
    SELECT id, task_key::text AS task_key, status, run_at, claimed_at, finished_at, \
      left(split_part(last_error, chr(10), 1), 240) AS last_error \
    FROM job_queue WHERE kind = $1 ORDER BY id DESC LIMIT $2";

/// The MySQL `LATEST_OF_KIND_SQL`.
const PG_LATEST_OF_KIND_SQL: &str = "\
    SELECT queue::text, payload::text, priority, max_attempts, lease_ms, concurrency_key::text, \
      concurrency_limit, rate_key::text, rate_limit, rate_window_ms \
    FROM job_queue WHERE kind = $1 ORDER BY id DESC LIMIT 1";

/// See the MySQL `kind_stats`.
pub(crate) async fn kind_stats(store: &Store, pool: &PgPool, hours: u32) -> Result<Vec<KindStats>> {
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(PG_KIND_STATS_SQL)
        .bind(i64::from(hours))
        .fetch_all(&mut *conn))?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let n = |i: usize| -> sqlx::Result<u64> {
            Ok(r.try_get::<Option<i64>, _>(i)?.unwrap_or(0).max(0) as u64)
        };
        let mut runtime_histogram = [0u64; 12];
        for (i, h) in runtime_histogram.iter_mut().enumerate() {
            *h = n(8 + i)?;
        }
        out.push((
            r.try_get::<String, _>(0)?,
            KindStats {
                kind: r.try_get(1)?,
                queues: Vec::new(),
                done: n(2)?,
                failed: n(3)?,
                retries: n(4)?,
                timed: n(5)?,
                total_runtime: Duration::from_micros(n(6)?),
                total_wait: Duration::from_micros(n(7)?),
                runtime_histogram,
            },
        ));
    }
    Ok(crate::store::kinds::merge_kinds(out))
}

/// See the MySQL `periodic_pauses`.
pub(crate) async fn periodic_pauses(
    store: &Store,
    pool: &PgPool,
) -> Result<Vec<(String, Option<NaiveDateTime>)>> {
    pg_autocommit!(store, pool, |conn| sqlx::query_as(
        "SELECT kind::text, paused_at FROM job_queue_cron ORDER BY kind"
    )
    .fetch_all(&mut *conn))
}

/// See the MySQL `recent_of_kind`.
pub(crate) async fn recent_of_kind(
    store: &Store,
    pool: &PgPool,
    kind: &str,
    limit: u32,
) -> Result<Vec<TickJob>> {
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(PG_RECENT_OF_KIND_SQL)
        .bind(kind)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn))?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let key: String = r.try_get("task_key")?;
        out.push(TickJob {
            id: id_of(r.try_get("id")?),
            manual: key.ends_with(RUN_NOW_SUFFIX),
            task_key: key,
            status: r.try_get::<String, _>("status")?.parse()?,
            run_at: pg_utc(r, "run_at")?,
            claimed_at: pg_opt_utc(r, "claimed_at")?,
            finished_at: pg_opt_utc(r, "finished_at")?,
            last_error: r
                .try_get::<Option<String>, _>("last_error")?
                .filter(|e| !e.is_empty()),
        });
    }
    Ok(out)
}

/// See the MySQL `set_periodic_paused`.
pub(crate) async fn set_periodic_paused(
    store: &Store,
    pool: &PgPool,
    kind: &str,
    paused: bool,
) -> Result<Option<bool>> {
    let sql = if paused {
        "UPDATE job_queue_cron SET paused_at = job_queue_now(), updated_at = job_queue_now() \
         WHERE kind = $1 AND paused_at IS NULL"
    } else {
        "UPDATE job_queue_cron SET paused_at = NULL, \
         last_tick = GREATEST(last_tick, job_queue_now()), updated_at = job_queue_now() \
         WHERE kind = $1 AND paused_at IS NOT NULL"
    };
    let changed = pg_autocommit!(store, pool, |conn| sqlx::query(sql)
        .bind(kind)
        .execute(&mut *conn))?
    .rows_affected();
    if changed == 1 {
        return Ok(Some(true));
    }
    Ok(has_schedule(store, pool, kind).await?.then_some(false))
}

/// See the MySQL `has_schedule`.
pub(crate) async fn has_schedule(store: &Store, pool: &PgPool, kind: &str) -> Result<bool> {
    pg_autocommit!(store, pool, |conn| sqlx::query_scalar(
        "SELECT EXISTS(SELECT 1 FROM job_queue_cron WHERE kind = $1)"
    )
    .bind(kind)
    .fetch_one(&mut *conn))
}

/// See the MySQL `copy_of_latest`.
pub(crate) async fn copy_of_latest(
    store: &Store,
    pool: &PgPool,
    kind: &str,
    key: String,
) -> Result<Option<NewJob>> {
    let row = pg_autocommit!(store, pool, |conn| sqlx::query(PG_LATEST_OF_KIND_SQL)
        .bind(kind)
        .fetch_optional(&mut *conn))?;
    let Some(r) = row else {
        return Ok(None);
    };
    let u32_at = |i: usize| -> sqlx::Result<u32> {
        Ok(u32::try_from(r.try_get::<i64, _>(i)?.max(0)).unwrap_or(u32::MAX))
    };
    let ckey: Option<String> = r.try_get(5)?;
    let climit = u32_at(6)?;
    let rkey: Option<String> = r.try_get(7)?;
    let rlimit = u32_at(8)?;
    let window = u32_at(9)?;
    Ok(Some(NewJob {
        kind: kind.to_owned(),
        queue: r.try_get(0)?,
        key,
        payload: r.try_get(1)?,
        priority: r.try_get(2)?,
        max_attempts: u32_at(3)?,
        lease_ms: u32_at(4)?,
        run_at: None,
        delay_us: 0,
        traceparent: None,
        unique: Uniqueness::UntilPruned,
        metadata: None,
        limits: JobLimits {
            concurrency: ckey.filter(|_| climit > 0).map(|k| (k, climit)),
            rate: rkey
                .filter(|_| rlimit > 0 && window > 0)
                .map(|k| (k, rlimit, window)),
        },
    }))
}
