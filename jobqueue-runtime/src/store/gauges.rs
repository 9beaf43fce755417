//! The queue gauges: how many jobs wait, run, are scheduled or failed, per queue, and how
//! old the oldest ready job is. One statement per refresh.

use sqlx::Row;

use super::decode::text;
use super::Store;
use crate::error::Result;
use crate::model::{JobStatus, QueueGauges};

impl Store {
    /// Counts the jobs of every queue in the four statuses an operator alerts on, with the
    /// age of each queue's oldest ready job. One grouped read over the `(status, run_at, id)`
    /// index: `done` and `cancelled` rows, the bulk of a busy table, lie outside its ranges.
    pub(crate) async fn queue_gauges(&self) -> Result<Vec<QueueGauges>> {
        let rows = sqlx::query(
            "SELECT queue, CAST(status AS CHAR), COUNT(*), \
             TIMESTAMPDIFF(MICROSECOND, MIN(run_at), UTC_TIMESTAMP(6)) \
             FROM job_queue WHERE status IN ('scheduled', 'ready', 'running', 'failed') \
             GROUP BY queue, status",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<QueueGauges> = Vec::new();
        for r in &rows {
            let queue = text(r, 0)?;
            let status: JobStatus = text(r, 1)?.parse()?;
            let n = r.try_get::<i64, _>(2)?.max(0) as u64;
            let i = match out.iter().position(|g| g.queue == queue) {
                Some(i) => i,
                None => {
                    out.push(QueueGauges {
                        queue,
                        ..Default::default()
                    });
                    out.len() - 1
                }
            };
            let g = &mut out[i];
            match status {
                JobStatus::Scheduled => g.scheduled = n,
                JobStatus::Ready => {
                    g.ready = n;
                    let age: Option<i64> = r.try_get(3)?;
                    g.oldest_ready_secs = age.map(|us| us.max(0) as f64 / 1e6);
                }
                JobStatus::Running => g.running = n,
                JobStatus::Failed => g.failed = n,
                JobStatus::Done | JobStatus::Cancelled => {}
            }
        }
        Ok(out)
    }
}
