//! Reclaim: jobs whose lease expired (their worker crashed, was killed or stalled) are
//! taken back, or failed once their attempts or lease expiries are used up.

use super::Maintenance;
use crate::error::Result;

pub(super) async fn reclaim_expired(m: &Maintenance) -> Result<()> {
    const RECLAIM_BATCH: usize = 100;
    let (store, queue, metrics) = (&m.store, &m.queue, &*m.metrics);
    loop {
        let r = store
            .reclaim_with(RECLAIM_BATCH, m.max_lease_expiries)
            .await?;
        let total =
            r.ready.len() + r.delayed.len() + r.failed.len() + r.poison.len() + r.cancelled.len();
        for (id, attempts, owner) in &r.ready {
            tracing::warn!(job.id = id, attempts, lease_owner = %owner, "lease expired; job back to ready with its attempts kept");
        }
        for (id, attempts, owner, delay) in &r.delayed {
            tracing::warn!(job.id = id, attempts, lease_owner = %owner, "lease of this job expired again; back in {delay:.1?} with its attempts kept");
        }
        for (id, attempts, owner) in &r.failed {
            tracing::error!(job.id = id, attempts, lease_owner = %owner, "lease expired on the last attempt; job failed");
        }
        for (id, attempts, owner) in &r.poison {
            tracing::error!(
                job.id = id,
                attempts,
                lease_owner = %owner,
                max_lease_expiries = m.max_lease_expiries,
                "lease of this job expired too many times (its workers crash or stall while running it); job failed"
            );
        }
        for id in &r.cancelled {
            tracing::info!(
                job.id = id,
                "lease expired on a job whose cancel was requested; job cancelled"
            );
        }
        if total > 0 {
            metrics.reclaimed(total as u64);
            queue.wake_workers();
        }
        if total < RECLAIM_BATCH {
            return Ok(());
        }
    }
}
