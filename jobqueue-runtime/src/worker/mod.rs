//! The worker: it claims jobs, runs them, writes how each attempt ended and keeps their
//! leases, and shuts down in two phases. Each concern has its file: `builder` (settings),
//! `claim_loop`, `execute` (one run), `outcome` (what to write), `writer` (writing it),
//! `lease` and `lease_thread` (renewals). Maintenance is its own module, started from here.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::data::DataMap;
use crate::error::Result;
use crate::job::CancelReason;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::queue::Queue;
use crate::registry::Registry;
use crate::store::Store;
mod builder;
mod claim_loop;
pub(crate) mod execute;
mod heartbeat;
mod lease;
mod lease_thread;
pub(crate) mod middleware;
pub(crate) mod outcome;
mod pacer;
mod progress;
mod writer;

use crate::maintenance::{maintenance_loop, scheduler_loop, Maintenance, Scheduler};
use builder::Config;
pub use builder::WorkerBuilder;
use claim_loop::drain;
use execute::{PerQueue, Running};
pub use heartbeat::{HEARTBEAT_INTERVAL, WORKER_FORGOTTEN_AFTER, WORKER_GONE_AFTER};
use lease::Leases;
use lease_thread::LeaseThread;
pub use middleware::{JobRunInfo, Middleware, Next, RunOutcome, RunResult};
use outcome::Report;

/// Runs jobs: claims them from the table, runs them, records how each attempt ended.
///
/// ```no_run
/// # extern crate jobqueue_runtime as jobqueue;
/// # async fn demo(queue: jobqueue::Queue) -> jobqueue::Result<()> {
/// use jobqueue::Worker;
/// let worker = Worker::builder(queue).queues(["exports", "default"]).concurrency(16).build()?;
/// worker.run_until(jobqueue::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Worker {
    queue: Queue,
    store: Store,
    config: Arc<Config>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    data: DataMap,
    /// Outermost first.
    middleware: Arc<middleware::Chain>,
}

/// Stops a running [`Worker`] and reads its counters from elsewhere.
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    stop: CancellationToken,
    metrics: Arc<Metrics>,
}

impl WorkerHandle {
    /// Begins a graceful shutdown (see [`Worker::run_until`]).
    pub fn shutdown(&self) {
        self.stop.cancel();
    }

    /// The worker's counters now.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM: pass it to [`Worker::run_until`].
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM; only Ctrl-C will stop the worker");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Stops a worker's background tasks and jobs when `run_until`'s future is dropped.
struct StopOnDrop {
    background: CancellationToken,
    leases: Leases,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !self.background.is_cancelled() {
            self.leases.cancel_all(CancelReason::Shutdown);
            self.background.cancel();
        }
    }
}

