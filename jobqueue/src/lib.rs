//! Background jobs in a MySQL 8.0 / MariaDB 10.6+ table, claimed with
//! `SELECT ... FOR UPDATE SKIP LOCKED`.
//!
//! See the README for the whole picture; the short of it:
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
//! let queue = Queue::connect("mysql://root@127.0.0.1/test").await?;
//! queue.migrate().await?;
//! queue.enqueue(ExportOrder { order_id: 7412, format: "csv".into() }).await?;
//! Worker::builder(queue).queues(["exports"]).concurrency(16).build()?
//!     .run_until(jobqueue::shutdown_signal()).await?;
//! # Ok(()) }
//! ```

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
#[macro_export]
macro_rules! register {
    ($job:ty) => {
        $crate::__private::inventory::submit! {
            $crate::__private::JobDescriptor::of::<$job>(::core::concat!(
                ::core::module_path!(),
                "::",
                ::core::stringify!($job)
            ))
        }
    };
}

/// What `#[job]` expands to uses these paths. Not a stable API: anything here may change in
/// any release.
#[doc(hidden)]
pub mod __private {
    pub use jobqueue_runtime::__private::*;
}
