//! The dashboard's daily workflows: the per-kind figures kept by the throughput count
//! (`gauges.rs`), the pause and the recent jobs of periodic schedules, and one queue's page
//! (its limits, their holders, its workers). Every read is a range of an index or capped.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::Row;

use super::decode::{opt_text, opt_utc, text, utc};
use super::*;
use crate::model::{
    BlockingKey, JobLimits, JobStatus, KindStats, LimitKind, NewJob, SlotHolder, StatusCounts,
    TickJob, Uniqueness, WorkerInfo, OVERVIEW_COUNT_CAP, RUN_NOW_SUFFIX,
};

/// The per-kind figures of the buckets that end within the last `?` hours (a range of the
/// primary key, `(bucket, queue, kind)`: 12 buckets per hour and queue and kind).
const KIND_STATS_SQL: &str = "\
    SELECT queue, kind, CAST(SUM(done) AS SIGNED), CAST(SUM(failed) AS SIGNED), \
      CAST(SUM(retries) AS SIGNED), CAST(SUM(timed) AS SIGNED), CAST(SUM(run_us) AS SIGNED), \
      CAST(SUM(wait_us) AS SIGNED), \
      CAST(SUM(h00) AS SIGNED), CAST(SUM(h01) AS SIGNED), CAST(SUM(h02) AS SIGNED), \
      CAST(SUM(h03) AS SIGNED), CAST(SUM(h04) AS SIGNED), CAST(SUM(h05) AS SIGNED), \
      CAST(SUM(h06) AS SIGNED), CAST(SUM(h07) AS SIGNED), CAST(SUM(h08) AS SIGNED), \
      CAST(SUM(h09) AS SIGNED), CAST(SUM(h10) AS SIGNED), CAST(SUM(h11) AS SIGNED) \
    FROM job_queue_kind_stats \
    WHERE bucket > UTC_TIMESTAMP() - INTERVAL ? HOUR - INTERVAL 5 MINUTE \
    GROUP BY queue, kind";

/// The newest jobs of one kind, newest first: a range of the `(kind, id)` index read
/// backwards, `?` rows. The error is cut on the server, so a long one costs nothing
/// (`CHAR(10 USING utf8mb4)`, not `'\n'`, which means two characters under `NO_BACKSLASH_ESCAPES`).
const RECENT_OF_KIND_SQL: &str = "\
    SELECT id, task_key, CAST(status AS CHAR), run_at, claimed_at, finished_at, \
      LEFT(SUBSTRING_INDEX(last_error, CHAR(10 USING utf8mb4), 1), 240) \
    FROM job_queue FORCE INDEX (job_queue_list_kind) WHERE kind = ? ORDER BY id DESC LIMIT ?";

/// The newest job of a kind, with what a manual run copies from it.
const LATEST_OF_KIND_SQL: &str = "\
    SELECT queue, CAST(payload AS CHAR), priority, max_attempts, lease_ms, concurrency_key, \
      concurrency_limit, rate_key, rate_limit, rate_window_ms \
    FROM job_queue FORCE INDEX (job_queue_list_kind) WHERE kind = ? ORDER BY id DESC LIMIT 1";

/// The most blocked jobs of a queue the queue page reads to find the keys they wait for.
pub(crate) const BLOCKED_READ: u32 = 500;

/// The most keys the queue page shows.
pub(crate) const KEYS_SHOWN: u32 = 20;

/// Up to how many waiting jobs of a key the queue page counts.
pub(crate) const WAITING_CAP: u64 = 10_000;

/// The keys the first `?` blocked jobs of a queue (in claim order, over the claim index)
/// wait for, with how many of them wait for each and the limit the first of them carries:
/// at most [`BLOCKED_READ`] rows of the queue, each joined to its waiting row by the job
/// index of `job_queue_blocked`.
const BLOCKING_KEYS_SQL: &str = "\
    SELECT b.slot_key, COUNT(*), \
      CAST(MIN(IF(LEFT(b.slot_key, 2) = 'c:', j.concurrency_limit, j.rate_limit)) AS SIGNED), \
      CAST(MIN(j.rate_window_ms) AS SIGNED) \
    FROM (SELECT id, concurrency_limit, rate_limit, rate_window_ms \
          FROM job_queue FORCE INDEX (job_queue_claim) \
          WHERE queue = ? AND status = 'blocked' ORDER BY priority, id LIMIT ?) j \
    JOIN job_queue_blocked b ON b.job_id = j.id \
    GROUP BY b.slot_key ORDER BY COUNT(*) DESC, b.slot_key LIMIT ?";

/// How many jobs wait for one key, up to a cap (the `LIMIT`, one more than the cap): a
/// range of the primary key of `job_queue_blocked`.
const WAITING_SQL: &str = "\
    SELECT COUNT(*) FROM (SELECT 1 FROM job_queue_blocked WHERE slot_key = ? LIMIT ?) t";

