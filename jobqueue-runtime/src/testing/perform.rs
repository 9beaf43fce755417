//! Running one job in the test's own task, as a worker would, without a database.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::data::DataMap;
use crate::job::{CancelReason, Job, JobContext};
use crate::model::Finish;
use crate::registry::{JobDescriptor, Registry};
use crate::worker::execute::run_one;
use crate::worker::middleware::Chain;
use crate::worker::outcome::{decide, Outcome};

/// What a worker would record for one attempt, as [`perform`] reports it.
///
/// More variants may come (the enum is `#[non_exhaustive]`): match with a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Performed {
    /// The job succeeded: it would be `done`.
    Done,
    /// The job succeeded and returned a value (not `()`): it would be `done`, with this
    /// output (its JSON, as [`Queue::output`](crate::Queue::output) would read it).
    DoneWithOutput(serde_json::Value),
    /// The job snoozed ([`JobError::snooze`](crate::JobError::snooze)): back to
    /// `scheduled`, due after `delay`, without spending an attempt (a worker fails it instead
    /// once it has snoozed its kind's `max_snoozes` times).
    Snoozed {
        /// The wait before it runs again.
        delay: Duration,
    },
    /// The attempt failed and attempts are left: back to `scheduled`, due after `delay`
    /// (the kind's backoff for this attempt, with its jitter).
    Retry {
        /// The wait before the next attempt.
        delay: Duration,
        /// What `last_error` would say.
        error: String,
    },
    /// `failed` for good: the last attempt failed, or a permanent error
    /// ([`JobError::permanent`](crate::JobError::permanent)).
    Failed {
        /// What `last_error` would say, such as `boom (attempt 3 of 3)`.
        error: String,
    },
    /// `cancelled`: the job was cancelled ([`CancelReason::Requested`]) and returned an
    /// error.
    Cancelled {
        /// What `last_error` would say.
        error: String,
    },
    /// Back to `ready` with its attempt kept, as at a worker's shutdown.
    HandedBack,
    /// Not run: its arguments did not come back from JSON as they went in (a serde
    /// attribute that reads what it did not write). A worker would leave it waiting for
    /// another release.
    Deferred {
        /// Why.
        error: String,
    },
}

/// Runs one attempt of `job` in the test's own task, with a real [`JobContext`], and returns
/// what a worker would record: see [`Perform`] for the settings.
///
/// The job goes through what a worker does with it: its arguments to JSON and back, the
/// kind's `timeout`, a panic caught, and the worker's own decision between done, retry
/// (after the kind's backoff), failed and cancelled.
///
/// ```no_run
/// # extern crate jobqueue_runtime as jobqueue;
/// use jobqueue::testing::{perform, Performed};
/// # use jobqueue::{Job, JobContext, JobError, JobOptions};
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct Charge { order_id: u64 }
/// # impl Job for Charge {
/// #     const KIND: &'static str = "charge";
/// #     const OPTIONS: JobOptions = JobOptions::DEFAULT;
/// #     async fn run(self, _ctx: JobContext) -> Result<(), JobError> { Ok(()) }
/// # }
///
/// # async fn demo() {
/// // The third of three attempts: a failure now is final.
/// let performed = perform(Charge { order_id: 7 }).attempt(3).max_attempts(3).await;
/// assert_eq!(performed, Performed::Done);
/// # }
/// ```
pub fn perform<J: Job>(job: J) -> Perform<J> {
    Perform {
        job,
        id: 1,
        attempt: 1,
        max_attempts: J::OPTIONS.max_attempts,
        task_key: None,
        queue: None,
        data: DataMap::default(),
        cancel: Cancel::Never,
    }
}

/// One attempt to run, from [`perform`]: `.await` it (or call [`Perform::run`]).
///
/// Defaults: attempt 1 of the kind's `max_attempts`, the task key the job would get at
/// enqueue, the kind's queue, job id 1, no shared state, never cancelled.
#[must_use = "a `Perform` runs nothing until it is awaited"]
pub struct Perform<J> {
    job: J,
    id: u64,
    attempt: u32,
    max_attempts: u32,
    task_key: Option<String>,
    queue: Option<String>,
    data: DataMap,
    cancel: Cancel,
}

enum Cancel {
    Never,
    BeforeStart,
    After(Duration),
    On(Pin<Box<dyn Future<Output = ()> + Send>>),
}

impl<J: Job> Perform<J> {
    /// Which attempt this is, from 1.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// How many attempts the job has in all (default: the kind's `max_attempts`).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// The task key the job sees in [`JobContext::task_key`] (default: the key it would get
    /// at enqueue).
    pub fn task_key(mut self, key: impl Into<String>) -> Self {
        self.task_key = Some(key.into());
        self
    }

    /// The queue the job sees in [`JobContext::queue`] (default: the kind's).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// The job's id (default 1).
    pub fn id(mut self, id: u64) -> Self {
        self.id = id;
        self
    }

    /// Shared state for the job's [`Data<T>`](crate::Data) parameters, as
    /// [`WorkerBuilder::data`](crate::WorkerBuilder::data) gives it. A worker also gives
    /// every job its own [`Queue`](crate::Queue): pass one here for a job that enqueues.
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// The job is cancelled ([`CancelReason::Requested`], an operator's cancel) before it
    /// starts: it sees [`JobContext::is_cancelled`] from its first line.
    pub fn cancel_before_start(mut self) -> Self {
        self.cancel = Cancel::BeforeStart;
        self
    }

    /// The job is cancelled ([`CancelReason::Requested`]) `after` it starts.
    pub fn cancel_after(mut self, after: Duration) -> Self {
        self.cancel = Cancel::After(after);
        self
    }

