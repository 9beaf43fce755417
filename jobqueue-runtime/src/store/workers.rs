//! The worker heartbeat's rows: `job_queue_worker` (who is alive) and the schedules written
//! into `job_queue_cron`. Single statements, each within the store's call timeout, no
//! conflict retries: a failed beat is tried again at the next one.

use sqlx::Row;

use super::decode::{opt_text, text};
use super::*;
use crate::model::{JobStatus, QueueGauges};

/// What a worker reads at each heartbeat, in one statement: the live workers (seen within
/// the bound given), the maintenance turn, the queue gauges last counted, and the server's
/// clock (µs since 2000-01-01 UTC) on every row, so that workers on hosts whose clocks
/// differ share one time for their probe rotation.
const READ_ROSTER: &str = "\
     SELECT 'w', owner, queues, CAST(running AS SIGNED), CAST(concurrency AS SIGNED), NULL, \
            TIMESTAMPDIFF(MICROSECOND, '2000-01-01', UTC_TIMESTAMP(6)) \
     FROM job_queue_worker WHERE last_seen >= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND \
     UNION ALL \
     SELECT 't', holder, NULL, NULL, NULL, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), \
            TIMESTAMPDIFF(MICROSECOND, '2000-01-01', UTC_TIMESTAMP(6)) \
     FROM job_queue_turn WHERE name = 'maintenance' \
     UNION ALL \
     SELECT 'g', queue, CAST(status AS CHAR), CAST(jobs AS SIGNED), NULL, \
            TIMESTAMPDIFF(MICROSECOND, oldest_run_at, UTC_TIMESTAMP(6)), \
            TIMESTAMPDIFF(MICROSECOND, '2000-01-01', UTC_TIMESTAMP(6)) \
     FROM job_queue_gauges";

/// A live worker, as the heartbeat's roster read sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveWorker {
    pub(crate) owner: String,
    /// The queues it claims from, comma-separated, in its order.
    pub(crate) queues: String,
    pub(crate) running: u64,
    pub(crate) concurrency: u64,
}

/// What one roster read returned.
#[derive(Debug, Default)]
pub(crate) struct RosterRead {
    /// The server's clock when it read, µs since 2000-01-01 UTC.
    pub(crate) server_us: i64,
    pub(crate) workers: Vec<LiveWorker>,
    /// The holder of the maintenance turn (None: released), and how long until it expires
    /// (negative: expired).
    pub(crate) turn: Option<(Option<String>, i64)>,
    /// The queue gauges last counted.
    pub(crate) gauges: Vec<QueueGauges>,
}

impl Store {
    /// Refreshes the heartbeat row of `owner`. Returns the rows matched (0: no row yet).
    pub(crate) async fn beat_worker(&self, owner: &str, running: u64) -> Result<u64> {
        on_postgres!(self, workers::beat_worker(owner, running));
        Ok(on_connection!(self, |conn| sqlx::query(
            "UPDATE job_queue_worker SET running = ?, last_seen = UTC_TIMESTAMP(6) WHERE owner = ?",
        )
        .bind(running)
        .bind(owner)
        .execute(&mut *conn))
        .await?
        .rows_affected())
    }

    /// Refreshes the heartbeat row of `owner` and reads the roster (workers seen within
    /// `live_within`), on one connection. None when `owner` has no row yet.
    pub(crate) async fn beat_and_read(
        &self,
        owner: &str,
        running: u64,
        live_within: Duration,
    ) -> Result<Option<RosterRead>> {
        on_postgres!(self, workers::beat_and_read(owner, running, live_within));
        let us = i64::try_from(live_within.as_micros()).unwrap_or(i64::MAX);
        let (updated, rows) = on_connection!(self, |conn| async {
            let updated = sqlx::query(
                "UPDATE job_queue_worker SET running = ?, last_seen = UTC_TIMESTAMP(6) WHERE owner = ?",
            )
            .bind(running)
            .bind(owner)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if updated == 0 {
                return Ok::<_, sqlx::Error>((0, Vec::new()));
            }
            let rows = sqlx::query(READ_ROSTER).bind(us).fetch_all(&mut *conn).await?;
            Ok((updated, rows))
        })
        .await?;
        if updated == 0 {
            return Ok(None);
        }
        Ok(Some(roster_from_rows(&rows)?))
    }

