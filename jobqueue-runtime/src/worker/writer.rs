//! The outcome writer: successes many per statement, the rest one by one, every write
//! fenced by the claim, retried through outages while the lease is held.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::lease::Leases;
use super::outcome::{Outcome, Report};
use crate::error::Result;
use crate::metrics::Metrics;
use crate::model::{Finish, JobStatus};
use crate::queue::Queue;
use crate::store::{self, Store};

/// How long one outcome write may wait for the server before it is given up, its connection
/// closed, and the write tried again on a new one. The lease is renewed meanwhile.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes attempt outcomes: successes many per statement, the rest one by one, every write
/// fenced. Retries through database outages for as long as this worker still holds the lease.
pub(super) async fn write_outcomes(
    store: Store,
    owner: String,
    leases: Leases,
    metrics: Arc<Metrics>,
    mut reports: mpsc::Receiver<Report>,
    queue: Queue,
) {
    let mut batch = Vec::new();
    // Outcomes that arrive within one write's duration of the first are written with it:
    // jobs claimed together end together, and are then recorded in one statement (one
    // commit) instead of several, at the cost of at most one write's delay.
    let mut write_took = Duration::ZERO;
    while reports.recv_many(&mut batch, 256).await > 0 {
        let gather_until = tokio::time::Instant::now() + write_took;
        while batch.len() < 256 {
            let room = 256 - batch.len();
            let more = reports.recv_many(&mut batch, room);
            if !matches!(tokio::time::timeout_at(gather_until, more).await, Ok(n) if n > 0) {
                break;
            }
        }
        let began = Instant::now();
        let mut delay = Duration::from_millis(100);
        // Writes the server refused (rather than failed to answer): after a few, each report
        // is written alone and one the server keeps refusing is given up, so that it cannot
        // hold back every later outcome of this worker.
        let mut refused = 0;
        let mut left = batch.len();
        let mut failed = false;
        loop {
            // Nothing is written for a claim the renewer has given up on.
            batch.retain(|r| {
                // A job that completed itself may have committed that after its lease was
                // given up on: the writer reads whether it did.
                let held = leases.holds(r.id, r.attempt)
                    || matches!(r.outcome, Outcome::DoneInTransaction { .. });
                if !held {
                    tracing::warn!(
                        job.id = r.id,
                        attempt = r.attempt,
                        "lease lost before the outcome was written; it is discarded"
                    );
                }
                held
            });
            leases.mark_finishing(batch.iter().map(|r| (r.id, r.attempt)));
            let written = if refused < GIVE_UP_AFTER {
                write_batch(&store, &owner, &leases, &metrics, &mut batch).await
            } else {
                write_singly(&store, &owner, &leases, &metrics, &mut batch).await
            };
            match written {
                Ok(()) => {
                    if failed {
                        tracing::info!("job outcomes recorded again");
                    }
                    break;
                }
                Err(e) => {
                    failed = true;
                    // Consecutive refusals: a try that wrote part of the batch starts over.
                    if batch.len() < left {
                        refused = 0;
                        left = batch.len();
                    }
                    if store::is_deterministic(&e) {
                        refused += 1;
                    }
                    metrics.database_errors(1);
                    tracing::error!(error = %e, pending = batch.len(), retry_in = ?delay, "cannot record job outcomes; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        write_took = began.elapsed().min(Duration::from_millis(50));
        batch.clear();
        queue.jobs_ended();
    }
}

/// How many times a batch is written whole while the server refuses it, before its reports
/// are written one by one and a refused one is given up.
const GIVE_UP_AFTER: u32 = 5;

/// Writes each report of `batch` on its own, giving up on one the server refuses (a missing
/// grant, say): it is logged and released, so that its lease expires and reclaim decides
/// what becomes of the job, and the rest of the batch is written. An error that may pass
/// (no reply, a conflict, a failover) is returned, for the whole of what is left to be
/// retried.
async fn write_singly(
    store: &Store,
    owner: &str,
    leases: &Leases,
    metrics: &Metrics,
    batch: &mut Vec<Report>,
) -> Result<()> {
    while let Some(r) = batch.pop() {
        let mut one = vec![r];
        match write_batch(store, owner, leases, metrics, &mut one).await {
            Ok(()) => {}
            Err(e) if store::is_deterministic(&e) => {
                let r = &one[0];
                leases.release(r.id, r.attempt);
                metrics.database_errors(1);
                // A job whose own transaction committed is done whatever failed after it
                // (storing its output, waking its key): it is not run again.
                let committed = matches!(r.outcome, Outcome::DoneInTransaction { .. })
                    && store
                        .ids_done_at(&[(r.id, r.attempt)])
                        .await
                        .is_ok_and(|done| !done.is_empty());
                if committed {
                    succeeded(metrics, r);
                    tracing::error!(
                        job.id = r.id,
                        job.kind = %r.kind,
                        attempt = r.attempt,
                        error = %e,
                        "the job is done (its transaction committed), but the database refuses what the worker records after it: its output is not stored, and its key's next job waits for maintenance (check the worker user's grants)"
                    );
                    continue;
                }
                tracing::error!(
                    job.id = r.id,
                    job.kind = %r.kind,
                    attempt = r.attempt,
                    error = %e,
                    "the database refuses to record this job's outcome; giving up on it: its lease will expire and maintenance will run it again or fail it (check the worker user's grants)"
                );
            }
            Err(e) => {
                batch.extend(one);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Writes `batch`, removing each report once written, so that a retry after an error only
/// writes what is left.
async fn write_batch(
    store: &Store,
    owner: &str,
    leases: &Leases,
    metrics: &Metrics,
    batch: &mut Vec<Report>,
) -> Result<()> {
    write_outputs(store, owner, leases, metrics, batch).await?;
    done_in_transaction(store, leases, metrics, batch).await?;
    write_successes(store, owner, leases, metrics, batch).await?;
    write_finishes(store, owner, leases, metrics, batch).await
}

/// Writes the successes of jobs that returned a value: one by one, each with its value.
async fn write_outputs(
    store: &Store,
    owner: &str,
    leases: &Leases,
    metrics: &Metrics,
    batch: &mut Vec<Report>,
) -> Result<()> {
    while let Some(i) = batch
        .iter()
        .position(|r| matches!(r.outcome, Outcome::Done { output: Some(_) }))
    {
        let r = &batch[i];
        let Outcome::Done {
            output: Some(output),
        } = &r.outcome
        else {
            unreachable!("found above")
        };
        let written = store
            .complete_claim_with_output(owner, r.id, r.attempt, output, r.holds_slot)
            .await?;
        leases.release(r.id, r.attempt);
        if written {
            succeeded(metrics, r);
        } else {
            completion_lost(metrics, r);
        }
        batch.swap_remove(i);
    }
    Ok(())
}

/// Writes the other successes (the common case), many per statement.
async fn write_successes(
    store: &Store,
    owner: &str,
    leases: &Leases,
    metrics: &Metrics,
    batch: &mut Vec<Report>,
) -> Result<()> {
    let is_done = |r: &Report| matches!(r.outcome, Outcome::Done { .. });
    let (limited, unlimited): (Vec<&Report>, Vec<&Report>) = batch
        .iter()
        .filter(|r| is_done(r))
        .partition(|r| r.holds_slot);
    let claims = |reports: Vec<&Report>| -> Vec<(u64, u32)> {
        reports.iter().map(|r| (r.id, r.attempt)).collect()
    };
    let (limited, unlimited) = (claims(limited), claims(unlimited));
    if limited.is_empty() && unlimited.is_empty() {
        return Ok(());
    }
    // Claims holding a concurrency slot free it in the transaction that marks them done; the
    // others need no transaction.
    let mut lost = store.complete(owner, &limited).await?;
    lost.extend(store.complete_unlimited(owner, &unlimited).await?);
    for r in batch.iter().filter(|r| is_done(r)) {
        leases.release(r.id, r.attempt);
        if lost.contains(&r.id) {
            completion_lost(metrics, r);
        } else {
            succeeded(metrics, r);
        }
    }
    batch.retain(|r| !is_done(r));
    Ok(())
}

/// Writes the attempts that did not succeed (retries, failures, snoozes, deferrals,
/// hand-backs, cancels) and the fallback outcomes of jobs whose own transaction did not
/// commit, one by one, last first.
async fn write_finishes(
    store: &Store,
    owner: &str,
    leases: &Leases,
    metrics: &Metrics,
    batch: &mut Vec<Report>,
) -> Result<()> {
    while let Some(r) = batch.last() {
        let (how, in_transaction) = match &r.outcome {
            Outcome::Finish(how) => (Some(how), false),
            Outcome::DoneInTransaction { otherwise, .. } => (otherwise.as_ref(), true),
            Outcome::Done { .. } => {
                batch.pop();
                continue;
            }
        };
        // A run dropped after its lease was lost writes nothing of its own.
        let written = match how {
            Some(how) => {
                store
                    .finish_claim(owner, r.id, r.attempt, how, r.holds_slot)
                    .await?
            }
            None => None,
        };
        leases.release(r.id, r.attempt);
        let (id, attempt, kind, queue) = (r.id, r.attempt, r.kind.as_str(), r.queue.as_str());
        // The job's own transaction may have committed its completion after it was read
        // as not committed (a commit whose reply was lost, still under way on the server).
        if written.is_none()
            && in_transaction
            && !store.ids_done_at(&[(id, attempt)]).await?.is_empty()
        {
            succeeded(metrics, r);
            batch.pop();
            continue;
        }
        if how.is_none() {
            // A run dropped for its lost lease, already counted as such when it was dropped;
            // its transaction did not commit either.
            tracing::debug!(
                job.id = id,
                attempt,
                "the stopped job's own transaction did not commit; nothing was written"
            );
            batch.pop();
            continue;
        }
        let (Some(written), Some(how)) = (written, how) else {
            metrics.lease_lost(queue, kind);
            tracing::warn!(
                job.id = id,
                attempt,
                "lease lost before the outcome was recorded; nothing was written"
            );
            batch.pop();
            continue;
        };
        finished(metrics, r, written, how);
        batch.pop();
    }
    Ok(())
}

/// Counts and logs an outcome of `r` that the store recorded: `written` is the status its
/// row took.
fn finished(metrics: &Metrics, r: &Report, written: JobStatus, how: &Finish) {
    let (id, attempt, kind, queue) = (r.id, r.attempt, r.kind.as_str(), r.queue.as_str());
    match (written, how) {
        (JobStatus::Scheduled, Finish::Retry { delay, error }) => {
            metrics.retried(queue, kind);
            tracing::warn!(job.id = id, job.kind = kind, attempt, error = %error, "job failed; retrying in {delay:.1?}");
        }
        (JobStatus::Failed, Finish::Fail { error }) => {
            metrics.failed(queue, kind);
            tracing::error!(job.id = id, job.kind = kind, attempt, error = %error, "job failed; not retrying");
        }
        (JobStatus::Scheduled, Finish::Defer { delay, error, .. }) => {
            metrics.deferred(queue, kind);
            tracing::warn!(job.id = id, job.kind = kind, attempt, error = %error, "this worker cannot run the job; left for a worker that can, back in {delay:.1?} (not counted as an attempt)");
        }
        (
            JobStatus::Failed,
            Finish::Defer {
                error,
                give_up_after,
                ..
            },
        ) => {
            metrics.failed(queue, kind);
            tracing::error!(job.id = id, job.kind = kind, attempt, error = %error, "no worker could run the job within {give_up_after:?}; job failed");
        }
        (JobStatus::Scheduled, Finish::Snooze { delay, .. }) => {
            metrics.snoozed(queue, kind);
            tracing::info!(
                job.id = id,
                job.kind = kind,
                attempt,
                "job snoozed; runs again in {delay:.1?} (not counted as an attempt)"
            );
        }
        (JobStatus::Failed, Finish::Snooze { exhausted, .. }) => {
            metrics.failed(queue, kind);
            tracing::error!(job.id = id, job.kind = kind, attempt, error = %exhausted, "job failed; not retrying");
        }
        (JobStatus::Failed, _) => {
            metrics.failed(queue, kind);
            tracing::error!(
                job.id = id,
                job.kind = kind,
                attempt,
                "job stopped at shutdown during its last attempt; failed, not run again"
            );
        }
        (JobStatus::Ready, _) => {
            metrics.handed_back(queue, kind);
            tracing::info!(
                job.id = id,
                job.kind = kind,
                attempt,
                "job handed back to ready at shutdown"
            );
        }
        (_, _) => {
            metrics.cancelled(queue, kind);
            tracing::info!(
                job.id = id,
                job.kind = kind,
                attempt,
                "job cancelled on request"
            );
        }
    }
}

/// A completion that matched no row: another worker owns the job now.
fn completion_lost(metrics: &Metrics, r: &Report) {
    metrics.lease_lost(&r.queue, &r.kind);
    tracing::warn!(job.id = r.id, attempt = r.attempt, "lease lost before completion was recorded; another worker owns the job now, nothing was written");
}

/// Records a job as done, once: its row became `done` by this claim, written by the writer
/// or committed with the job's own transaction.
fn succeeded(metrics: &Metrics, r: &Report) {
    metrics.succeeded(&r.queue, &r.kind);
    tracing::debug!(job.id = r.id, attempt = r.attempt, "job done");
}

/// Settles the reports of jobs that called `complete_in`: a job whose row is `done` at its
/// attempt committed its completion, and is recorded as done with nothing written; the others
/// stay in `batch`, to be written as their fallback outcome.
async fn done_in_transaction(
    store: &Store,
    leases: &Leases,
    metrics: &Metrics,
    batch: &mut Vec<Report>,
) -> Result<()> {
    let claims: Vec<(u64, u32)> = batch
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::DoneInTransaction { .. }))
        .map(|r| (r.id, r.attempt))
        .collect();
    let mut done = Vec::new();
    for chunk in claims.chunks(128) {
        done.extend(store.ids_done_at(chunk).await?);
    }
    // Committed: what the job's transaction left to the worker, then recorded as done. Each
    // report leaves the batch once settled, so that a retry after an error only does the rest.
    while let Some(i) = batch.iter().position(|r| {
        matches!(r.outcome, Outcome::DoneInTransaction { .. }) && done.contains(&r.id)
    }) {
        let r = &batch[i];
        if let Outcome::DoneInTransaction {
            output: Some(output),
            ..
        } = &r.outcome
        {
            // Written once: a retry finds the output there and matches nothing.
            store
                .write_committed_output(r.id, r.attempt, output)
                .await?;
        }
        if r.holds_slot {
            // The job's transaction freed its slot without waking the key's next job.
            store.wake_after_commit(r.id).await?;
        }
        if let Outcome::DoneInTransaction {
            refused: Some(why), ..
        } = &r.outcome
        {
            tracing::warn!(
                job.id = r.id,
                attempt = r.attempt,
                "the job's completion committed, so it is done, but its output is not stored: {why}"
            );
        }
        leases.release(r.id, r.attempt);
        succeeded(metrics, r);
        batch.swap_remove(i);
    }
    Ok(())
}
