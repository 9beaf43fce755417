//! The plain data of the queue: what a job row is, what its states are, and what each step
//! of the protocol takes and gives back. Behaviour modules (the store, the queue, the worker,
//! maintenance) import these types; this module imports none of them, only the error type
//! its parsers return.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::NaiveDateTime;

use crate::error::{Error, Result};

mod dashboard;
pub use dashboard::{JobPage, JobQuery, PeriodicJob, ThroughputMinute, WorkerInfo};

/// A job's state. See the README's state diagram.
/// Serialised as the lowercase name stored in the `status` column (`"ready"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Waiting for `run_at`: a delayed job, or a retry waiting out its backoff.
    Scheduled,
    /// May be claimed now.
    Ready,
    /// Claimed: `lease_owner` holds it until `lease_until`.
    Running,
    /// Finished successfully.
    Done,
    /// Out of attempts, or failed with a permanent error; `last_error` says why.
    Failed,
    /// Cancelled before it ran, or stopped on request while running.
    Cancelled,
    /// Ready, but its concurrency or rate limit key was at its limit when a worker tried to
    /// claim it: it waits, out of the claim's way, until a slot of its key frees (see the
    /// README's "Limits").
    Blocked,
}

impl JobStatus {
    /// The status as stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Scheduled => "scheduled",
            JobStatus::Ready => "ready",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Blocked => "blocked",
        }
    }

    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 7] = [
        JobStatus::Scheduled,
        JobStatus::Ready,
        JobStatus::Blocked,
        JobStatus::Running,
        JobStatus::Done,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobStatus {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        JobStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| Error::UnknownStatus(s.to_owned()))
    }
}

/// One row of `job_queue`, as [`Queue::job`](crate::Queue::job) reads it.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct JobRecord {
    /// The job's id.
    pub id: u64,
    /// Its queue.
    pub queue: String,
    /// Its kind name.
    pub kind: String,
    /// Its idempotency key.
    pub task_key: String,
    /// Its arguments, as JSON.
    pub payload: serde_json::Value,
    /// Where it is in its life.
    pub status: JobStatus,
    /// Lower runs first.
    pub priority: i16,
    /// When it may run (UTC, server clock).
    pub run_at: NaiveDateTime,
    /// Claims so far.
    pub attempts: u32,
    /// Claims it may have.
    pub max_attempts: u32,
    /// The worker holding it, while running.
    pub lease_owner: Option<String>,
    /// Until when the lease holds (UTC, server clock).
    pub lease_until: Option<NaiveDateTime>,
    /// Whether an operator asked for it to be cancelled.
    pub cancel_requested: bool,
    /// The error of the last failed attempt.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub created_at: NaiveDateTime,
    /// When the row last changed.
    pub updated_at: NaiveDateTime,
    /// When it reached done, failed or cancelled.
    pub finished_at: Option<NaiveDateTime>,
    /// How many times a lease of it expired (its worker crashed, was killed or stalled).
    pub lease_expiries: u32,
    /// Since when it waits for a worker that can run it (a worker found its kind unknown or
    /// its payload unfit), if it does; `last_error` says why.
    pub unrunnable_since: Option<NaiveDateTime>,
    /// The key of its concurrency limit, if its kind has one.
    pub concurrency_key: Option<String>,
    /// How many jobs of `concurrency_key` may run at once (0: no limit).
    pub concurrency_limit: u32,
    /// The key of its rate limit, if its kind has one.
    pub rate_key: Option<String>,
    /// How many jobs of `rate_key` may start per window (0: no limit).
    pub rate_limit: u32,
    /// The rate limit's window, in milliseconds.
    pub rate_window_ms: u32,
}

/// What an enqueue did.
///
/// Not `#[must_use]`: a duplicate is already logged, and the job runs once either way, so
/// `queue.enqueue(job).await?;` is a complete statement. Match on it where a duplicate
/// matters to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Enqueued {
    /// A new job was inserted with this id.
    New(u64),
    /// A job with the same task key exists already (this id); nothing was inserted and the
    /// job will not run twice.
    Duplicate(u64),
}

impl Enqueued {
    /// The id of the job: the new one, or the existing one a duplicate refers to.
    pub fn id(self) -> u64 {
        match self {
            Enqueued::New(id) | Enqueued::Duplicate(id) => id,
        }
    }

    /// Whether a new job was inserted.
    pub fn is_new(self) -> bool {
        matches!(self, Enqueued::New(_))
    }

    /// Whether the task key existed already.
    pub fn is_duplicate(self) -> bool {
        matches!(self, Enqueued::Duplicate(_))
    }
}

/// What [`Queue::cancel`](crate::Queue::cancel) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelOutcome {
    /// The job had not started: it is `cancelled` now and will never run.
    Cancelled,
    /// The job is running: its worker will cancel its context within a third of its lease;
    /// the job decides how to stop, and ends `cancelled` (or `done`, if it finished anyway).
    Requested,
    /// The job had already ended with this status; nothing changed.
    AlreadyFinished(JobStatus),
}

/// A filter for [`Queue::list`](crate::Queue::list) and the bulk actions.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct JobFilter {
    /// Only this status.
    pub status: Option<JobStatus>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
}

