//! Operator queries on PostgreSQL: cancel, retry, pause, resume, counts, figures and what
//! pruning would delete. The same statements as `store/admin.rs`; what differs is said at
//! each function.

use chrono::NaiveDateTime;
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Row;

use super::dashboard::{bind_all, bulk, conditions, micros_between, numbered, where_clause};
use super::{db_id, id_of};
use crate::error::Result;
use crate::model::{BulkProgress, CancelOutcome, JobFilter, JobStatus, QueueStats, RunningJob};
use crate::store::dashboard::{Arg, BulkBound};
use crate::store::Store;

/// An operator's retry is a fresh start (see the MySQL `RETRY_SET`).
pub(crate) const RETRY_SET: &str = "UPDATE job_queue SET status = 'ready', \
     run_at = job_queue_now(), max_attempts = GREATEST(max_attempts, attempts + 1), \
     cancel_requested = FALSE, lease_expiries = 0, unrunnable_since = NULL, snoozes = 0, \
     lease_owner = NULL, lease_until = NULL, finished_at = NULL, updated_at = job_queue_now()";

/// See the MySQL `cancel`: the same order of locks (a blocked job's waiting rows, then the
/// job's row), the same conflict retries.
pub(crate) async fn cancel(store: &Store, pool: &PgPool, id: u64) -> Result<Option<CancelOutcome>> {
    let status: Option<String> = pg_transaction!(store, pool, |conn| {
        let (status, unblocked) = unblock_and_lock(&mut *conn, id).await?;
        match status.as_deref() {
            Some("scheduled" | "ready" | "blocked") => {
                sqlx::query(
                    "UPDATE job_queue SET status = 'cancelled', finished_at = job_queue_now(), \
                     updated_at = job_queue_now(), \
                     last_error = 'cancelled by an operator before it ran' WHERE id = $1",
                )
                .bind(db_id(id))
                .execute(&mut *conn)
                .await?;
                if status.as_deref() == Some("blocked") && !unblocked {
                    // Blocked since the read: its waiting row goes with it.
                    sqlx::query("DELETE FROM job_queue_blocked WHERE job_id = $1")
                        .bind(db_id(id))
                        .execute(&mut *conn)
                        .await?;
                }
            }
            Some("running") => {
                sqlx::query(
                    "UPDATE job_queue SET cancel_requested = TRUE, updated_at = job_queue_now() \
                     WHERE id = $1",
                )
                .bind(db_id(id))
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
        JobStatus::Scheduled | JobStatus::Ready | JobStatus::Blocked => CancelOutcome::Cancelled,
        JobStatus::Running => CancelOutcome::Requested,
        other => CancelOutcome::AlreadyFinished(other),
    }))
}

/// See the MySQL `retry`. `rows_affected` counts rows changed here, rows matched on MySQL:
/// the same under the status guard, which every matched row leaves.
pub(crate) async fn retry(_store: &Store, pool: &PgPool, id: u64) -> Result<u64> {
    Ok(sqlx::query(&format!(
        "{RETRY_SET} WHERE id = $1 AND status IN ('failed', 'cancelled')"
    ))
    .bind(db_id(id))
    .execute(pool)
    .await?
    .rows_affected())
}

/// See the MySQL `retry_matching`.
pub(crate) async fn retry_matching(
    store: &Store,
    pool: &PgPool,
    filter: &JobFilter,
    bound: BulkBound,
) -> Result<BulkProgress> {
    bulk(
        store,
        pool,
        RETRY_SET,
        filter,
        &[JobStatus::Failed, JobStatus::Cancelled],
        bound,
    )
    .await
}

/// See the MySQL `counts`.
pub(crate) async fn counts(
    _store: &Store,
    pool: &PgPool,
    queue: Option<&str>,
) -> Result<Vec<(JobStatus, u64)>> {
    let rows = match queue {
        Some(q) => {
            sqlx::query("SELECT status, COUNT(*) FROM job_queue WHERE queue = $1 GROUP BY status")
                .bind(q)
                .fetch_all(pool)
                .await?
        }
        None => {
            sqlx::query("SELECT status, COUNT(*) FROM job_queue GROUP BY status")
                .fetch_all(pool)
                .await?
        }
    };
    rows.iter()
        .map(|r| {
            let s: String = r.try_get(0)?;
            let n: i64 = r.try_get(1)?;
            Ok((s.parse()?, n.max(0) as u64))
        })
        .collect()
}

/// See the MySQL `pause`. `ON CONFLICT DO NOTHING` where MySQL reads the duplicate-key
/// error: an error would abort a PostgreSQL transaction.
pub(crate) async fn pause(_store: &Store, pool: &PgPool, queue: &str) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO job_queue_pause (queue, paused_at) VALUES ($1, job_queue_now()) \
         ON CONFLICT (queue) DO NOTHING",
    )
    .bind(queue)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// See the MySQL `resume`.
