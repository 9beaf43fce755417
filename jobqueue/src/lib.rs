//! Background jobs in a MySQL 8.0 / MariaDB 10.6+ table, claimed with
//! `SELECT ... FOR UPDATE SKIP LOCKED`.
//!
//! Jobs are rows of one InnoDB table, `job_queue`. Workers run inside your own binaries, on
//! as many instances as you like: each claim is a short transaction that locks as many
//! ready rows as the worker has free slots (rows other workers hold are skipped, never
//! waited for) and marks them `running` under a lease; the job's code runs after the commit;
//! the outcome is written with a statement fenced by the claim's owner and attempt number,
//! so a worker that lost its lease cannot overwrite anything.
//!
//! # Defining jobs
//!
//! [`#[job]`](job) on an `async fn` makes it a job kind: it generates a struct of the
//! arguments (serde-serialized into the row), an impl of [`Job`], and a link-time
//! registration the worker finds by itself.
//!
//! ```no_run
//! use jobqueue::{job, JobContext, JobError, Queue, Worker};
//!
//! /// Export one order as a file.
//! #[job(queue = "exports", max_attempts = 5, key = "export:{order_id}:{format}")]
//! async fn export_order(ctx: JobContext, order_id: u64, format: String) -> Result<(), JobError> {
//!     println!("exporting order {order_id} as {format} (attempt {})", ctx.attempt());
//!     Ok(())
//! }
//!
//! # async fn demo() -> jobqueue::Result<()> {
//! let queue = Queue::connect("mysql://app:secret@127.0.0.1/shop").await?;
//! queue.migrate().await?;
//! queue.enqueue(ExportOrder { order_id: 7412, format: "csv".into() }).await?;
//! Worker::builder(queue).queues(["exports"]).concurrency(16).build()?
//!     .run_until(jobqueue::shutdown_signal()).await?;
//! # Ok(()) }
//! ```
//!
//! # Enqueueing
//!
//! [`Queue::enqueue`] inserts one row and is idempotent: every job has a task key (derived
//! from its kind and arguments, or rendered from the kind's `key` template, or given in
//! [`EnqueueOptions::key`]), and a second enqueue of an existing key returns
//! [`Enqueued::Duplicate`] with the existing job's id and status, and logs it (at WARN when
//! that job has already finished, since nothing will run); the job never runs twice.
//! [`Queue::enqueue_in`] enqueues inside your own transaction (the job exists if and only if
//! it commits), [`Queue::enqueue_many`] inserts many with a few statements, and
//! [`Queue::enqueue_with`] takes a delay, a start time, a priority or an explicit key.
//!
//! How long a key blocks is the kind's [`Uniqueness`] (`#[job(unique = "while_active")]`,
//! `#[job(unique_for = "1h")]`, or [`EnqueueOptions::unique`]): until the job is pruned (the
//! default), while it waits or runs, or for a period after its enqueue. Once it stops
//! blocking, the next enqueue of the key makes a new job and the old one stays as history
//! ([`Queue::jobs_by_key`]). A job may carry a small JSON object of metadata
//! ([`EnqueueOptions::meta`], filtered with [`JobFilter::meta`](admin::JobFilter::meta)) and,
//! while it runs, report its progress ([`JobContext::set_progress`]), which operators read in
//! its [`JobRecord`](admin::JobRecord).
//!
//! # Running jobs
//!
//! A [`Worker`] claims exactly its free slots, renews its leases while jobs run, retries
//! failed attempts with the kind's [`Backoff`], and on shutdown lets running jobs finish
//! for a grace period before handing the rest back. Every worker also runs maintenance:
//! due delayed jobs are promoted, expired leases (a crashed worker's jobs) are reclaimed with
//! their attempts kept (a job whose lease keeps expiring is failed as a poison job, see
//! [`WorkerBuilder::max_lease_expiries`]), periodic (`cron`) jobs are enqueued at most once per
//! tick across all nodes and restarts, and finished jobs are pruned after their [`Retention`].
//! A job a worker cannot run (a kind or payload of another release) waits for one that can,
//! without spending its attempts ([`WorkerBuilder::unrunnable_deadline`]).
//!
//! Leases are renewed, and outcomes written, from a thread of the worker's own with
//! connections of its own, and every database call of a worker has a timeout, so neither a
//! server that stops answering nor job code that blocks its thread can make a lease lapse.
//! Blocking work still belongs in `tokio::task::spawn_blocking`: a job that blocks a runtime
//! thread holds up every other task on it, and its cancellation cannot interrupt it.
//!
//! # Guarantees
//!
//! At-least-once execution, idempotent enqueue, and fenced writes. A job can still run twice
//! when a worker finishes it but cannot record the outcome before its lease expires (a crash,
//! a network cut, a server restart): make its side effects idempotent, keyed by
//! [`JobContext::task_key`]. Writes to the queue's own database can be exactly once instead:
//! [`JobContext::complete_in`] marks the job done inside your transaction, fenced by the
//! claim, so the writes and the completion commit together, and an attempt that lost its
//! lease cannot commit.
//!
//! # Server requirements
//!
//! MySQL 8.0.13+ or MariaDB 10.6+ (10.6.6+ recommended), the primary (never a replica),
//! `binlog_format` ROW or MIXED when the binary log is on, no Galera. [`Queue::connect`]
//! checks these and refuses an unsafe server with an error saying what to change.
//!
//! # Features
//!
//! - `testing`: `jobqueue::testing`: a database per test on a throwaway
//!   MariaDB/MySQL server, one job run in-process, typed assertions on enqueued jobs, and
//!   draining queues in a test.
//! - `opentelemetry`: an enqueue stores the W3C `traceparent` of the current span with the
//!   job, and the job's span continues it (the first attempt as a child, retries linked);
//!   needs a `tracing-opentelemetry` layer. See the [operations guide](guide::operations).
//!
//! # Where things are
//!
//! The root holds what most programs name. The rest is grouped by role:
//! [`context`] (what job code uses beyond [`JobContext`]), [`limits`] (rate limits and size
//! bounds), [`admin`] (what operators read and act on: [`admin::JobFilter`],
//! [`admin::JobRecord`]...), [`metrics`], [`middleware`], [`registry`], [`key`], [`cron`],
//! and `testing` (with the `testing` feature). The [`guide`] module holds the guides: getting
//! started in an existing service, jobs and options, scheduling, uniqueness, limits, the
//! lifecycle, exactly-once effects, middleware, testing, operations, deployment, guarantees,
//! performance and the FAQ.