/// A key's slots (at most 1,000, `MAX_SLOTS`): how many are held (concurrency) or used
/// within the window (rate), and when the next rate slot frees. A range of the primary key.
const SLOTS_SQL: &str = "\
    SELECT CAST(SUM(job_id IS NOT NULL) AS SIGNED), CAST(SUM(free_at > UTC_TIMESTAMP(6)) AS SIGNED), \
      TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(free_at)) \
    FROM job_queue_slot WHERE slot_key = ? AND slot_no < ?";

/// The jobs holding a concurrency key's slots, at most 20, with their kind, queue, status
/// and worker (by primary key).
const HOLDERS_SQL: &str = "\
    SELECT s.job_id, j.kind, j.queue, CAST(j.status AS CHAR), j.lease_owner \
    FROM job_queue_slot s LEFT JOIN job_queue j ON j.id = s.job_id \
    WHERE s.slot_key = ? AND s.job_id IS NOT NULL ORDER BY s.slot_no LIMIT 20";

/// The workers whose heartbeat lists a queue, at most 100 (the heartbeat table has a row
/// per live worker, plus the gone ones until they are forgotten).
const QUEUE_WORKERS_SQL: &str = "\
    SELECT w.owner, w.host, w.pid, w.version, w.queues, w.concurrency, w.running, w.started_at, \
      w.last_seen, TIMESTAMPDIFF(MICROSECOND, w.last_seen, UTC_TIMESTAMP(6)), \
      CAST(t.holder IS NOT NULL AS SIGNED) \
    FROM job_queue_worker w LEFT JOIN job_queue_turn t \
      ON t.name = 'maintenance' AND t.holder = w.owner AND t.expires_at > UTC_TIMESTAMP(6) \
    WHERE FIND_IN_SET(?, w.queues) > 0 ORDER BY w.host, w.owner LIMIT 100";

/// One queue's gauges, as last counted (a range of the gauges' primary key), with how long
/// ago they were counted, and whether the queue is paused.
const QUEUE_GAUGES_SQL: &str = "\
    SELECT CAST(status AS CHAR), CAST(jobs AS SIGNED), \
      TIMESTAMPDIFF(MICROSECOND, oldest_run_at, UTC_TIMESTAMP(6)) FROM job_queue_gauges WHERE queue = ? \
    UNION ALL \
    SELECT 'counted', 0, IF(refreshed_at < '2001-01-01', NULL, \
        TIMESTAMPDIFF(MICROSECOND, refreshed_at, UTC_TIMESTAMP(6))) \
      FROM job_queue_gauge_refresh WHERE id = 1 \
    UNION ALL \
    SELECT 'paused', 0, NULL FROM job_queue_pause WHERE queue = ?";

/// Per-kind figures merged over queues, by kind name.
pub(super) fn merge_kinds(rows: Vec<(String, KindStats)>) -> Vec<KindStats> {
    let mut by_kind: std::collections::BTreeMap<String, KindStats> = Default::default();
    for (queue, k) in rows {
        match by_kind.get_mut(&k.kind) {
            None => {
                let mut k = k;
                k.queues = vec![queue];
                by_kind.insert(k.kind.clone(), k);
            }
            Some(m) => {
                m.queues.push(queue);
                m.done += k.done;
                m.failed += k.failed;
                m.retries += k.retries;
                m.timed += k.timed;
                m.total_runtime += k.total_runtime;
                m.total_wait += k.total_wait;
                for (a, b) in m.runtime_histogram.iter_mut().zip(k.runtime_histogram) {
                    *a += b;
                }
            }
        }
    }
    let mut out: Vec<KindStats> = by_kind.into_values().collect();
    for k in &mut out {
        k.queues.sort();
    }
    out
}

