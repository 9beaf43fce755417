//! The statements of the testing API (`jobqueue::testing`): moving a test database's
//! clock forward for the jobs of some queues, and finding the jobs a drain left blocked.

use sqlx::Row;

use super::*;

/// The `scheduled` jobs of one queue after a (priority, id) in claim order, a batch at a
/// time: a range of the claim index (queue, status, priority, id), read in its order,
/// without a sort. The same on MySQL 8.0 and MariaDB. The jobs a round moves stay
/// `scheduled` until the next promotion, so each round starts after the last job the
/// previous one read, or it would read that one's batch again.
pub const BRING_FORWARD_SELECT: &str = "SELECT id, priority FROM job_queue \
     WHERE queue = ? AND status = 'scheduled' \
       AND (priority > ? OR (priority = ? AND id > ?)) \
     ORDER BY priority, id LIMIT ?";

/// The `blocked` jobs of one queue, first in claim order, with the slot key each waits for
/// (`c:KEY` or `r:KEY`; NULL if its waiting row is gone): the claim index serves the jobs
/// in their order (forced: with few blocked jobs the optimizer may take the status index
/// and sort), the job index of `job_queue_blocked` the join. The same on MySQL 8.0 and
/// MariaDB.
pub const BLOCKED_IN_QUEUE: &str =
    "SELECT job_queue.id, job_queue.kind, job_queue_blocked.slot_key \
     FROM job_queue FORCE INDEX (job_queue_claim) LEFT JOIN job_queue_blocked ON job_queue_blocked.job_id = job_queue.id \
     WHERE job_queue.queue = ? AND job_queue.status = 'blocked' \
     ORDER BY job_queue.priority, job_queue.id LIMIT ?";

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
        on_postgres!(self, testing::bring_forward(queue));
        let mut moved = 0;
        // Where the next round starts: after this (priority, id), in claim order.
        let (mut after_priority, mut after_id) = (i16::MIN, 0u64);
        loop {
            let rows: Vec<(u64, i16)> =
                on_connection!(self, |conn| sqlx::query_as(BRING_FORWARD_SELECT)
                    .bind(queue)
                    .bind(after_priority)
                    .bind(after_priority)
                    .bind(after_id)
                    .bind(BATCH)
                    .fetch_all(&mut *conn))
                .await?;
            let Some(&(last_id, last_priority)) = rows.last() else {
                return Ok(moved);
            };
            (after_priority, after_id) = (last_priority, last_id);
            let ids: Vec<u64> = rows.iter().map(|&(id, _)| id).collect();
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

    /// Up to `limit` `blocked` jobs of `queue`, first in claim order: (id, kind, the slot
    /// key it waits for, `c:KEY` or `r:KEY`).
    pub async fn blocked_in_queue(
        &self,
        queue: &str,
        limit: u32,
    ) -> Result<Vec<(u64, String, Option<String>)>> {
        on_postgres!(self, testing::blocked_in_queue(queue, limit));
        let rows = on_connection!(self, |conn| sqlx::query(BLOCKED_IN_QUEUE)
            .bind(queue)
            .bind(limit)
            .fetch_all(&mut *conn))
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let key: Option<Vec<u8>> = r.try_get(2)?;
            out.push((
                r.try_get(0)?,
                text(r, 1)?,
                key.map(|k| String::from_utf8_lossy(&k).into_owned()),
            ));
        }
        Ok(out)
    }

    /// Moves time forward for the rate limits the `blocked` jobs of `queue` wait for: every
    /// slot of their rate keys may start a job now. Returns how many slots changed; the next
    /// [`Store::limits_pass`] wakes the jobs. Meant for a test's own database.
    pub async fn free_rate_slots(&self, queue: &str) -> Result<u64> {
        on_postgres!(self, testing::free_rate_slots(queue));
        // The first jobs in claim order are the ones to run next: their keys are freed,
        // and the drain comes back for the keys of the jobs behind them.
        let mut keys: Vec<Vec<u8>> = self
            .blocked_in_queue(queue, BATCH as u32)
            .await?
            .into_iter()
            .filter_map(|(_, _, key)| key)
            .filter(|key| key.starts_with("r:"))
            .map(String::into_bytes)
            .collect();
        keys.sort();
        keys.dedup();
        let mut freed = 0;
        for key in &keys {
            freed += autocommit!(self, |conn| sqlx::query(
                "UPDATE job_queue_slot SET free_at = UTC_TIMESTAMP(6) \
                 WHERE slot_key = ? AND free_at > UTC_TIMESTAMP(6)"
            )
            .bind(key)
            .execute(&mut *conn))?
            .rows_affected();
        }
        Ok(freed)
    }
}