pub(crate) async fn resume(_store: &Store, pool: &PgPool, queue: &str) -> Result<()> {
    sqlx::query("DELETE FROM job_queue_pause WHERE queue = $1")
        .bind(queue)
        .execute(pool)
        .await?;
    Ok(())
}

/// See the MySQL `paused_queues_sorted`.
pub(crate) async fn paused_queues_sorted(_store: &Store, pool: &PgPool) -> Result<Vec<String>> {
    Ok(
        sqlx::query_scalar("SELECT queue::text FROM job_queue_pause ORDER BY queue")
            .fetch_all(pool)
            .await?,
    )
}

/// See the MySQL `prunable`.
pub(crate) async fn prunable(
    _store: &Store,
    pool: &PgPool,
    status: JobStatus,
    older_than_us: i64,
) -> Result<u64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_queue WHERE status = $1 \
         AND status_at < job_queue_now() - $2 * INTERVAL '1 microsecond'",
    )
    .bind(status.as_str())
    .bind(older_than_us)
    .fetch_one(pool)
    .await?;
    Ok(n.max(0) as u64)
}

/// The conditions of a prune over `filter` (see the MySQL `prune_conditions`), with `?`
/// marks.
fn prune_conditions(filter: &JobFilter, older_than_us: i64) -> (Vec<&'static str>, Vec<Arg>) {
    let (mut conds, mut args) = conditions(filter);
    conds.push("status_at < job_queue_now() - ? * INTERVAL '1 microsecond'");
    args.push(Arg::Int(older_than_us.max(0) as u64));
    (conds, args)
}

/// The count of `prunable_matching` on PostgreSQL, with its arguments: a range of
/// `job_queue_status_at (status, status_at, id)`.
pub fn prune_matching_count(filter: &JobFilter, older_than_us: i64) -> (String, Vec<Arg>) {
    let (conds, args) = prune_conditions(filter, older_than_us);
    (
        numbered(&format!(
            "SELECT COUNT(*) FROM job_queue {}",
            where_clause(&conds)
        )),
        args,
    )
}

/// The locking read of one batch of `prune_matching` on PostgreSQL, with its arguments.
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
        numbered(&format!(
            "SELECT id, status_at FROM job_queue {} \
             ORDER BY status_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
            where_clause(&conds)
        )),
        args,
    )
}

/// See the MySQL `prunable_matching`.
pub(crate) async fn prunable_matching(
    _store: &Store,
    pool: &PgPool,
    query: &JobFilter,
    older_than_us: i64,
) -> Result<u64> {
    let (sql, args) = prune_matching_count(query, older_than_us);
    let n: i64 = bind_all(sqlx::query(&sql), &args)
        .fetch_one(pool)
        .await?
        .try_get(0)?;
    Ok(n.max(0) as u64)
}

/// See the MySQL `prune_matching_batch`: the same locking read (SKIP LOCKED), then one
/// `DELETE ... WHERE id = ANY(ids)` that checks the status again.
pub(crate) async fn prune_matching_batch(
    store: &Store,
    pool: &PgPool,
    query: &JobFilter,
    older_than_us: i64,
    from: Option<NaiveDateTime>,
    limit: u64,
) -> Result<(u64, Option<NaiveDateTime>)> {
    let (sql, args) = prune_matching_select(query, older_than_us, from, limit);
    let status = query.status.map(JobStatus::as_str).unwrap_or_default();
    pg_transaction!(store, pool, |conn| {
        let rows = bind_all(sqlx::query(&sql), &args)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<NaiveDateTime, _>(1)?)))
            .collect::<sqlx::Result<Vec<_>>>()?;
        let Some(&(_, last)) = rows.last() else {
            return Ok(((0, None), false));
        };
        let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
        let n = sqlx::query("DELETE FROM job_queue WHERE id = ANY($1) AND status = $2")
            .bind(&ids)
            .bind(status)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        Ok(((n, Some(last)), true))
    })
}

