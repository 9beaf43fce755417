//! The runtime behind `jobqueue`: the MySQL/MariaDB store, enqueue, the claim loop and the
//! worker. Depend on the `jobqueue` crate, which re-exports everything here with the
//! `#[job]` macro.

mod admin;
mod audit;
mod backend;
mod complete_in;
pub mod cron;
mod data;
mod enqueue;
mod error;
mod job;
pub mod key;
mod maintenance;
mod metrics;
mod model;
mod operator;
mod progress;
mod queue;
pub mod registry;
mod retry;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod trace;
mod wait;
mod worker;

pub use audit::{AuditEntry, AUDIT_JOB_ROWS};
pub use backend::{Backend, DatabasePool, JobConnection, JobDatabase};
pub use data::{Data, DataNeed};
pub use enqueue::{EnqueueOptions, MAX_METADATA_BYTES};
pub use error::{BoxError, Error, JobError, JobRef, Result};
pub use job::{
    CancelReason, FromJobContext, IntoJobResult, Job, JobCanceller, JobContext, JobContextBuilder,
    JobOptions, JobOutput, RateLimit,
};
pub use metrics::MetricsSnapshot;
pub use model::Uniqueness;
pub use model::{
    Attempt, AttemptOutcome, CancelOutcome, Enqueued, JobFilter, JobRecord, JobStatus,
    QueueOverview, QueueStats, Retention, RunningJob, StatusCounts, MAX_ATTEMPT_ERROR_BYTES,
    MAX_ATTEMPT_HISTORY, MAX_OUTPUT_BYTES, OVERVIEW_COUNT_CAP,
};
pub use model::{
    BlockingKey, BulkProgress, JobDetail, JobSummary, JobSummaryPage, KindStats, LimitKind,
    PeriodicTicks, QueueDetail, QueueOverviewPage, SlotHolder, StoredJson, StoredText, TickJob,
    DASHBOARD_ROWS, DETAIL_HISTORY_BYTES, DETAIL_TEXT_BYTES, KIND_RUNTIME_BOUNDS,
    SUMMARY_ERROR_CHARS,
};
pub use model::{InvalidCursor, JobCursor, JobPage, PeriodicJob, ThroughputMinute, WorkerInfo};
pub use operator::{
    ListCounts, SelectionOutcome, LIST_COUNT_CAP, LIST_SCAN_INDEXED_ROWS, LIST_SCAN_ROWS,
    MAX_NAMES, MAX_SELECTION, RECOUNT_MAX_JOBS,
};
pub use progress::MAX_PROGRESS_BYTES;
pub use queue::{pool_options, postgres_pool_options, redact_url, Queue, QueueConfig};
pub use retry::Backoff;
pub use store::DbErrorKind;
pub use store::ServerInfo;
pub use worker::{shutdown_signal, Worker, WorkerBuilder, WorkerHandle};
pub use worker::{JobRunInfo, Middleware, Next, RunOutcome, RunResult};
pub use worker::{HEARTBEAT_INTERVAL, WORKER_FORGOTTEN_AFTER, WORKER_GONE_AFTER};

/// The steps of the claim protocol (claim, renew, complete, finish, reclaim, promote) and
/// the statements whose query plans the protocol relies on, for this workspace's own
/// protocol tests. Not a stable API: it changes whenever the protocol does.
#[doc(hidden)]
pub mod __store {
    pub use crate::model::{Claimed, EmptyClaim, Finish, LeaseState, Reclaimed};
    /// The channel an idle PostgreSQL worker listens on.
    pub use crate::store::postgres::wake::READY_CHANNEL;
    pub use crate::store::{Listening, Store, WakeSource, DEFAULT_MAX_LEASE_EXPIRIES};

    /// PostgreSQL's promotion, reclaim and pruning statements, which must be served by the
    /// `(status, status_at, id)` index, for the PostgreSQL EXPLAIN tests.
    pub mod pg_maintenance {
        pub use crate::store::postgres::maintenance::{
            PG_PROMOTE, PG_PROMOTE_PROBE, PG_PRUNE, PG_RECLAIM_SELECT,
        };
    }

    /// Statements that must be served by their index (no filesort, no full scan), for the
    /// EXPLAIN tests.
    pub mod statements {
        pub use crate::store::{
            claim_lock_sql, complete_in_sql, count_gauges_sql, ready_probe_sql,
            BRING_FORWARD_SELECT, CLAIM_SELECT, COUNT_THROUGHPUT, GAUGE_QUEUES, PROMOTE_PROBE,
            PROMOTE_SELECT, PRUNE_SELECT, RECLAIM_SELECT,
        };
        // The claim's statement on PostgreSQL.
        pub use crate::store::pg_claim_sql;
        // A job's history and output, read by primary key.
        pub use crate::store::{ATTEMPT_LOG_SELECT, OUTPUT_SELECT};
        // The blocked jobs a drain left in a queue.
        pub use crate::store::BLOCKED_IN_QUEUE;
        // The limits' statements on their side tables.
        pub use crate::store::{
            BLOCKED_DELETE_JOB, BLOCKED_SELECT, FREE_CONCURRENCY_SLOT, FREE_RATE_SLOT,
            ORPHAN_SLOTS, WAKE_SCAN,
        };
        // The claim's locking read of the free slots it takes.
        pub use crate::store::limits::lock_free_slots_sql;
        // The operator dashboard's statements for a filter, with their arguments; run one
        // with `Store::explain`.
        pub use crate::store::{dashboard_statements, Arg};
        // The job list's pickers and status tabs, and an operator's "run now".
        pub use crate::store::{
            CAPPED_QUEUE_STATUS_COUNT, CAPPED_STATUS_COUNT, NEXT_KIND_NAME, NEXT_QUEUE_NAME,
            RUN_NOW_UPDATE,
        };
        // The job list's "Newer" page: its listing read backwards, with its arguments.
        pub use crate::store::previous_statement;
        // An operator's prune of the jobs matching a filter: its count and its batch's
        // locking read, with their arguments.
        pub use crate::store::{prune_matching_count, prune_matching_select};
        /// The same statements on PostgreSQL, for `Store::explain` on a queue there.
        pub mod postgres {
            pub use crate::store::postgres::admin::{prune_matching_count, prune_matching_select};
            pub use crate::store::postgres::dashboard::{dashboard_statements, list_statement};
            pub use crate::store::postgres::operator::previous_statement;
        }
        // The older jobs of a task key (see `Uniqueness`).
        pub use crate::store::{key_history_sql, release_sql};
        // A running job's progress write.
        pub use crate::store::PROGRESS_UPDATE;
        // What a completion in the job's own transaction does besides its statement: free
        // its slot by primary key, then (after the commit) write its output and wake its key.
        pub use crate::store::{
            CONCURRENCY_KEY_OF_JOB, OUTPUT_AFTER_COMMIT, SLOT_OF_CLAIM, SLOT_RELEASE,
        };
    }
}

/// What `#[job]` expands to uses these paths. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::data::DataNeed;
    pub use crate::job::{FromJobContext, IntoJobResult, JobOutput, OutputSlot};
    pub use crate::key::{derived_task_key, fit_key};
    pub use crate::registry::{JobDescriptor, RunFuture};
    pub use ::inventory;
    pub use ::serde;
    pub use ::serde_json;
}
