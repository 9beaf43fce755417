//! The runtime behind `jobqueue`: the MySQL/MariaDB store, enqueue, the claim loop and the
//! worker. Depend on the `jobqueue` crate, which re-exports everything here with the
//! `#[job]` macro.

mod admin;
pub mod cron;
mod data;
mod enqueue;
mod error;
mod job;
pub mod key;
mod maintenance;
mod metrics;
mod model;
mod queue;
pub mod registry;
mod retry;
mod store;
mod trace;
mod worker;

pub use data::{Data, DataNeed};
pub use enqueue::EnqueueOptions;
pub use error::{BoxError, Error, JobError, JobRef, Result};
pub use job::{
    CancelReason, FromJobContext, IntoJobResult, Job, JobContext, JobOptions, RateLimit,
};
pub use metrics::MetricsSnapshot;
pub use model::{
    CancelOutcome, Enqueued, JobFilter, JobRecord, JobStatus, QueueStats, Retention, RunningJob,
};
pub use model::{JobPage, JobQuery, PeriodicJob, ThroughputMinute, WorkerInfo};
pub use queue::{redact_url, Queue, QueueConfig};
pub use retry::Backoff;
pub use store::ServerInfo;
pub use worker::{shutdown_signal, Worker, WorkerBuilder, WorkerHandle};
pub use worker::{HEARTBEAT_INTERVAL, WORKER_FORGOTTEN_AFTER, WORKER_GONE_AFTER};

/// The steps of the claim protocol (claim, renew, complete, finish, reclaim, promote) and
/// the statements whose query plans the protocol relies on, for this workspace's own
/// protocol tests. Not a stable API: it changes whenever the protocol does.
#[doc(hidden)]
pub mod __store {
    pub use crate::model::{Claimed, EmptyClaim, Finish, LeaseState, Reclaimed};
    pub use crate::store::{Store, DEFAULT_MAX_LEASE_EXPIRIES};

    /// Statements that must be served by their index (no filesort, no full scan), for the
    /// EXPLAIN tests.
    pub mod statements {
        pub use crate::store::{CLAIM_SELECT, PROMOTE_PROBE, PROMOTE_SELECT, RECLAIM_SELECT};
        // The limits' statements on their side tables.
        pub use crate::store::{
            BLOCKED_SELECT, FREE_CONCURRENCY_SLOT, FREE_RATE_SLOT, ORPHAN_SLOTS, WAKE_SCAN,
        };
        // The operator dashboard's statements for a filter, with their arguments; run one
        // with `Store::explain`.
        pub use crate::store::{dashboard_statements, Arg};
    }
}

/// What `#[job]` expands to uses these paths. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::job::{FromJobContext, IntoJobResult};
    pub use crate::key::{derived_task_key, fit_key};
    pub use crate::registry::{JobDescriptor, RunFuture};
    pub use ::inventory;
    pub use ::serde;
    pub use ::serde_json;
}
