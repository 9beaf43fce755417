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
    /// Default 30 s.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.grace = grace;
        self
    }

    /// After a job is cancelled at shutdown, how long it has to return by itself before it is
    /// dropped. Default 5 s. Either way its lease is handed back (`ready`, attempts kept).
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
    /// minute, 500 rows per statement, SKIP LOCKED). Default [`Retention::default`].
    pub fn retention(mut self, retention: Retention) -> Self {
        self.config.retention = retention;
        self
    }

    /// Whether this worker enqueues the ticks of periodic (`cron`) kinds. Default true: every
    /// node may, since each tick's task key makes it one job however many nodes enqueue it.
    /// Turn it off in deployments that should only run jobs. Needs maintenance on.
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

impl Worker {
    /// Starts building a worker for `queue`.
    pub fn builder(queue: Queue) -> WorkerBuilder {
        WorkerBuilder {
            queue,
            config: Config {
                queues: vec!["default".into()],
                concurrency: 10,
                poll_min: Duration::from_millis(50),
                poll_max: Duration::from_secs(2),
                grace: Duration::from_secs(30),
                cancel_grace: Duration::from_secs(5),
                maintenance_interval: Duration::from_secs(1),
                maintenance: true,
                retention: Retention::default(),
                periodic: true,
                owner: default_owner(),
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
    /// back to `ready` with their attempts kept, so another worker starts them at once.
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
            crate::cron::Scheduler::new(&self.registry)?
        } else {
            crate::cron::Scheduler::none()
        };
        let leases = Leases::default();
        let background = CancellationToken::new();
        // Renewals and outcomes get two connections of their own: jobs that use the queue's
        // pool (or a pool smaller than the concurrency) must not make a renewal wait for a
        // connection until the lease is gone.
        let lease_store = Store {
            pool: sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(2)
                .acquire_timeout(self.queue.inner.config.acquire_timeout)
                .max_lifetime(self.queue.inner.config.max_lifetime)
                .connect_lazy_with((*self.queue.inner.pool.connect_options()).clone()),
            set_isolation: false,
            metrics: self.metrics.clone(),
        };
        let renewer = tokio::spawn(lease::renew_loop(
            lease_store.clone(),
            cfg.owner.clone(),
            leases.clone(),
            self.metrics.clone(),
            background.clone(),
        ));
        let maintenance = cfg.maintenance.then(|| {
            tokio::spawn(maintenance_loop(
                Maintenance {
                    store: self.store.clone(),
                    queue: self.queue.clone(),
                    metrics: self.metrics.clone(),
                    scheduler,
                    retention: cfg.retention,
                    last_prune: None,
                },
                cfg.maintenance_interval,
                background.clone(),
            ))
        });
        let (report_tx, report_rx) = mpsc::channel::<Report>(cfg.concurrency * 4 + 16);
        let writer = tokio::spawn(write_outcomes(
            lease_store.clone(),
            cfg.owner.clone(),
            leases.clone(),
            self.metrics.clone(),
            report_rx,
        ));

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
        if let Err(e) = writer.await {
            tracing::error!(error = %e, "outcome writer stopped abnormally");
        }
        background.cancel();
        let _ = renewer.await;
        if let Some(m) = maintenance {
            let _ = m.await;
        }
        lease_store.pool.close().await;
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
        leases.insert(
            c.id,
            Held {
                attempt: c.attempt,
                lease: c.lease,
                renewed_at: c.claimed_at,
                ctx: ctx.clone(),
                cancel_seen: false,
            },
        );
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
        let shutdown = shutdown.clone();
        jobs.spawn(
            async move {
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
                let Some(outcome) = decide(outcome, &ctx, descriptor) else {
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
    UnknownKind(String),
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
        return Ran::UnknownKind(format!(
            "job kind `{kind}` is not registered in this worker (it knows: {known}); deploy a worker that has it, or cancel the job"
        ));
    };
    let payload = match payload {
        Ok(p) => p,
        Err(e) => return Ran::Finished(Err(RunError::Payload(e))),
    };
    tracing::debug!("job started");
    let started = Instant::now();
    let timeout = d.options().timeout;
    let mut run = std::pin::pin!(AssertUnwindSafe(d.run(payload, ctx.clone())).catch_unwind());
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
        Ok(r) => Ran::Finished(r),
        Err(panic) => Ran::Panicked(
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic payload".into()),
        ),
    }
}

/// What to write for an attempt that ended as `ran`. `None`: write nothing (lease lost).
fn decide(ran: Ran, ctx: &JobContext, descriptor: Option<&JobDescriptor>) -> Option<Outcome> {
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
        Ran::Finished(Err(RunError::Payload(msg))) => Outcome::Finish(Finish::Fail { error: msg }),
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
        Ran::UnknownKind(msg) => failed_attempt(msg),
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
        let now = m.queue.now().await?.and_utc();
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
        let r = store.reclaim(RECLAIM_BATCH).await?;
        let total = r.ready.len() + r.failed.len() + r.cancelled.len();
        for (id, attempts, owner) in &r.ready {
            tracing::warn!(job.id = id, attempts, lease_owner = %owner, "lease expired; job back to ready with its attempts kept");
        }
        for (id, attempts, owner) in &r.failed {
            tracing::error!(job.id = id, attempts, lease_owner = %owner, "lease expired on the last attempt; job failed");
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
        let r = m.retention;
        for (status, keep) in [
            (crate::queue::JobStatus::Done, r.done),
            (crate::queue::JobStatus::Cancelled, r.cancelled),
            (crate::queue::JobStatus::Failed, r.failed),
        ] {
            if let Some(keep) = keep {
                // At most 20 batches a pass: a large backlog is worked off over several
                // passes instead of one long burst of deletes.
                let n = m.queue.prune_batches(status, keep, 20).await?;
                if n > 0 {
                    tracing::info!(status = %status, jobs = n, older_than = ?keep, "pruned finished jobs");
                }
            }
        }
    }
    Ok(())
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
