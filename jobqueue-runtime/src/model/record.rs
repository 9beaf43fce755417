//! The public records of the queue: a job's row and states, its attempts, what an enqueue or
//! a cancel did, the filter over jobs, a queue's figures and how long finished jobs stay.
//! Operators and job code read these; they carry no behaviour but parsing and building.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// A job's state. The lifecycle guide (`jobqueue::guide::lifecycle_and_outputs`) draws
/// the states and what moves a job between them.
/// Serialised as the lowercase name stored in the `status` column (`"ready"`). Ordered as
/// [`JobStatus::ALL`], the lifecycle: scheduled, ready, blocked, running, done, failed,
/// cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum JobStatus {
    /// Waiting for `run_at`: a delayed job, or a retry waiting out its backoff.
    Scheduled,
    /// May be claimed now.
    Ready,
    /// Ready, but its concurrency or rate limit key was at its limit when a worker tried to
    /// claim it: it waits, out of the claim's way, until a slot of its key frees (see the
    /// limits guide, `jobqueue::guide::limits`).
    Blocked,
    /// Claimed: `lease_owner` holds it until `lease_until`.
    Running,
    /// Finished successfully.
    Done,
    /// Out of attempts, or failed with a permanent error; `last_error` says why.
    Failed,
    /// Cancelled before it ran, or stopped on request while running.
    Cancelled,
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

    /// Every status, in lifecycle order (the order of `Ord`).
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
    /// When it may run (server clock).
    pub run_at: DateTime<Utc>,
    /// Claims so far.
    pub attempts: u32,
    /// Claims it may have.
    pub max_attempts: u32,
    /// The worker holding it, while running.
    pub lease_owner: Option<String>,
    /// Until when the lease holds (server clock).
    pub lease_until: Option<DateTime<Utc>>,
    /// Whether an operator asked for it to be cancelled.
    pub cancel_requested: bool,
    /// The error of the last failed attempt.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
    /// When it reached done, failed or cancelled.
    pub finished_at: Option<DateTime<Utc>>,
    /// How many times a lease of it expired (its worker crashed, was killed or stalled).
    pub lease_expiries: u32,
    /// Since when it waits for a worker that can run it (a worker found its kind unknown or
    /// its payload unfit), if it does; `last_error` says why.
    pub unrunnable_since: Option<DateTime<Utc>>,
    /// How long its task key blocks another enqueue of the key.
    pub unique: Uniqueness,
    /// Whether a newer job of the same task key holds the key now (this one gave it up when
    /// its [`Uniqueness`] stopped blocking); `task_key` is still the key it was enqueued with.
    pub key_released: bool,
    /// The JSON object set at enqueue with [`EnqueueOptions::metadata`](crate::EnqueueOptions::metadata).
    pub metadata: Option<serde_json::Value>,
    /// The latest value the job reported with
    /// [`JobContext::set_progress`](crate::JobContext::set_progress).
    pub progress: Option<serde_json::Value>,
    /// When that value was written (server clock).
    pub progress_at: Option<DateTime<Utc>>,
    /// How many times it snoozed ([`JobError::snooze`](crate::JobError::snooze)); each
    /// snooze raised `max_attempts` by one.
    pub snoozes: u32,
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

/// How long a job's task key blocks another enqueue of the same key.
///
/// The holder's policy decides: an enqueue that meets a job holding its key gets
/// [`Enqueued::Duplicate`] while that job's policy blocks, and a new job once it does not
/// (the old job's row stays, as history: see [`Queue::jobs_by_key`](crate::Queue::jobs_by_key)).
///
/// Set per kind with `#[job(unique = "while_active")]` or `#[job(unique_for = "1h")]`, per
/// enqueue with [`EnqueueOptions::unique`](crate::EnqueueOptions::unique).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Uniqueness {
    /// While the job's row exists, until it is pruned after its retention (the default).
    #[default]
    UntilPruned,
    /// While the job is scheduled, ready or running: once it is done, failed or cancelled
    /// the key can be enqueued again. An operator's retry of a failed job whose key has
    /// since been taken by a newer job puts it back without its key.
    WhileActive,
    /// For this long after the job was enqueued (server clock), whatever its status: a job
    /// still waiting or running after the period does not block a new one. At least 1 ms.
    For(#[serde(serialize_with = "serialize_secs")] std::time::Duration),
}

fn serialize_secs<S: serde::Serializer>(
    d: &std::time::Duration,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Uniqueness {
    /// The value of the `unique_policy` column.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Uniqueness::UntilPruned => "until_pruned",
            Uniqueness::WhileActive => "while_active",
            Uniqueness::For(_) => "for_period",
        }
    }

    /// The period in microseconds, for `unique_until`; `None` unless [`Uniqueness::For`].
    pub(crate) fn period_us(self) -> Option<i64> {
        match self {
            Uniqueness::For(d) => Some(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
            _ => None,
        }
    }
}

