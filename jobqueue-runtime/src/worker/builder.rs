//! Building a worker: its settings, their defaults and their checks.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::middleware::{Chain, Middleware};
use super::{Worker, QUEUE_CALL_TIMEOUT};
use crate::data::DataMap;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::model::Retention;
use crate::queue::Queue;
use crate::registry::Registry;

/// Settings of a [`Worker`]; see each [`WorkerBuilder`] method for its default.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) queues: Vec<String>,
    pub(super) concurrency: usize,
    /// Jobs run at once per queue, for the queues given (within `concurrency`).
    pub(super) queue_concurrency: Vec<(String, usize)>,
    pub(super) poll_min: Duration,
    pub(super) poll_max: Duration,
    /// While idle, how often to look for ready jobs with one cheap read; `None`: claim on
    /// the polling schedule alone.
    pub(super) idle_probe: Option<Duration>,
    /// On PostgreSQL, while an idle worker listens for notifications, how often it claims
    /// anyway.
    pub(super) listen_fallback: Duration,
    pub(super) grace: Duration,
    pub(super) cancel_grace: Duration,
    pub(super) maintenance_interval: Duration,
    pub(super) maintenance: bool,
    pub(super) retention: Retention,
    pub(super) periodic: bool,
    pub(super) owner: String,
    pub(super) unrunnable_deadline: Duration,
    pub(super) max_lease_expiries: u32,
    pub(super) progress_interval: Duration,
}

/// Builds a [`Worker`]. Every setting has a default; [`WorkerBuilder::build`] checks them.
#[derive(Debug)]
pub struct WorkerBuilder {
    pub(super) queue: Queue,
    pub(super) config: Config,
    pub(super) data: DataMap,
    pub(super) middleware: Chain,
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