    /// Reads the roster alone (workers seen within `live_within`).
    pub(crate) async fn read_roster(&self, live_within: Duration) -> Result<RosterRead> {
        on_postgres!(self, workers::read_roster(live_within));
        let us = i64::try_from(live_within.as_micros()).unwrap_or(i64::MAX);
        let rows = on_connection!(self, |conn| sqlx::query(READ_ROSTER)
            .bind(us)
            .fetch_all(&mut *conn))
        .await?;
        roster_from_rows(&rows)
    }

    /// Writes the first heartbeat row of a worker.
    pub(crate) async fn insert_worker(&self, worker: &WorkerRow<'_>) -> Result<()> {
        on_postgres!(self, workers::insert_worker(worker));
        on_connection!(self, |conn| sqlx::query(
            "INSERT INTO job_queue_worker (owner, host, pid, version, queues, concurrency, running, started_at, last_seen) \
             VALUES (?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
        )
        .bind(worker.owner)
        .bind(worker.host)
        .bind(worker.pid)
        .bind(env!("CARGO_PKG_VERSION"))
        .bind(worker.queues)
        .bind(worker.concurrency)
        .bind(worker.running)
        .execute(&mut *conn))
        .await?;
        Ok(())
    }

    /// Records the cron expression of a periodic kind. Returns the rows matched (0: the
    /// scheduler has not created the kind's row yet).
    pub(crate) async fn write_schedule(&self, kind: &str, expr: &str) -> Result<u64> {
        on_postgres!(self, workers::write_schedule(kind, expr));
        Ok(on_connection!(self, |conn| sqlx::query(
            "UPDATE job_queue_cron SET schedule = ? WHERE kind = ?"
        )
        .bind(expr)
        .bind(kind)
        .execute(&mut *conn))
        .await?
        .rows_affected())
    }

    /// Deletes the rows of workers not seen for `older_than_secs` seconds.
    pub(crate) async fn forget_workers(&self, older_than_secs: u64) -> Result<()> {
        on_postgres!(self, workers::forget_workers(older_than_secs));
        on_connection!(self, |conn| sqlx::query(
            "DELETE FROM job_queue_worker WHERE last_seen < UTC_TIMESTAMP(6) - INTERVAL ? SECOND",
        )
        .bind(older_than_secs)
        .execute(&mut *conn))
        .await?;
        Ok(())
    }

    /// Deletes the heartbeat row of `owner` (a worker that stops).
    pub(crate) async fn delete_worker(&self, owner: &str) -> Result<()> {
        on_postgres!(self, workers::delete_worker(owner));
        on_connection!(self, |conn| sqlx::query(
            "DELETE FROM job_queue_worker WHERE owner = ?"
        )
        .bind(owner)
        .execute(&mut *conn))
        .await?;
        Ok(())
    }
}

/// What a worker's first heartbeat row says about it.
pub(crate) struct WorkerRow<'a> {
    pub(crate) owner: &'a str,
    pub(crate) host: &'a str,
    pub(crate) pid: u32,
    /// The queues it claims from, comma-separated.
    pub(crate) queues: &'a str,
    pub(crate) concurrency: u64,
    pub(crate) running: u64,
}

fn roster_from_rows(rows: &[sqlx::mysql::MySqlRow]) -> Result<RosterRead> {
    let mut read = RosterRead::default();
    for r in rows {
        read.server_us = r.try_get::<Option<i64>, _>(6)?.unwrap_or(read.server_us);
        match text(r, 0)?.as_str() {
            "w" => read.workers.push(LiveWorker {
                owner: text(r, 1)?,
                queues: opt_text(r, 2)?.unwrap_or_default(),
                running: r.try_get::<Option<i64>, _>(3)?.unwrap_or(0).max(0) as u64,
                concurrency: r.try_get::<Option<i64>, _>(4)?.unwrap_or(0).max(0) as u64,
            }),
            "t" => {
                let holder = opt_text(r, 1)?;
                let left = r.try_get::<Option<i64>, _>(5)?.unwrap_or(i64::MIN);
                read.turn = Some((holder, left));
            }
            "g" => {
                let queue = text(r, 1)?;
                let status: JobStatus = opt_text(r, 2)?.unwrap_or_default().parse()?;
                let n = r.try_get::<Option<i64>, _>(3)?.unwrap_or(0).max(0) as u64;
                let oldest: Option<i64> = r.try_get(5)?;
                super::gauges::add_gauge(&mut read.gauges, queue, status, n, oldest);
            }
            _ => {}
        }
    }
    Ok(read)
}
