//! The runtime behind `jobqueue`: the MySQL/MariaDB store, enqueue, the claim loop and the
//! worker. Depend on the `jobqueue` crate, which re-exports everything here with the
//! `#[job]` macro.

mod admin;
pub mod cron;
mod data;
mod enqueue;
mod error;
mod heartbeat;
mod insight;
mod job;
pub mod key;
mod lease;
mod metrics;
mod migrate;
mod queue;
pub mod registry;
mod retry;
mod server;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod worker;

pub use admin::{CancelOutcome, JobFilter, QueueStats, RunningJob};
pub use data::{Data, DataNeed, FromJobContext};
pub use enqueue::{EnqueueOptions, Enqueued};
pub use error::{BoxError, Error, JobError, Result};
pub use heartbeat::{HEARTBEAT_INTERVAL, WORKER_FORGOTTEN_AFTER, WORKER_GONE_AFTER};
#[doc(hidden)]
pub use insight::Arg as InsightArg;
pub use insight::{JobPage, JobQuery, PeriodicJob, ThroughputMinute, WorkerInfo};
pub use job::{CancelReason, IntoJobResult, Job, JobContext, JobOptions};
pub use metrics::MetricsSnapshot;
pub use queue::{redact_url, JobRecord, JobStatus, Queue, QueueConfig};
pub use retry::Backoff;
pub use server::ServerInfo;
pub use worker::{shutdown_signal, Retention, Worker, WorkerBuilder, WorkerHandle};

/// What `#[job]` expands to uses these paths. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::data::FromJobContext;
    pub use crate::job::IntoJobResult;
    pub use crate::key::{derived_task_key, fit_key};
    pub use crate::registry::{JobDescriptor, RunFuture};
    pub use ::inventory;
    pub use ::serde;
    pub use ::serde_json;
}
