//! The store's request and response vocabulary: what an insert, a claim, an outcome, a
//! lease check, a reclaim and a periodic tick take and give back. Crate-private, but for the
//! few types the protocol tests drive through `__store`.

use std::time::Duration;

use chrono::NaiveDateTime;

use super::Uniqueness;

/// One queue's gauges: the figures maintenance publishes as `jobqueue_queue_jobs` and
/// `jobqueue_queue_oldest_ready_age_seconds`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct QueueGauges {
    pub(crate) queue: String,
    pub(crate) scheduled: u64,
    pub(crate) ready: u64,
    /// Jobs waiting for a slot of their limit (`blocked`).
    pub(crate) blocked: u64,
    pub(crate) running: u64,
    pub(crate) failed: u64,
    /// Age of the oldest ready job; `None` when none is ready.
    pub(crate) oldest_ready_secs: Option<f64>,
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
    /// How long its key blocks another enqueue.
    pub(crate) unique: Uniqueness,
    /// The metadata object, as JSON text.
    pub(crate) metadata: Option<String>,
    /// Its concurrency and rate limits, if its kind has any.
    pub(crate) limits: JobLimits,
}

/// The limits a job carries in its row (see the limits guide, `jobqueue::guide::limits`).
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
    /// An operator paused the kind's schedule: no tick was enqueued.
    Paused,
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
    /// The metadata object the job was enqueued with, for the worker's middleware (`None`
    /// when it has none, or it cannot be read).
    pub metadata: Option<serde_json::Value>,
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
    /// The job asked to run again later ([`JobError::snooze`](crate::JobError::snooze)):
    /// back to `scheduled`, due after `delay`, without spending an attempt (`max_attempts`
    /// grows by one with `attempts`), `snoozes` counted. To `failed` with `exhausted` in
    /// `last_error` when the job has snoozed `max_snoozes` times already; to `cancelled` if
    /// an operator's cancel is pending.
    Snooze {
        /// The wait before the next attempt.
        delay: Duration,
        /// How many snoozes the job may have.
        max_snoozes: u32,
        /// The error it fails with after `max_snoozes` snoozes.
        exhausted: String,
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
