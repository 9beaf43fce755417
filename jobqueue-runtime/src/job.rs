//! What a job kind is: the [`Job`] trait, its [`JobOptions`], and the [`JobContext`] a run sees.

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::data::{Data, DataMap, DataNeed};
use crate::error::{JobError, Result};
use crate::model::Uniqueness;
use crate::retry::Backoff;

/// A kind of job: a serializable argument struct plus the code that runs it.
///
/// `#[job]` implements this trait for the argument struct it generates; implement it by hand
/// only where the macro does not fit (see the macro's "equivalent code" section). A kind is
/// found by the worker through its registration (`jobqueue::register!` or the macro's own),
/// by [`Job::KIND`], so the name must stay stable across releases while jobs of the old
/// release may still sit in the table.
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The stable kind name stored with every job (`kind` column).
    const KIND: &'static str;

    /// Defaults for every job of this kind: queue, attempts, lease, backoff...
    const OPTIONS: JobOptions;

    /// The shared state a run takes from its worker ([`Data<T>`](crate::Data) parameters of
    /// a `#[job]` function). A worker that serves the kind's queue without one of these is
    /// refused by [`WorkerBuilder::build`](crate::WorkerBuilder::build). Default: none.
    const DATA: &'static [DataNeed] = &[];

    /// The idempotency key of this job: a second enqueue with an equal key is a duplicate.
    /// Keys are shared by every kind: a key that a job of another kind holds makes the
    /// enqueue fail with [`Error::KeyTaken`](crate::Error::KeyTaken).
    ///
    /// The default is [`derived_task_key`](crate::key::derived_task_key): the kind and a hash
    /// of the arguments, so equal arguments give equal keys.
    fn task_key(&self) -> Result<String> {
        crate::key::derived_task_key(Self::KIND, self)
    }

    /// The key of this job's concurrency limit ([`JobOptions::concurrency`]): jobs with equal
    /// keys share the limit. `None` (the default): the kind's name, one limit for the whole
    /// kind. `#[job(concurrency_key = "account:{account_id}")]` renders its template here.
    fn concurrency_key(&self) -> Option<String> {
        None
    }

    /// The key of this job's rate limit ([`JobOptions::rate_limit`]), as
    /// [`Job::concurrency_key`] is of its concurrency limit. `None`: the kind's name.
    fn rate_key(&self) -> Option<String> {
        None
    }

    /// Runs one attempt of the job.
    fn run(self, ctx: JobContext) -> impl Future<Output = Result<(), JobError>> + Send;
}

/// Settings shared by every job of a kind; `#[job(...)]` fills them from its options.
///
/// Every field has a default (see [`JobOptions::DEFAULT`]); a per-enqueue
/// [`EnqueueOptions`](crate::EnqueueOptions) can override the queue, priority, key,
/// `max_attempts`, uniqueness, concurrency key and rate key, and add a delay or start time
/// and metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobOptions {
    /// The queue the job goes to. Default `"default"`.
    pub queue: &'static str,
    /// How many attempts (runs) a job gets before it is `failed`. Default 25, at least 1.
    pub max_attempts: u32,
    /// How long a claim holds the job without renewal. Default 30 s, at least 1 s, at most
    /// about 49.7 days (`u32::MAX` ms; a longer one is refused at enqueue). The worker renews
    /// every lease a quarter of the way through, so a job may run for much longer.
    pub lease: Duration,
    /// Longest time one attempt may run before it is cancelled and counted as failed.
    /// Default: no limit, since a run may legitimately last hours and the lease already
    /// brings back the job of a crashed worker. A job that hangs keeps its slot, and its
    /// renewed lease, until the worker stops: set a timeout on kinds that wait on I/O.
    pub timeout: Option<Duration>,
    /// Lower runs first within a queue. Default 0; range `-32768..=32767`.
    pub priority: i16,
    /// The wait before each retry.
    pub backoff: Backoff,
    /// A cron schedule on which the workers enqueue this job by themselves, each tick at most
    /// once: six fields `sec min hour day month weekday`, or five without the seconds, in
    /// UTC unless a time zone comes first (`CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri`).
    pub cron: Option<&'static str>,
    /// For a `cron` kind: whether a tick is enqueued while the job of the previous tick is
    /// still scheduled, ready or running. Default false: such a tick is skipped, so a run
    /// longer than the period never overlaps the next one, and a queue that no worker serves
    /// holds at most one waiting tick.
    pub overlap: bool,
    /// How long a job's task key blocks another enqueue of the key. Default
    /// [`Uniqueness::UntilPruned`]: while its row exists.
    pub unique: Uniqueness,
    /// How many times a job of this kind may snooze ([`JobError::snooze`]) before the next
    /// snooze fails it. Default 100.
    pub max_snoozes: u32,
    /// At most this many jobs of one concurrency key run at once, across every worker.
    /// Default: no limit. The key is [`Job::concurrency_key`] (the kind's name unless the
    /// kind or the enqueue names one).
    pub concurrency: Option<u32>,
    /// At most this many jobs of one rate key start in any window of this length, across
    /// every worker. Default: no limit. The key is [`Job::rate_key`].
    pub rate_limit: Option<RateLimit>,
}

