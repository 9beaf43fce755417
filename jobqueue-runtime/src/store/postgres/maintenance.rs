//! Maintenance on PostgreSQL: promotion, reclaim, pruning, periodic ticks and the maintenance
//! turn, with the guarantees of the MySQL functions of the same names (`store/maintenance.rs`).
//! What differs:
//! - Promotion and pruning are one statement each: an `UPDATE` or `DELETE` of
//!   `id = ANY(ARRAY(<locking read>))`. The locking read (`FOR UPDATE SKIP LOCKED`, over the
//!   `(status, status_at, id)` index) runs once, as an init plan, and its ids are then found
//!   by primary key. (A join to a `WITH` of the batch lets the planner hash the whole
//!   status's rows instead; an `IN (subquery)` may run the locking read again.) The outer
//!   statement does not repeat MySQL's `AND status = ...`: the rows are locked by the same
//!   statement, whose locking read checked its `WHERE` on their latest versions, so nothing
//!   can have changed them; and the repeat let the planner match the ids along the
//!   `(status, status_at, id)` index, one array search per entry of the status (seconds for
//!   a batch of 500 among 30,000 jobs on a table not yet analyzed, against milliseconds by
//!   primary key). PostgreSQL needs no `FORCE INDEX`: the plans are checked by
//!   `postgres_maintenance_plans`.
//! - Id lists are bound as one array (`= ANY($n)`), not padded `IN` lists.
//! - `rows_affected` counts rows changed, not matched: every fenced `UPDATE` here changes
//!   each row it matches, so the expected counts are those of MySQL.
//! - `attempt_log` is a JSON array held as `TEXT`; it is appended to through `jsonb`.
//! - A periodic kind's first row is inserted with `ON CONFLICT (kind) DO NOTHING`: on
//!   PostgreSQL a duplicate-key error would abort the transaction.

use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::postgres::PgPool;
use sqlx::Row;

use super::{db_id, id_of, micros, Store};
use crate::error::{Error, Result};
use crate::model::{Enqueued, JobStatus, NewJob, Reclaimed, TickPass};
use crate::MAX_ATTEMPT_HISTORY;

/// Whether any scheduled job is due (the MySQL `PROMOTE_PROBE`).
pub const PG_PROMOTE_PROBE: &str = "SELECT EXISTS(SELECT 1 FROM job_queue \
     WHERE status = 'scheduled' AND status_at <= job_queue_now())";

/// Promotion: locks up to `$1` due scheduled jobs, oldest due first, skipping rows locked
/// elsewhere, and makes them ready (the MySQL `PROMOTE_SELECT` and its `UPDATE`).
pub const PG_PROMOTE: &str = "UPDATE job_queue SET status = 'ready', updated_at = job_queue_now() \
     WHERE id = ANY(ARRAY(\
       SELECT id FROM job_queue \
       WHERE status = 'scheduled' AND status_at <= job_queue_now() \
       ORDER BY status_at, id LIMIT $1 FOR UPDATE SKIP LOCKED))";

/// Reclaim's locking read (the MySQL `RECLAIM_SELECT`).
pub const PG_RECLAIM_SELECT: &str =
    "SELECT id, attempts, max_attempts, cancel_requested, COALESCE(lease_owner, ''), \
     lease_expiries, lease_ms, concurrency_key IS NOT NULL \
     FROM job_queue \
     WHERE status = 'running' AND status_at < job_queue_now() \
     ORDER BY status_at, id LIMIT $1 FOR UPDATE SKIP LOCKED";

/// Pruning: locks up to `$3` jobs of status `$1` finished more than `$2` µs ago, oldest
/// first, skipping rows locked elsewhere, and deletes them (the MySQL `PRUNE_SELECT` and its
/// `DELETE`).
pub const PG_PRUNE: &str = "DELETE FROM job_queue \
     WHERE id = ANY(ARRAY(\
       SELECT id FROM job_queue \
       WHERE status = $1 AND status_at < job_queue_now() - $2 * INTERVAL '1 microsecond' \
       ORDER BY status_at, id LIMIT $3 FOR UPDATE SKIP LOCKED))";