impl JobFilter {
    /// Only jobs with this status.
    pub fn status(mut self, status: JobStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only jobs of this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Only jobs of this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }
}

/// One queue's gauges: the figures maintenance publishes as `jobqueue_queue_jobs` and
/// `jobqueue_queue_oldest_ready_age_seconds`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct QueueGauges {
    pub(crate) queue: String,
    pub(crate) scheduled: u64,
    pub(crate) ready: u64,
    pub(crate) running: u64,
    pub(crate) failed: u64,
    /// Age of the oldest ready job; `None` when none is ready.
    pub(crate) oldest_ready_secs: Option<f64>,
}

/// One queue's figures, as `jobqueue status` shows them.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct QueueStats {
    /// The queue's name.
    pub queue: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Jobs per status.
    pub scheduled: u64,
    /// Ready jobs.
    pub ready: u64,
    /// Jobs waiting for a slot of their concurrency or rate limit key.
    pub blocked: u64,
    /// Running jobs.
    pub running: u64,
    /// Done jobs (not yet pruned).
    pub done: u64,
    /// Failed jobs.
    pub failed: u64,
    /// Cancelled jobs.
    pub cancelled: u64,
    /// Age of the oldest ready job, in seconds (how far behind the queue is).
    pub oldest_ready_secs: Option<f64>,
    /// Running jobs whose lease has expired: they wait for a reclaim.
    pub expired_leases: u64,
    /// Scheduled jobs that wait for a worker that can run them: a worker found their kind
    /// unknown or their payload unfit (another release, during a rolling deploy). A count
    /// that stays above zero means no deployed worker can run them.
    pub unrunnable: u64,
    /// Jobs that failed in the last hour.
    pub failed_last_hour: u64,
    /// Jobs done in the last minute.
    pub done_last_minute: u64,
}

/// A running job and its lease, as `jobqueue status` shows them.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct RunningJob {
    /// The job's id.
    pub id: u64,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// The worker holding it.
    pub lease_owner: String,
    /// Seconds its lease has left (negative: expired, waiting for reclaim).
    pub lease_left_secs: f64,
    /// Its attempt number.
    pub attempts: u32,
}

/// A job to insert, already validated and serialized.
#[derive(Debug, Clone)]
pub(crate) struct NewJob {
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) key: String,
    pub(crate) payload: String,
    pub(crate) priority: i16,
    pub(crate) max_attempts: u32,
    pub(crate) lease_ms: u32,
    /// An absolute start time (UTC); `None` means now plus `delay_us`.
    pub(crate) run_at: Option<NaiveDateTime>,
    pub(crate) delay_us: i64,
    /// The W3C `traceparent` of the code that enqueued it, if it was traced.
    pub(crate) traceparent: Option<String>,
    /// Its concurrency and rate limits, if its kind has any.
    pub(crate) limits: JobLimits,
}

/// The limits a job carries in its row (see the README's "Limits").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobLimits {
    /// The concurrency key and how many jobs of it may run at once.
    pub(crate) concurrency: Option<(String, u32)>,
    /// The rate key, the starts allowed per window, and the window in milliseconds.
    pub(crate) rate: Option<(String, u32, u32)>,
}

/// What one [`Store::schedule_ticks`](crate::store::Store::schedule_ticks) pass did for a periodic kind.
#[derive(Debug)]
pub(crate) enum TickPass {
    /// Another node holds the kind's row at this moment; it does this pass's work.
    Busy,
    /// The kind had no row; it has one now, starting at this time, and got no tick.
    Started(NaiveDateTime),
    /// The latest tick dealt with now, the ids of the jobs enqueued, and how many ticks were
    /// skipped because the previous tick's job had not finished.
    Advanced {
        last_tick: NaiveDateTime,
        new: Vec<u64>,
        skipped: usize,
    },
}

/// A job this worker has just claimed.
#[derive(Debug)]
#[non_exhaustive]
pub struct Claimed {
    /// The job's id.
    pub id: u64,
    /// The queue it was claimed from.
    pub queue: String,
    /// Its kind name.
    pub kind: String,
    /// Its idempotency key.
    pub task_key: String,
    /// The payload, or why it could not be read.
    pub payload: std::result::Result<serde_json::Value, String>,
    /// This claim's attempt number: the fencing token of every later write.
    pub attempt: u32,
    /// How many attempts it has in all.
    pub max_attempts: u32,
    /// Its lease length.
    pub lease: Duration,
    /// A local instant taken just before the claim's `UPDATE`: the lease runs out no earlier
    /// than `claimed_at + lease` by this process's monotonic clock.
    pub claimed_at: std::time::Instant,
    /// The W3C `traceparent` stored by the enqueue, if it was traced.
    pub traceparent: Option<String>,
    /// Whether the claim holds a concurrency slot of the job's key, which the outcome frees.
    pub holds_slot: bool,
}

/// Why a claim found nothing. None of these is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmptyClaim {
    /// No ready job in any served queue.
    Idle,
    /// Ready jobs exist, but other claimers hold all of them.
    Contended,
    /// No ready job; only running jobs, waiting on their leases.
    LeasedOnly,
    /// Every served queue is paused.
    Paused,
}

