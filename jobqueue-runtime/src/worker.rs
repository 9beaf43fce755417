//! The worker: the claim loop, job execution, outcome writing, maintenance and shutdown.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::data::DataMap;
use crate::error::{Error, Result};
use crate::job::{CancelReason, JobContext};
use crate::lease::{self, Held, Leases};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::queue::{JobStatus, Queue};
use crate::registry::{JobDescriptor, Registry, RunError};
use crate::retry::{jitter, Backoff};
use crate::store::{Claimed, EmptyClaim, Finish, Store};

/// Settings of a [`Worker`]; see each [`WorkerBuilder`] method for its default.
#[derive(Debug, Clone)]
struct Config {
    queues: Vec<String>,
    concurrency: usize,
    poll_min: Duration,
    poll_max: Duration,
    grace: Duration,
    cancel_grace: Duration,
    maintenance_interval: Duration,
    maintenance: bool,
    retention: Retention,
    periodic: bool,
    owner: String,
    unrunnable_deadline: Duration,
    max_lease_expiries: u32,
}

/// How long finished jobs stay in the table before maintenance deletes them. `None` keeps
/// them forever.
///
/// A task key blocks a second enqueue for as long as its row exists, so `done` is also the
/// window in which a repeated enqueue is recognised as a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// Done jobs. Default 7 days.
    pub done: Option<Duration>,
    /// Cancelled jobs. Default 7 days.
    pub cancelled: Option<Duration>,
    /// Failed jobs, kept longer for a post-mortem. Default 30 days.
    pub failed: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        Retention {
            done: Some(Duration::from_secs(7 * DAY)),
            cancelled: Some(Duration::from_secs(7 * DAY)),
            failed: Some(Duration::from_secs(30 * DAY)),
        }
    }
}

impl Retention {
    /// Keeps every finished job (pruning only by hand or with the CLI).
    pub const FOREVER: Retention = Retention {
        done: None,
        cancelled: None,
        failed: None,
    };

    /// Sets how long done jobs stay.
    pub fn done(mut self, keep: Option<Duration>) -> Self {
        self.done = keep;
        self
    }

    /// Sets how long cancelled jobs stay.
    pub fn cancelled(mut self, keep: Option<Duration>) -> Self {
        self.cancelled = keep;
        self
    }

    /// Sets how long failed jobs stay.
    pub fn failed(mut self, keep: Option<Duration>) -> Self {
        self.failed = keep;
        self
    }
}

/// Builds a [`Worker`]. Every setting has a default; [`WorkerBuilder::build`] checks them.
#[derive(Debug)]
pub struct WorkerBuilder {
    queue: Queue,
    config: Config,
    data: DataMap,
}

