//! Promotion: due `scheduled` jobs become `ready`.

use super::Maintenance;
use crate::error::Result;

pub(super) async fn promote_due(m: &Maintenance) -> Result<()> {
    const PROMOTE_BATCH: usize = 500;
    let (store, queue, metrics) = (&m.store, &m.queue, &*m.metrics);
    loop {
        let n = store.promote(PROMOTE_BATCH).await?;
        if n > 0 {
            metrics.promoted(n);
            tracing::debug!(jobs = n, "promoted due scheduled jobs");
            queue.wake_workers();
        }
        if (n as usize) < PROMOTE_BATCH {
            return Ok(());
        }
    }
}
