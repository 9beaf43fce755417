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
//! `jobqueue_claims_empty_total{reason}`, `jobqueue_conflict_retries_total{code}` (`code`: the
//! conflict's [`DbErrorKind`](crate::DbErrorKind) name, `deadlock`, `lock_wait_timeout` or
//! `snapshot_conflict`),
//! `jobqueue_database_errors_total`. Gauges, labelled `{queue, status}` and `{queue}`:
//! `jobqueue_queue_jobs`, `jobqueue_queue_oldest_ready_age_seconds`.
//!
//! Label values come from finite sets: the queues a program enqueues to or serves and the
//! kinds linked into it. A job's queue and kind are never derived from its arguments, so the
//! number of series is bounded by queues × kinds.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::store::DbErrorKind;

/// Facade name of the counter the empty claims count on, labelled `{reason}`.
const CLAIMS_EMPTY: &str = "jobqueue_claims_empty_total";
/// Facade name of the counter of conflict retries, labelled `{code}`.
const CONFLICT_RETRIES: &str = "jobqueue_conflict_retries_total";
/// Facade name of the histogram of attempt durations, labelled `{queue, kind}`.
pub(crate) const JOB_DURATION: &str = "jobqueue_job_duration_seconds";
/// Facade name of the gauge of jobs per queue and status, labelled `{queue, status}`.
pub(crate) const QUEUE_JOBS: &str = "jobqueue_queue_jobs";
/// Facade name of the gauge of the oldest ready job's age, labelled `{queue}`.
pub(crate) const QUEUE_OLDEST_READY_AGE: &str = "jobqueue_queue_oldest_ready_age_seconds";

/// Declares every counter once: its field (in [`Metrics`] and [`MetricsSnapshot`]), its
/// facade name, its description, and how it is counted, which gives the method call sites
/// use (so that none types a name):
/// - `per_job`: `metrics.field(queue, kind)` counts one, labelled with the job's queue and
///   kind;
/// - `total`: `metrics.field(n)` counts `n`, unlabelled;
/// - `labelled`: counted by a method of its own below, which sets the label.
macro_rules! counters {
    ($($how:ident $field:ident => $name:expr, $doc:literal;)*) => {
        #[derive(Debug, Default)]
        pub(crate) struct Metrics {
            $($field: AtomicU64,)*
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

            $(counter_method!($how $field => $name, $doc);)*
        }

        /// Facade names, for the `describe_*` calls.
        const NAMES: &[(&str, &str)] = &[$(($name, $doc),)*];
    };
}

/// The method of one counter (see [`counters!`]).
macro_rules! counter_method {
    (per_job $field:ident => $name:expr, $doc:literal) => {
        #[doc = $doc]
        ///
        /// Counts one, labelled with the job's queue and kind. Both sets are finite (the
        /// queues a program names, the kinds linked into it), so the label cardinality is
        /// bounded by queues × kinds.
        pub(crate) fn $field(&self, queue: &str, kind: &str) {
            self.$field.fetch_add(1, Relaxed);
            metrics::counter!($name, "queue" => queue.to_owned(), "kind" => kind.to_owned())
                .increment(1);
        }
    };
    (total $field:ident => $name:expr, $doc:literal) => {
        #[doc = $doc]
        ///
        /// Counts `n`.
        pub(crate) fn $field(&self, n: u64) {
            self.$field.fetch_add(n, Relaxed);
            metrics::counter!($name).increment(n);
        }
    };
    (labelled $field:ident => $name:expr, $doc:literal) => {};
}

