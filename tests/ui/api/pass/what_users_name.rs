// Every item `jobqueue` exports, named as a user names it: removing one from the facade, or
// moving it, breaks this file.
#![allow(unused_imports)]

// The root: what most programs name.
use jobqueue::{
    job, pool_options, register, shutdown_signal, Backoff, Data, DbErrorKind, EnqueueOptions,
    Enqueued, Error, Job, JobContext, JobError, JobOptions, JobStatus, Middleware, Queue,
    QueueConfig, Result, Retention, Uniqueness, Worker, WorkerBuilder, WorkerHandle,
};

// The modules, by role.
use jobqueue::admin::{
    redact_url, Attempt, AttemptOutcome, CancelOutcome, InvalidCursor, JobCursor, JobFilter, JobPage, JobRecord,
    JobRef, PeriodicJob, QueueOverview, QueueStats, RunningJob, StatusCounts, ServerInfo, ThroughputMinute, WorkerInfo,
    HEARTBEAT_INTERVAL, OVERVIEW_COUNT_CAP, WORKER_FORGOTTEN_AFTER, WORKER_GONE_AFTER,
};
// What the dashboard reads: rows without their payloads, one job as stored text, a bounded
// overview, a bulk action's progress.
use jobqueue::admin::{
    BulkProgress, JobDetail, JobSummary, JobSummaryPage, QueueOverviewPage, StoredJson, StoredText,
    DASHBOARD_ROWS, DETAIL_HISTORY_BYTES, DETAIL_TEXT_BYTES, SUMMARY_ERROR_CHARS,
};
use jobqueue::context::{
    BoxError, CancelReason, DataNeed, FromJobContext, IntoJobResult, JobCanceller,
    JobContextBuilder, JobOutput,
};
use jobqueue::cron::{tick_key, Schedule};
use jobqueue::key::{derived_task_key, fit_key, MAX_KEY_CHARS, MAX_QUEUE_CHARS};
use jobqueue::limits::{
    RateLimit, MAX_ATTEMPT_ERROR_BYTES, MAX_ATTEMPT_HISTORY, MAX_METADATA_BYTES,
    MAX_OUTPUT_BYTES, MAX_PROGRESS_BYTES,
};
use jobqueue::metrics::MetricsSnapshot;
use jobqueue::middleware::{JobRunInfo, Next, RunOutcome, RunResult};
use jobqueue::registry::{all, lookup, JobDescriptor, Registry, RunError};
use jobqueue::testing::{
    assert_enqueued, drain, enqueued, perform, refute_enqueued, Drain, DrainCounts, DrainSummary,
    EnqueuedJob, Error as TestServerError, ExpectEnqueued, Perform, Performed, TestDatabase,
    TestServer, DEFAULT_MAX_RUNS,
};

fn main() {}
