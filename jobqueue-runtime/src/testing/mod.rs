//! Testing an application that uses jobqueue (the `testing` feature): a database per test,
//! one job run in-process, typed assertions on enqueued jobs, and draining queues.
//!
//! Two kinds of test, as the testing guide (`jobqueue::guide::testing`) shows in full:
//!
//! * **this code enqueued that job**: give the code under test the queue of a
//!   [`TestDatabase`], then [`assert_enqueued`] / [`refute_enqueued`] / [`enqueued`], typed
//!   by the job's generated struct;
//! * **this job does the right thing**: [`perform`] runs one attempt with a real
//!   [`JobContext`](crate::JobContext), any attempt number, cancellation and shared state,
//!   and returns what a worker would record ([`Performed`]); [`drain`] runs everything due in
//!   some queues, and what those jobs enqueue, against the test database.
//!
//! ```no_run
//! # extern crate jobqueue_runtime as jobqueue;
//! # use jobqueue::{Job, JobContext, JobError, JobOptions};
//! # #[derive(Debug, serde::Serialize, serde::Deserialize)]
//! # struct SendEmail { to: String }
//! # impl Job for SendEmail {
//! #     const KIND: &'static str = "send_email";
//! #     const OPTIONS: JobOptions = JobOptions::DEFAULT;
//! #     async fn run(self, _ctx: JobContext) -> Result<(), JobError> { Ok(()) }
//! # }
//! use jobqueue::testing::{assert_enqueued, drain, TestDatabase};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let db = TestDatabase::new("welcome").await?;
//! db.queue().enqueue(SendEmail { to: "ada@example.com".into() }).await?;
//!
//! assert_enqueued::<SendEmail>(db.queue()).matching(|e| e.to == "ada@example.com").await;
//! let summary = drain(db.queue()).await?;
//! assert_eq!(summary.kind("send_email").done, 1);
//! # Ok(()) }
//! ```
//!
//! [`TestServer`] is the server underneath: the one `JOBQUEUE_TEST_DATABASE_URL` names, or a
//! throwaway one started from the `mariadbd` or `mysqld` binary on this machine. Its errors
//! are [`Error`], which converts into the queue's: a test returning [`crate::Result`] (or
//! `Result<(), Box<dyn std::error::Error>>`) takes both with `?`.
//!
//! [`TestDatabase::migrate_with`] runs the application's own `sqlx::migrate!` migrations on a
//! test's database, beside the queue's.

mod database;
mod drain;
mod enqueued;
mod perform;

pub use database::{TestDatabase, TEST_POOL_CONNECTIONS};
pub use drain::{drain, Drain, DrainCounts, DrainSummary, DEFAULT_MAX_RUNS};
pub use enqueued::{assert_enqueued, enqueued, refute_enqueued, EnqueuedJob, ExpectEnqueued};
pub use jobqueue_testserver::{Error, TestServer};

/// The test server's errors as the queue's, so that a test returning [`crate::Result`] takes
/// both with `?`: as [`crate::Error::Testing`], with the test server's message.
impl From<Error> for crate::Error {
    fn from(e: Error) -> Self {
        crate::Error::Testing(e.to_string())
    }
}
pub use perform::{perform, Perform, Performed};