/// How long one call on the queue's pool (a claim, a maintenance statement or transaction)
/// may wait for the server before it is given up and its connection closed.
pub(crate) const QUEUE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl Worker {
    /// The default [`WorkerBuilder::shutdown_grace`]: 20 s. With
    /// [`Worker::DEFAULT_CANCEL_GRACE`] it leaves 5 s of Kubernetes' default
    /// `terminationGracePeriodSeconds` (30 s) to hand jobs back and exit.
    ///
    /// ```
    /// # extern crate jobqueue_runtime as jobqueue;
    /// use std::time::Duration;
    /// use jobqueue::Worker;
    ///
    /// // Within Kubernetes' default 30 s, with 5 s to spare for the hand-back.
    /// let defaults = Worker::DEFAULT_SHUTDOWN_GRACE + Worker::DEFAULT_CANCEL_GRACE;
    /// assert_eq!(defaults, Duration::from_secs(25));
    /// ```
    pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

    /// The default [`WorkerBuilder::cancel_grace`]: 5 s.
    pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(5);

    /// Server-side prepared statements each of a worker's two lease-store connections
    /// (renewals and outcomes) keeps: every statement they send fits, so none is prepared
    /// twice. See [`QueueConfig::statement_cache_capacity`](crate::QueueConfig::statement_cache_capacity)
    /// for the bound per process.
    pub const LEASE_STORE_STATEMENTS: usize = crate::store::LEASE_STORE_STATEMENTS;

    /// A handle to stop this worker and read its counters while it runs.
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle {
            stop: self.stop.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// The worker's counters now.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// The `lease_owner` this worker writes.
    pub fn owner(&self) -> &str {
        &self.config.owner
    }

    /// Runs until [`WorkerHandle::shutdown`].
    pub async fn run(self) -> Result<()> {
        self.run_until(std::future::pending::<()>()).await
    }

    /// Runs until `signal` resolves (or [`WorkerHandle::shutdown`]), then shuts down in two
    /// phases: it stops claiming and lets running jobs finish for the shutdown grace period;
    /// then it cancels what still runs ([`CancelReason::Shutdown`]) and hands those jobs
    /// back to `ready` with their attempts kept, so another worker starts them at once (a
    /// job on its last attempt is `failed` instead: it never runs beyond `max_attempts`).
    ///
    /// Lease renewals and outcome writes run on an OS thread the worker starts for them
    /// (`jobqueue-lease`), with a single-threaded runtime and two connections of their own, so
    /// that job code which blocks its thread or hogs the CPU cannot hold them up. Every
    /// database call of the worker is bounded: a renewal by a quarter of the shortest lease it
    /// renews, an outcome write by 5 s, a claim or maintenance call by 30 s. A call that runs
    /// out of time is given up and its connection closed (a server that stopped answering, or
    /// a network that dropped the connection silently, is noticed that way), and it is tried
    /// again on a new connection.
    ///
    /// Returns an error only if the worker cannot start; database errors while running are
    /// logged, counted and retried with backoff.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<()> {
        crate::metrics::describe();
        let cfg = self.config.clone();
        let server = self.queue.server_info();
        let kinds = self.registry.kinds();
        let kinds = kinds.iter().map(|d| d.kind()).collect::<Vec<_>>();
        match server.backend {
            crate::Backend::Postgres => tracing::info!(
                owner = %cfg.owner,
                queues = ?cfg.queues,
                concurrency = cfg.concurrency,
                kinds = ?kinds,
                backend = %server.backend,
                server = %server.version,
                isolation = %server.isolation,
                // `ServerInfo` keeps `synchronous_commit` there on PostgreSQL.
                synchronous_commit = %server.flush_log_at_trx_commit,
                idle = if cfg.idle_probe.is_some() { "listen" } else { "poll" },
                "worker starting"
            ),
            _ => tracing::info!(
                owner = %cfg.owner,
                queues = ?cfg.queues,
                concurrency = cfg.concurrency,
                kinds = ?kinds,
                server = %server.version,
                isolation = %server.isolation,
                binlog = %if server.log_bin { server.binlog_format.as_str() } else { "off" },
                flush_log_at_trx_commit = %server.flush_log_at_trx_commit,
                "worker starting"
            ),
        }

        // Fallible set-up first, before any task is spawned.
        self.queue.check_schema().await?;
        let scheduler = if cfg.periodic {
            Scheduler::new(&self.registry, cfg.maintenance_interval)?
        } else {
            Scheduler::none()
        };
        let leases = Leases::default();
        let background = CancellationToken::new();
        let (report_tx, report_rx) = mpsc::channel::<Report>(cfg.concurrency * 4 + 16);
        let lease_thread = LeaseThread {
            connect: self.queue.lease_connect_options(),
            owner: cfg.owner.clone(),
            leases: leases.clone(),
            metrics: self.metrics.clone(),
            stop: background.clone(),
            reports: report_rx,
            queue: self.queue.clone(),
        }
        .spawn()?;
        let roster = heartbeat::Roster::new(&cfg.owner, &cfg.queues);
        let scheduler = cfg.maintenance.then(|| {
            tokio::spawn(scheduler_loop(
                scheduler,
                self.store.clone(),
                self.queue.clone(),
                self.metrics.clone(),
                cfg.maintenance_interval,
                background.clone(),
            ))
        });
        let maintenance = cfg.maintenance.then(|| {
            tokio::spawn(maintenance_loop(
                Maintenance {
                    store: self.store.clone(),
                    queue: self.queue.clone(),
                    metrics: self.metrics.clone(),
                    retention: cfg.retention,
                    max_lease_expiries: cfg.max_lease_expiries,
                    last_prune: None,
                    gauges: Default::default(),
                    failing_steps: Default::default(),
                    owner: cfg.owner.clone(),
                    fleet_size: Box::new({
                        let roster = roster.clone();
                        move || roster.fleet()
                    }),
                },
                cfg.maintenance_interval,
                background.clone(),
            ))
        });

        let heartbeat = tokio::spawn(
            heartbeat::Heartbeat {
                store: self.store.clone(),
                owner: cfg.owner.clone(),
                queues: cfg.queues.clone(),
                concurrency: cfg.concurrency,
                schedules: if cfg.periodic {
                    self.registry
                        .kinds()
                        .iter()
                        .filter_map(|d| Some((d.kind().to_owned(), d.options().cron?.to_owned())))
                        .collect()
                } else {
                    Vec::new()
                },
                running: Box::new({
                    let leases = leases.clone();
                    move || leases.len()
                }),
                roster: roster.clone(),
                publish_gauges: cfg.maintenance,
            }
            .run(background.clone()),
        );
        // If this future is dropped instead of shut down, stop the background tasks and the
        // jobs: their leases then expire and other workers take them, as after a crash.
        let _guard = StopOnDrop {
            background: background.clone(),
            leases: leases.clone(),
        };
        let shutdown = CancellationToken::new();
        let per_queue = PerQueue::new(&cfg.queues);
        let run = Running {
            leases: &leases,
            reports: &report_tx,
            shutdown: &shutdown,
            per_queue: &per_queue,
        };
        let mut jobs = JoinSet::new();
        self.claim_loop(signal, &run, &mut jobs, &roster).await;

        // Phase one: no more claims; running jobs get the grace period.
        if !jobs.is_empty() {
            tracing::info!(running = jobs.len(), grace = ?cfg.grace, "shutting down: waiting for running jobs");
            let drained = tokio::time::timeout(cfg.grace, drain(&mut jobs)).await;
            if drained.is_err() {
                // Phase two: cancel; each job then has `cancel_grace` to return before it is
                // dropped, and is handed back either way.
                tracing::warn!(
                    running = jobs.len(),
                    "shutdown grace period over: cancelling running jobs and handing them back"
                );
                leases.cancel_all(CancelReason::Shutdown);
                shutdown.cancel();
                drain(&mut jobs).await;
            }
        }
        drop(report_tx);
        if lease_thread.writer_done.await.is_err() {
            tracing::error!("outcome writer stopped abnormally");
        }
        background.cancel();
        let _ = lease_thread.finished.await;
        for task in [maintenance, scheduler].into_iter().flatten() {
            let _ = task.await;
        }
        let _ = heartbeat.await;
        tracing::info!(owner = %cfg.owner, metrics = ?self.metrics.snapshot(), "worker stopped");
        Ok(())
    }
}
