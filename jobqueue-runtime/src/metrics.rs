//! Counters a program can read ([`MetricsSnapshot`]) and the same figures sent to the
//! `metrics` facade, so any exporter (Prometheus, OpenTelemetry...) sees them with no glue.
//!
//! Facade names, labelled `{queue, kind}`: `jobqueue_jobs_claimed_total`,
//! `jobqueue_jobs_succeeded_total`, `jobqueue_jobs_retried_total`, `jobqueue_jobs_failed_total`,
//! `jobqueue_jobs_cancelled_total`, `jobqueue_jobs_handed_back_total`,
//! `jobqueue_jobs_snoozed_total`, `jobqueue_jobs_deferred_total`, `jobqueue_leases_lost_total`, `jobqueue_enqueued_total`,
//! `jobqueue_enqueue_duplicates_total`, `jobqueue_job_duration_seconds` (histogram).
//! Unlabelled or with other labels: `jobqueue_lease_renewals_total`,
//! `jobqueue_leases_reclaimed_total`, `jobqueue_jobs_promoted_total`,
//! `jobqueue_claims_empty_total{reason}`, `jobqueue_conflict_retries_total{code}`,
//! `jobqueue_database_errors_total`. Gauges, labelled `{queue, status}` and `{queue}`:
//! `jobqueue_queue_jobs`, `jobqueue_queue_oldest_ready_age_seconds`.
//!
//! Label values come from finite sets: the queues a program enqueues to or serves and the
//! kinds linked into it. A job's queue and kind are never derived from its arguments, so the
//! number of series is bounded by queues × kinds.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($field:ident => $name:literal: $doc:literal,)*) => {
        #[derive(Debug, Default)]
        pub(crate) struct Metrics {
            $(pub(crate) $field: AtomicU64,)*
        }

        /// A point-in-time copy of a worker's or a queue handle's counters.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct MetricsSnapshot {
            $(#[doc = $doc] pub $field: u64,)*
        }

        impl Metrics {
            pub(crate) fn snapshot(&self) -> MetricsSnapshot {
                MetricsSnapshot { $($field: self.$field.load(Relaxed),)* }
            }
        }

        /// Facade names, for the `describe_*` calls.
        pub(crate) const NAMES: &[(&str, &str)] = &[$(($name, $doc),)*];
    };
}

counters! {
    claimed => "jobqueue_jobs_claimed_total": "Jobs claimed (a job claimed twice counts twice).",
    succeeded => "jobqueue_jobs_succeeded_total": "Attempts that succeeded and were recorded `done`.",
    retried => "jobqueue_jobs_retried_total": "Failed attempts scheduled for a retry.",
    failed => "jobqueue_jobs_failed_total": "Jobs recorded `failed` (out of attempts, or a permanent error).",
    cancelled => "jobqueue_jobs_cancelled_total": "Running jobs recorded `cancelled`: stopped on an operator's request, or cancelled by the job itself.",
    handed_back => "jobqueue_jobs_handed_back_total": "Jobs handed back to `ready` at shutdown.",
    snoozed => "jobqueue_jobs_snoozed_total": "Attempts that asked to run again later (`JobError::snooze`), without spending an attempt.",
    deferred => "jobqueue_jobs_deferred_total": "Claims of jobs this worker cannot run (kind not registered, payload that does not fit), put back for a worker that can without spending an attempt.",
    lease_lost => "jobqueue_leases_lost_total": "Attempts whose lease was lost; nothing of them was recorded.",
    renewals => "jobqueue_lease_renewals_total": "Lease renewal rounds: each renews every lease the worker holds, in one locking read and one update (per 128 jobs).",
    reclaimed => "jobqueue_leases_reclaimed_total": "Expired leases taken back by this process's maintenance.",
    promoted => "jobqueue_jobs_promoted_total": "Scheduled jobs made ready by this process's maintenance.",
    empty_idle => "jobqueue_claims_empty_total{reason=\"idle\"}": "Empty claims: no ready job at all.",
    idle_probes => "jobqueue_idle_probes_total": "Reads an idle worker made to look for ready jobs (one index entry per served queue) instead of claiming.",
    empty_contended => "jobqueue_claims_empty_total{reason=\"contended\"}": "Empty claims: ready jobs exist, all locked by other claimers.",
    empty_leased_only => "jobqueue_claims_empty_total{reason=\"leased_only\"}": "Empty claims: only running jobs remain, waiting on their leases.",
    empty_paused => "jobqueue_claims_empty_total{reason=\"paused\"}": "Empty claims: every served queue is paused.",
    conflict_retries => "jobqueue_conflict_retries_total": "Transactions retried after a deadlock (1213), lock wait timeout (1205) or snapshot conflict (1020).",
    database_errors => "jobqueue_database_errors_total": "Database errors the worker logged and recovered from.",
    enqueued => "jobqueue_enqueued_total": "Jobs inserted by enqueue.",
    duplicates => "jobqueue_enqueue_duplicates_total": "Enqueues refused as duplicates of an existing task key.",
    progress_writes => "jobqueue_progress_writes_total": "Progress values of running jobs written: the first at once, then at most one per job per progress interval, and the last when the attempt ends.",
}

