//! The dashboard's per-kind figures and periodic schedules on PostgreSQL (see the MySQL
//! `store/kinds.rs`). What differs: sums are cast to `BIGINT` (`SUM` of a `BIGINT` is
//! `NUMERIC` on PostgreSQL); a status and a key are text already; the error's first line is
//! `split_part(last_error, chr(10), 1)`; no index hints (the `(kind, id)` index serves
//! `WHERE kind = $1 ORDER BY id DESC`, the `(queue, status, priority, id)` claim index the
//! queue page's blocked jobs); a slot key is text (`c:`/`r:` and the key), not bytes; a
//! worker's queues are matched with `= ANY(string_to_array(queues, ','))` (MySQL:
//! `FIND_IN_SET`).

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::postgres::PgPool;
use sqlx::Row;

use super::dashboard::{capped_count, micros_between, worker_from_row};
use super::decode::{pg_opt_utc, pg_utc};
use super::{id_of, Store};
use crate::error::Result;
use crate::model::{
    BlockingKey, JobLimits, JobStatus, KindStats, LimitKind, NewJob, SlotHolder, StatusCounts,
    TickJob, Uniqueness, WorkerInfo, OVERVIEW_COUNT_CAP, RUN_NOW_SUFFIX,
};
use crate::store::kinds::{BLOCKED_READ, KEYS_SHOWN, WAITING_CAP};
use crate::store::limits::MAX_SLOTS;

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

/// The MySQL `QUEUE_GAUGES_SQL`: the gauges' rows of queue `$1` (a range of their primary
/// key), when they were counted, and whether the queue is paused.
fn queue_gauges_sql() -> String {
    format!(
        "SELECT status, jobs, {} FROM job_queue_gauges WHERE queue = $1 \
         UNION ALL \
         SELECT 'counted', CAST(0 AS BIGINT), \
           CASE WHEN refreshed_at < '2001-01-01' THEN NULL ELSE {} END \
           FROM job_queue_gauge_refresh WHERE id = 1 \
         UNION ALL \
         SELECT 'paused', CAST(0 AS BIGINT), CAST(NULL AS BIGINT) \
           FROM job_queue_pause WHERE queue = $1",
        micros_between("oldest_run_at", "job_queue_now()"),
        micros_between("refreshed_at", "job_queue_now()"),
    )
}

/// How many of queue `$1`'s blocked jobs the page reads, up to `$2` (the claim index).
const PG_BLOCKED_READ_SQL: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue \
     WHERE queue = $1 AND status = 'blocked' LIMIT $2) t";

/// The MySQL `BLOCKING_KEYS_SQL`: the keys the first `$2` blocked jobs of queue `$1` (in
/// claim order, over the claim index) wait for, at most `$3`. `MIN` of a `BIGINT` is a
/// `BIGINT`; the keys sort byte by byte (`COLLATE "C"`), as MySQL's binary keys.
const PG_BLOCKING_KEYS_SQL: &str = "\
    SELECT b.slot_key::text, COUNT(*), \
      MIN(CASE WHEN left(b.slot_key, 2) = 'c:' THEN j.concurrency_limit ELSE j.rate_limit END), \
      MIN(j.rate_window_ms) \
    FROM (SELECT id, concurrency_limit, rate_limit, rate_window_ms \
          FROM job_queue \
          WHERE queue = $1 AND status = 'blocked' ORDER BY priority, id LIMIT $2) j \
    JOIN job_queue_blocked b ON b.job_id = j.id \
    GROUP BY b.slot_key ORDER BY COUNT(*) DESC, b.slot_key LIMIT $3";

/// The MySQL `WAITING_SQL`: how many jobs wait for key `$1`, up to `$2`.
const PG_WAITING_SQL: &str = "\
    SELECT COUNT(*) FROM (SELECT 1 FROM job_queue_blocked WHERE slot_key = $1 LIMIT $2) t";

