//! Progress: the latest value a running job reported, fenced by its claim.

use super::*;

/// Writes one attempt's progress. By primary key; the owner and attempt fence it, as they
/// fence every write after a claim. `updated_at` is left alone: progress is not a change
/// of state.
///
/// A row `done` at this attempt matches too: a job that completed itself in its own
/// transaction (`JobContext::complete_in`) is done before the worker writes its last value,
/// and that value is this attempt's (a row is `done` at an attempt only by that attempt's
/// completion, and nothing claims it again).
pub const PROGRESS_UPDATE: &str =
    "UPDATE job_queue SET progress = ?, progress_at = UTC_TIMESTAMP(6) \
     WHERE id = ? AND (lease_owner = ? AND status = 'running' OR status = 'done') \
       AND attempts = ?";

impl Store {
    /// Writes `json` as the progress of job `id`, attempt `attempt` held by `owner`.
    /// Returns false when that claim is no longer held (the lease was lost, or the job
    /// ended): nothing was written.
    pub(crate) async fn write_progress(
        &self,
        id: u64,
        owner: &str,
        attempt: u32,
        json: &str,
    ) -> Result<bool> {
        on_postgres!(self, progress::write_progress(id, owner, attempt, json));
        let q = sqlx::query(PROGRESS_UPDATE)
            .bind(json)
            .bind(id)
            .bind(owner)
            .bind(attempt);
        let done = on_connection!(self, |conn| q.execute(&mut *conn)).await?;
        let held = done.rows_affected() == 1;
        if held {
            let m = &self.metrics;
            m.progress_writes(1);
        }
        Ok(held)
    }
}
