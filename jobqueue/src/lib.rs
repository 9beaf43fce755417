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
//! #[job(queue = "exports", max_attempts = 5, key = "export:{order_id}")]
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
//! [`Enqueued::Duplicate`] with the existing job's id and logs it; the job never runs twice.
//! [`Queue::enqueue_in`] enqueues inside your own transaction (the job exists if and only if
//! it commits), [`Queue::enqueue_many`] inserts many with a few statements, and
//! [`Queue::enqueue_with`] takes a delay, a start time, a priority or an explicit key.
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
//! [`JobContext::task_key`].
//!
//! # Server requirements
//!
//! MySQL 8.0.13+ or MariaDB 10.6+ (10.6.6+ recommended), the primary (never a replica),
//! `binlog_format` ROW or MIXED when the binary log is on, no Galera. [`Queue::connect`]
//! checks these and refuses an unsafe server with an error saying what to change.
//!
//! # Features
//!
//! - `testing`: `jobqueue::testing::TestServer`, a throwaway MariaDB/MySQL server for your own
//!   tests, started from the server binaries on `PATH`.
//! - `opentelemetry`: an enqueue stores the W3C `traceparent` of the current span with the
//!   job, and the job's span continues it (the first attempt as a child, retries linked);
//!   needs a `tracing-opentelemetry` layer. See the README's "Traces".

#[doc(inline)]
pub use jobqueue_macros::job;

pub use jobqueue_runtime::*;

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