    /// The job is cancelled ([`CancelReason::Requested`]) when `signal` resolves: a
    /// oneshot the test fires once the job has reached the point the test is about.
    pub fn cancel_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.cancel = Cancel::On(Box::pin(signal));
        self
    }

    /// Runs the attempt and returns what a worker would record.
    ///
    /// # Panics
    ///
    /// With a message saying what to change, when the settings cannot describe a real
    /// attempt (attempt 0, or past `max_attempts`), when the kind takes a `Data<T>` that was
    /// not given with [`Perform::data`], or when the job's task key cannot be made.
    pub async fn run(self) -> Performed {
        let Perform {
            job,
            id,
            attempt,
            max_attempts,
            task_key,
            queue,
            data,
            cancel,
        } = self;
        if attempt == 0 || attempt > max_attempts {
            panic!(
                "perform: attempt {attempt} of {max_attempts} cannot happen; attempts count \
                 from 1 up to `max_attempts`"
            );
        }
        for need in J::DATA {
            if !data.contains(need) {
                panic!(
                    "perform: job `{}` needs `Data<{}>`; give it with `.data(value)`",
                    J::KIND,
                    need.type_name()
                );
            }
        }
        let task_key = match task_key {
            Some(key) => key,
            None => job.task_key().unwrap_or_else(|e| {
                panic!(
                    "perform: cannot make the task key of job `{}`: {e}",
                    J::KIND
                )
            }),
        };
        let payload = serde_json::to_value(&job).unwrap_or_else(|e| {
            panic!(
                "perform: cannot serialize the arguments of job `{}`: {e}",
                J::KIND
            )
        });
        let builder = JobContext::builder(id, task_key)
            .max_attempts(max_attempts)
            .attempt(attempt)
            .kind(J::KIND)
            .queue(queue.unwrap_or_else(|| J::OPTIONS.queue.to_owned()))
            .data_map(data);
        let canceller = builder.canceller();
        let ctx = builder.build();
        let cancelling = match cancel {
            Cancel::Never => None,
            Cancel::BeforeStart => {
                canceller.cancel(CancelReason::Requested);
                None
            }
            Cancel::After(after) => Some(tokio::spawn(async move {
                tokio::time::sleep(after).await;
                canceller.cancel(CancelReason::Requested);
            })),
            Cancel::On(signal) => Some(tokio::spawn(async move {
                signal.await;
                canceller.cancel(CancelReason::Requested);
            })),
        };
        let descriptor = descriptor_of::<J>();
        let registry = Registry::from_descriptors(std::iter::once(descriptor))
            .expect("one descriptor has no duplicate");
        let ran = run_one(
            Some(descriptor),
            Ok(payload),
            ctx.clone(),
            Duration::ZERO,
            CancellationToken::new(),
            &registry,
            (&Chain::default(), None),
        )
        .await;
        if let Some(task) = cancelling {
            task.abort();
        }
        // No lease to lose here, so there is always something to record.
        match decide(ran, &ctx, Some(descriptor), Duration::MAX) {
            Some(outcome) => performed(outcome),
            None => unreachable!("a performed job has no lease to lose"),
        }
    }
}

impl<J: Job> IntoFuture for Perform<J> {
    type Output = Performed;
    type IntoFuture = Pin<Box<dyn Future<Output = Performed> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

impl<J> std::fmt::Debug for Perform<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Perform")
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .field("max_attempts", &self.max_attempts)
            .field("task_key", &self.task_key)
            .field("queue", &self.queue)
            .field("data", &self.data)
            .finish_non_exhaustive()
    }
}

/// What the worker would record, as a [`Performed`].
pub(crate) fn performed(outcome: Outcome) -> Performed {
    match outcome {
        // A performed job's context holds no claim: its `complete_in` writes nothing and
        // returns Ok, so the job is done as far as the test can tell.
        Outcome::Done { output: None } | Outcome::DoneInTransaction { .. } => Performed::Done,
        Outcome::Done { output: Some(json) } => match serde_json::from_str(&json) {
            Ok(value) => Performed::DoneWithOutput(value),
            // The worker stores the text it serialised; a value the JSON reader cannot
            // read back would not be readable from the table either.
            Err(e) => Performed::Failed {
                error: format!("the job's output is not JSON: {e}"),
            },
        },
        Outcome::Finish(Finish::Snooze { delay, .. }) => Performed::Snoozed { delay },
        Outcome::Finish(Finish::Retry { delay, error }) => Performed::Retry { delay, error },
        Outcome::Finish(Finish::Fail { error }) => Performed::Failed { error },
        Outcome::Finish(Finish::Cancelled { error }) => Performed::Cancelled { error },
        Outcome::Finish(Finish::HandBack) => Performed::HandedBack,
        Outcome::Finish(Finish::Defer { error, .. }) => Performed::Deferred { error },
    }
}

/// The registered descriptor of `J`, or, for a kind not registered (a hand-written impl
/// without `register!`), one made for it and kept for the rest of the process.
fn descriptor_of<J: Job>() -> &'static JobDescriptor {
    if let Some(d) = crate::registry::lookup(J::KIND) {
        return d;
    }
    static MADE: Mutex<BTreeMap<TypeId, &'static JobDescriptor>> = Mutex::new(BTreeMap::new());
    let mut made = MADE.lock().unwrap_or_else(PoisonError::into_inner);
    made.entry(TypeId::of::<J>())
        .or_insert_with(|| Box::leak(Box::new(JobDescriptor::of::<J>(std::any::type_name::<J>()))))
}
