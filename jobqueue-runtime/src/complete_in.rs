//! [`JobContext::complete_in`]: a job's completion written in the job's own transaction, so
//! that its database effects and its `done` commit together, or not at all.

use sqlx::Transaction;

use crate::backend::JobDatabase;

use crate::error::{Error, Result};
use crate::job::JobContext;
use crate::store;

impl JobContext {
    /// Marks this job `done` inside your transaction: the job's writes in `tx` and its
    /// completion commit together, or neither does. Call it, commit `tx`, and return `Ok`:
    /// the worker then finds the job done and writes nothing more.
    ///
    /// The completion is fenced like every write of the worker: it names this claim (the
    /// worker's `lease_owner` and this attempt). If the lease was lost (the job was taken back
    /// after its lease ran out, and perhaps claimed again), or an operator asked to cancel the
    /// job, it matches no row and returns [`Error::NotCompleted`], saying which. Do not commit
    /// then: returning the error with `?` drops `tx`, which rolls it back. So a job's database
    /// effects happen once, across crashes and reclaims: a transaction that commits its
    /// effects commits the job's completion, and an attempt that no longer holds the job
    /// cannot commit.
    ///
    /// ```no_run
    /// # extern crate jobqueue_runtime as jobqueue;
    /// # use jobqueue::{JobContext, JobError};
    /// # async fn transfer(ctx: JobContext, pool: sqlx::MySqlPool) -> Result<(), JobError> {
    /// let mut tx = pool.begin().await?;
    /// ctx.complete_in(&mut tx).await?; // first: a stale attempt stops here
    /// sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 1")
    ///     .execute(&mut *tx)
    ///     .await?;
    /// sqlx::query("UPDATE accounts SET balance = balance + 10 WHERE id = 2")
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?;
    /// Ok(())
    /// # }
    /// ```
    ///
    /// # Where to call it, and for how long
    ///
    /// Call it first in the transaction, as above. An attempt that no longer holds the job
    /// then stops before doing any work, and once it returns `Ok` the job's row is locked by
    /// `tx`: no other worker can take the job back until `tx` ends. Called last, it is just
    /// as safe (nothing commits without it), but a stale attempt finds out only after its
    /// work. Except under REPEATABLE READ with MariaDB's `innodb_snapshot_isolation` (on by
    /// default from 11.6.2, opt-in on 10.6 and 10.11): there a transaction that read before
    /// the lease's last renewal (every quarter of the lease) cannot lock the job's row, and
    /// the call fails saying so, every time. Call it first, or run such a transaction at
    /// READ COMMITTED.
    ///
    /// From this call to the commit, the job's row is locked, so the worker cannot renew the
    /// job's lease; and an operator's cancel of the job waits for the commit. Keep that part
    /// of the transaction short: under a third of the kind's lease (10 s with the default
    /// 30 s). A worker that cannot renew a lease for three quarters of it stops the job
    /// (`CancelReason::LeaseLost`), which drops `tx` and rolls it back.
    ///
    /// # What the worker records
    ///
    /// After the job returns, the worker reads whether the completion committed. If it did,
    /// the job is done and counted once as succeeded, whatever the job returned afterwards;
    /// the worker then stores the value the job returned as its output (unless it is over
    /// the output limit: the job stays done without it) and its last progress value, just
    /// after the commit: a reader that sees the job done at that very moment may find them
    /// not written yet. A run stopped after its commit (its row, being done, is no longer
    /// renewed: a job that goes on long after `commit` is stopped at three quarters of its
    /// lease), or a worker that dies there, leaves no value to store: the job is done
    /// without an output, and [`Queue::output`](crate::Queue::output) reads it as one that
    /// returned nothing. Commit last, and return soon after.
    /// If it did not (you rolled back, or the commit failed), the attempt counts as failed:
    /// the job is retried with its backoff (or fails on its last attempt), with the reason
    /// in `last_error`; a job an operator asked to cancel ends `cancelled`. A job that
    /// returns `Ok` without calling `complete_in` is completed by the worker as usual.
    ///
    /// # Limits
    ///
    /// - `tx` must be a transaction on the queue's database: the completion is a statement
    ///   on `job_queue` inside it. It may run at any isolation level (see above for
    ///   MariaDB's snapshot isolation when it is called late): the completion locks
    ///   the job's row and, for a job with a concurrency limit, its one slot row, both by
    ///   primary key, and no gap, so other workers' claims go on while `tx` is open.
    /// - Only what `tx` writes is exactly once. Effects outside the database (an e-mail, an
    ///   HTTP call) still happen at least once: an attempt may do them and then lose its
    ///   lease.
    /// - A deadlock ([`DbErrorKind::Deadlock`](crate::DbErrorKind::Deadlock)) rolls back all of `tx`, as for any statement; run the transaction
    ///   again from its start, or return the error and let the job be retried.
    /// - On a [`JobContext::detached`] context (a job called outside a worker) there is no
    ///   claim and no row to complete: nothing is written and it returns `Ok`, so that the
    ///   rest of the transaction can be tested.
    pub async fn complete_in<DB: JobDatabase>(&self, tx: &mut Transaction<'_, DB>) -> Result<()> {
        let Some(claim) = &self.claim else {
            return Ok(());
        };
        claim.completion_tried();
        match store::complete_in_on(
            DB::transaction_ref(tx),
            self.id,
            &claim.owner,
            self.attempt,
            claim.holds_slot,
        )
        .await?
        {
            None => {
                claim.completion_written();
                tracing::debug!(
                    job.id = self.id,
                    attempt = self.attempt,
                    "job completed inside its own transaction; done when that commits"
                );
                Ok(())
            }
            Some(reason) => Err(Error::NotCompleted {
                id: self.id,
                attempt: self.attempt,
                reason,
            }),
        }
    }
}