/// How a running job's attempt ends, as written by [`Store::finish`](crate::store::Store::finish).
#[derive(Debug, Clone)]
pub enum Finish {
    /// Back to `scheduled`, due after `delay`; to `cancelled` instead if an operator's
    /// cancel request is pending (the worker may not have passed it on to the job yet).
    Retry {
        /// The wait before the next attempt.
        delay: Duration,
        /// The attempt's error, kept in `last_error`.
        error: String,
    },
    /// To `failed` for good.
    Fail {
        /// Why, kept in `last_error`.
        error: String,
    },
    /// To `cancelled` (an operator asked).
    Cancelled {
        /// Why, kept in `last_error`.
        error: String,
    },
    /// Back to `ready` at once with `attempts` kept (shutdown); to `cancelled` instead if an
    /// operator's cancel request is pending, and to `failed` if this was its last attempt
    /// (the attempt may have done part of its work, so it is not run beyond `max_attempts`).
    HandBack,
    /// This worker cannot run the job (its kind is not registered here, or its payload does
    /// not fit the kind's arguments: typically an old worker during a rolling deploy). Back
    /// to `scheduled`, due after `delay`, without spending an attempt: `attempts` still
    /// grows, since it is the fencing token of every claim, and `max_attempts` grows by one
    /// with it. To `failed` once the job has waited longer than `give_up_after` since a worker
    /// first found it could not run it; to `cancelled` if an operator's cancel is pending.
    Defer {
        /// The wait before another worker may try.
        delay: Duration,
        /// Why this worker cannot run it, kept in `last_error` (with a note that it waits).
        error: String,
        /// How long a job may wait for a worker that can run it before it fails.
        give_up_after: Duration,
    },
}

/// What one maintenance pass over expired leases did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Reclaimed {
    /// (id, attempts, former owner) put back to `ready` (a first expiry).
    pub ready: Vec<(u64, u32, String)>,
    /// (id, attempts, former owner, delay) put back to `scheduled`, due after the delay (a
    /// later expiry).
    pub delayed: Vec<(u64, u32, String, Duration)>,
    /// (id, attempts, former owner) out of attempts, now `failed`.
    pub failed: Vec<(u64, u32, String)>,
    /// (id, attempts, former owner) whose lease expired too many times, now `failed`.
    pub poison: Vec<(u64, u32, String)>,
    /// Ids whose cancel had been requested, now `cancelled`.
    pub cancelled: Vec<u64>,
}

/// A claim as seen by a lease check: whether this worker still holds it.
#[derive(Debug)]
pub struct LeaseState {
    /// The job's id.
    pub id: u64,
    /// Whether the owner still holds this claim (same attempt, still running).
    pub held: bool,
    /// Whether an operator asked to cancel the job.
    pub cancel_requested: bool,
}

/// How long finished jobs stay in the table before maintenance deletes them. `None` keeps
/// them forever.
///
/// A task key blocks a second enqueue for as long as its row exists, so `done` is also the
/// window in which a repeated enqueue is recognised as a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// Done jobs. Default 7 days.
    pub done: Option<Duration>,
    /// Cancelled jobs. Default 7 days.
    pub cancelled: Option<Duration>,
    /// Failed jobs, kept longer for a post-mortem. Default 30 days.
    pub failed: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        Retention {
            done: Some(Duration::from_secs(7 * DAY)),
            cancelled: Some(Duration::from_secs(7 * DAY)),
            failed: Some(Duration::from_secs(30 * DAY)),
        }
    }
}

impl Retention {
    /// Keeps every finished job (pruning only by hand or with the CLI).
    pub const FOREVER: Retention = Retention {
        done: None,
        cancelled: None,
        failed: None,
    };

    /// Sets how long done jobs stay.
    pub fn done(mut self, keep: Option<Duration>) -> Self {
        self.done = keep;
        self
    }

    /// Sets how long cancelled jobs stay.
    pub fn cancelled(mut self, keep: Option<Duration>) -> Self {
        self.cancelled = keep;
        self
    }

    /// Sets how long failed jobs stay.
    pub fn failed(mut self, keep: Option<Duration>) -> Self {
        self.failed = keep;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_serialise_as_stored_and_parse_back() {
        for status in JobStatus::ALL {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, serde_json::Value::from(status.as_str()));
            assert_eq!(status.as_str().parse::<JobStatus>().unwrap(), status);
        }
        assert!(matches!(
            "paused".parse::<JobStatus>(),
            Err(Error::UnknownStatus(s)) if s == "paused"
        ));
    }

    #[test]
    fn operator_records_serialise_for_a_dashboard() {
        let outcome =
            serde_json::to_value(CancelOutcome::AlreadyFinished(JobStatus::Done)).unwrap();
        assert_eq!(outcome, serde_json::json!({ "already_finished": "done" }));
        let stats = serde_json::to_value(QueueStats {
            queue: "default".into(),
            ready: 3,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(stats["queue"], "default");
        assert_eq!(stats["ready"], 3);
    }
}