/// How one attempt of a job ended, as its history records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The job succeeded.
    Done,
    /// It failed and will be retried after its backoff.
    Retry,
    /// It failed for good (out of attempts, a permanent error, too many snoozes...).
    Failed,
    /// It ended the job as `cancelled` (an operator's request, or the job's own
    /// [`JobError::cancel`](crate::JobError::cancel)).
    Cancelled,
    /// The job asked to run again later, without spending an attempt.
    Snoozed,
    /// Its worker shut down and handed the job back to `ready`.
    HandedBack,
    /// Its worker could not run it (unknown kind, payload of another release); left for
    /// another worker, without spending an attempt.
    Deferred,
    /// Its lease expired (the worker crashed, was killed or stalled) and maintenance took
    /// the job back.
    LeaseExpired,
}

impl AttemptOutcome {
    /// The name stored in the history (`"lease_expired"`).
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Done => "done",
            AttemptOutcome::Retry => "retry",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Cancelled => "cancelled",
            AttemptOutcome::Snoozed => "snoozed",
            AttemptOutcome::HandedBack => "handed_back",
            AttemptOutcome::Deferred => "deferred",
            AttemptOutcome::LeaseExpired => "lease_expired",
        }
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt of a job: a claim and how it ended. A job keeps its last
/// [`MAX_ATTEMPT_HISTORY`] attempts; see [`Queue::attempts`](crate::Queue::attempts).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Attempt {
    /// The attempt's number (`attempts` after its claim).
    pub attempt: u32,
    /// When it was claimed (server clock); `None` if the claim was made by a worker
    /// older than the history.
    pub started_at: Option<DateTime<Utc>>,
    /// When its end was recorded (server clock).
    pub ended_at: DateTime<Utc>,
    /// The worker that ran it (its `lease_owner`).
    pub worker: Option<String>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// Its error, if it had one (at most [`MAX_ATTEMPT_ERROR_BYTES`] bytes).
    pub error: Option<String>,
}

/// How many attempts a job's history keeps: the latest.
pub const MAX_ATTEMPT_HISTORY: usize = 20;

/// The largest output a job may return, in bytes of JSON: a larger one fails the attempt
/// for good (the same output would be as large next time).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The longest error an attempt's history entry keeps, in bytes.
pub const MAX_ATTEMPT_ERROR_BYTES: usize = 2048;

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
    /// A job with the same task key exists already; nothing was inserted and the job will
    /// not run twice.
    ///
    /// A holder that has finished (`done`, `failed`, `cancelled`) still blocks its key under
    /// the default [`Uniqueness`], so such an enqueue runs nothing: it is logged at WARN.
    /// To run a key again after its job ends, give the kind `unique = "while_active"`, or
    /// put the period in the key (`key = "report:{day}"`).
    #[non_exhaustive]
    Duplicate {
        /// The id of the job holding the key.
        id: u64,
        /// Its status as the enqueue read it; `None` when the enqueue could not read it:
        /// the caller's transaction's snapshot hides the row, or it was inserted by the
        /// same [`Queue::enqueue_many`](crate::Queue::enqueue_many) call.
        status: Option<JobStatus>,
    },
}

impl Enqueued {
    /// The id of the job: the new one, or the existing one a duplicate refers to.
    pub fn id(self) -> u64 {
        match self {
            Enqueued::New(id) | Enqueued::Duplicate { id, .. } => id,
        }
    }

    /// Whether a new job was inserted.
    pub fn is_new(self) -> bool {
        matches!(self, Enqueued::New(_))
    }

    /// Whether the task key existed already.
    pub fn is_duplicate(self) -> bool {
        matches!(self, Enqueued::Duplicate { .. })
    }

    /// The id of the job holding the key, when this enqueue was a duplicate.
    pub fn duplicate_of(self) -> Option<u64> {
        match self {
            Enqueued::Duplicate { id, .. } => Some(id),
            Enqueued::New(_) => None,
        }
    }

    /// The holder's status, when this enqueue was a duplicate and could read it.
    pub fn holder_status(self) -> Option<JobStatus> {
        match self {
            Enqueued::Duplicate { status, .. } => status,
            Enqueued::New(_) => None,
        }
    }

    pub(crate) fn duplicate(id: u64, status: Option<JobStatus>) -> Enqueued {
        Enqueued::Duplicate { id, status }
    }
}

