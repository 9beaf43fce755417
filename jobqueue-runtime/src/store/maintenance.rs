//! Maintenance: promotion of due jobs, reclaim of expired leases, pruning of finished jobs
//! and the ticks of periodic jobs. Every worker runs it; SKIP LOCKED keeps passes of many
//! workers apart.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::Row;

use super::*;
use crate::model::{Enqueued, JobStatus, NewJob, Reclaimed, TickPass};

/// How many times a job's lease may expire before reclaim fails it, unless the worker says
/// otherwise ([`WorkerBuilder::max_lease_expiries`](crate::WorkerBuilder::max_lease_expiries)).
pub const DEFAULT_MAX_LEASE_EXPIRIES: u32 = 3;

/// How long a job waits after the `expiry`th expiry of its lease (from 2; the first one
/// returns it at once): `lease × (2^(expiry-1) - 1)`, at most an hour, before jitter.
pub(super) fn expiry_delay(lease: Duration, expiry: u32) -> Duration {
    let leases = (1u32 << expiry.saturating_sub(1).min(20)) - 1;
    lease
        .checked_mul(leases)
        .unwrap_or(Duration::MAX)
        .min(Duration::from_secs(3600))
}

/// Whether any scheduled job is due: the plain read before a promotion.
pub const PROMOTE_PROBE: &str =
    "SELECT EXISTS(SELECT 1 FROM job_queue FORCE INDEX (job_queue_status_at) \
     WHERE status = 'scheduled' AND status_at <= UTC_TIMESTAMP(6))";

/// Promotion's locking read: due scheduled jobs, over the status-time index (a scheduled
/// row's `status_at` is its `run_at`).
pub const PROMOTE_SELECT: &str = "SELECT id FROM job_queue FORCE INDEX (job_queue_status_at) \
     WHERE status = 'scheduled' AND status_at <= UTC_TIMESTAMP(6) \
     ORDER BY status_at, id LIMIT ? FOR UPDATE SKIP LOCKED";

/// Reclaim's locking read: running jobs whose lease expired, over the status-time index (a
/// running row's `status_at` is its `lease_until`).
pub const RECLAIM_SELECT: &str =
    "SELECT id, attempts, max_attempts, cancel_requested, COALESCE(lease_owner, ''), \
     lease_expiries, lease_ms, concurrency_key IS NOT NULL \
     FROM job_queue FORCE INDEX (job_queue_status_at) \
     WHERE status = 'running' AND status_at < UTC_TIMESTAMP(6) \
     ORDER BY status_at, id LIMIT ? FOR UPDATE SKIP LOCKED";

/// Pruning's locking read: jobs of one finished status that finished before a cutoff, over
/// the status-time index (a finished row's `status_at` is its `finished_at`).
pub const PRUNE_SELECT: &str = "SELECT id FROM job_queue FORCE INDEX (job_queue_status_at) \
     WHERE status = ? AND status_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND \
     ORDER BY status_at, id LIMIT ? FOR UPDATE SKIP LOCKED";

/// Whether `tick` came while the previous tick's job (in `status`, finished at `finished`)
/// was unfinished, so that a kind without `overlap` skips it: the job is still waiting or
/// running, or it finished after the tick's time. The second decides a tick that a pass
/// sees only after the job finished (a pass that ran late): it is skipped as it would have
/// been by a pass on time, so the outcome does not depend on when the passes run.
pub(crate) fn overlaps(tick: NaiveDateTime, status: &str, finished: Option<NaiveDateTime>) -> bool {
    matches!(status, "scheduled" | "ready" | "blocked" | "running")
        || finished.is_some_and(|f| f > tick)
}

impl Store {
    /// [`Store::reclaim_with`] with the default bound of [`DEFAULT_MAX_LEASE_EXPIRIES`]
    /// expired leases per job.
    pub async fn reclaim(&self, limit: usize) -> Result<Reclaimed> {
        self.reclaim_with(limit, DEFAULT_MAX_LEASE_EXPIRIES).await
    }