counters! {
    per_job claimed => "jobqueue_jobs_claimed_total", "Jobs claimed (a job claimed twice counts twice).";
    per_job succeeded => "jobqueue_jobs_succeeded_total", "Attempts that succeeded and were recorded `done`.";
    per_job retried => "jobqueue_jobs_retried_total", "Failed attempts scheduled for a retry.";
    per_job failed => "jobqueue_jobs_failed_total", "Jobs recorded `failed` (out of attempts, or a permanent error).";
    per_job cancelled => "jobqueue_jobs_cancelled_total", "Running jobs recorded `cancelled`: stopped on an operator's request, or cancelled by the job itself.";
    per_job handed_back => "jobqueue_jobs_handed_back_total", "Jobs handed back to `ready` at shutdown.";
    per_job snoozed => "jobqueue_jobs_snoozed_total", "Attempts that asked to run again later (`JobError::snooze`), without spending an attempt.";
    per_job deferred => "jobqueue_jobs_deferred_total", "Claims of jobs this worker cannot run (kind not registered, payload that does not fit), put back for a worker that can without spending an attempt.";
    per_job lease_lost => "jobqueue_leases_lost_total", "Attempts whose lease was lost; nothing of them was recorded.";
    total renewals => "jobqueue_lease_renewals_total", "Lease renewal rounds: each renews every lease the worker holds, in one locking read and one update (per 128 jobs).";
    total reclaimed => "jobqueue_leases_reclaimed_total", "Expired leases taken back by this process's maintenance.";
    total promoted => "jobqueue_jobs_promoted_total", "Scheduled jobs made ready by this process's maintenance.";
    labelled empty_idle => CLAIMS_EMPTY, "Empty claims: no ready job at all.";
    total idle_probes => "jobqueue_idle_probes_total", "Reads an idle worker made to look for ready jobs (one index entry per served queue) instead of claiming.";
    labelled empty_contended => CLAIMS_EMPTY, "Empty claims: ready jobs exist, all locked by other claimers.";
    labelled empty_leased_only => CLAIMS_EMPTY, "Empty claims: only running jobs remain, waiting on their leases.";
    labelled empty_paused => CLAIMS_EMPTY, "Empty claims: every served queue is paused.";
    labelled conflict_retries => CONFLICT_RETRIES, "Transactions retried after a deadlock, lock wait timeout or snapshot conflict.";
    total database_errors => "jobqueue_database_errors_total", "Database errors the worker logged and recovered from.";
    per_job enqueued => "jobqueue_enqueued_total", "Jobs inserted by enqueue.";
    per_job duplicates => "jobqueue_enqueue_duplicates_total", "Enqueues refused as duplicates of an existing task key.";
    total progress_writes => "jobqueue_progress_writes_total", "Progress values of running jobs written: the first at once, then at most one per job per progress interval, and the last when the attempt ends.";
}

impl Metrics {
    /// Counts an empty claim, labelled with why it was empty.
    pub(crate) fn empty(&self, reason: crate::model::EmptyClaim) {
        use crate::model::EmptyClaim::*;
        let (field, label) = match reason {
            Idle => (&self.empty_idle, "idle"),
            Contended => (&self.empty_contended, "contended"),
            LeasedOnly => (&self.empty_leased_only, "leased_only"),
            Paused => (&self.empty_paused, "paused"),
        };
        field.fetch_add(1, Relaxed);
        metrics::counter!(CLAIMS_EMPTY, "reason" => label).increment(1);
    }

    /// Counts a transaction retried after `conflict`, labelled with the conflict's name.
    pub(crate) fn conflict(&self, conflict: DbErrorKind) {
        self.conflict_retries.fetch_add(1, Relaxed);
        metrics::counter!(CONFLICT_RETRIES, "code" => conflict.as_str()).increment(1);
    }
}

/// Registers the descriptions of every metric with the installed `metrics` recorder.
pub(crate) fn describe() {
    for (name, doc) in NAMES {
        metrics::describe_counter!(*name, *doc);
    }
    metrics::describe_histogram!(
        JOB_DURATION,
        metrics::Unit::Seconds,
        "Time one attempt ran, by queue and kind."
    );
    metrics::describe_gauge!(
        QUEUE_JOBS,
        metrics::Unit::Count,
        "Jobs per queue and status (waiting, running, scheduled, failed), read every 5 s."
    );
    metrics::describe_gauge!(
        QUEUE_OLDEST_READY_AGE,
        metrics::Unit::Seconds,
        "Age of the queue's oldest ready job (0 when none is ready): how far behind the queue is."
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    use super::*;

    /// Keeps the name and labels of every counter registered.
    #[derive(Default)]
    struct Keys(Mutex<Vec<String>>);

    impl Recorder for Keys {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let key = format!("{}{{{}}}", key.name(), labels.join(","));
            self.0.lock().unwrap().push(key);
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn each_method_counts_on_its_own_name_and_labels() {
        let keys = Keys::default();
        let m = Metrics::default();
        metrics::with_local_recorder(&keys, || {
            m.retried("mail", "send_mail");
            m.promoted(3);
            m.empty(crate::model::EmptyClaim::Contended);
            m.conflict(DbErrorKind::Deadlock);
            m.conflict(DbErrorKind::SnapshotConflict);
        });
        assert_eq!(
            *keys.0.lock().unwrap(),
            [
                "jobqueue_jobs_retried_total{queue=mail,kind=send_mail}",
                "jobqueue_jobs_promoted_total{}",
                "jobqueue_claims_empty_total{reason=contended}",
                "jobqueue_conflict_retries_total{code=deadlock}",
                "jobqueue_conflict_retries_total{code=snapshot_conflict}",
            ]
        );
        let s = m.snapshot();
        assert_eq!(
            (s.retried, s.promoted, s.empty_contended, s.conflict_retries),
            (1, 3, 1, 2)
        );
    }
}