/// What [`Queue::cancel`](crate::Queue::cancel) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelOutcome {
    /// The job had not started: it is `cancelled` now and will never run.
    Cancelled,
    /// The job is running: its worker will cancel its context within a quarter of its lease;
    /// the job decides how to stop, and ends `cancelled` (or `done`, if it finished anyway).
    Requested,
    /// The job had already ended with this status; nothing changed.
    AlreadyFinished(JobStatus),
}

/// A filter over jobs, for [`Queue::list`](crate::Queue::list),
/// [`Queue::count`](crate::Queue::count) and the bulk actions
/// ([`Queue::cancel_matching`](crate::Queue::cancel_matching),
/// [`Queue::retry_matching`](crate::Queue::retry_matching)). Every field is optional; the
/// set ones must all match, and the default matches every job.
///
/// ```
/// # mod jobqueue { pub use jobqueue_runtime::JobStatus; pub mod admin { pub use jobqueue_runtime::JobFilter; } }
/// use jobqueue::admin::JobFilter;
/// use jobqueue::JobStatus;
///
/// let filter = JobFilter::default()
///     .queue("exports")
///     .status(JobStatus::Failed)
///     .meta("tenant", "acme");
/// assert_eq!(filter.queue.as_deref(), Some("exports"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobFilter {
    /// Only this status.
    pub status: Option<JobStatus>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only task keys starting with this text.
    pub key_prefix: Option<String>,
    /// Only jobs enqueued at or after this time (the server's clock).
    pub created_from: Option<DateTime<Utc>>,
    /// Only jobs enqueued before this time (the server's clock).
    pub created_to: Option<DateTime<Utc>>,
    /// Only jobs whose time in their status is at or after this time (see
    /// [`JobFilter::status_time`]).
    pub status_time_from: Option<DateTime<Utc>>,
    /// Only jobs whose time in their status is before this time.
    pub status_time_to: Option<DateTime<Utc>>,
    /// Only jobs whose metadata has this key with this value (a JSON string equal to it, or
    /// a number or boolean that prints as it: `42`, `true`).
    pub meta: Option<(String, String)>,
    /// Only jobs whose last error contains this text (see [`JobFilter::error_contains`]).
    pub error_contains: Option<String>,
}

impl JobFilter {
    /// How a listing with this filter is ordered, in words (see
    /// [`Queue::list`](crate::Queue::list)): "newest first" without a status, "newest
    /// finished first" for finished statuses, "soonest lease expiry first" for running jobs,
    /// "next to run first" for waiting ones.
    pub fn order(&self) -> &'static str {
        match self.status {
            None => "newest first",
            Some(JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled) => {
                "newest finished first"
            }
            Some(JobStatus::Running) => "soonest lease expiry first",
            Some(_) => "next to run first",
        }
    }

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

    /// Only jobs whose task key starts with `prefix` (an empty prefix matches every job).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// Only jobs enqueued in `[from, to)`; either end may be open.
    pub fn created(mut self, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Self {
        self.created_from = from;
        self.created_to = to;
        self
    }

    /// Only jobs whose time in their status is in `[from, to)`; either end may be open.
    /// That time is the one a listing of one status is ordered by: when the job is due
    /// (scheduled, ready, blocked), when its lease ends (running), when it finished (done,
    /// failed, cancelled). With a status, the bounds are a range of the listing's index:
    /// "the jobs that failed between 9:00 and 9:30" reads only those. Without a status they
    /// are tested row by row, as the enqueue times of [`JobFilter::created`] are.
    pub fn status_time(mut self, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Self {
        self.status_time_from = from;
        self.status_time_to = to;
        self
    }

    /// Only jobs whose metadata holds `key` with `value` (see [`JobFilter::meta`]). A key of
    /// other characters than ASCII letters, digits, `_`, `-` and `.` matches no job.
    ///
    /// The metadata is not indexed: a page of [`Queue::list`](crate::Queue::list) tests at
    /// most [`LIST_SCAN_ROWS`](crate::LIST_SCAN_ROWS) jobs (fewer through an index) of the
    /// range the other filters select, in the list's order (see
    /// [`JobPage::searched`](crate::JobPage::searched)); the count and the bulk actions test
    /// every job of that range. Combine it with a status and a queue on a large table.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.meta = Some((key.into(), value.into()));
        self
    }

    /// Only jobs whose `last_error` contains `text`, ignoring case (`%` and `_` are plain
    /// characters here; an empty text matches every job).
    ///
    /// Errors are not indexed: like [`JobFilter::meta`], a page of the list tests a bounded
    /// number of jobs ([`LIST_SCAN_ROWS`](crate::LIST_SCAN_ROWS)) of the range the other
    /// filters select, and stops after a second
    /// ([`Error::FilterTooSlow`](crate::Error::FilterTooSlow)) if their errors are long.
    /// Combine it with a status (`failed`) and a queue on a large table.
    pub fn error_contains(mut self, text: impl Into<String>) -> Self {
        self.error_contains = Some(text.into());
        self
    }
}