/// A rate limit: at most `starts` jobs of one key start in any window of length `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Starts allowed per window, at least 1.
    pub starts: u32,
    /// The window's length, from 1 ms to about 49.7 days (`u32::MAX` ms).
    pub per: Duration,
}

impl JobOptions {
    /// The defaults: queue `default`, 25 attempts, 30 s lease, no timeout, priority 0,
    /// exponential backoff, no cron schedule, no overlapping ticks, keys unique until the
    /// job is pruned, 100 snoozes.
    pub const DEFAULT: JobOptions = JobOptions {
        queue: "default",
        max_attempts: 25,
        lease: Duration::from_secs(30),
        timeout: None,
        priority: 0,
        backoff: Backoff::DEFAULT,
        cron: None,
        overlap: false,
        unique: Uniqueness::UntilPruned,
        max_snoozes: 100,
        concurrency: None,
        rate_limit: None,
    };

    /// Sets the queue.
    pub const fn queue(mut self, queue: &'static str) -> Self {
        self.queue = queue;
        self
    }

    /// Sets the number of attempts.
    pub const fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets the lease.
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets the per-attempt timeout.
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the priority.
    pub const fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Sets the retry backoff.
    pub const fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the cron schedule.
    pub const fn cron(mut self, cron: &'static str) -> Self {
        self.cron = Some(cron);
        self
    }

    /// Sets whether a periodic kind's ticks may overlap (see [`JobOptions::overlap`]).
    pub const fn overlap(mut self, overlap: bool) -> Self {
        self.overlap = overlap;
        self
    }

    /// Sets how long a job's task key blocks another enqueue (see [`Uniqueness`]).
    pub const fn unique(mut self, unique: Uniqueness) -> Self {
        self.unique = unique;
        self
    }

    /// Sets how many times a job may snooze (see [`JobOptions::max_snoozes`]).
    pub const fn max_snoozes(mut self, max_snoozes: u32) -> Self {
        self.max_snoozes = max_snoozes;
        self
    }
}

impl JobOptions {
    /// Sets the concurrency limit per key (see [`JobOptions::concurrency`]).
    pub const fn concurrency(mut self, limit: u32) -> Self {
        self.concurrency = Some(limit);
        self
    }

    /// Sets the rate limit per key: at most `starts` starts in any window of length `per`.
    pub const fn rate_limit(mut self, starts: u32, per: Duration) -> Self {
        self.rate_limit = Some(RateLimit { starts, per });
        self
    }
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions::DEFAULT
    }
}

/// Why a job's [`JobContext::cancelled`] resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// The worker is shutting down and the grace period is over; the job goes back to `ready`.
    Shutdown,
    /// The lease could not be renewed: another worker may run the job now. Nothing this
    /// attempt does will be recorded.
    LeaseLost,
    /// The attempt ran longer than the kind's `timeout`; it counts as a failed attempt.
    Timeout,
    /// An operator asked for the job to be cancelled; it ends `cancelled`.
    Requested,
}

/// What a running job knows about itself, and the signal that asks it to stop. A job whose
/// work is writes to the queue's database can also complete itself in its own transaction
/// with [`JobContext::complete_in`].
#[derive(Debug, Clone)]
pub struct JobContext {
    pub(crate) id: u64,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) task_key: String,
    pub(crate) token: CancellationToken,
    pub(crate) reason: std::sync::Arc<CancelState>,
    pub(crate) data: DataMap,
    /// The claim this run holds, for the writes the job makes itself
    /// ([`JobContext::complete_in`]); `None` for a [`JobContext::detached`] one.
    pub(crate) claim: Option<Arc<ClaimFence>>,
    pub(crate) progress: std::sync::Arc<crate::progress::ProgressSlot>,
    pub(crate) output: OutputSlot,
}