impl Store {
    /// The per-kind figures of the last `hours` hours (see [`KIND_STATS_SQL`]), one per kind,
    /// by kind name, as the workers kept them: never counted here, since a count reads every
    /// job finished since the last one, which no page view should wait for.
    pub(crate) async fn kind_stats(&self, hours: u32) -> Result<Vec<KindStats>> {
        on_postgres!(self, kinds::kind_stats(hours));
        let rows = on_connection!(self, |conn| sqlx::query(KIND_STATS_SQL)
            .bind(hours)
            .fetch_all(&mut *conn))
        .await?;
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
                text(r, 0)?,
                KindStats {
                    kind: text(r, 1)?,
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
        Ok(merge_kinds(out))
    }

    /// When each periodic kind was paused (`None`: it runs), by kind.
    pub(crate) async fn periodic_pauses(&self) -> Result<Vec<(String, Option<NaiveDateTime>)>> {
        on_postgres!(self, kinds::periodic_pauses());
        let rows = on_connection!(self, |conn| sqlx::query(
            "SELECT kind, paused_at FROM job_queue_cron ORDER BY kind"
        )
        .fetch_all(&mut *conn))
        .await?;
        rows.iter()
            .map(|r| Ok((text(r, 0)?, r.try_get(1)?)))
            .collect()
    }

    /// The newest `limit` jobs of `kind`, newest first (see [`RECENT_OF_KIND_SQL`]).
    pub(crate) async fn recent_of_kind(&self, kind: &str, limit: u32) -> Result<Vec<TickJob>> {
        on_postgres!(self, kinds::recent_of_kind(kind, limit));
        let rows = on_connection!(self, |conn| sqlx::query(RECENT_OF_KIND_SQL)
            .bind(kind)
            .bind(limit)
            .fetch_all(&mut *conn))
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let key = opt_text(r, 1)?.unwrap_or_default();
            out.push(TickJob {
                id: r.try_get(0)?,
                manual: key.ends_with(RUN_NOW_SUFFIX),
                task_key: key,
                status: text(r, 2)?.parse()?,
                run_at: utc(r, 3)?,
                claimed_at: opt_utc(r, 4)?,
                finished_at: opt_utc(r, 5)?,
                last_error: opt_text(r, 6)?.filter(|e| !e.is_empty()),
            });
        }
        Ok(out)
    }

    /// Pauses (`true`) or resumes (`false`) the schedule of `kind`. `None`: the kind has no
    /// schedule row; otherwise whether it changed. A resume moves `last_tick` to now, so the
    /// ticks missed while paused are never enqueued. The update waits for a scheduler pass
    /// holding the row (a short transaction), and moves `last_tick` under its fence, so a
    /// pass that read the row before fails its own update and enqueues nothing.
    pub(crate) async fn set_periodic_paused(
        &self,
        kind: &str,
        paused: bool,
    ) -> Result<Option<bool>> {
        on_postgres!(self, kinds::set_periodic_paused(kind, paused));
        let sql = if paused {
            "UPDATE job_queue_cron SET paused_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) \
             WHERE kind = ? AND paused_at IS NULL"
        } else {
            "UPDATE job_queue_cron SET paused_at = NULL, \
             last_tick = GREATEST(last_tick, UTC_TIMESTAMP(6)), updated_at = UTC_TIMESTAMP(6) \
             WHERE kind = ? AND paused_at IS NOT NULL"
        };
        let changed = autocommit!(self, |conn| sqlx::query(sql).bind(kind).execute(&mut *conn))?
            .rows_affected();
        if changed == 1 {
            return Ok(Some(true));
        }
        let exists: bool = on_connection!(self, |conn| sqlx::query_scalar(
            "SELECT EXISTS(SELECT 1 FROM job_queue_cron WHERE kind = ?)"
        )
        .bind(kind)
        .fetch_one(&mut *conn))
        .await?;
        Ok(exists.then_some(false))
    }

    /// Whether `kind` has a schedule row.
    pub(crate) async fn has_schedule(&self, kind: &str) -> Result<bool> {
        on_postgres!(self, kinds::has_schedule(kind));
        Ok(on_connection!(self, |conn| sqlx::query_scalar(
            "SELECT EXISTS(SELECT 1 FROM job_queue_cron WHERE kind = ?)"
        )
        .bind(kind)
        .fetch_one(&mut *conn))
        .await?)
    }