    /// Takes back up to `limit` jobs whose lease expired, and counts the expiry in the
    /// job's `lease_expiries`:
    /// - to `cancelled` when a cancel was pending;
    /// - to `failed` when that was the last attempt;
    /// - to `failed` when this is the `max_lease_expiries`th expiry of the job: a job whose
    ///   worker crashed or stalled that often is taken to be what crashes them (a poison
    ///   job), and is not run again;
    /// - otherwise back to `ready` at once after a first expiry (a crashed or killed worker
    ///   is routine), and to `scheduled` after a later one, due after `lease × (2^(n-1) - 1)`
    ///   (±20 %, at most an hour) for the `n`th: 1, 3, 7... leases, so that a job that keeps
    ///   killing workers does not go round the fleet at full speed.
    ///
    /// Attempts are kept either way. Rows that another process is reclaiming are skipped.
    pub async fn reclaim_with(&self, limit: usize, max_lease_expiries: u32) -> Result<Reclaimed> {
        on_postgres!(self, maintenance::reclaim_with(limit, max_lease_expiries));
        let max_lease_expiries = max_lease_expiries.max(1);
        transaction!(self, |conn| {
            let rows = sqlx::query(RECLAIM_SELECT)
                .bind(limit as u64)
                .fetch_all(&mut *conn)
                .await?;
            let mut out = Reclaimed::default();
            for r in &rows {
                let (id, attempts, max, cancel): (u64, u32, u32, bool) =
                    (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
                let owner = text(r, 4)?;
                let (expiries, lease_ms): (u32, u32) = (r.try_get(5)?, r.try_get(6)?);
                let expiry = expiries.saturating_add(1);
                if cancel {
                    out.cancelled.push(id);
                } else if attempts >= max {
                    out.failed.push((id, attempts, owner));
                } else if expiry >= max_lease_expiries {
                    out.poison.push((id, attempts, owner));
                } else if expiry == 1 {
                    out.ready.push((id, attempts, owner));
                } else {
                    let delay = expiry_delay(Duration::from_millis(lease_ms.into()), expiry);
                    out.delayed
                        .push((id, attempts, owner, crate::retry::jitter(delay, 0.2)));
                }
            }
            const GUARD: &str = "AND status = 'running' AND lease_until < UTC_TIMESTAMP(6)";
            // Every SET reads `lease_expiries` and `lease_owner` before they are assigned.
            const COUNT: &str =
                "lease_expiries = lease_expiries + 1, lease_owner = NULL, lease_until = NULL, \
                 updated_at = UTC_TIMESTAMP(6)";
            let ready: Vec<u64> = out.ready.iter().map(|r| r.0).collect();
            let failed: Vec<u64> = out.failed.iter().map(|r| r.0).collect();
            let poison: Vec<u64> = out.poison.iter().map(|r| r.0).collect();
            let updates = [
                (
                    &ready,
                    "status = 'ready', last_error = LEFT(CONCAT('lease of ', COALESCE(lease_owner, '?'), \
                     ' expired during attempt ', attempts, '; taken back', \
                     COALESCE(CONCAT('; previous error: ', last_error), '')), 16000)",
                ),
                (
                    &failed,
                    "status = 'failed', finished_at = UTC_TIMESTAMP(6), last_error = LEFT(CONCAT('lease of ', \
                     COALESCE(lease_owner, '?'), ' expired during the last attempt (', attempts, ' of ', max_attempts, ')', \
                     COALESCE(CONCAT('; previous error: ', last_error), '')), 16000)",
                ),
                (
                    &poison,
                    "status = 'failed', finished_at = UTC_TIMESTAMP(6), last_error = LEFT(CONCAT('lease expired ', \
                     lease_expiries + 1, ' times (the last during attempt ', attempts, ', held by ', \
                     COALESCE(lease_owner, '?'), '): the job may be crashing or stalling the workers that run it; \
                     not run again', COALESCE(CONCAT('; previous error: ', last_error), '')), 16000)",
                ),
                (
                    &out.cancelled,
                    "status = 'cancelled', finished_at = UTC_TIMESTAMP(6), \
                     last_error = 'cancelled on request; its worker stopped renewing the lease'",
                ),
            ];
            // The lost attempt goes into the job's history, first in each SET (it reads
            // `lease_owner` before it is cleared).
            let log = super::outcome::log_attempt(
                "'lease_expired'",
                "'the lease expired: its worker crashed, was stopped or stalled'",
            );
            for (ids, set) in updates {
                if ids.is_empty() {
                    continue;
                }
                let sql = format!(
                    "UPDATE job_queue SET {log}, {set}, {COUNT} WHERE id IN ({}) {GUARD}",
                    placeholders(padded_len(ids.len()))
                );
                // Rare (only after a crash or a lost lease), and twelve texts in all: not
                // worth a place in the connection's statement cache.
                let mut q = sqlx::query(&sql).persistent(false);
                for id in padded(ids) {
                    q = q.bind(id);
                }
                let matched = q.execute(&mut *conn).await?.rows_affected();
                if matched != ids.len() as u64 {
                    return Ok((Reclaimed::default(), false));
                }
            }
            // Each delayed job has a delay of its own: one statement each (they are rare).
            for (id, _, _, delay) in &out.delayed {
                let sql = format!(
                    "UPDATE job_queue SET {log}, status = 'scheduled', \
                     run_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
                     last_error = LEFT(CONCAT('lease of ', COALESCE(lease_owner, '?'), \
                     ' expired during attempt ', attempts, ' (expiry ', lease_expiries + 1, ' of at most ', ?, \
                     '); taken back with a delay', COALESCE(CONCAT('; previous error: ', last_error), '')), 16000), \
                     {COUNT} WHERE id = ? {GUARD}"
                );
                let matched = sqlx::query(&sql)
                    .bind(micros(*delay))
                    .bind(max_lease_expiries - 1)
                    .bind(id)
                    .execute(&mut *conn)
                    .await?
                    .rows_affected();
                if matched != 1 {
                    return Ok((Reclaimed::default(), false));
                }
            }
            // The slots of the claims taken back are free again, in this transaction. Jobs
            // without a concurrency key hold none: the tables of the limits are left alone
            // when no such job was taken back, so that a worker user without rights on them
            // (kept from a release before limits) still takes back unlimited jobs.
            let mut claims: Vec<(u64, u32)> = Vec::new();
            for r in &rows {
                if r.try_get::<bool, _>(7)? {
                    claims.push((r.try_get(0)?, r.try_get(1)?));
                }
            }
            if !claims.is_empty() {
                super::limits::release_claims(conn, &claims).await?;
            }
            Ok((out, true))
        })
    }

    /// Deletes up to `limit` jobs with `status` that finished more than `older_than_us`
    /// microseconds ago. Rows locked by anyone else are skipped.
    pub(crate) async fn prune_batch(
        &self,
        status: JobStatus,
        older_than_us: i64,
        limit: usize,
    ) -> Result<u64> {
        on_postgres!(self, maintenance::prune_batch(status, older_than_us, limit));
        transaction!(self, |conn| {
            // Pruning runs once a minute: its statements are prepared for one use each, so
            // that they take no place in the connection's statement cache.
            let ids: Vec<u64> = sqlx::query_scalar(PRUNE_SELECT)
                .persistent(false)
                .bind(status.as_str())
                .bind(older_than_us)
                .bind(limit as u64)
                .fetch_all(&mut *conn)
                .await?;
            if ids.is_empty() {
                return Ok((0, false));
            }
            let sql = format!(
                "DELETE FROM job_queue WHERE id IN ({}) AND status = ?",
                placeholders(padded_len(ids.len()))
            );
            let mut q = sqlx::query(&sql).persistent(false);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            let n = q
                .bind(status.as_str())
                .execute(&mut *conn)
                .await?
                .rows_affected();
            Ok((n, true))
        })
    }

    /// The queues an operator has paused.
    pub(crate) async fn paused_queues(&self) -> Result<Vec<String>> {
        on_postgres!(self, maintenance::paused_queues());
        let rows = on_connection!(self, |conn| sqlx::query(
            "SELECT queue FROM job_queue_pause"
        )
        .fetch_all(conn))
        .await?;
        rows.iter()
            .map(|r| text(r, 0).map_err(Error::from))
            .collect()
    }

    /// One scheduler pass over the periodic kind `kind`, in one short transaction with the
    /// kind's `job_queue_cron` row locked (SKIP LOCKED: a node that finds it locked leaves
    /// the pass to the node holding it).
    ///
    /// A kind without a row gets one starting at `now`, and no tick; a paused kind
    /// (`paused_at` set) gets no tick and keeps its row as it is. Otherwise `due` turns
    /// the recorded `last_tick` into the ticks to deal with; each is enqueued (`job_of`
    /// builds its job), or skipped when `overlap` is off and the previous tick's job is
    /// still scheduled, ready or running. The row then moves to the last of them, fenced by
    /// the `last_tick` read, so a tick is enqueued by exactly one transaction, ever.
    pub(crate) async fn schedule_ticks(
        &self,
        kind: &str,
        now: NaiveDateTime,
        overlap: bool,
        due: impl Fn(NaiveDateTime) -> Vec<NaiveDateTime>,
        job_of: impl Fn(NaiveDateTime) -> NewJob,
    ) -> Result<TickPass> {
        on_postgres!(
            self,
            maintenance::schedule_ticks(kind, now, overlap, due, job_of)
        );
        let pass: Result<Result<TickPass>> = transaction!(self, |conn| {
            let row: Option<(NaiveDateTime, Option<u64>, bool)> = sqlx::query_as(
                "SELECT last_tick, last_job_id, paused_at IS NOT NULL FROM job_queue_cron \
                 WHERE kind = ? FOR UPDATE SKIP LOCKED",
            )
            .bind(kind)
            .fetch_optional(&mut *conn)
            .await?;
            let Some((last, mut last_job, paused)) = row else {
                // No row, or another node holds it. A plain read tells which without waiting
                // for that node's lock (an insert would wait for it, to check the key).
                let exists: bool = sqlx::query_scalar(
                    "SELECT EXISTS(SELECT 1 FROM job_queue_cron WHERE kind = ?)",
                )
                .bind(kind)
                .fetch_one(&mut *conn)
                .await?;
                if exists {
                    return Ok((Ok(TickPass::Busy), false));
                }
                let created = sqlx::query(
                    "INSERT INTO job_queue_cron (kind, last_tick, last_job_id, updated_at) \
                     VALUES (?, ?, NULL, UTC_TIMESTAMP(6))",
                )
                .bind(kind)
                .bind(now)
                .execute(&mut *conn)
                .await;
                return match created {
                    Ok(_) => Ok((Ok(TickPass::Started(now)), true)),
                    Err(e) if is_key_conflict(&e) => Ok((Ok(TickPass::Busy), false)),
                    Err(e) => Err(e),
                };
            };
            if paused {
                // Read with the row locked: a pause committed before this pass holds it
                // back. The resume moves `last_tick` to its own time.
                return Ok((Ok(TickPass::Paused), false));
            }
            let ticks = due(last);
            let Some(&end) = ticks.last() else {
                return Ok((
                    Ok(TickPass::Advanced {
                        last_tick: last,
                        new: Vec::new(),
                        skipped: 0,
                    }),
                    false,
                ));
            };
            let (mut new, mut skipped) = (Vec::new(), 0);
            for &tick in &ticks {
                if !overlap {
                    if let Some(id) = last_job {
                        // The latest committed state (READ COMMITTED), or this
                        // transaction's own insert of the tick before.
                        let previous: Option<(String, Option<NaiveDateTime>)> = sqlx::query_as(
                            "SELECT CAST(status AS CHAR), finished_at FROM job_queue WHERE id = ?",
                        )
                        .bind(id)
                        .fetch_optional(&mut *conn)
                        .await?;
                        if previous
                            .is_some_and(|(status, finished)| overlaps(tick, &status, finished))
                        {
                            skipped += 1;
                            continue;
                        }
                    }
                }
                match insert(conn, &job_of(tick)).await {
                    Ok(Enqueued::New(id)) => {
                        new.push(id);
                        last_job = Some(id);
                    }
                    // Enqueued by hand, or by a node of an older release.
                    Ok(Enqueued::Duplicate { id, .. }) => last_job = Some(id),
                    Err(Error::Database(e)) => return Err(e),
                    Err(other) => return Ok((Err(other), false)),
                }
            }
            let moved = sqlx::query(
                "UPDATE job_queue_cron SET last_tick = ?, last_job_id = ?, updated_at = UTC_TIMESTAMP(6) \
                 WHERE kind = ? AND last_tick = ?",
            )
            .bind(end)
            .bind(last_job)
            .bind(kind)
            .bind(last)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if moved != 1 {
                return Ok((Ok(TickPass::Busy), false));
            }
            Ok((
                Ok(TickPass::Advanced {
                    last_tick: end,
                    new,
                    skipped,
                }),
                true,
            ))
        });
        pass?
    }

    /// Makes up to `limit` due `scheduled` jobs `ready`. Returns how many.
    pub async fn promote(&self, limit: usize) -> Result<u64> {
        on_postgres!(self, maintenance::promote(limit));
        // A plain read first: most passes find nothing due, and a plain read locks nothing
        // and needs no transaction.
        let due: bool = on_connection!(self, |conn| sqlx::query_scalar(PROMOTE_PROBE,)
            .fetch_one(&mut *conn))
        .await?;
        if !due {
            return Ok(0);
        }
        transaction!(self, |conn| {
            let ids: Vec<u64> = sqlx::query_scalar(PROMOTE_SELECT)
                .bind(limit as u64)
                .fetch_all(&mut *conn)
                .await?;
            if ids.is_empty() {
                return Ok((0, false));
            }
            let sql = format!(
                "UPDATE job_queue SET status = 'ready', updated_at = UTC_TIMESTAMP(6) \
                 WHERE id IN ({}) AND status = 'scheduled'",
                placeholders(padded_len(ids.len()))
            );
            let mut q = sqlx::query(&sql);
            for id in padded(&ids) {
                q = q.bind(id);
            }
            let matched = q.execute(&mut *conn).await?.rows_affected();
            if matched != ids.len() as u64 {
                return Ok((0, false));
            }
            Ok((matched, true))
        })
    }
}

/// The maintenance turn's take-or-renew: `holder` takes the turn when it is free (released,
/// or expired), or renews it when it holds it already; either way it is theirs for `ttl`
/// from now. `taken_at` moves only when the holder changes (SET runs left to right, so it
/// reads the holder before this statement changes it).
pub(crate) const TAKE_MAINTENANCE_TURN: &str = "UPDATE job_queue_turn \
     SET taken_at = IF(holder <=> ?, taken_at, UTC_TIMESTAMP(6)), holder = ?, \
     expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
     WHERE name = 'maintenance' AND (holder <=> ? OR holder IS NULL OR expires_at <= UTC_TIMESTAMP(6))";

impl Store {
    /// Takes or renews the maintenance turn for `owner`, for `ttl` from now. True when
    /// `owner` holds it now.
    pub(crate) async fn take_maintenance_turn(&self, owner: &str, ttl: Duration) -> Result<bool> {
        on_postgres!(self, maintenance::take_maintenance_turn(owner, ttl));
        let us = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
        let taken = on_connection!(self, |conn| sqlx::query(TAKE_MAINTENANCE_TURN)
            .bind(owner)
            .bind(owner)
            .bind(us)
            .bind(owner)
            .execute(&mut *conn))
        .await?
        .rows_affected();
        Ok(taken == 1)
    }