#[doc(inline)]
pub use jobqueue_macros::job;

pub mod guide;

// The public API, item by item: nothing of the runtime becomes API by being `pub` there.
// `tests/ui/api` checks both directions (what users name resolves; the insides do not).
// The root holds what most programs name; the modules below hold the rest, by role.

// Defining jobs.
#[doc(inline)]
pub use jobqueue_runtime::{Backoff, Data, Job, JobContext, JobError, JobOptions};
// Enqueueing.
#[doc(inline)]
pub use jobqueue_runtime::{
    pool_options, postgres_pool_options, EnqueueOptions, Enqueued, Queue, QueueConfig, Uniqueness,
};
// The databases a queue runs on, and the connections it takes from the application.
#[doc(inline)]
pub use jobqueue_runtime::{Backend, DatabasePool, JobConnection, JobDatabase};
// Running jobs.
#[doc(inline)]
pub use jobqueue_runtime::{
    shutdown_signal, Middleware, Retention, Worker, WorkerBuilder, WorkerHandle,
};
// A job's state; errors.
#[doc(inline)]
pub use jobqueue_runtime::{DbErrorKind, Error, JobStatus, Result};

/// What job code uses beyond the root: its cancellation, the arguments a job function may
/// take besides its own ([`FromJobContext`](context::FromJobContext),
/// [`DataNeed`](context::DataNeed)), what it may return
/// ([`IntoJobResult`](context::IntoJobResult), [`JobOutput`](context::JobOutput)), and a
/// context built by hand for a test ([`JobContextBuilder`](context::JobContextBuilder)).
pub mod context {
    #[doc(inline)]
    pub use jobqueue_runtime::{
        BoxError, CancelReason, DataNeed, FromJobContext, IntoJobResult, JobCanceller,
        JobContextBuilder, JobOutput,
    };
}

/// Bounds on what jobs may do and carry: the [`RateLimit`](limits::RateLimit) of a kind,
/// and every size limit of a job's row.
pub mod limits {
    #[doc(inline)]
    pub use jobqueue_runtime::{
        RateLimit, MAX_ATTEMPT_ERROR_BYTES, MAX_ATTEMPT_HISTORY, MAX_METADATA_BYTES,
        MAX_OUTPUT_BYTES, MAX_PROGRESS_BYTES,
    };
}

