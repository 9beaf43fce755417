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

/// Whether JSON text `json` holds the escape `\u0000` (in a string; a `\\` before `u0000`
/// is an escaped backslash, not that escape). PostgreSQL's JSONB cannot store that
/// character: its enqueue refuses such a payload or metadata, and `set_progress` such a value
/// on every database, so that a job's progress behaves alike on both.
pub(crate) fn holds_nul_escape(json: &str) -> bool {
    let b = json.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if b.get(i + 1) == Some(&b'u') && b.get(i + 2..i + 6) == Some(b"0000".as_slice()) {
                return true;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    false
}

/// Whether `key` may name a metadata entry: 1 to 64 ASCII letters, digits, `_`, `-`, `.`.
/// The enqueue checks the keys it stores with it, and a filter the key it looks for.
pub(crate) fn valid_meta_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod nul_tests {
    use super::holds_nul_escape;

    #[test]
    fn a_nul_escape_is_found_and_an_escaped_backslash_is_not_one() {
        let with_nul = serde_json::to_string(&serde_json::json!({"s": "a\u{0}b"})).unwrap();
        assert!(holds_nul_escape(&with_nul), "{with_nul}");
        let backslash = serde_json::to_string(&serde_json::json!({"s": "\\u0000"})).unwrap();
        assert!(!holds_nul_escape(&backslash), "{backslash}");
        assert!(!holds_nul_escape(r#"{"s": "\u0001", "t": "\\"}"#));
    }
}