/// The MySQL `SLOTS_SQL`: key `$1`'s slots below `$2`, held, used within the window, and
/// microseconds until the next rate slot frees.
fn slots_sql() -> String {
    format!(
        "SELECT COUNT(job_id), COUNT(*) FILTER (WHERE free_at > job_queue_now()), {} \
         FROM job_queue_slot WHERE slot_key = $1 AND slot_no < $2",
        micros_between("job_queue_now()", "MIN(free_at)")
    )
}

/// The MySQL `HOLDERS_SQL`: the jobs holding concurrency key `$1`'s slots, at most 20.
const PG_HOLDERS_SQL: &str = "\
    SELECT s.job_id, j.kind::text, j.queue::text, j.status, j.lease_owner::text \
    FROM job_queue_slot s LEFT JOIN job_queue j ON j.id = s.job_id \
    WHERE s.slot_key = $1 AND s.job_id IS NOT NULL ORDER BY s.slot_no LIMIT 20";

/// The MySQL `QUEUE_WORKERS_SQL`: the workers whose heartbeat lists queue `$1`, at most 100.
fn queue_workers_sql() -> String {
    format!(
        "SELECT w.owner::text, w.host::text, w.pid, w.version::text, w.queues, w.concurrency, \
           w.running, w.started_at, w.last_seen, {}, \
           CAST(t.holder IS NOT NULL AS INTEGER) \
         FROM job_queue_worker w LEFT JOIN job_queue_turn t \
           ON t.name = 'maintenance' AND t.holder = w.owner AND t.expires_at > job_queue_now() \
         WHERE $1 = ANY(string_to_array(w.queues, ',')) ORDER BY w.host, w.owner LIMIT 100",
        micros_between("w.last_seen", "job_queue_now()")
    )
}

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

/// See the MySQL `queue_figures`.
#[allow(clippy::type_complexity)]
pub(crate) async fn queue_figures(
    store: &Store,
    pool: &PgPool,
    queue: &str,
) -> Result<(
    bool,
    StatusCounts,
    Vec<JobStatus>,
    Option<f64>,
    Option<f64>,
    Vec<BlockingKey>,
    u64,
)> {
    let sql = queue_gauges_sql();
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(&sql)
        .bind(queue)
        .fetch_all(&mut *conn))?;
    let (mut paused, mut counts, mut oldest, mut counted) =
        (false, StatusCounts::default(), None, None);
    for r in &rows {
        let what: String = r.try_get(0)?;
        let n = r.try_get::<i64, _>(1)?.max(0) as u64;
        let us: Option<i64> = r.try_get(2)?;
        match what.as_str() {
            "paused" => paused = true,
            "counted" => counted = us.map(|us| us.max(0) as f64 / 1e6),
            status => {
                let status: JobStatus = status.parse()?;
                counts.set(status, n);
                if status == JobStatus::Ready {
                    oldest = us.map(|us| us.max(0) as f64 / 1e6);
                }
            }
        }
    }
    let mut capped = Vec::new();
    for status in [JobStatus::Done, JobStatus::Cancelled] {
        let n = capped_count(store, pool, queue, status, OVERVIEW_COUNT_CAP).await?;
        if n > OVERVIEW_COUNT_CAP {
            capped.push(status);
        }
        counts.set(status, n.min(OVERVIEW_COUNT_CAP));
    }
    let (keys, blocked_read) = blocking_keys(store, pool, queue).await?;
    Ok((paused, counts, capped, oldest, counted, keys, blocked_read))
}