/// What operators read and act on, through [`Queue`]'s operator methods (`job`, `list`,
/// `count`, `cancel_matching`, `retry_matching`, `stats`, `workers`...): jobs and their
/// attempts, the one filter over jobs, queue figures, live workers and periodic schedules.
pub mod admin {
    // Jobs and their history.
    #[doc(inline)]
    pub use jobqueue_runtime::{
        Attempt, AttemptOutcome, CancelOutcome, InvalidCursor, JobCursor, JobFilter, JobPage,
        JobRecord, JobRef,
    };
    // Who did what from the dashboard.
    #[doc(inline)]
    pub use jobqueue_runtime::{AuditEntry, AUDIT_JOB_ROWS};
    // Actions on jobs picked by id, and what a job list shows beside its rows.
    #[doc(inline)]
    pub use jobqueue_runtime::{
        ListCounts, SelectionOutcome, LIST_COUNT_CAP, LIST_SCAN_INDEXED_ROWS, LIST_SCAN_ROWS,
        MAX_NAMES, MAX_SELECTION, RECOUNT_MAX_JOBS,
    };
    // What the dashboard reads: rows without their payloads, one job as stored text, a
    // bounded overview, a bulk action's progress.
    #[doc(inline)]
    pub use jobqueue_runtime::{
        BulkProgress, JobDetail, JobSummary, JobSummaryPage, QueueOverviewPage, StoredJson,
        StoredText, DASHBOARD_ROWS, DETAIL_HISTORY_BYTES, DETAIL_TEXT_BYTES, SUMMARY_ERROR_CHARS,
    };
    // Queues, workers and schedules.
    #[doc(inline)]
    pub use jobqueue_runtime::{
        PeriodicJob, QueueOverview, QueueStats, RunningJob, StatusCounts, ThroughputMinute,
        WorkerInfo, OVERVIEW_COUNT_CAP,
    };
    // Per-kind figures, periodic schedules' recent jobs, one queue's page.
    #[doc(inline)]
    pub use jobqueue_runtime::{
        BlockingKey, KindStats, LimitKind, PeriodicTicks, QueueDetail, SlotHolder, TickJob,
        KIND_RUNTIME_BOUNDS,
    };
    // Live workers: how often each writes its heartbeat, and when it counts as gone.
    #[doc(inline)]
    pub use jobqueue_runtime::{HEARTBEAT_INTERVAL, WORKER_FORGOTTEN_AFTER, WORKER_GONE_AFTER};
    // The server the queue talks to, and its URL fit for a log.
    #[doc(inline)]
    pub use jobqueue_runtime::{redact_url, ServerInfo};
}

/// The figures a worker sends to the `metrics` facade, read in-process.
pub mod metrics {
    #[doc(inline)]
    pub use jobqueue_runtime::MetricsSnapshot;
}

/// Code wrapping every run of a job on a worker, registered with
/// [`WorkerBuilder::middleware`]: the [`Middleware`] trait at the root, and here what a
/// middleware is given ([`JobRunInfo`](middleware::JobRunInfo), [`Next`](middleware::Next))
/// and what it sees of the run ([`RunResult`](middleware::RunResult),
/// [`RunOutcome`](middleware::RunOutcome)). The [middleware guide](guide::middleware) shows
/// one in use.
pub mod middleware {
    #[doc(inline)]
    pub use jobqueue_runtime::{JobRunInfo, Next, RunOutcome, RunResult};
}

/// The job kinds this binary registered (with `#[job]` or [`register!`]): find a kind by
/// name, list them, or check them all as a worker does at start-up.
///
/// ```
/// // Every kind of this binary, checked as `Worker::build` checks them.
/// let registry = jobqueue::registry::Registry::load().expect("valid job kinds");
/// assert!(registry.kinds().iter().all(|kind| !kind.kind().is_empty()));
/// ```
pub mod registry {
    #[doc(inline)]
    pub use jobqueue_runtime::registry::{all, lookup, JobDescriptor, Registry, RunError};
}

/// Task keys, for hand-written [`Job`] impls and for looking a job up by its key.
pub mod key {
    #[doc(inline)]
    pub use jobqueue_runtime::key::{derived_task_key, fit_key, MAX_KEY_CHARS, MAX_QUEUE_CHARS};
}

/// Periodic jobs: cron schedules, and the task key each tick's job gets.
pub mod cron {
    #[doc(inline)]
    pub use jobqueue_runtime::cron::{tick_key, Schedule};
}