impl Metrics {
    pub(crate) fn add(&self, field: &AtomicU64, name: &'static str, n: u64) {
        field.fetch_add(n, Relaxed);
        metrics::counter!(name).increment(n);
    }

    /// Counts `n` on `field` and on the facade counter `name` labelled with the job's queue
    /// and kind. Both sets are finite (the queues a program names, the kinds linked into
    /// it), so the label cardinality is bounded by queues × kinds.
    pub(crate) fn add_job(
        &self,
        field: &AtomicU64,
        name: &'static str,
        queue: &str,
        kind: &str,
        n: u64,
    ) {
        field.fetch_add(n, Relaxed);
        metrics::counter!(name, "queue" => queue.to_owned(), "kind" => kind.to_owned())
            .increment(n);
    }

    pub(crate) fn claimed(&self, queue: &str, kind: &str) {
        self.add_job(&self.claimed, "jobqueue_jobs_claimed_total", queue, kind, 1);
    }

    pub(crate) fn empty(&self, reason: crate::model::EmptyClaim) {
        use crate::model::EmptyClaim::*;
        let (field, label) = match reason {
            Idle => (&self.empty_idle, "idle"),
            Contended => (&self.empty_contended, "contended"),
            LeasedOnly => (&self.empty_leased_only, "leased_only"),
            Paused => (&self.empty_paused, "paused"),
        };
        field.fetch_add(1, Relaxed);
        metrics::counter!("jobqueue_claims_empty_total", "reason" => label).increment(1);
    }

    pub(crate) fn conflict(&self, code: u16) {
        self.conflict_retries.fetch_add(1, Relaxed);
        metrics::counter!("jobqueue_conflict_retries_total", "code" => code.to_string())
            .increment(1);
    }
}

/// Registers the descriptions of every metric with the installed `metrics` recorder.
pub(crate) fn describe() {
    for (name, doc) in NAMES {
        let base = name.split('{').next().unwrap_or(name);
        metrics::describe_counter!(base, *doc);
    }
    metrics::describe_histogram!(
        "jobqueue_job_duration_seconds",
        metrics::Unit::Seconds,
        "Time one attempt ran, by queue and kind."
    );
    metrics::describe_gauge!(
        "jobqueue_queue_jobs",
        metrics::Unit::Count,
        "Jobs per queue and status (waiting, running, scheduled, failed), read every 5 s."
    );
    metrics::describe_gauge!(
        "jobqueue_queue_oldest_ready_age_seconds",
        metrics::Unit::Seconds,
        "Age of the queue's oldest ready job (0 when none is ready): how far behind the queue is."
    );
}
