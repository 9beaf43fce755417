//! Maintenance: the work every worker shares with no leader, once per maintenance interval:
//! enqueue periodic ticks (on a task of their own), promote due jobs, reclaim expired leases, prune finished jobs,
//! refresh the queue gauges.
//! SKIP LOCKED keeps the passes of many workers apart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::metrics::Metrics;
use crate::model::Retention;
use crate::queue::Queue;
use crate::retry::jitter;
use crate::store::Store;

mod gauges;
mod periodic;
mod promote;
mod prune;
mod reclaim;

use gauges::refresh_gauges;
pub(crate) use gauges::{Gauges, GAUGE_INTERVAL};
use periodic::enqueue_ticks;
pub(crate) use periodic::Scheduler;
use promote::promote_due;
use prune::prune_finished;
use reclaim::reclaim_expired;

/// What maintenance needs and remembers between passes.
pub(crate) struct Maintenance {
    pub(crate) store: Store,
    pub(crate) queue: Queue,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) retention: Retention,
    pub(crate) max_lease_expiries: u32,
    pub(crate) last_prune: Option<Instant>,
    pub(crate) gauges: Gauges,
    /// The steps failing now, with their last error (to log each failure once).
    pub(crate) failing_steps: std::collections::HashMap<&'static str, String>,
}

/// Enqueues periodic jobs' ticks every `every` (jittered), on a task of its own: a pass of
/// the other steps can take seconds (a promotion backlog, many keys to wake, pruning), and a
/// scheduler that waited for it would find dense schedules' ticks past their catch-up window
/// and collapse them.
pub(crate) async fn scheduler_loop(
    mut scheduler: Scheduler,
    store: Store,
    queue: Queue,
    metrics: Arc<Metrics>,
    every: Duration,
    stop: CancellationToken,
) {
    if scheduler.is_empty() {
        return;
    }
    let mut failing: Option<String> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(jitter(every, 0.2)) => {}
        }
        match enqueue_ticks(&mut scheduler, &store, &queue).await {
            Ok(()) => {
                if failing.take().is_some() {
                    tracing::info!(step = "periodic jobs", "maintenance step recovered");
                }
            }
            Err(e) => {
                metrics.database_errors(1);
                let message = e.to_string();
                if failing.as_ref() != Some(&message) {
                    tracing::error!(error = %e, step = "periodic jobs", "maintenance step failed; retrying at the next interval");
                    failing = Some(message);
                } else {
                    tracing::debug!(error = %e, step = "periodic jobs", "maintenance step still failing");
                }
            }
        }
    }
}

/// Promotes due scheduled jobs, reclaims expired leases and prunes old finished jobs, every
/// `every` (jittered).
pub(crate) async fn maintenance_loop(mut m: Maintenance, every: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(jitter(every, 0.2)) => {}
        }
        // Each failed step was logged by `maintain`; count the pass once.
        if maintain(&mut m).await.is_err() {
            m.metrics.database_errors(1);
        }
    }
}

/// Frees concurrency slots whose claim ended without releasing them and wakes blocked jobs
/// whose key has a free slot (see `store/limits.rs`).
async fn wake_blocked(m: &Maintenance) -> Result<()> {
    let (freed, woken) = m.store.limits_pass().await?;
    if freed > 0 {
        tracing::warn!(
            slots = freed,
            "freed concurrency slots whose claim had ended without releasing them"
        );
    }
    if woken > 0 {
        tracing::debug!(jobs = woken, "woke blocked jobs whose key has a free slot");
        m.queue.wake_workers();
    }
    Ok(())
}

/// One maintenance pass. Each step runs even if an earlier one failed (a periodic job
/// that cannot be enqueued must not stop reclaims); the first error is returned after all.
async fn maintain(m: &mut Maintenance) -> Result<()> {
    let steps = [
        ("promotion", promote_due(m).await),
        ("reclaim", reclaim_expired(m).await),
        ("limits", wake_blocked(m).await),
        ("pruning", prune_finished(m).await),
        ("queue gauges", refresh_gauges(m).await),
    ];
    let mut first = None;
    for (step, result) in steps {
        match result {
            Err(e) => {
                // A step that keeps failing the same way (a missing table or grant) is
                // logged as an error once, then quietly until it changes or recovers.
                let message = e.to_string();
                if m.failing_steps.get(step) != Some(&message) {
                    tracing::error!(error = %e, step, "maintenance step failed; retrying at the next interval");
                    m.failing_steps.insert(step, message);
                } else {
                    tracing::debug!(error = %e, step, "maintenance step still failing");
                }
                first.get_or_insert(e);
            }
            Ok(()) => {
                if m.failing_steps.remove(step).is_some() {
                    tracing::info!(step, "maintenance step recovered");
                }
            }
        }
    }
    first.map_or(Ok(()), Err)
}
