//! Pruning: finished jobs older than the retention are deleted, within a time budget per
//! pass.

use std::time::{Duration, Instant};

use super::Maintenance;
use crate::error::Result;
use crate::model::JobStatus;
use crate::store::Store;

/// How often a worker prunes finished jobs.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

pub(super) async fn prune_finished(m: &mut Maintenance) -> Result<()> {
    if m.last_prune.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
        m.last_prune = Some(Instant::now());
        let deadline = Instant::now() + PRUNE_BUDGET;
        let r = m.retention;
        for (status, keep) in [
            (JobStatus::Done, r.done),
            (JobStatus::Cancelled, r.cancelled),
            (JobStatus::Failed, r.failed),
        ] {
            if let Some(keep) = keep {
                let (n, more) = prune_within(&m.store, status, keep, deadline).await?;
                if n > 0 {
                    tracing::info!(status = %status, jobs = n, older_than = ?keep, "pruned finished jobs");
                }
                if more {
                    // The budget ran out with rows left: the next pass, one maintenance
                    // interval away, goes on instead of waiting for the next minute.
                    tracing::debug!(status = %status, "pruning backlog left; continuing at the next maintenance pass");
                    m.last_prune = None;
                }
            }
        }
        // The audit log is kept as long as the longest-kept finished jobs, so that a job's
        // page shows who acted on it for as long as the job is there.
        if let Some(keep) = [r.done, r.cancelled, r.failed].into_iter().flatten().max() {
            prune_audit(&m.store, keep, deadline).await;
        }
    }
    Ok(())
}

/// Deletes audit rows older than `keep` while full batches come back and `deadline` has not
/// passed. A failure is logged and does not fail the pass: a worker user without DELETE on
/// `job_queue_audit` (granted for the dashboard's log) still runs every other step.
async fn prune_audit(store: &Store, keep: Duration, deadline: Instant) {
    let older_than_us = i64::try_from(keep.as_micros()).unwrap_or(i64::MAX);
    let mut total = 0;
    loop {
        match store.prune_audit_batch(older_than_us).await {
            Ok(n) => {
                total += n;
                if n < crate::store::AUDIT_PRUNE_BATCH || Instant::now() >= deadline {
                    break;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot prune the audit log (job_queue_audit); grant DELETE on it to prune it");
                break;
            }
        }
    }
    if total > 0 {
        tracing::info!(rows = total, older_than = ?keep, "pruned the audit log");
    }
}

/// Rows deleted per pruning statement.
const PRUNE_BATCH: usize = 500;

/// How long one maintenance pass may spend pruning, so that promotion and reclaim, which
/// wait for it, are never held up for long. A backlog larger than one pass can delete is
/// worked off at the next passes, one maintenance interval apart.
const PRUNE_BUDGET: Duration = Duration::from_secs(2);

/// Deletes batches of `status` jobs older than `keep` while full batches come back and
/// `deadline` has not passed. Returns the rows deleted and whether rows may be left.
async fn prune_within(
    store: &Store,
    status: JobStatus,
    keep: Duration,
    deadline: Instant,
) -> Result<(u64, bool)> {
    let older_than_us = i64::try_from(keep.as_micros()).unwrap_or(i64::MAX);
    let mut total = 0;
    loop {
        let n = store
            .prune_batch(status, older_than_us, PRUNE_BATCH)
            .await?;
        total += n;
        if (n as usize) < PRUNE_BATCH {
            return Ok((total, false));
        }
        if Instant::now() >= deadline {
            return Ok((total, true));
        }
    }
}