    /// Jobs of `queue` run at once by this worker, at most; the worker's
    /// [`concurrency`](WorkerBuilder::concurrency) still bounds all its queues together.
    /// Default: only that bound. A queue at its bound is not claimed from while its other
    /// queues are, so a slow queue cannot take every slot. Per worker: for a bound across
    /// every worker, give the kind a concurrency limit (`#[job(concurrency = 4)]`).
    pub fn queue_concurrency(mut self, queue: impl Into<String>, n: usize) -> Self {
        let queue = queue.into();
        self.config.queue_concurrency.retain(|(q, _)| *q != queue);
        self.config.queue_concurrency.push((queue, n));
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

    /// While it finds nothing to claim, how often the worker's group looks for ready jobs
    /// that another process enqueued (or that maintenance made ready), instead of polling
    /// with claims. Default 60 ms: a job enqueued elsewhere on an idle queue starts within
    /// about a tenth of a second, even with a slot of the rotation missed. The group is the live workers (as their heartbeats say)
    /// serving the same queues in the same order and having a free slot: each probes in its
    /// own slot of a rotation, slots this far apart on the database server's clock, so a
    /// group of k workers looks as often as one worker and each every k × this; a worker
    /// alone looks every interval. Workers of a group should share this setting. A look is
    /// one read of one index entry per served queue, so it costs the server one small
    /// statement per interval (about 17 a second at the default, per group) and locks
    /// nothing; the claim follows only when it finds a job. The probes read on a
    /// connection of the queue's pool, held while the worker is idle and given back before
    /// each claim, or whenever the pool has no other to spare (a probe then skips its slot
    /// rather than wait for one) (on a [`Queue::from_pool`](crate::Queue::from_pool) pool, on a connection
    /// of their own, opened the first time the worker is idle and kept: one more connection
    /// per worker process). After a failed probe it stays off for 10 s while the worker
    /// polls with claims.
    ///
    /// `None` turns it off: the worker then polls with claims, backing off as
    /// [`poll_interval`](Self::poll_interval) says (fewer statements while idle, up to 2 s
    /// before a job from another process starts). A job enqueued in this process wakes the
    /// worker at once either way. At least 10 ms.
    ///
    /// On PostgreSQL there is no probe: an idle worker listens for the notifications the
    /// schema's triggers send when a job of a served queue becomes ready (or a queue is
    /// resumed), and claims when one comes, so it sends nothing while it waits (see
    /// [`listen_fallback`](Self::listen_fallback)). The interval is unused there; `None`
    /// turns the listening off as it turns the probe off here.
    pub fn idle_probe(mut self, every: Option<Duration>) -> Self {
        self.config.idle_probe = every;
        self
    }

    /// On PostgreSQL, while an idle worker listens for ready jobs, how often it claims
    /// anyway. Default 5 s. Notifications are not kept for a session that is not listening,
    /// so one sent while the listener's connection was being replaced is lost; the listener
    /// also claims once after each reconnection, and the worker polls with claims while it
    /// cannot listen at all. The listener holds one connection of the queue's pool for the
    /// worker's life (so a worker process at the defaults still holds at most 4), or one of
    /// its own beside a pool of the application's ([`Queue::from_pool`](crate::Queue::from_pool))
    /// or a pool of one connection. Unused on MySQL/MariaDB. At least 100 ms.
    pub fn listen_fallback(mut self, every: Duration) -> Self {
        self.config.listen_fallback = every;
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

    /// The least time between two writes of one job's progress
    /// ([`JobContext::set_progress`](crate::JobContext::set_progress)). Default 2 s. The
    /// first value is written at once and the last when the attempt ends, whatever this is.
    pub fn progress_interval(mut self, every: Duration) -> Self {
        self.config.progress_interval = every;
        self
    }

    /// How often maintenance runs: promoting due scheduled jobs and reclaiming expired
    /// leases. Default 1 s (±20 % jitter). A due job starts within about this long of its
    /// time; a crashed worker's job comes back within its lease plus this long.
    ///
    /// One worker of the fleet runs the passes at a time: the holder of the maintenance
    /// turn, which renews it at each pass for 5 intervals. The others try to take it every
    /// interval × the number of live workers, and get it once it is released (a worker that
    /// stops gives it up) or expired (one that died or froze): within 5 intervals plus 1.2 ×
    /// interval × live workers. The operations guide shows how to see the holder.
    pub fn maintenance_interval(mut self, every: Duration) -> Self {
        self.config.maintenance_interval = every;
        self
    }

    /// Whether this worker takes part in maintenance. Default true: every worker may,
    /// safely, since one holds the turn at a time and each pass locks its rows with SKIP
    /// LOCKED; turn it off only if another process does it.
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
    /// [`JobContext::data`](crate::JobContext::data). One value per type; a second call with the same type replaces
    /// the first. The worker's own [`Queue`] is always there, for follow-up jobs.
    ///
    /// Use it for what would otherwise be a `static`: the application's pool, an HTTP
    /// client, a configuration. A type that is not `Clone` goes in an `Arc`.
    pub fn data<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// Wraps every run of a job's code on this worker in `middleware`: for error reporting,
    /// tracing fields (a tenant's, from the job's metadata) or timing. Middlewares run
    /// outermost first, in the order of these calls: the first registered sees the run
    /// begin first and end last. Default: none.
    ///
    /// A middleware runs on the job's task, in its span, under its lease checks and its
    /// shutdown; it sees how the job's code ended but cannot change it, and one that panics
    /// fails the attempt as a job that panics does. See [`Middleware`].
    ///
    /// ```no_run
    /// # extern crate jobqueue_runtime as jobqueue;
    /// use jobqueue::{JobRunInfo, Middleware, Next, RunResult, Worker};
    ///
    /// struct Tenant;
    ///
    /// impl Middleware for Tenant {
    ///     async fn call(&self, job: &JobRunInfo, next: Next<'_>) -> RunResult {
    ///         use tracing::Instrument;
    ///         let tenant = job.metadata().and_then(|m| m.get("tenant")?.as_str()).unwrap_or("-");
    ///         next.run().instrument(tracing::info_span!("tenant", tenant)).await
    ///     }
    /// }
    ///
    /// # fn demo(queue: jobqueue::Queue) -> jobqueue::Result<()> {
    /// let worker = Worker::builder(queue).middleware(Tenant).build()?;
    /// # Ok(()) }
    /// ```
    pub fn middleware(mut self, middleware: impl Middleware) -> Self {
        self.middleware.push(middleware);
        self
    }

    /// Checks the settings and the job registry (no two kinds with one name), and that this
    /// worker holds every [`Data<T>`](crate::Data) the kinds of its queues take.
    pub fn build(mut self) -> Result<Worker> {
        let c = &self.config;
        if c.queues.is_empty() {
            return Err(Error::InvalidSetting {
                setting: "queues",
                reason: "a worker needs at least one queue; call `.queues([\"default\"])`".into(),
            });
        }
        for q in &c.queues {
            crate::key::validate_queue(q)?;
        }
        if c.concurrency == 0 {
            return Err(Error::InvalidSetting {
                setting: "concurrency",
                reason: "`concurrency` must be at least 1".into(),
            });
        }
        for (q, n) in &c.queue_concurrency {
            if !c.queues.contains(q) {
                return Err(Error::InvalidSetting {
                    setting: "queue_concurrency",
                    reason: format!(
                        "queue {q:?} has a concurrency but is not one of this worker's queues ({}); add it to `.queues(...)` or remove its `.queue_concurrency`",
                        c.queues.join(", ")
                    ),
                });
            }
            if *n == 0 {
                return Err(Error::InvalidSetting {
                    setting: "queue_concurrency",
                    reason: format!("the concurrency of queue {q:?} must be at least 1; to stop serving it, remove it from `.queues(...)`"),
                });
            }
        }
        if c.poll_min.is_zero() || c.poll_min > c.poll_max {
            return Err(Error::InvalidSetting {
                setting: "poll_interval",
                reason: format!(
                    "poll interval must satisfy 0 < min <= max, got min {:?}, max {:?}",
                    c.poll_min, c.poll_max
                ),
            });
        }
        if let Some(every) = c.idle_probe.filter(|d| *d < Duration::from_millis(10)) {
            return Err(Error::InvalidSetting {
                setting: "idle_probe",
                reason: format!(
                    "the idle probe's interval must be at least 10 ms, got {every:?}; pass a \
                     longer one, or None to poll with claims only"
                ),
            });
        }
        if c.listen_fallback < Duration::from_millis(100) {
            return Err(Error::InvalidSetting {
                setting: "listen_fallback",
                reason: format!(
                    "the listener's fallback interval must be at least 100 ms, got {:?}",
                    c.listen_fallback
                ),
            });
        }
        if c.max_lease_expiries == 0 {
            return Err(Error::InvalidSetting {
                setting: "max_lease_expiries",
                reason: "`max_lease_expiries` must be at least 1".into(),
            });
        }
        if c.owner.is_empty() || c.owner.chars().count() > 100 {
            return Err(Error::InvalidSetting {
                setting: "owner",
                reason: "`owner` must be 1 to 100 characters".into(),
            });
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
                return Err(Error::MissingData {
                    kind: d.kind().to_owned(),
                    type_name: need.type_name(),
                    queues: c.queues.clone(),
                });
            }
        }
        let metrics = Arc::new(Metrics::default());
        Ok(Worker {
            store: self.queue.worker_store(metrics.clone(), QUEUE_CALL_TIMEOUT),
            queue: self.queue,
            config: Arc::new(self.config),
            registry: Arc::new(registry),
            metrics,
            stop: CancellationToken::new(),
            data: self.data,
            middleware: Arc::new(self.middleware),
        })
    }
}

pub(super) fn default_owner() -> String {
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

impl Worker {
    /// Starts building a worker for `queue`.
    pub fn builder(queue: Queue) -> WorkerBuilder {
        WorkerBuilder {
            queue,
            config: Config {
                queues: vec!["default".into()],
                concurrency: 10,
                queue_concurrency: Vec::new(),
                poll_min: Duration::from_millis(50),
                poll_max: Duration::from_secs(2),
                idle_probe: Some(Duration::from_millis(60)),
                listen_fallback: Duration::from_secs(5),
                grace: Worker::DEFAULT_SHUTDOWN_GRACE,
                cancel_grace: Worker::DEFAULT_CANCEL_GRACE,
                maintenance_interval: Duration::from_secs(1),
                maintenance: true,
                retention: Retention::default(),
                periodic: true,
                owner: default_owner(),
                unrunnable_deadline: Duration::from_secs(24 * 3600),
                max_lease_expiries: crate::store::DEFAULT_MAX_LEASE_EXPIRIES,
                progress_interval: Duration::from_secs(2),
            },
            data: DataMap::default(),
            middleware: Chain::default(),
        }
    }
}
