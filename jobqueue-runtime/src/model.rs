//! The plain data of the queue: what a job row is, what its states are, and what each step
//! of the protocol takes and gives back. Behaviour modules (the store, the queue, the worker,
//! maintenance) import these types; this module imports none of them, only the error type
//! its parsers return.
//!
//! `record.rs` holds the public records, `dashboard.rs` what a dashboard reads, and
//! `protocol.rs` the store's own vocabulary.

mod dashboard;
mod protocol;
mod record;

pub(crate) use dashboard::RUN_NOW_SUFFIX;
pub use dashboard::{
    BlockingKey, BulkProgress, JobDetail, JobSummary, JobSummaryPage, KindStats, LimitKind,
    PeriodicTicks, QueueDetail, QueueOverviewPage, SlotHolder, StoredJson, StoredText, TickJob,
    DASHBOARD_ROWS, DETAIL_HISTORY_BYTES, DETAIL_TEXT_BYTES, KIND_RUNTIME_BOUNDS,
    SUMMARY_ERROR_CHARS,
};
pub use dashboard::{InvalidCursor, JobCursor, JobPage, PeriodicJob, ThroughputMinute, WorkerInfo};
pub use protocol::{Claimed, EmptyClaim, Finish, LeaseState, Reclaimed};
pub(crate) use protocol::{JobLimits, NewJob, QueueGauges, TickPass};
pub use record::{
    Attempt, AttemptOutcome, CancelOutcome, Enqueued, JobFilter, JobRecord, JobStatus,
    QueueOverview, QueueStats, Retention, RunningJob, StatusCounts, Uniqueness,
    MAX_ATTEMPT_ERROR_BYTES, MAX_ATTEMPT_HISTORY, MAX_OUTPUT_BYTES, OVERVIEW_COUNT_CAP,
};

/// Whether `key` may name a metadata entry: 1 to 64 ASCII letters, digits, `_`, `-`, `.`.
/// The enqueue checks the keys it stores with it, and a filter the key it looks for.
pub(crate) fn valid_meta_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
