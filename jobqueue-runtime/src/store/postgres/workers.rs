//! The worker heartbeat's rows on PostgreSQL (see the MySQL `store/workers.rs`). What
//! differs: the roster's microsecond differences are `EXTRACT(EPOCH ...)` of an interval,
//! and its `NULL` columns are typed, as a `UNION ALL` on PostgreSQL needs.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgRow};
use sqlx::Row;

use super::{micros, Store};
use crate::error::Result;
use crate::model::JobStatus;
use crate::store::workers::LiveWorker;
use crate::store::{RosterRead, WorkerRow};

/// Microseconds from `a` to `b` (both `TIMESTAMP`), as `BIGINT`.
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

/// The MySQL `READ_ROSTER`: live workers, the maintenance turn and the gauges, each row with
/// the server's clock in µs since 2000-01-01 UTC.
const PG_READ_ROSTER: &str = concat!(
    "SELECT 'w'::text, owner::text, queues, running, concurrency, NULL::bigint, ",
    us_between!("TIMESTAMP '2000-01-01'", "job_queue_now()"),
    " FROM job_queue_worker WHERE last_seen >= job_queue_now() - $1 * INTERVAL '1 microsecond' \
     UNION ALL \
     SELECT 't', holder::text, NULL::text, NULL::bigint, NULL::bigint, ",
    us_between!("job_queue_now()", "expires_at"),
    ", ",
    us_between!("TIMESTAMP '2000-01-01'", "job_queue_now()"),
    " FROM job_queue_turn WHERE name = 'maintenance' \
     UNION ALL \
     SELECT 'g', queue::text, status, jobs, NULL::bigint, ",
    us_between!("oldest_run_at", "job_queue_now()"),
    ", ",
    us_between!("TIMESTAMP '2000-01-01'", "job_queue_now()"),
    " FROM job_queue_gauges"
);

const BEAT: &str =
    "UPDATE job_queue_worker SET running = $1, last_seen = job_queue_now() WHERE owner = $2";

/// See the MySQL `beat_worker`.
pub(crate) async fn beat_worker(
    store: &Store,
    pool: &PgPool,
    owner: &str,
    running: u64,
) -> Result<u64> {
    let done = pg_autocommit!(store, pool, |conn| sqlx::query(BEAT)
        .bind(i64::try_from(running).unwrap_or(i64::MAX))
        .bind(owner)
        .execute(&mut *conn))?;
    Ok(done.rows_affected())
}

/// See the MySQL `beat_and_read`: both statements on one connection.
pub(crate) async fn beat_and_read(
    store: &Store,
    pool: &PgPool,
    owner: &str,
    running: u64,
    live_within: Duration,
) -> Result<Option<RosterRead>> {
    let rows: Option<Vec<PgRow>> = pg_autocommit!(store, pool, |conn| async {
        let updated = sqlx::query(BEAT)
            .bind(i64::try_from(running).unwrap_or(i64::MAX))
            .bind(owner)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if updated == 0 {
            return Ok::<_, sqlx::Error>(None);
        }
        let rows = sqlx::query(PG_READ_ROSTER)
            .bind(micros(live_within))
            .fetch_all(&mut *conn)
            .await?;
        Ok(Some(rows))
    })?;
    rows.map(|rows| roster_from_rows(&rows)).transpose()
}

/// See the MySQL `read_roster`.
pub(crate) async fn read_roster(
    store: &Store,
    pool: &PgPool,
    live_within: Duration,
) -> Result<RosterRead> {
    let rows = pg_autocommit!(store, pool, |conn| sqlx::query(PG_READ_ROSTER)
        .bind(micros(live_within))
        .fetch_all(&mut *conn))?;
    roster_from_rows(&rows)
}

/// See the MySQL `insert_worker`. A row of the same owner (another process of that name)
/// is left as it is without an error, which the caller ignores on MySQL.
pub(crate) async fn insert_worker(
    store: &Store,
    pool: &PgPool,
    worker: &WorkerRow<'_>,
) -> Result<()> {
    pg_autocommit!(store, pool, |conn| {
        sqlx::query(
        "INSERT INTO job_queue_worker (owner, host, pid, version, queues, concurrency, running, started_at, last_seen) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, job_queue_now(), job_queue_now()) \
         ON CONFLICT (owner) DO NOTHING",
    )
    .bind(worker.owner)
    .bind(worker.host)
    .bind(i64::from(worker.pid))
    .bind(env!("CARGO_PKG_VERSION"))
    .bind(worker.queues)
    .bind(i64::try_from(worker.concurrency).unwrap_or(i64::MAX))
    .bind(i64::try_from(worker.running).unwrap_or(i64::MAX))
    .execute(&mut *conn)
    })?;
    Ok(())
}

/// See the MySQL `write_schedule`.
pub(crate) async fn write_schedule(
    store: &Store,
    pool: &PgPool,
    kind: &str,
    expr: &str,
) -> Result<u64> {
    let done = pg_autocommit!(store, pool, |conn| sqlx::query(
        "UPDATE job_queue_cron SET schedule = $1 WHERE kind = $2"
    )
    .bind(expr)
    .bind(kind)
    .execute(&mut *conn))?;
    Ok(done.rows_affected())
}

/// See the MySQL `forget_workers`.
pub(crate) async fn forget_workers(
    store: &Store,
    pool: &PgPool,
    older_than_secs: u64,
) -> Result<()> {
    pg_autocommit!(store, pool, |conn| sqlx::query(
        "DELETE FROM job_queue_worker WHERE last_seen < job_queue_now() - $1 * INTERVAL '1 second'",
    )
    .bind(i64::try_from(older_than_secs).unwrap_or(i64::MAX))
    .execute(&mut *conn))?;
    Ok(())
}

/// See the MySQL `delete_worker`.
pub(crate) async fn delete_worker(store: &Store, pool: &PgPool, owner: &str) -> Result<()> {
    pg_autocommit!(store, pool, |conn| sqlx::query(
        "DELETE FROM job_queue_worker WHERE owner = $1"
    )
    .bind(owner)
    .execute(&mut *conn))?;
    Ok(())
}

fn roster_from_rows(rows: &[PgRow]) -> Result<RosterRead> {
    let mut read = RosterRead::default();
    for r in rows {
        read.server_us = r.try_get::<Option<i64>, _>(6)?.unwrap_or(read.server_us);
        let tag: String = r.try_get(0)?;
        match tag.as_str() {
            "w" => read.workers.push(LiveWorker {
                owner: r.try_get(1)?,
                queues: r.try_get::<Option<String>, _>(2)?.unwrap_or_default(),
                running: r.try_get::<Option<i64>, _>(3)?.unwrap_or(0).max(0) as u64,
                concurrency: r.try_get::<Option<i64>, _>(4)?.unwrap_or(0).max(0) as u64,
            }),
            "t" => {
                let holder: Option<String> = r.try_get(1)?;
                let left = r.try_get::<Option<i64>, _>(5)?.unwrap_or(i64::MIN);
                read.turn = Some((holder, left));
            }
            "g" => {
                let queue: String = r.try_get(1)?;
                let status: JobStatus = r
                    .try_get::<Option<String>, _>(2)?
                    .unwrap_or_default()
                    .parse()?;
                let n = r.try_get::<Option<i64>, _>(3)?.unwrap_or(0).max(0) as u64;
                let oldest: Option<i64> = r.try_get(5)?;
                crate::store::gauges::add_gauge(&mut read.gauges, queue, status, n, oldest);
            }
            _ => {}
        }
    }
    Ok(read)
}