/// See the MySQL `blocking_keys`.
async fn blocking_keys(
    store: &Store,
    pool: &PgPool,
    queue: &str,
) -> Result<(Vec<BlockingKey>, u64)> {
    let blocked_read: i64 =
        pg_autocommit!(store, pool, |conn| sqlx::query_scalar(PG_BLOCKED_READ_SQL)
            .bind(queue)
            .bind(i64::from(BLOCKED_READ))
            .fetch_one(&mut *conn))?;
    if blocked_read == 0 {
        return Ok((Vec::new(), 0));
    }
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(PG_BLOCKING_KEYS_SQL)
        .bind(queue)
        .bind(i64::from(BLOCKED_READ))
        .bind(i64::from(KEYS_SHOWN))
        .fetch_all(&mut *conn))?;
    let slots_sql = slots_sql();
    let mut keys = Vec::with_capacity(rows.len());
    for r in &rows {
        let slot_key: String = r.try_get(0)?;
        let blocked_here = r.try_get::<i64, _>(1)?.max(0) as u64;
        let limit =
            u32::try_from(r.try_get::<Option<i64>, _>(2)?.unwrap_or(0).max(0)).unwrap_or(u32::MAX);
        let window_ms = r.try_get::<Option<i64>, _>(3)?.unwrap_or(0).max(0) as u64;
        let (limit_kind, key) = if let Some(k) = slot_key.strip_prefix("c:") {
            (LimitKind::Concurrency, k)
        } else if let Some(k) = slot_key.strip_prefix("r:") {
            (LimitKind::Rate, k)
        } else {
            (LimitKind::Concurrency, slot_key.as_str())
        };
        let waiting: i64 = pg_autocommit!(store, pool, |conn| sqlx::query_scalar(PG_WAITING_SQL)
            .bind(&slot_key)
            .bind(i64::try_from(WAITING_CAP + 1).unwrap_or(i64::MAX))
            .fetch_one(&mut *conn))?;
        let waiting = waiting.max(0) as u64;
        let slots = pg_autocommit!(store, pool, |conn| sqlx::query(&slots_sql)
            .bind(&slot_key)
            .bind(i64::from(limit.min(MAX_SLOTS)))
            .fetch_one(&mut *conn))?;
        let held = u32::try_from(slots.try_get::<i64, _>(0)?.max(0)).unwrap_or(u32::MAX);
        let used = u32::try_from(slots.try_get::<i64, _>(1)?.max(0)).unwrap_or(u32::MAX);
        let next_us: Option<i64> = slots.try_get(2)?;
        let mut holders = Vec::new();
        if limit_kind == LimitKind::Concurrency {
            let rows = pg_autocommit!(store, pool, |conn| sqlx::query(PG_HOLDERS_SQL)
                .bind(&slot_key)
                .fetch_all(&mut *conn))?;
            for h in &rows {
                let kind: Option<String> = h.try_get(1)?;
                let job = match kind {
                    Some(kind) => Some((
                        kind,
                        h.try_get::<String, _>(2)?,
                        h.try_get::<String, _>(3)?.parse()?,
                    )),
                    None => None,
                };
                holders.push(SlotHolder {
                    id: id_of(h.try_get(0)?),
                    job,
                    lease_owner: h.try_get(4)?,
                });
            }
        }
        let rate = limit_kind == LimitKind::Rate;
        keys.push(BlockingKey {
            limit_kind,
            key: key.to_owned(),
            limit,
            window: rate.then(|| Duration::from_millis(window_ms)),
            blocked_here,
            waiting: waiting.min(WAITING_CAP),
            waiting_capped: waiting > WAITING_CAP,
            busy: if rate { used } else { held },
            next_start_secs: if rate && used >= limit {
                next_us.map(|us| us.max(0) as f64 / 1e6)
            } else {
                None
            },
            holders,
        });
    }
    Ok((keys, blocked_read.max(0) as u64))
}

/// See the MySQL `queue_workers`.
pub(crate) async fn queue_workers(
    store: &Store,
    pool: &PgPool,
    queue: &str,
    gone_after: Duration,
) -> Result<Vec<WorkerInfo>> {
    let sql = queue_workers_sql();
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(&sql)
        .bind(queue)
        .fetch_all(&mut *conn))?;
    rows.iter()
        .map(|r| worker_from_row(r, gone_after))
        .collect()
}