/// See the MySQL `stats`.
pub(crate) async fn stats(store: &Store, pool: &PgPool) -> Result<Vec<QueueStats>> {
    let rows = sqlx::query(
        "SELECT queue::text, status, COUNT(*) FROM job_queue GROUP BY queue, status ORDER BY queue",
    )
    .fetch_all(pool)
    .await?;
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
        let q: String = r.try_get(0)?;
        let status: JobStatus = r.try_get::<String, _>(1)?.parse()?;
        let n: i64 = r.try_get(2)?;
        entry(&mut by_name, q).counts.set(status, n.max(0) as u64);
    }
    for q in paused_queues_sorted(store, pool).await? {
        entry(&mut by_name, q).paused = true;
    }
    let mut out: Vec<QueueStats> = by_name.into_values().collect();
    let figures = format!(
        "SELECT \
           (SELECT {} FROM job_queue WHERE queue = $1 AND status = 'ready'), \
           (SELECT COUNT(*) FROM job_queue WHERE queue = $1 AND status = 'running' \
              AND status_at < job_queue_now()), \
           (SELECT COUNT(*) FROM job_queue WHERE queue = $1 AND status = 'failed' \
              AND status_at > job_queue_now() - INTERVAL '1 hour'), \
           (SELECT COUNT(*) FROM job_queue WHERE queue = $1 AND status = 'done' \
              AND status_at > job_queue_now() - INTERVAL '1 minute'), \
           (SELECT COUNT(*) FROM job_queue WHERE queue = $1 AND status = 'scheduled' \
              AND unrunnable_since IS NOT NULL)",
        micros_between("MIN(run_at)", "job_queue_now()")
    );
    for s in &mut out {
        let r = sqlx::query(&figures).bind(&s.queue).fetch_one(pool).await?;
        let age: Option<i64> = r.try_get(0)?;
        s.oldest_ready_secs = age.map(|us| us.max(0) as f64 / 1e6);
        s.expired_leases = r.try_get::<i64, _>(1)?.max(0) as u64;
        s.failed_last_hour = r.try_get::<i64, _>(2)?.max(0) as u64;
        s.done_last_minute = r.try_get::<i64, _>(3)?.max(0) as u64;
        s.unrunnable = r.try_get::<i64, _>(4)?.max(0) as u64;
    }
    Ok(out)
}

/// See the MySQL `running`.
pub(crate) async fn running(
    _store: &Store,
    pool: &PgPool,
    queue: Option<&str>,
    limit: u32,
) -> Result<Vec<RunningJob>> {
    let sql = format!(
        "SELECT id, queue::text, kind::text, COALESCE(lease_owner, '')::text, {}, attempts \
         FROM job_queue WHERE status = 'running'{} ORDER BY status_at LIMIT {}",
        micros_between("job_queue_now()", "lease_until"),
        if queue.is_some() {
            " AND queue = $2"
        } else {
            ""
        },
        "$1"
    );
    let mut q = sqlx::query(&sql).bind(i64::from(limit));
    if let Some(name) = queue {
        q = q.bind(name);
    }
    let rows = q.fetch_all(pool).await?;
    rows.iter()
        .map(|r| {
            Ok(RunningJob {
                id: id_of(r.try_get(0)?),
                queue: r.try_get(1)?,
                kind: r.try_get(2)?,
                lease_owner: r.try_get(3)?,
                lease_left_secs: r.try_get::<Option<i64>, _>(4)?.unwrap_or(0) as f64 / 1e6,
                attempts: u32::try_from(r.try_get::<i64, _>(5)?.max(0)).unwrap_or(u32::MAX),
            })
        })
        .collect()
}

/// See the MySQL `unblock_and_lock`: the same order (waiting rows by primary key after a
/// plain read, then the job's row, `FOR UPDATE`), so that it cannot deadlock with a wake.
pub(crate) async fn unblock_and_lock(
    conn: &mut PgConnection,
    id: u64,
) -> sqlx::Result<(Option<String>, bool)> {
    let blocked: Option<bool> =
        sqlx::query_scalar("SELECT status = 'blocked' FROM job_queue WHERE id = $1")
            .bind(db_id(id))
            .fetch_optional(&mut *conn)
            .await?;
    let mut waiting: Vec<(String, i16)> = Vec::new();
    if blocked == Some(true) {
        waiting = sqlx::query_as(
            "SELECT slot_key::text, priority FROM job_queue_blocked WHERE job_id = $1",
        )
        .bind(db_id(id))
        .fetch_all(&mut *conn)
        .await?;
    }
    for (key, priority) in &waiting {
        sqlx::query(
            "DELETE FROM job_queue_blocked WHERE slot_key = $1 AND priority = $2 AND job_id = $3",
        )
        .bind(key)
        .bind(priority)
        .bind(db_id(id))
        .execute(&mut *conn)
        .await?;
    }
    let status: Option<String> =
        sqlx::query_scalar("SELECT status FROM job_queue WHERE id = $1 FOR UPDATE")
            .bind(db_id(id))
            .fetch_optional(&mut *conn)
            .await?;
    Ok((status, !waiting.is_empty()))
}