    /// A manual run of `kind` copied from its newest job (queue, arguments, priority,
    /// attempts, lease, limits), with task key `key`, due now. `None` when the kind has no
    /// job.
    pub(crate) async fn copy_of_latest(&self, kind: &str, key: String) -> Result<Option<NewJob>> {
        on_postgres!(self, kinds::copy_of_latest(kind, key));
        let row = on_connection!(self, |conn| sqlx::query(LATEST_OF_KIND_SQL)
            .bind(kind)
            .fetch_optional(&mut *conn))
        .await?;
        let Some(r) = row else {
            return Ok(None);
        };
        let lossy = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
        let ckey = lossy(r.try_get(5)?);
        let climit: u32 = r.try_get(6)?;
        let rkey = lossy(r.try_get(7)?);
        let rlimit: u32 = r.try_get(8)?;
        let window: u32 = r.try_get(9)?;
        Ok(Some(NewJob {
            kind: kind.to_owned(),
            queue: text(&r, 0)?,
            key,
            payload: text(&r, 1)?,
            priority: r.try_get(2)?,
            max_attempts: r.try_get(3)?,
            lease_ms: r.try_get(4)?,
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

    /// The figures of one queue's page but its workers (see [`QueueDetail`](crate::QueueDetail)):
    /// (paused, counts, capped statuses, oldest ready, gauges' age, keys, blocked read).
    #[allow(clippy::type_complexity)]
    pub(crate) async fn queue_figures(
        &self,
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
        on_postgres!(self, kinds::queue_figures(queue));
        let rows = on_connection!(self, |conn| sqlx::query(QUEUE_GAUGES_SQL)
            .bind(queue)
            .bind(queue)
            .fetch_all(&mut *conn))
        .await?;
        let (mut paused, mut counts, mut oldest, mut counted) =
            (false, StatusCounts::default(), None, None);
        for r in &rows {
            let what = text(r, 0)?;
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
            let n = self.capped_count(queue, status, OVERVIEW_COUNT_CAP).await?;
            if n > OVERVIEW_COUNT_CAP {
                capped.push(status);
            }
            counts.set(status, n.min(OVERVIEW_COUNT_CAP));
        }
        let (keys, blocked_read) = self.blocking_keys(queue).await?;
        Ok((paused, counts, capped, oldest, counted, keys, blocked_read))
    }

    /// The keys `queue`'s first blocked jobs wait for, with their slots and holders, and how
    /// many blocked jobs were read.
    async fn blocking_keys(&self, queue: &str) -> Result<(Vec<BlockingKey>, u64)> {
        let blocked_read: i64 = on_connection!(self, |conn| sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue FORCE INDEX (job_queue_claim) \
             WHERE queue = ? AND status = 'blocked' LIMIT ?) t"
        )
        .bind(queue)
        .bind(BLOCKED_READ)
        .fetch_one(&mut *conn))
        .await?;
        if blocked_read == 0 {
            return Ok((Vec::new(), 0));
        }
        let rows = on_connection!(self, |conn| sqlx::query(BLOCKING_KEYS_SQL)
            .bind(queue)
            .bind(BLOCKED_READ)
            .bind(KEYS_SHOWN)
            .fetch_all(&mut *conn))
        .await?;
        let mut keys = Vec::with_capacity(rows.len());
        for r in &rows {
            let slot_key: Vec<u8> = r.try_get(0)?;
            let blocked_here = r.try_get::<i64, _>(1)?.max(0) as u64;
            let limit = r.try_get::<Option<i64>, _>(2)?.unwrap_or(0).max(0) as u32;
            let window_ms = r.try_get::<Option<i64>, _>(3)?.unwrap_or(0).max(0) as u64;
            let (limit_kind, key) = match slot_key.split_at_checked(2) {
                Some((b"c:", k)) => (LimitKind::Concurrency, k),
                Some((b"r:", k)) => (LimitKind::Rate, k),
                _ => (LimitKind::Concurrency, slot_key.as_slice()),
            };
            let waiting: i64 = on_connection!(self, |conn| sqlx::query_scalar(WAITING_SQL)
                .bind(&slot_key)
                .bind(WAITING_CAP + 1)
                .fetch_one(&mut *conn))
            .await?;
            let waiting = waiting.max(0) as u64;
            let slots = on_connection!(self, |conn| sqlx::query(SLOTS_SQL)
                .bind(&slot_key)
                .bind(limit.min(MAX_SLOTS))
                .fetch_one(&mut *conn))
            .await?;
            let held = slots.try_get::<Option<i64>, _>(0)?.unwrap_or(0).max(0) as u32;
            let used = slots.try_get::<Option<i64>, _>(1)?.unwrap_or(0).max(0) as u32;
            let next_us: Option<i64> = slots.try_get(2)?;
            let mut holders = Vec::new();
            if limit_kind == LimitKind::Concurrency {
                let rows = on_connection!(self, |conn| sqlx::query(HOLDERS_SQL)
                    .bind(&slot_key)
                    .fetch_all(&mut *conn))
                .await?;
                for h in &rows {
                    let kind = opt_text(h, 1)?;
                    let job = match kind {
                        Some(kind) => Some((kind, text(h, 2)?, text(h, 3)?.parse()?)),
                        None => None,
                    };
                    holders.push(SlotHolder {
                        id: h.try_get(0)?,
                        job,
                        lease_owner: opt_text(h, 4)?,
                    });
                }
            }
            let rate = limit_kind == LimitKind::Rate;
            keys.push(BlockingKey {
                limit_kind,
                key: String::from_utf8_lossy(key).into_owned(),
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

    /// The workers whose heartbeat lists `queue` (see [`QUEUE_WORKERS_SQL`]); those not seen
    /// for `gone_after` are marked gone.
    pub(crate) async fn queue_workers(
        &self,
        queue: &str,
        gone_after: Duration,
    ) -> Result<Vec<WorkerInfo>> {
        on_postgres!(self, kinds::queue_workers(queue, gone_after));
        let rows = on_connection!(self, |conn| sqlx::query(QUEUE_WORKERS_SQL)
            .bind(queue)
            .fetch_all(&mut *conn))
        .await?;
        rows.iter()
            .map(|r| super::dashboard::worker_from_row(r, gone_after))
            .collect()
    }
}