/// Why a context was cancelled, and whether its lease was lost. The reason the job reads is
/// the first one given; a lease loss is kept apart because it decides, whatever the job was
/// told before (an operator's cancel, a shutdown), that its future must be dropped at once:
/// another worker may take the job, and its concurrency slot is freed.
///
/// It also holds the moment by which the worker must have stopped the run if no renewal
/// comes (three quarters of the lease after the last renewal was sent). The lease thread
/// stops such a run too, but a process that was frozen (SIGSTOP, a stalled VM) and thaws
/// wakes its job tasks and its lease thread at once: the run checks the moment itself before
/// each step, so that no step runs after it.
#[derive(Debug)]
pub(crate) struct CancelState {
    first: std::sync::OnceLock<CancelReason>,
    lease_lost: CancellationToken,
    /// Nanoseconds after [`clock_base`] by which the run must stop; `u64::MAX`: never
    /// (a context outside a worker).
    stop_by: std::sync::atomic::AtomicU64,
}

impl Default for CancelState {
    fn default() -> Self {
        CancelState {
            first: Default::default(),
            lease_lost: Default::default(),
            stop_by: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }
}

/// The origin of [`CancelState::stop_by`].
fn clock_base() -> std::time::Instant {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(std::time::Instant::now)
}

/// What a job needs to write its own completion, fenced like the worker's writes: the
/// worker's `lease_owner` (with the context's id and attempt), and how far the job got.
#[derive(Debug)]
pub(crate) struct ClaimFence {
    pub(crate) owner: String,
    /// Whether the claim holds a concurrency slot, which the completion frees.
    pub(crate) holds_slot: bool,
    completion: AtomicU8,
}

/// [`ClaimFence::completion`]: the job never called `complete_in`.
const NOT_TRIED: u8 = 0;
/// It called it, and the completion matched no row (lease lost, cancel requested).
const REFUSED: u8 = 1;
/// Its completion matched the row, in a transaction that may have committed since.
const WRITTEN: u8 = 2;

impl ClaimFence {
    pub(crate) fn new(owner: impl Into<String>, holds_slot: bool) -> Self {
        ClaimFence {
            owner: owner.into(),
            holds_slot,
            completion: AtomicU8::new(NOT_TRIED),
        }
    }

    /// Records that the job is about to write its completion; called before the statement,
    /// so that a run dropped half-way through it is still checked.
    pub(crate) fn completion_tried(&self) {
        let _ = self.completion.compare_exchange(
            NOT_TRIED,
            REFUSED,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// Records that the job's completion matched its row.
    pub(crate) fn completion_written(&self) {
        self.completion.store(WRITTEN, Ordering::SeqCst);
    }
}

impl JobContext {
    /// Whether the job called [`JobContext::complete_in`] during this run: the worker then
    /// reads whether that transaction committed instead of writing the outcome itself.
    pub(crate) fn completion_tried(&self) -> bool {
        self.claim
            .as_ref()
            .is_some_and(|c| c.completion.load(Ordering::SeqCst) != NOT_TRIED)
    }

    /// Whether a completion of this run matched its row, so that the row may be locked by
    /// the job's transaction, or finished by its commit.
    pub(crate) fn completion_written(&self) -> bool {
        self.claim
            .as_ref()
            .is_some_and(|c| c.completion.load(Ordering::SeqCst) == WRITTEN)
    }
}

impl JobContext {
    /// The job's id (`job_queue.id`).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Which attempt this is, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How many attempts the job has in all.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The job's kind name.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The queue the job was claimed from.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The job's idempotency key: use it to make side effects idempotent too.
    pub fn task_key(&self) -> &str {
        &self.task_key
    }

    /// Resolves when the job should stop: shutdown after the grace period, lease lost,
    /// timeout, or an operator's cancel. See [`JobContext::cancel_reason`].
    ///
    /// What happens next depends on the reason. After a shutdown the job has the worker's
    /// `cancel_grace` to return (an error hands it back to `ready`; `Ok(())` records it
    /// done, so return `Ok` only if the work is really finished). After an operator's cancel
    /// the job decides how to stop and ends `cancelled`. After a lease loss or a timeout the
    /// job's future is dropped at its next `.await` at once — another worker may already run
    /// it — so this future resolves only in tasks the job spawned with a clone of the context
    /// or of [`JobContext::cancellation_token`], which should stop too.
    pub async fn cancelled(&self) {
        self.token.cancelled().await
    }

    /// Whether the job has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Why the job was asked to stop, once it has been.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.reason.first.get().copied()
    }

    /// The cancellation token itself, to hand to code that takes one.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// A value the worker was given with
    /// [`WorkerBuilder::data`](crate::WorkerBuilder::data) (or a detached context with
    /// [`JobContext::with_data`]). A worker always holds its own [`Queue`](crate::Queue), for
    /// follow-up jobs: `ctx.data::<Queue>()`.
    pub fn data<T: 'static>(&self) -> Option<&T> {
        self.data.get::<T>()
    }

