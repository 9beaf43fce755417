//! The statements of the testing API (`jobqueue::testing`): moving a test database's
//! clock forward for the jobs of some queues.

use super::*;

/// The `scheduled` jobs of one queue, a batch at a time: the claim index (queue, status,
/// priority, id) serves it, in its order, without a sort. The same on MySQL 8.0 and MariaDB.
pub const BRING_FORWARD_SELECT: &str = "SELECT id FROM job_queue \
     WHERE queue = ? AND status = 'scheduled' ORDER BY priority, id LIMIT ?";

/// How many jobs one round of [`Store::bring_forward`] moves.
const BATCH: u64 = 500;

impl Store {
    /// Makes every `scheduled` job of `queue` due now (`run_at` set to the server's clock),
    /// so that a drain in a test runs delayed jobs and retries without waiting for them;
    /// they become `ready` at the next [`Store::promote`]. Returns how many were moved.
    ///
    /// Meant for a test's own database: the read takes no locks, and the update by id
    /// re-checks the status, so a job that changed meanwhile is left alone.
    pub async fn bring_forward(&self, queue: &str) -> Result<u64> {
        let mut moved = 0;
        loop {
            let ids: Vec<u64> =
                on_connection!(self, |conn| sqlx::query_scalar(BRING_FORWARD_SELECT)
                    .bind(queue)
                    .bind(BATCH)
                    .fetch_all(&mut *conn))
                .await?;
            if ids.is_empty() {
                return Ok(moved);
            }
            let sql = format!(
                "UPDATE job_queue SET run_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) \
                 WHERE id IN ({}) AND status = 'scheduled'",
                placeholders(padded_len(ids.len()))
            );
            let done = autocommit!(self, |conn| {
                let mut q = sqlx::query(&sql);
                for id in padded(&ids) {
                    q = q.bind(id);
                }
                q.execute(&mut *conn)
            })?;
            moved += done.rows_affected();
            if (ids.len() as u64) < BATCH {
                return Ok(moved);
            }
        }
    }
}