/// The maintenance turn's take-or-renew (the MySQL `TAKE_MAINTENANCE_TURN`). Every `SET`
/// expression reads the row as it was before the statement, so `taken_at` compares the old
/// holder.
pub(crate) const PG_TAKE_MAINTENANCE_TURN: &str = "UPDATE job_queue_turn \
     SET taken_at = CASE WHEN holder IS NOT DISTINCT FROM $1::text THEN taken_at ELSE job_queue_now() END, \
     holder = $1, expires_at = job_queue_now() + $2 * INTERVAL '1 microsecond' \
     WHERE name = 'maintenance' \
     AND (holder IS NOT DISTINCT FROM $1::text OR holder IS NULL OR expires_at <= job_queue_now())";

/// `attempt_log = ...`: the lost attempt appended to the job's history, the oldest entry
/// dropped past [`MAX_ATTEMPT_HISTORY`] (the MySQL `log_attempt`, through `jsonb`). It reads
/// `lease_owner` and `claimed_at` as they were before the statement.
fn log_attempt(outcome: &str, error: &str) -> String {
    format!(
        "attempt_log = (SELECT (CASE WHEN jsonb_array_length(l) >= {MAX_ATTEMPT_HISTORY} \
             THEN l - 0 ELSE l END \
           || jsonb_build_array(jsonb_build_object('attempt', attempts, \
             'started_at', to_char(claimed_at, 'YYYY-MM-DD HH24:MI:SS.US'), \
             'ended_at', to_char(job_queue_now(), 'YYYY-MM-DD HH24:MI:SS.US'), \
             'worker', lease_owner, 'outcome', {outcome}::text, 'error', {error}::text)))::text \
           FROM (SELECT COALESCE(attempt_log, '[]')::jsonb AS l) AS log)"
    )
}

