//! Queue gauges: jobs per queue and status, and the queue lag, published to the `metrics`
//! facade. Counting them costs a read of every active row, so at most one worker of the
//! fleet counts per [`GAUGE_INTERVAL`] (the holder of the maintenance turn, which also takes
//! the gauges' own turn in the database, for workers of the previous release that race for
//! it) and writes the counts to a small table; the holder publishes them at once, every
//! other worker when its heartbeat reads that table (every 10 s).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::Maintenance;
use crate::error::Result;

/// How often a worker refreshes the queue gauges.
pub(crate) const GAUGE_INTERVAL: Duration = Duration::from_secs(5);

/// What the gauges remember between passes: when they were last read, and every queue seen
/// so far, whose gauges drop to zero (not vanish) once its jobs are gone.
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    last: Option<Instant>,
    queues: BTreeSet<String>,
    /// This user may not write the kept throughput counts.
    throughput_denied: bool,
}

pub(super) async fn refresh_gauges(m: &mut Maintenance) -> Result<()> {
    if m.gauges.last.is_some_and(|t| t.elapsed() < GAUGE_INTERVAL) {
        return Ok(());
    }
    m.gauges.last = Some(Instant::now());
    // One worker of the fleet counts per interval; the others read what it wrote. The
    // small margin keeps a worker whose timer runs a little early from losing every turn.
    // The one that counts also adds the jobs finished since the last count to the kept
    // throughput (the dashboard's chart); an error there (a table not granted) is reported
    // after the gauges are published.
    let mut throughput = Ok(());
    if m.store.take_gauge_turn(GAUGE_INTERVAL.mul_f64(0.9)).await? {
        m.store.count_gauges().await?;
        if !m.gauges.throughput_denied {
            throughput = match m.store.count_throughput().await {
                // A user granted the tables of an earlier release only: the dashboard then
                // counts the chart itself at each look, as it did before.
                Err(e) if e.database_class() == Some(crate::DbErrorKind::TableDenied) => {
                    tracing::info!(error = %e, "this user may not keep the throughput counts (`job_queue_throughput`, `job_queue_throughput_mark`), so the dashboard counts its chart itself; grant them as the deployment guide's least-privilege section shows");
                    m.gauges.throughput_denied = true;
                    Ok(())
                }
                other => other,
            };
        }
    }
    let read = m.store.queue_gauges().await?;
    publish_gauges(&mut m.gauges.queues, &read);
    throughput
}

/// Publishes `read` to the `metrics` facade; `seen` are the queues published so far, whose
/// gauges drop to zero (not vanish) once their jobs are gone.
pub(crate) fn publish_gauges(seen: &mut BTreeSet<String>, read: &[crate::model::QueueGauges]) {
    seen.extend(read.iter().map(|g| g.queue.clone()));
    for queue in seen.iter() {
        let g = read.iter().find(|g| &g.queue == queue);
        let count = |f: fn(&crate::model::QueueGauges) -> u64| g.map_or(0, f) as f64;
        for (status, n) in [
            ("waiting", count(|g| g.ready)),
            ("blocked", count(|g| g.blocked)),
            ("running", count(|g| g.running)),
            ("scheduled", count(|g| g.scheduled)),
            ("failed", count(|g| g.failed)),
        ] {
            metrics::gauge!(crate::metrics::QUEUE_JOBS, "queue" => queue.clone(), "status" => status)
                .set(n);
        }
        let lag = g.and_then(|g| g.oldest_ready_secs).unwrap_or(0.0);
        metrics::gauge!(crate::metrics::QUEUE_OLDEST_READY_AGE, "queue" => queue.clone()).set(lag);
    }
}