    /// Adds shared state to a context, for calling a job function that takes
    /// [`Data<T>`](crate::Data) outside a worker.
    pub fn with_data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// Records how far the job has come: any value that serialises to JSON, at most
    /// [`MAX_PROGRESS_BYTES`](crate::MAX_PROGRESS_BYTES) of it (a count, a percentage, a
    /// small object). Operators read it with [`Queue::job`](crate::Queue::job)
    /// (`JobRecord::progress`) and `jobqueue show`.
    ///
    /// Cheap to call as often as you like: the worker writes the latest value at once, then
    /// at most once per [`WorkerBuilder::progress_interval`](crate::WorkerBuilder::progress_interval)
    /// (default 2 s), and the last value when the attempt ends, before its outcome: the
    /// final value is never lost. Each write is fenced by the claim (owner and attempt): an
    /// attempt that lost its lease writes nothing more. A later attempt starts from the
    /// value the earlier one left until it sets its own.
    ///
    /// A [`JobContext::detached`] context keeps the value in memory only
    /// ([`JobContext::progress`]).
    ///
    /// ```
    /// # extern crate jobqueue_runtime as jobqueue;
    /// # fn demo(ctx: jobqueue::JobContext) -> jobqueue::Result<()> {
    /// ctx.set_progress(&serde_json::json!({ "rows": 1200, "of": 5000 }))?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) (setting `progress`) when
    /// the value does not serialise, is larger than the limit, or holds the character U+0000
    /// (on every database: PostgreSQL cannot store it); the previous value stays.
    pub fn set_progress<T: serde::Serialize + ?Sized>(&self, value: &T) -> Result<()> {
        let invalid = |reason: String| crate::Error::InvalidSetting {
            setting: "progress",
            reason: format!("job `{}`: {reason}", self.kind),
        };
        let json = serde_json::to_string(value).map_err(|e| {
            invalid(format!(
                "the progress value does not serialise to JSON: {e}"
            ))
        })?;
        if crate::model::holds_nul_escape(&json) {
            return Err(invalid(
                "the progress value holds the character U+0000 (`\\u0000` in JSON), which \
                 PostgreSQL's JSONB cannot store; remove it or encode it otherwise"
                    .to_string(),
            ));
        }
        let limit = crate::progress::MAX_PROGRESS_BYTES;
        if json.len() > limit {
            return Err(invalid(format!(
                "the progress value is {} bytes of JSON, more than the limit of {limit}; report counts or a short status, not data",
                json.len()
            )));
        }
        self.progress.set(json);
        Ok(())
    }

    /// The latest value this attempt gave [`JobContext::set_progress`], written or not.
    pub fn progress(&self) -> Option<serde_json::Value> {
        self.progress
            .latest()
            .and_then(|json| serde_json::from_str(&json).ok())
    }

    /// A context for calling a job function directly, outside a worker (tests, scripts):
    /// attempt 1 of 1, no kind, no queue, not cancelled. [`JobContext::builder`] sets the
    /// rest. Its [`JobContext::set_progress`] values stay in memory, readable with
    /// [`JobContext::progress`].
    pub fn detached(id: u64, task_key: impl Into<String>) -> Self {
        JobContext::builder(id, task_key).build()
    }