impl WorkerBuilder {
    /// The queues to serve, in priority order: free slots go to the first queue's ready
    /// jobs, then the next queue's. Default `["default"]`.
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.queues = queues.into_iter().map(Into::into).collect();
        self
    }

    /// Jobs run at once by this worker. Default 10. Each claim takes exactly the free slots.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n;
        self
    }

    /// How often an idle worker polls: it starts at `min` after a poll that found nothing
    /// and doubles (±20 % jitter) up to `max`. Default 50 ms to 2 s. A job enqueued in this
    /// process wakes the worker at once, whatever the interval.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.config.poll_min = min;
        self.config.poll_max = max;
        self
    }

    /// How long running jobs may go on after shutdown begins before they are cancelled.
    /// Default 20 s ([`Worker::DEFAULT_SHUTDOWN_GRACE`]).
    ///
    /// The defaults (20 s, then 5 s of [`cancel_grace`](Self::cancel_grace)) fit within
    /// Kubernetes' default `terminationGracePeriodSeconds` of 30 s. For longer grace periods
    /// raise the pod's `terminationGracePeriodSeconds` above their sum plus a few seconds,
    /// or the pod is killed before it hands its jobs back (they then wait a full lease and
    /// lose an attempt).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.grace = grace;
        self
    }

    /// After a job is cancelled at shutdown, how long it has to return by itself before it is
    /// dropped. Default 5 s ([`Worker::DEFAULT_CANCEL_GRACE`]). Either way its lease is
    /// handed back (`ready`, attempts kept), unless that was its last attempt: then it is
    /// `failed`, since the attempt may have done part of its work, and `max_attempts` is
    /// never exceeded.
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.config.cancel_grace = grace;
        self
    }

    /// How often maintenance runs: promoting due scheduled jobs and reclaiming expired
    /// leases. Default 1 s (±20 % jitter). A due job starts within about this long of its
    /// time; a crashed worker's job comes back within its lease plus this long.
    pub fn maintenance_interval(mut self, every: Duration) -> Self {
        self.config.maintenance_interval = every;
        self
    }

    /// Whether this worker runs maintenance. Default true: every worker may, safely, since
    /// each pass locks its rows with SKIP LOCKED; turn it off only if another process does it.
    pub fn maintenance(mut self, on: bool) -> Self {
        self.config.maintenance = on;
        self
    }

    /// How long finished jobs stay before this worker's maintenance prunes them (once a
    /// minute, 500 rows per statement, SKIP LOCKED, for up to 2 s a pass; a larger backlog
    /// goes on at the next passes, a maintenance interval apart). Default
    /// [`Retention::default`].
    pub fn retention(mut self, retention: Retention) -> Self {
        self.config.retention = retention;
        self
    }

    /// Whether this worker enqueues the ticks of periodic (`cron`) kinds. Default true: every
    /// node may, since a tick is enqueued only by the one transaction that moves the kind's
    /// row in `job_queue_cron` past it. Turn it off in deployments that should only run
    /// jobs. Needs maintenance on. Ticks that fall due while no worker schedules them are
    /// missed, and only the latest of them runs when one does again.
    pub fn periodic_jobs(mut self, on: bool) -> Self {
        self.config.periodic = on;
        self
    }

    /// The identity written to `lease_owner`. Default `host:pid:random`. Must be unique
    /// among running workers, and at most 100 characters.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.config.owner = owner.into();
        self
    }

    /// How long a job this worker cannot run may wait for one that can. Default 24 h.
    ///
    /// A worker that claims a job whose kind it does not have, or whose payload does not
    /// fit its kind's arguments (an old worker during a rolling deploy, when the new
    /// version added a kind or changed its arguments), does not spend the job's attempts:
    /// it puts the job back as `scheduled`, due again after 1 s, 2 s, 4 s... (by claim, at
    /// most 5 min, ±20 %), with `last_error` saying `waiting for a worker that can run it`
    /// and why, and counts it in `jobqueue_jobs_deferred_total`. Once the job has waited
    /// this long since the first such claim, the next worker that cannot run it fails it,
    /// naming the missing kind or the payload error, so that a kind that no deployed
    /// worker registers does not wait unseen forever. `Duration::MAX` waits for good (the
    /// CLI's `status` counts such jobs in its NO WORKER column).
    pub fn unrunnable_deadline(mut self, wait: Duration) -> Self {
        self.config.unrunnable_deadline = wait;
        self
    }

    /// How many times a job's lease may expire (its worker crashed, was killed or stalled
    /// past the lease) before this worker's maintenance fails it as a poison job. Default
    /// 3.
    ///
    /// The first expiry puts the job back to `ready` at once; the `n`th later one puts it
    /// back as `scheduled`, due after `lease × (2^(n-1) - 1)` (1, 3, 7... leases, ±20 %, at
    /// most 1 h), so that a job that crashes its workers does not go round the fleet at full
    /// speed. Each expiry also uses the attempt it happened in.
    pub fn max_lease_expiries(mut self, n: u32) -> Self {
        self.config.max_lease_expiries = n;
        self
    }

    /// Gives the worker's jobs a shared value: a job function takes it as a
    /// [`Data<T>`](crate::Data) parameter (a clone per run), or reads it with
    /// [`JobContext::data`]. One value per type; a second call with the same type replaces
    /// the first. The worker's own [`Queue`] is always there, for follow-up jobs.
    ///
    /// Use it for what would otherwise be a `static`: the application's pool, an HTTP
    /// client, a configuration. A type that is not `Clone` goes in an `Arc`.
    pub fn data<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// Checks the settings and the job registry (no two kinds with one name), and that this
    /// worker holds every [`Data<T>`](crate::Data) the kinds of its queues take.
    pub fn build(mut self) -> Result<Worker> {
        let c = &self.config;
        if c.queues.is_empty() {
            return Err(Error::Config(
                "a worker needs at least one queue; call `.queues([\"default\"])`".into(),
            ));
        }
        for q in &c.queues {
            crate::key::validate_queue(q)?;
        }
        if c.concurrency == 0 {
            return Err(Error::Config("`concurrency` must be at least 1".into()));
        }
        if c.poll_min.is_zero() || c.poll_min > c.poll_max {
            return Err(Error::Config(format!(
                "poll interval must satisfy 0 < min <= max, got min {:?}, max {:?}",
                c.poll_min, c.poll_max
            )));
        }
        if c.max_lease_expiries == 0 {
            return Err(Error::Config(
                "`max_lease_expiries` must be at least 1".into(),
            ));
        }
        if c.owner.is_empty() || c.owner.chars().count() > 100 {
            return Err(Error::Config("`owner` must be 1 to 100 characters".into()));
        }
        let registry = Registry::load()?;
        if !self.data.contains_type::<Queue>() {
            self.data.insert(self.queue.clone());
        }
        let c = &self.config;
        for d in registry.kinds() {
            if !c.queues.iter().any(|q| q == d.options().queue) {
                continue;
            }
            if let Some(need) = d.data_needs().iter().find(|n| !self.data.contains(n)) {
                return Err(Error::Config(format!(
                    "job `{}` needs `Data<{}>`, which this worker (queues {:?}) was not given; call `.data(value)` with one on `Worker::builder`",
                    d.kind(),
                    need.type_name(),
                    c.queues
                )));
            }
        }
        let metrics = Arc::new(Metrics::default());
        Ok(Worker {
            store: Store {
                pool: self.queue.inner.pool.clone(),
                set_isolation: self.queue.inner.set_isolation,
                metrics: metrics.clone(),
                call_timeout: Some(QUEUE_CALL_TIMEOUT),
            },
            queue: self.queue,
            config: Arc::new(self.config),
            registry: Arc::new(registry),
            metrics,
            stop: CancellationToken::new(),
            data: self.data,
        })
    }
}

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

/// What the claim loop hands to each job it starts.
struct Running<'a> {
    leases: &'a Leases,
    reports: &'a mpsc::Sender<Report>,
    /// Fired in phase two of a shutdown.
    shutdown: &'a CancellationToken,
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

/// How one attempt ended, before it is written.
#[derive(Debug)]
enum Outcome {
    Done,
    Finish(Finish),
}

struct Report {
    id: u64,
    attempt: u32,
    kind: String,
    outcome: Outcome,
}

/// How long one call on the queue's pool (a claim, a maintenance statement or transaction)
/// may wait for the server before it is given up and its connection closed.
const QUEUE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one outcome write may wait for the server before it is given up, its connection
/// closed, and the write tried again on a new one. The lease is renewed meanwhile.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the lease thread needs: it renews the worker's leases and writes the outcomes of its
/// jobs, on an OS thread of its own with a single-threaded runtime and a pool of two
/// connections of its own. Job code that blocks its thread or hogs the CPU, or uses up the
/// queue's pool, cannot delay a renewal there.
struct LeaseThread {
    connect: sqlx::mysql::MySqlConnectOptions,
    acquire_timeout: Duration,
    max_lifetime: Duration,
    owner: String,
    leases: Leases,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    reports: mpsc::Receiver<Report>,
}

