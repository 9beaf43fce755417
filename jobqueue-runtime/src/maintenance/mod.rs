//! Maintenance: the work the workers share, once per maintenance interval: promote due
//! jobs, reclaim expired leases, wake blocked jobs, prune finished jobs, refresh the queue
//! gauges; and, on a task of each worker's own, enqueue periodic ticks.
//!
//! One worker of the fleet passes at a time: the holder of the maintenance turn (a lease
//! row, `job_queue_turn`), which renews it at each pass. The others try to take it at a pace
//! that slows as the fleet grows (every interval times the number of live workers, so about
//! once per interval together), and get it only once it is released or expired. No leader
//! can be lost: a holder that dies or freezes stops renewing, and another takes the turn
//! within [`TURN_LEASE_INTERVALS`] intervals plus one round of the others' tries. Passes
//! that overlap anyway (a pass longer than the turn's lease, a worker of the previous
//! release) stay safe: each step locks its rows with SKIP LOCKED.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::metrics::Metrics;
use crate::model::Retention;
use crate::queue::Queue;
use crate::retry::jitter;
use crate::store::DbErrorKind;
use crate::store::Store;

mod gauges;
mod periodic;
mod promote;
mod prune;
mod reclaim;

use gauges::refresh_gauges;
pub(crate) use gauges::{publish_gauges, Gauges, GAUGE_INTERVAL};
use periodic::enqueue_ticks;
pub(crate) use periodic::{tick_template, Scheduler};
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
    /// The worker's owner name, which holds the turn.
    pub(crate) owner: String,
    /// How many workers are alive (as the heartbeat last read), this one included.
    pub(crate) fleet_size: Box<dyn Fn() -> usize + Send + Sync>,
}

/// How many maintenance intervals the turn stays with its holder without a renewal: it
/// renews at every pass, so a pass may take four intervals longer than usual before another
/// worker may take the turn.
pub(crate) const TURN_LEASE_INTERVALS: u32 = 5;

/// Whose maintenance passes this worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// Holds the turn: passes every interval, renewing it each time.
    Holder,
    /// Tries to take the turn every interval times the fleet's size.
    Waiting,
    /// Cannot use the turn (its table is not granted): passes every interval, as every
    /// worker of the previous release does.
    Alone,
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

/// Runs maintenance passes while this worker holds the maintenance turn, every `every`
/// (jittered); tries to take the turn meanwhile, every `every` times the fleet's size. Gives
/// the turn up on `stop`.
pub(crate) async fn maintenance_loop(mut m: Maintenance, every: Duration, stop: CancellationToken) {
    let ttl = every * TURN_LEASE_INTERVALS;
    let mut pace = Pace::Waiting;
    loop {
        let wait = match pace {
            Pace::Holder | Pace::Alone => every,
            Pace::Waiting => every.saturating_mul((m.fleet_size)().max(1) as u32),
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(jitter(wait, 0.2)) => {}
        }
        if pace != Pace::Alone {
            pace = match m.store.take_maintenance_turn(&m.owner, ttl).await {
                Ok(true) => {
                    if pace == Pace::Waiting {
                        tracing::debug!(owner = %m.owner, "took the maintenance turn");
                    }
                    Pace::Holder
                }
                Ok(false) => {
                    if pace == Pace::Holder {
                        tracing::info!(owner = %m.owner, "lost the maintenance turn (a pass outlasted its lease); another worker maintains now");
                    }
                    Pace::Waiting
                }
                Err(e) if e.database_class() == Some(DbErrorKind::TableDenied) => {
                    tracing::info!(owner = %m.owner, error = %e, "this user may not update `job_queue_turn`, so this worker runs maintenance every interval beside the others; grant it as the deployment guide's least-privilege section shows");
                    Pace::Alone
                }
                Err(e) => {
                    m.metrics.database_errors(1);
                    tracing::debug!(error = %e, "could not take the maintenance turn; trying again");
                    continue;
                }
            };
            if pace == Pace::Waiting {
                continue;
            }
        }
        // Each failed step was logged by `maintain`; count the pass once.
        if maintain(&mut m).await.is_err() {
            m.metrics.database_errors(1);
        }
    }
    if pace == Pace::Holder {
        if let Err(e) = m.store.release_maintenance_turn(&m.owner).await {
            tracing::debug!(error = %e, "could not give the maintenance turn up; it passes on when it expires");
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
