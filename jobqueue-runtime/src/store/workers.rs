//! The worker heartbeat's rows: `job_queue_worker` (who is alive) and the schedules written
//! into `job_queue_cron`. Single statements, each within the store's call timeout, no
//! conflict retries: a failed beat is tried again at the next one.

use super::*;

impl Store {
    /// Refreshes the heartbeat row of `owner`. Returns the rows matched (0: no row yet).
    pub(crate) async fn beat_worker(&self, owner: &str, running: u64) -> Result<u64> {
        Ok(on_connection!(self, |conn| sqlx::query(
            "UPDATE job_queue_worker SET running = ?, last_seen = UTC_TIMESTAMP(6) WHERE owner = ?",
        )
        .bind(running)
        .bind(owner)
        .execute(&mut *conn))
        .await?
        .rows_affected())
    }

    /// Writes the first heartbeat row of a worker.
    pub(crate) async fn insert_worker(&self, worker: &WorkerRow<'_>) -> Result<()> {
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