/// How many jobs of one queue are in each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct StatusCounts {
    /// Scheduled jobs (delayed, or waiting out a retry's backoff).
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
}

impl StatusCounts {
    /// The count of jobs in `status`.
    pub fn get(&self, status: JobStatus) -> u64 {
        match status {
            JobStatus::Scheduled => self.scheduled,
            JobStatus::Ready => self.ready,
            JobStatus::Blocked => self.blocked,
            JobStatus::Running => self.running,
            JobStatus::Done => self.done,
            JobStatus::Failed => self.failed,
            JobStatus::Cancelled => self.cancelled,
        }
    }

    /// Every job of the queue, whatever its status.
    pub fn total(&self) -> u64 {
        JobStatus::ALL.iter().map(|&s| self.get(s)).sum()
    }

    /// Sets the count of jobs in `status`.
    pub(crate) fn set(&mut self, status: JobStatus, n: u64) {
        let count = match status {
            JobStatus::Scheduled => &mut self.scheduled,
            JobStatus::Ready => &mut self.ready,
            JobStatus::Blocked => &mut self.blocked,
            JobStatus::Running => &mut self.running,
            JobStatus::Done => &mut self.done,
            JobStatus::Failed => &mut self.failed,
            JobStatus::Cancelled => &mut self.cancelled,
        };
        *count = n;
    }
}

/// One queue's figures, as `jobqueue status` shows them.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct QueueStats {
    /// The queue's name.
    pub queue: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Its jobs per status (serialised as fields of the queue's own object).
    #[serde(flatten)]
    pub counts: StatusCounts,
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

/// How many jobs of one queue and status [`Queue::queue_overview`](crate::Queue::queue_overview)
/// counts at most, where it counts them itself (`done` and `cancelled`): reading further
/// would cost as much as the jobs there are. A count that reaches the cap is listed in
/// [`QueueOverview::capped`], and means "at least this many".
pub const OVERVIEW_COUNT_CAP: u64 = 1_000;

/// One queue at a glance, as [`Queue::queue_overview`](crate::Queue::queue_overview) reads
/// every queue's without reading every job: its counts by status, whether it is paused, how
/// far behind it is and its expired leases. [`QueueStats`] has exact counts and more
/// figures, at the cost of reading the queue's jobs.
///
/// Where each figure comes from:
/// - `scheduled`, `ready`, `blocked`, `running` and `failed`, and `oldest_ready_secs`: the
///   queue gauges, counted by one worker of the fleet every few seconds (or by this call,
///   when no worker counted lately); exact when they were counted, [`counted_secs_ago`]
///   seconds ago.
/// - `done` and `cancelled`: counted now, up to [`OVERVIEW_COUNT_CAP`]; a count that
///   reached it is in [`capped`].
/// - `paused` and `expired_leases`: read now.
///
/// [`counted_secs_ago`]: QueueOverview::counted_secs_ago
/// [`capped`]: QueueOverview::capped
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct QueueOverview {
    /// The queue's name.
    pub queue: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Its jobs per status (serialised as fields of the queue's own object).
    #[serde(flatten)]
    pub counts: StatusCounts,
    /// Age of the oldest ready job, in seconds (how far behind the queue is), as of the
    /// gauges' count.
    pub oldest_ready_secs: Option<f64>,
    /// Running jobs whose lease has expired: they wait for a reclaim.
    pub expired_leases: u64,
    /// How many seconds ago the gauges (the counts of scheduled, ready, blocked, running
    /// and failed jobs) were counted; `None` if they never were.
    pub counted_secs_ago: Option<f64>,
    /// The statuses whose count stopped at [`OVERVIEW_COUNT_CAP`]: there are at least that
    /// many jobs.
    pub capped: Vec<JobStatus>,
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
    fn statuses_are_ordered_as_their_lifecycle() {
        assert!(JobStatus::ALL.windows(2).all(|w| w[0] < w[1]));
    }

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
        let mut counts = StatusCounts::default();
        counts.set(JobStatus::Ready, 3);
        counts.set(JobStatus::Blocked, 2);
        assert_eq!((counts.get(JobStatus::Ready), counts.total()), (3, 5));
        let stats = serde_json::to_value(QueueStats {
            queue: "default".into(),
            counts,
            ..Default::default()
        })
        .unwrap();
        // The counts are fields of the queue's object, as before they had a type of their own.
        assert_eq!(stats["queue"], "default");
        assert_eq!(stats["ready"], 3);
        assert_eq!(stats["blocked"], 2);
        assert!(stats.get("counts").is_none(), "{stats}");
    }
}