    /// A context as a worker would make it, for calling a job function outside a worker:
    /// which attempt this is, the kind and queue, shared state, and a cancellation the test
    /// controls.
    ///
    /// ```
    /// # mod jobqueue {
    /// #     pub use jobqueue_runtime::JobContext;
    /// #     pub mod context { pub use jobqueue_runtime::CancelReason; }
    /// # }
    /// use jobqueue::JobContext;
    /// use jobqueue::context::CancelReason;
    ///
    /// let builder = JobContext::builder(7, "export:7").attempt(3).max_attempts(5);
    /// let canceller = builder.canceller();
    /// let ctx = builder.build();
    /// assert_eq!((ctx.attempt(), ctx.max_attempts()), (3, 5));
    ///
    /// canceller.cancel(CancelReason::Requested);
    /// assert_eq!(ctx.cancel_reason(), Some(CancelReason::Requested));
    /// ```
    pub fn builder(id: u64, task_key: impl Into<String>) -> JobContextBuilder {
        JobContextBuilder {
            ctx: JobContext {
                id,
                attempt: 1,
                max_attempts: 1,
                kind: String::new(),
                queue: String::new(),
                task_key: task_key.into(),
                token: CancellationToken::new(),
                reason: Default::default(),
                data: DataMap::default(),
                claim: None,
                progress: Default::default(),
                output: OutputSlot::default(),
            },
        }
    }

    /// Records what this attempt returns, stored with the job when it ends `done` (read
    /// with [`Queue::output`](crate::Queue::output)). A `#[job]` function does it by
    /// returning the value; a hand-written [`Job`] impl calls this. The last call wins.
    pub fn set_output<T: Serialize + 'static>(&self, value: &T) {
        self.output.put(value)
    }

    /// The output recorded by this attempt: its JSON, or why it could not be serialized.
    /// `None` when the job returned `()`.
    pub(crate) fn output(&self) -> Option<std::result::Result<String, String>> {
        self.output.0.lock().ok().and_then(|o| o.clone())
    }

    pub(crate) fn cancel(&self, reason: CancelReason) {
        let _ = self.reason.first.set(reason);
        if reason == CancelReason::LeaseLost {
            self.reason.lease_lost.cancel();
        }
        self.token.cancel();
    }

    /// Resolves once the attempt's lease is lost, whatever reason the job was told first.
    pub(crate) async fn lease_lost(&self) {
        self.reason.lease_lost.cancelled().await
    }

    /// Sets the moment by which the run must have stopped, unless a renewal moves it.
    pub(crate) fn stop_by(&self, at: std::time::Instant) {
        let nanos = at.saturating_duration_since(clock_base()).as_nanos();
        self.reason.stop_by.store(
            u64::try_from(nanos).unwrap_or(u64::MAX - 1),
            std::sync::atomic::Ordering::Release,
        );
    }

    /// Whether the run is past the moment by which it must have stopped.
    pub(crate) fn past_stop_by(&self) -> bool {
        let stop_by = self
            .reason
            .stop_by
            .load(std::sync::atomic::Ordering::Acquire);
        stop_by != u64::MAX && clock_base().elapsed().as_nanos() >= u128::from(stop_by)
    }
}

/// Builds a [`JobContext`] outside a worker; see [`JobContext::builder`]. (Not `Clone`: the
/// contexts of two clones would share one cancellation.)
#[derive(Debug)]
#[must_use = "call `.build()` to get the context"]
pub struct JobContextBuilder {
    ctx: JobContext,
}

impl JobContextBuilder {
    /// Which attempt this is, from 1 (default 1). Raises `max_attempts` to it if needed.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.ctx.attempt = attempt.max(1);
        self.ctx.max_attempts = self.ctx.max_attempts.max(self.ctx.attempt);
        self
    }

    /// How many attempts the job has in all (default 1, and at least `attempt`).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.ctx.max_attempts = max_attempts.max(1);
        self
    }

    /// The kind name (default empty).
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.ctx.kind = kind.into();
        self
    }

    /// The queue (default empty).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.ctx.queue = queue.into();
        self
    }

    /// Shared state, as [`WorkerBuilder::data`](crate::WorkerBuilder::data) gives a
    /// worker's jobs: one value per type.
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.ctx.data.insert(value);
        self
    }

    /// Starts the context cancelled, for `reason`: the job sees it cancelled from its first
    /// line, as a job does whose cancel arrived while it was being claimed.
    pub fn cancelled(self, reason: CancelReason) -> Self {
        self.ctx.cancel(reason);
        self
    }

    /// A handle that cancels the context later, from outside the job.
    pub fn canceller(&self) -> JobCanceller {
        JobCanceller {
            ctx: self.ctx.clone(),
        }
    }

    /// The context.
    pub fn build(self) -> JobContext {
        self.ctx
    }

    #[cfg(feature = "testing")]
    pub(crate) fn data_map(mut self, data: DataMap) -> Self {
        self.ctx.data = data;
        self
    }
}