/// A running lease thread.
struct LeaseThreadHandle {
    /// Resolves when every report has been written (the senders are gone).
    writer_done: tokio::sync::oneshot::Receiver<()>,
    /// Resolves when the thread has stopped (after `stop`) and closed its connections.
    finished: tokio::sync::oneshot::Receiver<()>,
}

impl LeaseThread {
    fn spawn(self) -> Result<LeaseThreadHandle> {
        let cannot = |e: std::io::Error| {
            Error::Config(format!(
                "cannot start the worker's lease thread: {e}; the process is out of threads or memory"
            ))
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(cannot)?;
        let (writer_tx, writer_done) = tokio::sync::oneshot::channel();
        let (finished_tx, finished) = tokio::sync::oneshot::channel();
        // Events of the thread go where the caller's go.
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        std::thread::Builder::new()
            .name("jobqueue-lease".into())
            .spawn(move || {
                let _log = tracing::dispatcher::set_default(&dispatch);
                runtime.block_on(self.run(writer_tx));
                drop(runtime);
                let _ = finished_tx.send(());
            })
            .map_err(cannot)?;
        Ok(LeaseThreadHandle {
            writer_done,
            finished,
        })
    }

    async fn run(self, writer_done: tokio::sync::oneshot::Sender<()>) {
        // READ COMMITTED, as for every queue session; and lock waits that end after 1 s: a
        // renewal skips rows other sessions lock, and a statement abandoned after a timeout
        // must not go on holding locks of its own for long on the server.
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(self.acquire_timeout)
            .max_lifetime(self.max_lifetime)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    sqlx::Executor::execute(
                        &mut *conn,
                        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    )
                    .await?;
                    sqlx::Executor::execute(conn, "SET SESSION innodb_lock_wait_timeout = 1")
                        .await?;
                    Ok(())
                })
            })
            .connect_lazy_with(
                self.connect
                    .statement_cache_capacity(Worker::LEASE_STORE_STATEMENTS),
            );
        let store = Store {
            pool,
            set_isolation: false,
            metrics: self.metrics.clone(),
            call_timeout: None,
        };
        let renewer = tokio::spawn(lease::renew_loop(
            store.clone(),
            self.owner.clone(),
            self.leases.clone(),
            self.metrics.clone(),
            self.stop.clone(),
        ));
        write_outcomes(
            store.bounded(WRITE_TIMEOUT),
            self.owner,
            self.leases,
            self.metrics,
            self.reports,
        )
        .await;
        let _ = writer_done.send(());
        let _ = renewer.await;
        // Closing waits for nothing that can hang: every call is bounded, and a connection
        // given up on is closed at once.
        store.pool.close().await;
    }
}

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
    pub const LEASE_STORE_STATEMENTS: usize = 16;

    /// Starts building a worker for `queue`.
    pub fn builder(queue: Queue) -> WorkerBuilder {
        WorkerBuilder {
            queue,
            config: Config {
                queues: vec!["default".into()],
                concurrency: 10,
                poll_min: Duration::from_millis(50),
                poll_max: Duration::from_secs(2),
                grace: Worker::DEFAULT_SHUTDOWN_GRACE,
                cancel_grace: Worker::DEFAULT_CANCEL_GRACE,
                maintenance_interval: Duration::from_secs(1),
                maintenance: true,
                retention: Retention::default(),
                periodic: true,
                owner: default_owner(),
                unrunnable_deadline: Duration::from_secs(24 * 3600),
                max_lease_expiries: crate::store::DEFAULT_MAX_LEASE_EXPIRIES,
            },
            data: DataMap::default(),
        }
    }

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
        tracing::info!(
            owner = %cfg.owner,
            queues = ?cfg.queues,
            concurrency = cfg.concurrency,
            kinds = ?self.registry.kinds().iter().map(|d| d.kind()).collect::<Vec<_>>(),
            server = %server.version,
            isolation = %server.isolation,
            binlog = %if server.log_bin { server.binlog_format.as_str() } else { "off" },
            flush_log_at_trx_commit = %server.flush_log_at_trx_commit,
            "worker starting"
        );

        // Fallible set-up first, before any task is spawned.
        self.queue.check_schema().await?;
        let scheduler = if cfg.periodic {
            crate::cron::Scheduler::new(&self.registry, cfg.maintenance_interval)?
        } else {
            crate::cron::Scheduler::none()
        };
        let leases = Leases::default();
        let background = CancellationToken::new();
        let (report_tx, report_rx) = mpsc::channel::<Report>(cfg.concurrency * 4 + 16);
        let lease_thread = LeaseThread {
            connect: (*self.queue.inner.pool.connect_options()).clone(),
            acquire_timeout: self.queue.inner.config.acquire_timeout,
            max_lifetime: self.queue.inner.config.max_lifetime,
            owner: cfg.owner.clone(),
            leases: leases.clone(),
            metrics: self.metrics.clone(),
            stop: background.clone(),
            reports: report_rx,
        }
        .spawn()?;
        let maintenance = cfg.maintenance.then(|| {
            tokio::spawn(maintenance_loop(
                Maintenance {
                    store: self.store.clone(),
                    queue: self.queue.clone(),
                    metrics: self.metrics.clone(),
                    scheduler,
                    retention: cfg.retention,
                    max_lease_expiries: cfg.max_lease_expiries,
                    last_prune: None,
                },
                cfg.maintenance_interval,
                background.clone(),
            ))
        });

        let heartbeat = tokio::spawn(
            crate::heartbeat::Heartbeat {
                queue: self.queue.clone(),
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
        let run = Running {
            leases: &leases,
            reports: &report_tx,
            shutdown: &shutdown,
        };
        let mut jobs = JoinSet::new();
        self.claim_loop(signal, &run, &mut jobs).await;

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
        if let Some(m) = maintenance {
            let _ = m.await;
        }
        let _ = heartbeat.await;
        tracing::info!(owner = %cfg.owner, metrics = ?self.metrics.snapshot(), "worker stopped");
        Ok(())
    }

    async fn claim_loop(
        &self,
        signal: impl Future<Output = ()>,
        run: &Running<'_>,
        jobs: &mut JoinSet<()>,
    ) {
        let cfg = &*self.config;
        let mut wake = self.queue.inner.wake.subscribe();
        let mut signal = std::pin::pin!(signal);
        let mut idle_delay = cfg.poll_min;
        let mut error_delay = Duration::from_millis(100);
        let mut in_outage = false;
        // Claim at once on start; afterwards when woken, polled, or a slot frees while the
        // last claim filled every slot (more may be waiting).
        let mut want_claim = true;
        let mut saturated = false;
        let mut next_poll = tokio::time::Instant::now();
        // After a full claim, a freed slot is refilled once every slot is free, or one
        // claim's duration after the first one freed, whichever comes first: jobs that finish
        // together are then claimed for together, in one transaction instead of one per
        // slot, and no slot waits longer than a claim would have kept it waiting anyway.
        let mut refill_at: Option<tokio::time::Instant> = None;
        let mut claim_took = Duration::ZERO;
        loop {
            if want_claim {
                // Free the slots of every job that has finished, not only the one that woke
                // us, so that one claim fills them all.
                while let Some(joined) = jobs.try_join_next() {
                    if let Err(e) = joined {
                        tracing::error!(error = %e, "a job task ended abnormally");
                    }
                }
            }
            if want_claim && jobs.len() < cfg.concurrency {
                want_claim = false;
                refill_at = None;
                let free = cfg.concurrency - jobs.len();
                let began = tokio::time::Instant::now();
                let result = self.claim(free, run, jobs).await;
                claim_took = began.elapsed().min(cfg.poll_min);
                match result {
                    Ok(n) => {
                        if in_outage {
                            tracing::info!("database reachable again; claiming resumed");
                            in_outage = false;
                        }
                        error_delay = Duration::from_millis(100);
                        if n == 0 {
                            next_poll = tokio::time::Instant::now() + jitter(idle_delay, 0.2);
                            idle_delay = (idle_delay * 2).min(cfg.poll_max);
                        } else {
                            idle_delay = cfg.poll_min;
                            saturated = n == free;
                            // A partial batch drained the queue for now: poll soon after.
                            next_poll = tokio::time::Instant::now() + cfg.poll_min;
                        }
                    }
                    Err(e) => {
                        in_outage = true;
                        self.metrics.add(
                            &self.metrics.database_errors,
                            "jobqueue_database_errors_total",
                            1,
                        );
                        tracing::error!(error = %e, retry_in = ?error_delay, "claim failed; retrying");
                        next_poll = tokio::time::Instant::now() + jitter(error_delay, 0.2);
                        error_delay = (error_delay * 2).min(Duration::from_secs(10));
                    }
                }
            }
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                _ = &mut signal => return,
                Some(joined) = jobs.join_next(), if !jobs.is_empty() => {
                    if let Err(e) = joined {
                        tracing::error!(error = %e, "a job task ended abnormally");
                    }
                    if saturated {
                        if jobs.is_empty() {
                            want_claim = true;
                        } else if refill_at.is_none() {
                            refill_at = Some(tokio::time::Instant::now() + claim_took);
                        }
                    }
                }
                _ = tokio::time::sleep_until(refill_at.unwrap_or(next_poll)), if refill_at.is_some() => {
                    refill_at = None;
                    want_claim = true;
                }
                changed = wake.changed() => {
                    if changed.is_ok() {
                        want_claim = true;
                        idle_delay = cfg.poll_min;
                    }
                }
                // With every slot busy there is nothing to poll for: a finished job wakes us.
                _ = tokio::time::sleep_until(next_poll), if jobs.len() < cfg.concurrency => {
                    want_claim = true;
                }
            }
        }
    }

    /// Claims up to `free` jobs over the served queues, in their order, and starts them.
    /// Each queue's claim is started as soon as it commits, so an error on a later queue
    /// cannot strand jobs already claimed. Returns how many were started.
    async fn claim(&self, free: usize, run: &Running<'_>, jobs: &mut JoinSet<()>) -> Result<usize> {
        let mut claimed = 0;
        for queue in &self.config.queues {
            let want = (free - claimed).min(100);
            if want == 0 {
                break;
            }
            let batch = self.store.claim(queue, &self.config.owner, want).await?;
            claimed += batch.len();
            if !batch.is_empty() {
                self.metrics.claimed(batch.len() as u64);
                tracing::debug!(queue = %queue, jobs = batch.len(), "claimed");
            }
            for c in batch {
                self.spawn_job(c, run, jobs);
            }
        }
        if claimed == 0 {
            let reason = self.store.classify_empty(&self.config.queues).await?;
            self.metrics.empty(reason);
            if reason == EmptyClaim::Contended {
                tracing::debug!("claim found only jobs locked by other claimers");
            }
        }
        Ok(claimed)
    }

    fn spawn_job(&self, c: Claimed, run: &Running<'_>, jobs: &mut JoinSet<()>) {
        let (leases, reports, shutdown) = (run.leases, run.reports, run.shutdown);
        let ctx = JobContext {
            id: c.id,
            attempt: c.attempt,
            max_attempts: c.max_attempts,
            kind: c.kind.clone(),
            queue: c.queue.clone(),
            task_key: c.task_key.clone(),
            token: CancellationToken::new(),
            reason: Default::default(),
            data: self.data.clone(),
        };
        let displaced = leases.insert(
            c.id,
            Held {
                attempt: c.attempt,
                lease: c.lease,
                renewed_at: c.claimed_at,
                ctx: ctx.clone(),
                cancel_seen: false,
                finishing: false,
            },
        );
        if displaced {
            self.metrics
                .add(&self.metrics.lease_lost, "jobqueue_leases_lost_total", 1);
            tracing::warn!(
                job.id = c.id,
                attempt = c.attempt,
                "claimed a job this worker was still running under an earlier attempt; that attempt is stopped"
            );
        }
        let span = tracing::info_span!(
            "job",
            job.kind = %c.kind,
            job.id = c.id,
            attempt = c.attempt,
            queue = %c.queue
        );
        let descriptor = self.registry.get(&c.kind);
        let registry = self.registry.clone();
        let reports = reports.clone();
        let cancel_grace = self.config.cancel_grace;
        let give_up_after = self.config.unrunnable_deadline;
        let shutdown = shutdown.clone();
        let leases = leases.clone();
        let (id, attempt) = (c.id, c.attempt);
        let task_ctx = ctx.clone();
        let task = async move {
            let outcome = run_one(
                c.kind.clone(),
                descriptor,
                c.payload,
                ctx.clone(),
                cancel_grace,
                shutdown,
                &registry,
            )
            .await;
            let Some(outcome) = decide(outcome, &ctx, descriptor, give_up_after) else {
                return;
            };
            let report = Report {
                id: c.id,
                attempt: c.attempt,
                kind: c.kind,
                outcome,
            };
            if reports.send(report).await.is_err() {
                tracing::error!(
                    "outcome writer is gone; the job's lease will expire and it will run again"
                );
            }
        };
        jobs.spawn(
            async move {
                // A panic outside the job's own code (a tracing layer, a metrics recorder)
                // must not leave the claim in `leases`, renewed for ever: stop and release
                // it, so that the lease runs out and the job is taken back.
                if let Err(panic) = AssertUnwindSafe(task).catch_unwind().await {
                    task_ctx.cancel(CancelReason::LeaseLost);
                    leases.release(id, attempt);
                    tracing::error!(
                        job.id = id,
                        attempt,
                        panic = %panic_message(&*panic),
                        "the job's task panicked outside the job; its lease is released, and the job is taken back once it expires"
                    );
                }
            }
            .instrument(span),
        );
    }
}