/// See the MySQL `reclaim_with`.
pub(crate) async fn reclaim_with(
    store: &Store,
    pool: &PgPool,
    limit: usize,
    max_lease_expiries: u32,
) -> Result<Reclaimed> {
    let max_lease_expiries = max_lease_expiries.max(1);
    pg_transaction!(store, pool, |conn| {
        let rows = sqlx::query(PG_RECLAIM_SELECT)
            .bind(limit as i64)
            .fetch_all(&mut *conn)
            .await?;
        let mut out = Reclaimed::default();
        for r in &rows {
            let id = id_of(r.try_get(0)?);
            let attempts = u32_of(r.try_get(1)?);
            let max = u32_of(r.try_get(2)?);
            let cancel: bool = r.try_get(3)?;
            let owner: String = r.try_get(4)?;
            let expiries = u32_of(r.try_get(5)?);
            let lease_ms = u32_of(r.try_get(6)?);
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
                let delay = crate::store::maintenance::expiry_delay(
                    Duration::from_millis(lease_ms.into()),
                    expiry,
                );
                out.delayed
                    .push((id, attempts, owner, crate::retry::jitter(delay, 0.2)));
            }
        }
        const GUARD: &str = "AND status = 'running' AND lease_until < job_queue_now()";
        // Every SET expression reads the row as it was before the statement.
        const COUNT: &str =
            "lease_expiries = lease_expiries + 1, lease_owner = NULL, lease_until = NULL, \
             updated_at = job_queue_now()";
        const PREVIOUS: &str = "COALESCE('; previous error: ' || last_error, '')";
        let ready: Vec<i64> = out.ready.iter().map(|r| db_id(r.0)).collect();
        let failed: Vec<i64> = out.failed.iter().map(|r| db_id(r.0)).collect();
        let poison: Vec<i64> = out.poison.iter().map(|r| db_id(r.0)).collect();
        let cancelled: Vec<i64> = out.cancelled.iter().map(|&id| db_id(id)).collect();
        let updates = [
            (
                &ready,
                format!(
                    "status = 'ready', last_error = left('lease of ' || COALESCE(lease_owner, '?') \
                     || ' expired during attempt ' || attempts || '; taken back' || {PREVIOUS}, 16000)"
                ),
            ),
            (
                &failed,
                format!(
                    "status = 'failed', finished_at = job_queue_now(), last_error = left('lease of ' \
                     || COALESCE(lease_owner, '?') || ' expired during the last attempt (' || attempts \
                     || ' of ' || max_attempts || ')' || {PREVIOUS}, 16000)"
                ),
            ),
            (
                &poison,
                format!(
                    "status = 'failed', finished_at = job_queue_now(), last_error = left('lease expired ' \
                     || (lease_expiries + 1) || ' times (the last during attempt ' || attempts \
                     || ', held by ' || COALESCE(lease_owner, '?') || '): the job may be crashing or \
                     stalling the workers that run it; not run again' || {PREVIOUS}, 16000)"
                ),
            ),
            (
                &cancelled,
                "status = 'cancelled', finished_at = job_queue_now(), \
                 last_error = 'cancelled on request; its worker stopped renewing the lease'"
                    .to_owned(),
            ),
        ];
        let log = log_attempt(
            "'lease_expired'",
            "'the lease expired: its worker crashed, was stopped or stalled'",
        );
        for (ids, set) in &updates {
            if ids.is_empty() {
                continue;
            }
            let sql =
                format!("UPDATE job_queue SET {log}, {set}, {COUNT} WHERE id = ANY($1) {GUARD}");
            // Rare (only after a crash or a lost lease): not kept prepared.
            let changed = sqlx::query(&sql)
                .persistent(false)
                .bind(*ids)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            if changed != ids.len() as u64 {
                return Ok((Reclaimed::default(), false));
            }
        }
        // Each delayed job has a delay of its own: one statement each (they are rare).
        for (id, _, _, delay) in &out.delayed {
            let sql = format!(
                "UPDATE job_queue SET {log}, status = 'scheduled', \
                 run_at = job_queue_now() + $1 * INTERVAL '1 microsecond', \
                 last_error = left('lease of ' || COALESCE(lease_owner, '?') \
                 || ' expired during attempt ' || attempts || ' (expiry ' || (lease_expiries + 1) \
                 || ' of at most ' || $2::bigint || '); taken back with a delay' || {PREVIOUS}, 16000), \
                 {COUNT} WHERE id = $3 {GUARD}"
            );
            let changed = sqlx::query(&sql)
                .persistent(false)
                .bind(micros(*delay))
                .bind(i64::from(max_lease_expiries - 1))
                .bind(db_id(*id))
                .execute(&mut *conn)
                .await?
                .rows_affected();
            if changed != 1 {
                return Ok((Reclaimed::default(), false));
            }
        }
        // The slots of the claims taken back are free again, in this transaction; jobs
        // without a concurrency key hold none, and the limits' tables are left alone when
        // no such job was taken back (as on MySQL).
        let mut claims: Vec<(u64, u32)> = Vec::new();
        for r in &rows {
            if r.try_get::<bool, _>(7)? {
                claims.push((id_of(r.try_get(0)?), u32_of(r.try_get(1)?)));
            }
        }
        if !claims.is_empty() {
            super::limits::release_claims(conn, &claims).await?;
        }
        Ok((out, true))
    })
}

/// See the MySQL `prune_batch`: one statement ([`PG_PRUNE`]), in autocommit.
pub(crate) async fn prune_batch(
    store: &Store,
    pool: &PgPool,
    status: JobStatus,
    older_than_us: i64,
    limit: usize,
) -> Result<u64> {
    let done = pg_autocommit!(store, pool, |conn| sqlx::query(PG_PRUNE)
        .persistent(false)
        .bind(status.as_str())
        .bind(older_than_us)
        .bind(limit as i64)
        .execute(&mut *conn))?;
    Ok(done.rows_affected())
}

/// See the MySQL `paused_queues`.
pub(crate) async fn paused_queues(store: &Store, pool: &PgPool) -> Result<Vec<String>> {
    pg_autocommit!(store, pool, |conn| sqlx::query_scalar(
        "SELECT queue FROM job_queue_pause"
    )
    .fetch_all(&mut *conn))
}