    /// Gives the maintenance turn up, if `owner` holds it, so that another worker takes it
    /// at its next try instead of after the turn expires.
    pub(crate) async fn release_maintenance_turn(&self, owner: &str) -> Result<()> {
        on_postgres!(self, maintenance::release_maintenance_turn(owner));
        on_connection!(self, |conn| sqlx::query(
            "UPDATE job_queue_turn SET holder = NULL, expires_at = UTC_TIMESTAMP(6) \
             WHERE name = 'maintenance' AND holder = ?",
        )
        .bind(owner)
        .execute(&mut *conn))
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_whose_lease_keeps_expiring_comes_back_later_each_time() {
        let lease = Duration::from_secs(30);
        let waits: Vec<u64> = (1..=5).map(|n| expiry_delay(lease, n).as_secs()).collect();
        assert_eq!(waits, [0, 30, 90, 210, 450]);
        assert_eq!(expiry_delay(lease, 40), Duration::from_secs(3600));
    }

    #[test]
    fn a_tick_overlaps_a_job_unfinished_or_finished_after_it() {
        let at = |s: u32| {
            chrono::NaiveDate::from_ymd_opt(2026, 1, 1)
                .unwrap()
                .and_hms_opt(0, 0, s)
                .unwrap()
        };
        for status in ["scheduled", "ready", "blocked", "running"] {
            assert!(overlaps(at(5), status, None), "{status}");
        }
        // Finished after the tick's time: the tick came while it ran.
        assert!(overlaps(at(1), "done", Some(at(3))));
        assert!(overlaps(at(2), "failed", Some(at(3))));
        // Finished at or before the tick's time: the tick runs.
        assert!(!overlaps(at(3), "done", Some(at(3))));
        assert!(!overlaps(at(4), "cancelled", Some(at(3))));
        assert!(!overlaps(at(4), "done", None));
    }
}