/// Testing an application that uses jobqueue (the `testing` feature): a database per test
/// ([`TestDatabase`](testing::TestDatabase)), one job run in-process
/// ([`perform`](testing::perform)), typed assertions on enqueued jobs
/// ([`assert_enqueued`](testing::assert_enqueued)), and draining queues in the test
/// ([`drain`](testing::drain)). The [testing guide](crate::guide::testing) shows a complete
/// test.
///
/// ```no_run
/// use jobqueue::testing::{assert_enqueued, drain, TestDatabase};
///
/// #[jobqueue::job(queue = "mail")]
/// async fn send_welcome(user_id: u64) {}
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let db = TestDatabase::new("signup").await?;
/// db.queue().enqueue(SendWelcome { user_id: 7 }).await?;
/// assert_enqueued::<SendWelcome>(db.queue()).matching(|job| job.user_id == 7).await;
/// assert_eq!(drain(db.queue()).await?.kind("send_welcome").done, 1);
/// # Ok(()) }
/// ```
///
/// [`TestServer`](testing::TestServer) is the server underneath:
/// `JOBQUEUE_TEST_DATABASE_URL`, or one started from the `mariadbd` or `mysqld` binary on
/// this machine. Its errors are [`testing::Error`], which converts into the queue's [`Error`]:
/// a test returning [`Result`] (or `Result<(), Box<dyn std::error::Error>>`) takes both with
/// `?`. [`TestDatabase::migrate_with`](testing::TestDatabase::migrate_with) runs the
/// application's own `sqlx::migrate!` migrations on the test's database.
#[cfg(feature = "testing")]
pub mod testing {
    #[doc(inline)]
    pub use jobqueue_runtime::testing::{
        assert_enqueued, drain, enqueued, perform, refute_enqueued, Drain, DrainCounts,
        DrainSummary, EnqueuedJob, Error, ExpectEnqueued, Perform, Performed, TestDatabase,
        TestServer, DEFAULT_MAX_RUNS, TEST_POOL_CONNECTIONS,
    };
}

/// Registers a hand-written [`Job`] impl, as `#[job]` does for the kinds it generates.
///
/// ```
/// use jobqueue::{Job, JobContext, JobError, JobOptions};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Reindex { index: String }
///
/// impl Job for Reindex {
///     const KIND: &'static str = "reindex";
///     const OPTIONS: JobOptions = JobOptions::DEFAULT.queue("maintenance");
///     async fn run(self, _ctx: JobContext) -> Result<(), JobError> { Ok(()) }
/// }
///
/// jobqueue::register!(Reindex);
/// assert!(jobqueue::registry::lookup("reindex").is_some());
/// ```
///
/// A periodic kind (`OPTIONS.cron` set) runs each tick with `Default::default()` arguments:
/// register it with `jobqueue::register!(Type, periodic)`, which requires `Type: Default`.
///
/// ```
/// use jobqueue::{Job, JobContext, JobError, JobOptions};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Heartbeat {}
///
/// impl Job for Heartbeat {
///     const KIND: &'static str = "heartbeat";
///     const OPTIONS: JobOptions = JobOptions::DEFAULT.cron("*/10 * * * * *");
///     async fn run(self, _ctx: JobContext) -> Result<(), JobError> { Ok(()) }
/// }
///
/// jobqueue::register!(Heartbeat, periodic);
/// assert!(jobqueue::registry::Registry::load().is_ok());
/// ```
#[macro_export]
macro_rules! register {
    (@submit $job:ty, $($with:tt)*) => {
        $crate::__private::inventory::submit! {
            $crate::__private::JobDescriptor::of::<$job>(::core::concat!(
                ::core::module_path!(),
                "::",
                ::core::stringify!($job)
            ))
            $($with)*
        }
    };
    ($job:ty) => {
        $crate::register!(@submit $job,);
    };
    ($job:ty, periodic) => {
        $crate::register!(@submit $job, .with_default_payload::<$job>());
    };
}

/// What `#[job]` expands to uses these paths. Not a stable API: anything here may change in
/// any release.
#[doc(hidden)]
pub mod __private {
    pub use jobqueue_runtime::__private::*;
}

/// The README's Rust blocks, compiled as documentation tests so that they stay true.
#[cfg(doctest)]
#[doc(test(attr(deny(warnings))))]
#[doc = include_str!("../../README.md")]
mod readme {}
