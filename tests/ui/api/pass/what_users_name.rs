// Every item `jobqueue` exports, named as a user names it: removing one from the facade, or
// moving it, breaks this file.
#![allow(unused_imports)]

use jobqueue::cron::{tick_key, Schedule};
use jobqueue::key::{derived_task_key, fit_key, MAX_KEY_CHARS, MAX_QUEUE_CHARS};
use jobqueue::registry::{all, lookup, JobDescriptor, Registry, RunError};
use jobqueue::testing::{Error as TestServerError, TestServer};
use jobqueue::{
    job, redact_url, register, shutdown_signal, Backoff, BoxError, CancelOutcome, CancelReason,
    Data, DataNeed, EnqueueOptions, FromJobContext, Enqueued, Error, IntoJobResult, Job, JobContext, JobError,
    JobFilter, JobOptions, JobPage, JobQuery, JobRecord, JobRef, PeriodicJob, ThroughputMinute,
    WorkerInfo, HEARTBEAT_INTERVAL, WORKER_FORGOTTEN_AFTER, WORKER_GONE_AFTER, JobStatus, MetricsSnapshot, Queue, QueueConfig,
    QueueStats, RateLimit, Result, Retention, RunningJob, ServerInfo, Worker, WorkerBuilder, WorkerHandle,
};

fn main() {}