async fn drain(jobs: &mut JoinSet<()>) {
    while let Some(joined) = jobs.join_next().await {
        if let Err(e) = joined {
            tracing::error!(error = %e, "a job task ended abnormally");
        }
    }
}

/// How running the job's code ended.
enum Ran {
    Finished(std::result::Result<(), RunError>),
    Panicked(String),
    TimedOut(Duration),
    /// Dropped unfinished: lease lost (`hand_back` false: write nothing), or shutdown and it
    /// did not stop in time (`hand_back` true).
    Abandoned {
        hand_back: bool,
    },
    /// This worker cannot run it (unknown kind, payload that does not fit the arguments);
    /// another worker may.
    Unrunnable(String),
    /// The row itself cannot be read (payload not JSON, key not UTF-8): no worker can run it.
    Unreadable(String),
}

async fn run_one(
    kind: String,
    descriptor: Option<&'static JobDescriptor>,
    payload: std::result::Result<serde_json::Value, String>,
    ctx: JobContext,
    cancel_grace: Duration,
    shutdown: CancellationToken,
    registry: &Registry,
) -> Ran {
    let Some(d) = descriptor else {
        let known = registry
            .kinds()
            .iter()
            .map(|d| d.kind())
            .collect::<Vec<_>>()
            .join(", ");
        let known = if known.is_empty() {
            "it knows no kinds".to_owned()
        } else {
            format!("it knows: {known}")
        };
        return Ran::Unrunnable(format!(
            "job kind `{kind}` is not registered in this worker ({known}); deploy a worker that has it, or cancel the job"
        ));
    };
    let payload = match payload {
        Ok(p) => p,
        Err(e) => return Ran::Unreadable(e),
    };
    tracing::debug!("job started");
    let started = Instant::now();
    let timeout = d.options().timeout;
    // Boxed already (`RunFuture`), so it can be dropped below, where a panicking destructor
    // is caught too.
    let mut run = AssertUnwindSafe(d.run(payload, ctx.clone())).catch_unwind();
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let mut deadline = std::pin::pin!(deadline);
    let ran = tokio::select! {
        r = &mut run => finished(r),
        _ = &mut deadline => {
            ctx.cancel(CancelReason::Timeout);
            Ran::TimedOut(timeout.unwrap_or_default())
        }
        // Phase two of a shutdown (whatever the job was told before, an operator's cancel
        // included): it may stop by itself, and is dropped after `cancel_grace`.
        _ = shutdown.cancelled() => tokio::select! {
            r = &mut run => finished(r),
            _ = tokio::time::sleep(cancel_grace) => Ran::Abandoned { hand_back: true },
        },
        // Lease lost: another worker may run it now; stop at once. (An operator's cancel
        // only tells the job, which decides how to stop.)
        _ = lease_lost(&ctx) => Ran::Abandoned { hand_back: false },
    };
    // An unfinished job (timed out, abandoned) is dropped here: its destructors run now,
    // outside the polls above, and one that panics must not take the outcome with it.
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(run))) {
        tracing::error!(panic = %panic_message(&*panic), "the job panicked while being dropped");
    }
    metrics::histogram!("jobqueue_job_duration_seconds", "kind" => d.kind())
        .record(started.elapsed().as_secs_f64());
    ran
}

