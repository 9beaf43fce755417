// Every item `jobqueue` exports, named as a user names it: removing one from the facade, or
// moving it, breaks this file.
#![allow(unused_imports)]

use jobqueue::cron::{tick_key, Schedule};
use jobqueue::key::{derived_task_key, fit_key, MAX_KEY_CHARS, MAX_QUEUE_CHARS};
use jobqueue::registry::{all, lookup, JobDescriptor, Registry, RunError};
use jobqueue::testing::{
    assert_enqueued, drain, enqueued, perform, refute_enqueued, Drain, DrainCounts, DrainSummary,
    EnqueuedJob, Error as TestServerError, ExpectEnqueued, Perform, Performed, TestDatabase,
    TestServer, DEFAULT_MAX_RUNS,
};
use jobqueue::{
    job, redact_url, register, shutdown_signal, Backoff, BoxError, CancelOutcome, CancelReason,
    Data, DataNeed, EnqueueOptions, FromJobContext, Enqueued, Error, IntoJobResult, Job, JobCanceller, JobContext, JobContextBuilder, JobError,
    JobFilter, JobOptions, JobPage, JobQuery, JobRecord, JobRef, PeriodicJob, ThroughputMinute,
    WorkerInfo, HEARTBEAT_INTERVAL, WORKER_FORGOTTEN_AFTER, WORKER_GONE_AFTER, JobStatus, MetricsSnapshot, Queue, QueueConfig,
    QueueStats, RateLimit, Result, Retention, RunningJob, ServerInfo, Worker, WorkerBuilder, WorkerHandle,
};
use jobqueue::pool_options;
use jobqueue::{Uniqueness, MAX_METADATA_BYTES, MAX_PROGRESS_BYTES};
use jobqueue::{
    Attempt, AttemptOutcome, JobOutput, MAX_ATTEMPT_ERROR_BYTES, MAX_ATTEMPT_HISTORY,
    MAX_OUTPUT_BYTES,
};
// Middleware.
use jobqueue::{JobRunInfo, Middleware, Next, RunOutcome, RunResult};

fn main() {}
