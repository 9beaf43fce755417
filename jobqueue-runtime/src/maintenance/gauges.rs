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
}

pub(super) async fn refresh_gauges(m: &mut Maintenance) -> Result<()> {
    if m.gauges.last.is_some_and(|t| t.elapsed() < GAUGE_INTERVAL) {
        return Ok(());
    }
    m.gauges.last = Some(Instant::now());
    // One worker of the fleet counts per interval; the others read what it wrote. The
    // small margin keeps a worker whose timer runs a little early from losing every turn.
    if m.store.take_gauge_turn(GAUGE_INTERVAL.mul_f64(0.9)).await? {
        m.store.count_gauges().await?;
    }
    let read = m.store.queue_gauges().await?;
    publish_gauges(&mut m.gauges.queues, &read);
    Ok(())
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