/// Resolves when the job's lease is lost.
async fn lease_lost(ctx: &JobContext) {
    ctx.cancelled().await;
    if ctx.cancel_reason() != Some(CancelReason::LeaseLost) {
        std::future::pending::<()>().await;
    }
}

fn finished(
    r: std::result::Result<std::result::Result<(), RunError>, Box<dyn std::any::Any + Send>>,
) -> Ran {
    match r {
        Ok(Err(RunError::Payload(msg))) => Ran::Unrunnable(msg),
        Ok(r) => Ran::Finished(r),
        Err(panic) => Ran::Panicked(panic_message(&*panic)),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}

/// The wait before another worker may try a job this one cannot run, by claim number:
/// 1 s, 2 s, 4 s... at most 5 minutes, ±20 %.
fn unrunnable_delay(attempt: u32) -> Duration {
    const BACKOFF: Backoff = Backoff::Exponential {
        base: Duration::from_secs(1),
        max: Duration::from_secs(300),
    };
    BACKOFF.delay(attempt)
}

/// What to write for an attempt that ended as `ran`. `None`: write nothing (lease lost).
/// `give_up_after`: how long a job no worker can run may wait for one.
fn decide(
    ran: Ran,
    ctx: &JobContext,
    descriptor: Option<&JobDescriptor>,
    give_up_after: Duration,
) -> Option<Outcome> {
    let backoff = descriptor
        .map(|d| d.options().backoff)
        .unwrap_or(Backoff::DEFAULT);
    let reason = ctx.cancel_reason();
    let failed_attempt = |error: String| {
        if reason == Some(CancelReason::Requested) {
            Outcome::Finish(Finish::Cancelled { error })
        } else if ctx.attempt < ctx.max_attempts {
            Outcome::Finish(Finish::Retry {
                delay: backoff.delay(ctx.attempt),
                error,
            })
        } else {
            Outcome::Finish(Finish::Fail {
                error: format!("{error} (attempt {} of {})", ctx.attempt, ctx.max_attempts),
            })
        }
    };
    Some(match ran {
        Ran::Finished(Ok(())) => Outcome::Done,
        Ran::Unreadable(msg) | Ran::Finished(Err(RunError::Payload(msg))) => {
            Outcome::Finish(Finish::Fail { error: msg })
        }
        Ran::Unrunnable(error) => Outcome::Finish(Finish::Defer {
            delay: unrunnable_delay(ctx.attempt),
            error,
            give_up_after,
        }),
        Ran::Finished(Err(RunError::Job(e))) => {
            if reason == Some(CancelReason::Shutdown) {
                Outcome::Finish(Finish::HandBack)
            } else if !e.is_retryable() && reason != Some(CancelReason::Requested) {
                Outcome::Finish(Finish::Fail {
                    error: format!("{e} (permanent error, not retried)"),
                })
            } else {
                failed_attempt(e.to_string())
            }
        }
        Ran::Panicked(msg) => failed_attempt(format!("job panicked: {msg}")),
        Ran::TimedOut(t) => failed_attempt(format!("timed out after {t:?}")),
        Ran::Abandoned { hand_back: true } => Outcome::Finish(Finish::HandBack),
        Ran::Abandoned { hand_back: false } => return None,
    })
}

/// Writes attempt outcomes: successes many per statement, the rest one by one, every write
/// fenced. Retries through database outages for as long as this worker still holds the lease.
async fn write_outcomes(
    store: Store,
    owner: String,
    leases: Leases,
    metrics: Arc<Metrics>,
    mut reports: mpsc::Receiver<Report>,
) {
    let mut batch = Vec::new();
    // Outcomes that arrive within one write's duration of the first are written with it:
    // jobs claimed together end together, and are then recorded in one statement (one
    // commit) instead of several, at the cost of at most one write's delay.
    let mut write_took = Duration::ZERO;
    while reports.recv_many(&mut batch, 256).await > 0 {
        let gather_until = tokio::time::Instant::now() + write_took;
        while batch.len() < 256 {
            let room = 256 - batch.len();
            let more = reports.recv_many(&mut batch, room);
            if !matches!(tokio::time::timeout_at(gather_until, more).await, Ok(n) if n > 0) {
                break;
            }
        }
        let began = Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            // Nothing is written for a claim the renewer has given up on.
            batch.retain(|r| {
                let held = leases.holds(r.id, r.attempt);
                if !held {
                    tracing::warn!(
                        job.id = r.id,
                        attempt = r.attempt,
                        "lease lost before the outcome was written; it is discarded"
                    );
                }
                held
            });
            leases.mark_finishing(batch.iter().map(|r| (r.id, r.attempt)));
            match write_batch(&store, &owner, &leases, &metrics, &mut batch).await {
                Ok(()) => break,
                Err(e) => {
                    metrics.add(
                        &metrics.database_errors,
                        "jobqueue_database_errors_total",
                        1,
                    );
                    tracing::error!(error = %e, pending = batch.len(), retry_in = ?delay, "cannot record job outcomes; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        write_took = began.elapsed().min(Duration::from_millis(50));
        batch.clear();
    }
}

/// Writes `batch`, removing each report once written, so that a retry after an error only
/// writes what is left.
async fn write_batch(
    store: &Store,
    owner: &str,
    leases: &Leases,
    metrics: &Metrics,
    batch: &mut Vec<Report>,
) -> Result<()> {
    let done: Vec<(u64, u32)> = batch
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Done))
        .map(|r| (r.id, r.attempt))
        .collect();
    if !done.is_empty() {
        let lost = store.complete(owner, &done).await?;
        for &(id, attempt) in &done {
            leases.release(id, attempt);
            if lost.contains(&id) {
                metrics.add(&metrics.lease_lost, "jobqueue_leases_lost_total", 1);
                tracing::warn!(job.id = id, attempt, "lease lost before completion was recorded; another worker owns the job now, nothing was written");
            } else {
                metrics.add(&metrics.succeeded, "jobqueue_jobs_succeeded_total", 1);
                tracing::debug!(job.id = id, attempt, "job done");
            }
        }
        batch.retain(|r| !matches!(r.outcome, Outcome::Done));
    }
    while let Some(r) = batch.last() {
        let Outcome::Finish(how) = &r.outcome else {
            batch.pop();
            continue;
        };
        let written = store.finish(owner, r.id, r.attempt, how).await?;
        leases.release(r.id, r.attempt);
        let (id, attempt, kind) = (r.id, r.attempt, r.kind.as_str());
        match (written, how) {
            (None, _) => {
                metrics.add(&metrics.lease_lost, "jobqueue_leases_lost_total", 1);
                tracing::warn!(
                    job.id = id,
                    attempt,
                    "lease lost before the outcome was recorded; nothing was written"
                );
            }
            (Some(JobStatus::Scheduled), Finish::Retry { delay, error }) => {
                metrics.add(&metrics.retried, "jobqueue_jobs_retried_total", 1);
                tracing::warn!(job.id = id, job.kind = kind, attempt, error = %error, "job failed; retrying in {delay:.1?}");
            }
            (Some(JobStatus::Failed), Finish::Fail { error }) => {
                metrics.add(&metrics.failed, "jobqueue_jobs_failed_total", 1);
                tracing::error!(job.id = id, job.kind = kind, attempt, error = %error, "job failed; not retrying");
            }
            (Some(JobStatus::Scheduled), Finish::Defer { delay, error, .. }) => {
                metrics.add(&metrics.deferred, "jobqueue_jobs_deferred_total", 1);
                tracing::warn!(job.id = id, job.kind = kind, attempt, error = %error, "this worker cannot run the job; left for a worker that can, back in {delay:.1?} (not counted as an attempt)");
            }
            (
                Some(JobStatus::Failed),
                Finish::Defer {
                    error,
                    give_up_after,
                    ..
                },
            ) => {
                metrics.add(&metrics.failed, "jobqueue_jobs_failed_total", 1);
                tracing::error!(job.id = id, job.kind = kind, attempt, error = %error, "no worker could run the job within {give_up_after:?}; job failed");
            }
            (Some(JobStatus::Failed), _) => {
                metrics.add(&metrics.failed, "jobqueue_jobs_failed_total", 1);
                tracing::error!(
                    job.id = id,
                    job.kind = kind,
                    attempt,
                    "job stopped at shutdown during its last attempt; failed, not run again"
                );
            }
            (Some(JobStatus::Ready), _) => {
                metrics.add(&metrics.handed_back, "jobqueue_jobs_handed_back_total", 1);
                tracing::info!(
                    job.id = id,
                    job.kind = kind,
                    attempt,
                    "job handed back to ready at shutdown"
                );
            }
            (Some(_), _) => {
                metrics.add(&metrics.cancelled, "jobqueue_jobs_cancelled_total", 1);
                tracing::info!(
                    job.id = id,
                    job.kind = kind,
                    attempt,
                    "job cancelled on request"
                );
            }
        }
        batch.pop();
    }
    Ok(())
}

/// What maintenance needs and remembers between passes.
struct Maintenance {
    store: Store,
    queue: Queue,
    metrics: Arc<Metrics>,
    scheduler: crate::cron::Scheduler,
    retention: Retention,
    max_lease_expiries: u32,
    last_prune: Option<Instant>,
}

/// How often a worker prunes finished jobs.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Promotes due scheduled jobs, reclaims expired leases, enqueues periodic jobs' ticks and
/// prunes old finished jobs, every `every` (jittered).
async fn maintenance_loop(mut m: Maintenance, every: Duration, stop: CancellationToken) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(jitter(every, 0.2)) => {}
        }
        match maintain(&mut m).await {
            Ok(()) => {
                if failing {
                    tracing::info!("maintenance recovered");
                    failing = false;
                }
            }
            // Each failed step was logged by `maintain`; count the pass once.
            Err(_) => {
                failing = true;
                m.metrics.add(
                    &m.metrics.database_errors,
                    "jobqueue_database_errors_total",
                    1,
                );
            }
        }
    }
}