/// See the MySQL `schedule_ticks`. The first row of a kind is inserted with
/// `ON CONFLICT (kind) DO NOTHING` (no duplicate-key error, which would abort the
/// transaction on PostgreSQL); a conflict there is another node's row, as on MySQL.
pub(crate) async fn schedule_ticks(
    store: &Store,
    pool: &PgPool,
    kind: &str,
    now: NaiveDateTime,
    overlap: bool,
    due: impl Fn(NaiveDateTime) -> Vec<NaiveDateTime>,
    job_of: impl Fn(NaiveDateTime) -> NewJob,
) -> Result<TickPass> {
    let pass: Result<Result<TickPass>> = pg_transaction!(store, pool, |conn| {
        let row: Option<(NaiveDateTime, Option<i64>, bool)> = sqlx::query_as(
            "SELECT last_tick, last_job_id, paused_at IS NOT NULL FROM job_queue_cron \
             WHERE kind = $1 FOR UPDATE SKIP LOCKED",
        )
        .bind(kind)
        .fetch_optional(&mut *conn)
        .await?;
        let Some((last, last_job, paused)) = row else {
            // No row, or another node holds it: a plain read tells which without waiting.
            let exists: bool =
                sqlx::query_scalar("SELECT EXISTS(SELECT 1 FROM job_queue_cron WHERE kind = $1)")
                    .bind(kind)
                    .fetch_one(&mut *conn)
                    .await?;
            if exists {
                return Ok((Ok(TickPass::Busy), false));
            }
            let created = sqlx::query(
                "INSERT INTO job_queue_cron (kind, last_tick, last_job_id, updated_at) \
                 VALUES ($1, $2, NULL, job_queue_now()) ON CONFLICT (kind) DO NOTHING",
            )
            .bind(kind)
            .bind(now)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            return Ok(if created == 1 {
                (Ok(TickPass::Started(now)), true)
            } else {
                (Ok(TickPass::Busy), false)
            });
        };
        let mut last_job = last_job.map(id_of);
        if paused {
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
                    // The latest committed state (READ COMMITTED), or this transaction's
                    // own insert of the tick before.
                    let previous: Option<(String, Option<NaiveDateTime>)> =
                        sqlx::query_as("SELECT status, finished_at FROM job_queue WHERE id = $1")
                            .bind(db_id(id))
                            .fetch_optional(&mut *conn)
                            .await?;
                    if previous.is_some_and(|(status, finished)| {
                        crate::store::maintenance::overlaps(tick, &status, finished)
                    }) {
                        skipped += 1;
                        continue;
                    }
                }
            }
            match super::enqueue::insert(conn, &job_of(tick)).await {
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
            "UPDATE job_queue_cron SET last_tick = $1, last_job_id = $2, updated_at = job_queue_now() \
             WHERE kind = $3 AND last_tick = $4",
        )
        .bind(end)
        .bind(last_job.map(db_id))
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

/// See the MySQL `promote`: a plain probe, then one statement ([`PG_PROMOTE`]).
pub(crate) async fn promote(store: &Store, pool: &PgPool, limit: usize) -> Result<u64> {
    let due: bool = pg_autocommit!(store, pool, |conn| sqlx::query_scalar(PG_PROMOTE_PROBE)
        .fetch_one(&mut *conn))?;
    if !due {
        return Ok(0);
    }
    let done = pg_autocommit!(store, pool, |conn| sqlx::query(PG_PROMOTE)
        .bind(limit as i64)
        .execute(&mut *conn))?;
    Ok(done.rows_affected())
}

/// See the MySQL `take_maintenance_turn`.
pub(crate) async fn take_maintenance_turn(
    store: &Store,
    pool: &PgPool,
    owner: &str,
    ttl: Duration,
) -> Result<bool> {
    let taken = pg_autocommit!(store, pool, |conn| sqlx::query(PG_TAKE_MAINTENANCE_TURN)
        .bind(owner)
        .bind(micros(ttl))
        .execute(&mut *conn))?;
    Ok(taken.rows_affected() == 1)
}

/// See the MySQL `release_maintenance_turn`.
pub(crate) async fn release_maintenance_turn(
    store: &Store,
    pool: &PgPool,
    owner: &str,
) -> Result<()> {
    pg_autocommit!(store, pool, |conn| sqlx::query(
        "UPDATE job_queue_turn SET holder = NULL, expires_at = job_queue_now() \
         WHERE name = 'maintenance' AND holder = $1",
    )
    .bind(owner)
    .execute(&mut *conn))?;
    Ok(())
}

/// An unsigned 32-bit column (a `BIGINT` with a CHECK) as `u32`.
fn u32_of(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}
