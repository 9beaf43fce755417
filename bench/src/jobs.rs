//! The job kinds of the benchmark, and the rows that stand for them.

use std::sync::Mutex;

use jobqueue::{job, Job, JobError};

use crate::measure::now_us;

/// The queue every scenario uses.
pub(crate) const QUEUE: &str = "bench";

/// Does nothing: the drains measure the queue, not the work.
#[job(queue = "bench", name = "bench_noop", key = "noop:{n}")]
pub(crate) async fn noop(n: u64) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// Records how long after its enqueue it started (`sent_us`: microseconds since the Unix
/// epoch, taken just before the enqueue).
#[job(queue = "bench", name = "bench_probe", key = "probe:{n}")]
pub(crate) async fn probe(n: u64, sent_us: u64) -> Result<(), JobError> {
    let _ = n;
    record_latency(sent_us);
    Ok(())
}

/// Latencies (µs) of the probes this process ran, in the order they started.
static LATENCIES: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Records a probe that starts now and was sent at `sent_us`.
pub(crate) fn record_latency(sent_us: u64) {
    let latency = now_us().saturating_sub(sent_us);
    LATENCIES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(latency);
}

/// How many probes have started so far.
pub(crate) fn probes_seen() -> u64 {
    LATENCIES.lock().unwrap_or_else(|e| e.into_inner()).len() as u64
}

/// Takes the latencies recorded so far.
pub(crate) fn take_latencies() -> Vec<u64> {
    std::mem::take(&mut *LATENCIES.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The kind name of the no-op job, for rows written by hand.
pub(crate) const NOOP_KIND: &str = <Noop as Job>::KIND;
/// The kind name of the probe job.
pub(crate) const PROBE_KIND: &str = <Probe as Job>::KIND;
/// `max_attempts` of the kinds, as `enqueue` writes it.
pub(crate) const MAX_ATTEMPTS: u32 = <Noop as Job>::OPTIONS.max_attempts;
/// `lease_ms` of the kinds, as `enqueue` writes it.
pub(crate) const LEASE_MS: u64 = <Noop as Job>::OPTIONS.lease.as_millis() as u64;

/// The task key `enqueue` derives for `Noop { n }`; the baseline writes the same one.
pub(crate) fn noop_key(n: u64) -> String {
    format!("noop:{n}")
}

/// The payload `enqueue` writes for `Noop { n }`.
pub(crate) fn noop_payload(n: u64) -> String {
    format!("{{\"n\":{n}}}")
}

/// The payload of a probe, as the baseline writes and reads it.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct ProbePayload {
    pub(crate) n: u64,
    pub(crate) sent_us: u64,
}