/// One maintenance pass. Each step runs even if an earlier one failed (a periodic job
/// that cannot be enqueued must not stop reclaims); the first error is returned after all.
async fn maintain(m: &mut Maintenance) -> Result<()> {
    let steps = [
        ("periodic jobs", enqueue_ticks(m).await),
        ("promotion", promote_due(m).await),
        ("reclaim", reclaim_expired(m).await),
        ("pruning", prune_finished(m).await),
    ];
    let mut first = None;
    for (step, result) in steps {
        if let Err(e) = result {
            tracing::error!(error = %e, step, "maintenance step failed; retrying at the next interval");
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

async fn enqueue_ticks(m: &mut Maintenance) -> Result<()> {
    if !m.scheduler.is_empty() {
        let now = m.store.now().await?.and_utc();
        let n = m.scheduler.run(&m.store, now).await?;
        if n > 0 {
            m.queue.wake_workers();
        }
    }
    Ok(())
}

async fn promote_due(m: &Maintenance) -> Result<()> {
    const PROMOTE_BATCH: usize = 500;
    let (store, queue, metrics) = (&m.store, &m.queue, &*m.metrics);
    loop {
        let n = store.promote(PROMOTE_BATCH).await?;
        if n > 0 {
            metrics.add(&metrics.promoted, "jobqueue_jobs_promoted_total", n);
            tracing::debug!(jobs = n, "promoted due scheduled jobs");
            queue.wake_workers();
        }
        if (n as usize) < PROMOTE_BATCH {
            return Ok(());
        }
    }
}

async fn reclaim_expired(m: &Maintenance) -> Result<()> {
    const RECLAIM_BATCH: usize = 100;
    let (store, queue, metrics) = (&m.store, &m.queue, &*m.metrics);
    loop {
        let r = store
            .reclaim_with(RECLAIM_BATCH, m.max_lease_expiries)
            .await?;
        let total =
            r.ready.len() + r.delayed.len() + r.failed.len() + r.poison.len() + r.cancelled.len();
        for (id, attempts, owner) in &r.ready {
            tracing::warn!(job.id = id, attempts, lease_owner = %owner, "lease expired; job back to ready with its attempts kept");
        }
        for (id, attempts, owner, delay) in &r.delayed {
            tracing::warn!(job.id = id, attempts, lease_owner = %owner, "lease of this job expired again; back in {delay:.1?} with its attempts kept");
        }
        for (id, attempts, owner) in &r.failed {
            tracing::error!(job.id = id, attempts, lease_owner = %owner, "lease expired on the last attempt; job failed");
        }
        for (id, attempts, owner) in &r.poison {
            tracing::error!(
                job.id = id,
                attempts,
                lease_owner = %owner,
                max_lease_expiries = m.max_lease_expiries,
                "lease of this job expired too many times (its workers crash or stall while running it); job failed"
            );
        }
        for id in &r.cancelled {
            tracing::info!(
                job.id = id,
                "lease expired on a job whose cancel was requested; job cancelled"
            );
        }
        if total > 0 {
            metrics.add(
                &metrics.reclaimed,
                "jobqueue_leases_reclaimed_total",
                total as u64,
            );
            queue.wake_workers();
        }
        if total < RECLAIM_BATCH {
            return Ok(());
        }
    }
}

async fn prune_finished(m: &mut Maintenance) -> Result<()> {
    if m.last_prune.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
        m.last_prune = Some(Instant::now());
        let deadline = Instant::now() + PRUNE_BUDGET;
        let r = m.retention;
        for (status, keep) in [
            (crate::queue::JobStatus::Done, r.done),
            (crate::queue::JobStatus::Cancelled, r.cancelled),
            (crate::queue::JobStatus::Failed, r.failed),
        ] {
            if let Some(keep) = keep {
                let (n, more) = prune_within(&m.store, status, keep, deadline).await?;
                if n > 0 {
                    tracing::info!(status = %status, jobs = n, older_than = ?keep, "pruned finished jobs");
                }
                if more {
                    // The budget ran out with rows left: the next pass, one maintenance
                    // interval away, goes on instead of waiting for the next minute.
                    tracing::debug!(status = %status, "pruning backlog left; continuing at the next maintenance pass");
                    m.last_prune = None;
                }
            }
        }
    }
    Ok(())
}

/// Rows deleted per pruning statement.
const PRUNE_BATCH: usize = 500;

/// How long one maintenance pass may spend pruning, so that promotion and reclaim, which
/// wait for it, are never held up for long. A backlog larger than one pass can delete is
/// worked off at the next passes, one maintenance interval apart.
const PRUNE_BUDGET: Duration = Duration::from_secs(2);

/// Deletes batches of `status` jobs older than `keep` while full batches come back and
/// `deadline` has not passed. Returns the rows deleted and whether rows may be left.
async fn prune_within(
    store: &Store,
    status: JobStatus,
    keep: Duration,
    deadline: Instant,
) -> Result<(u64, bool)> {
    let older_than_us = i64::try_from(keep.as_micros()).unwrap_or(i64::MAX);
    let mut total = 0;
    loop {
        let n = store
            .prune_batch(status, older_than_us, PRUNE_BATCH)
            .await?;
        total += n;
        if (n as usize) < PRUNE_BATCH {
            return Ok((total, false));
        }
        if Instant::now() >= deadline {
            return Ok((total, true));
        }
    }
}

fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    let host: String = host.chars().take(60).collect();
    format!(
        "{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(attempt: u32, max_attempts: u32) -> JobContext {
        JobContext {
            id: 1,
            attempt,
            max_attempts,
            kind: "k".into(),
            queue: "default".into(),
            task_key: "k:1".into(),
            token: CancellationToken::new(),
            reason: Default::default(),
            data: Default::default(),
        }
    }

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn a_job_this_worker_cannot_run_is_deferred_even_on_its_last_attempt() {
        let c = ctx(1, 1);
        let Some(Outcome::Finish(Finish::Defer {
            delay,
            error,
            give_up_after,
        })) = decide(Ran::Unrunnable("no such kind".into()), &c, None, DAY)
        else {
            panic!("not deferred");
        };
        assert!(delay >= Duration::from_millis(800) && delay <= Duration::from_millis(1200));
        assert_eq!((error.as_str(), give_up_after), ("no such kind", DAY));
        // The wait grows with each claim, up to five minutes.
        assert!(unrunnable_delay(3) >= Duration::from_millis(3200));
        assert!(unrunnable_delay(30) <= Duration::from_secs(360));
    }

    #[test]
    fn a_row_that_cannot_be_read_fails_at_once() {
        let outcome = decide(Ran::Unreadable("not JSON".into()), &ctx(1, 25), None, DAY);
        assert!(
            matches!(&outcome, Some(Outcome::Finish(Finish::Fail { error })) if error == "not JSON"),
            "{outcome:?}"
        );
    }
}