/// Cancels a [`JobContext`] made with [`JobContext::builder`], as a worker would: the job's
/// [`JobContext::cancelled`] resolves and [`JobContext::cancel_reason`] says why. The first
/// reason given stays.
#[derive(Debug, Clone)]
pub struct JobCanceller {
    ctx: JobContext,
}

impl JobCanceller {
    /// Cancels the context for `reason`.
    pub fn cancel(&self, reason: CancelReason) {
        self.ctx.cancel(reason);
    }
}

/// Where a run's output waits until its outcome is written: shared by the clones of a
/// [`JobContext`], so the code the macro generates can fill it after the function took the
/// context.
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct OutputSlot(
    std::sync::Arc<std::sync::Mutex<Option<std::result::Result<String, String>>>>,
);

impl OutputSlot {
    /// The slot of `ctx`.
    pub fn of(ctx: &JobContext) -> Self {
        ctx.output.clone()
    }

    /// Converts what a job function returned: its output into the slot, its error out.
    pub fn keep<R: IntoJobResult>(&self, returned: R) -> Result<(), JobError> {
        self.put(&returned.into_job_result()?);
        Ok(())
    }

    /// Serializes `value` into the slot; `()` stores nothing (and costs nothing).
    pub fn put<T: Serialize + 'static>(&self, value: &T) {
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<()>() {
            return;
        }
        let json = serde_json::to_string(value).map_err(|e| e.to_string());
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(json);
        }
    }
}

/// What a job function may return: `()`, or `Result<T, E>` where `T` is the job's output
/// (`()`, or any value serializable to JSON) and `E` converts into [`JobError`].
#[diagnostic::on_unimplemented(
    message = "a job function must return `()` or `Result<T, E>` where `T` is `()` or serializable (`Serialize + DeserializeOwned`) and `E` converts into `JobError`",
    label = "`{Self}` is not a job result",
    note = "any `E: Into<Box<dyn std::error::Error + Send + Sync>>` works, such as `std::io::Error`, `anyhow::Error` or `String`"
)]
pub trait IntoJobResult {
    /// What a successful run returns, stored with the job (`()`: nothing).
    type Output: Serialize + DeserializeOwned + Send + 'static;

    /// Converts the job function's return value.
    fn into_job_result(self) -> Result<Self::Output, JobError>;
}

impl IntoJobResult for () {
    type Output = ();

    fn into_job_result(self) -> Result<(), JobError> {
        Ok(())
    }
}

impl<T, E> IntoJobResult for std::result::Result<T, E>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    E: Into<JobError>,
{
    type Output = T;

    fn into_job_result(self) -> Result<T, JobError> {
        self.map_err(Into::into)
    }
}

/// The type a kind's runs return, stored with each done job and read back typed with
/// [`Queue::output`](crate::Queue::output) and [`Queue::wait_output`](crate::Queue::wait_output).
/// `#[job]` implements it from the function's return type (`()` when it returns `()` or
/// `Result<(), E>`); a hand-written [`Job`] impl may implement it, and record the value
/// with [`JobContext::set_output`].
pub trait JobOutput {
    /// What a successful run returns.
    type Output: Serialize + DeserializeOwned + Send + 'static;
}

/// A parameter of a job function that the worker provides rather than the payload.
/// Implemented by [`Data<T>`]; `#[job]` uses it for parameters of that type.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not state a worker can hand to a job",
    label = "use `Data<T>` for a value given to the worker with `.data(value)`",
    note = "the shared value must be `Clone + Send + Sync + 'static`; wrap it in an `Arc` if it is not `Clone`"
)]
pub trait FromJobContext: Sized {
    /// The type the worker must hold.
    const NEED: DataNeed;

    /// Takes the value from the context; an error if the worker was not given it.
    fn from_job_context(ctx: &JobContext) -> Result<Self, JobError>;
}

impl<T: Clone + Send + Sync + 'static> FromJobContext for Data<T> {
    const NEED: DataNeed = DataNeed::of::<T>();

    fn from_job_context(ctx: &JobContext) -> Result<Self, JobError> {
        match ctx.data::<T>() {
            Some(value) => Ok(Data(value.clone())),
            // Another worker may have it: retry rather than fail for good.
            None => Err(JobError::retryable(format!(
                "job `{}` needs `Data<{}>`, which this worker was not given; call `.data(value)` on its `Worker::builder`",
                ctx.kind(),
                Self::NEED.type_name()
            ))),
        }
    }
}
