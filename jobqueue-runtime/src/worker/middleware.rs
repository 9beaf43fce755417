//! Middleware: code of the application that wraps every run of a job's code on a worker,
//! for error reporting, tracing fields or timing. The chain runs inside the run's
//! protections (see [`Middleware`]); what the job's code came to passes through it
//! unchanged.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::JobError;
use crate::job::{CancelReason, JobContext};
use crate::registry::RunError;

/// Code that wraps every run of a job's code on a worker: register it with
/// [`WorkerBuilder::middleware`](crate::WorkerBuilder::middleware).
///
/// `call` receives what the worker knows of the job ([`JobRunInfo`]) and the rest of the
/// chain ([`Next`]); it calls [`Next::run`], which runs the next middleware, and the job's
/// code after the last, and returns how that ended ([`RunResult`]), which `call` inspects and
/// returns. Several middlewares run outermost first, in the order they were registered.
///
/// ```
/// # extern crate jobqueue_runtime as jobqueue;
/// use std::time::Instant;
/// use jobqueue::{JobRunInfo, Middleware, Next, RunOutcome, RunResult};
///
/// /// Logs how long each run took, and the error of each failed one.
/// struct Timing;
///
/// impl Middleware for Timing {
///     async fn call(&self, job: &JobRunInfo, next: Next<'_>) -> RunResult {
///         let started = Instant::now();
///         let result = next.run().await;
///         let took = started.elapsed();
///         match result.outcome() {
///             RunOutcome::Succeeded => tracing::info!(kind = job.kind(), ?took, "job ran"),
///             RunOutcome::Failed(error) => tracing::warn!(
///                 kind = job.kind(), attempt = job.attempt(), %error, ?took, "job failed"
///             ),
///             other => tracing::warn!(kind = job.kind(), ?other, ?took, "job did not finish"),
///         }
///         result
///     }
/// }
/// ```
///
/// # What a middleware may do, and what it may not
///
/// - It runs on the job's task, in the job's span (`job`, with `job.kind`, `job.id`,
///   `attempt` and `queue`): a span it enters around `next.run()` (with
///   [`tracing::Instrument`]) adds its fields to every event of the job, a tenant's name,
///   say.
/// - It cannot change how the run ended, nor skip the job: only [`Next::run`] makes a
///   [`RunResult`], and `call` must return one. What the worker records (done, a retry, a
///   failure, a cancel, a snooze) follows from the job's code alone, as without middleware.
/// - The protections of the run cover the whole chain, middleware included: every step
///   checks the lease's stop-by moment, a lost lease or the end of a shutdown's
///   cancel grace drops the whole chain at once (the code after `next.run().await` then does
///   not run; a drop guard does), and a middleware that panics fails the attempt as a job
///   that panics does (retried while attempts remain), with `in a middleware` in its error.
/// - The kind's `timeout` bounds the job's code, which a middleware sees end as
///   [`RunOutcome::TimedOut`]; the middleware's own work is bounded only by the lease and
///   the shutdown. Keep it short, or bound it yourself.
/// - A job this worker cannot start (its kind is not registered here, its row cannot be
///   read) is recorded without running any middleware.
pub trait Middleware: Send + Sync + 'static {
    /// Runs `next` (the rest of the chain, then the job's code) and returns what it
    /// returned.
    fn call(&self, job: &JobRunInfo, next: Next<'_>) -> impl Future<Output = RunResult> + Send;
}

impl<M: Middleware> Middleware for Arc<M> {
    fn call(&self, job: &JobRunInfo, next: Next<'_>) -> impl Future<Output = RunResult> + Send {
        M::call(self, job, next)
    }
}

/// What a [`Middleware`] knows of the job whose run it wraps.
#[derive(Debug)]
pub struct JobRunInfo {
    ctx: JobContext,
    metadata: Option<serde_json::Value>,
}

impl JobRunInfo {
    pub(crate) fn new(ctx: JobContext, metadata: Option<serde_json::Value>) -> Self {
        JobRunInfo { ctx, metadata }
    }

    /// The job's id.
    pub fn id(&self) -> u64 {
        self.ctx.id
    }

    /// The job's kind.
    pub fn kind(&self) -> &str {
        &self.ctx.kind
    }

    /// The queue it was claimed from.
    pub fn queue(&self) -> &str {
        &self.ctx.queue
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        self.ctx.attempt
    }

    /// How many attempts the job has in all: a failed attempt below this is retried.
    pub fn max_attempts(&self) -> u32 {
        self.ctx.max_attempts
    }

    /// The job's task key.
    pub fn task_key(&self) -> &str {
        &self.ctx.task_key
    }

    /// The metadata object the job was enqueued with
    /// ([`EnqueueOptions::meta`](crate::EnqueueOptions::meta)), if any.
    pub fn metadata(&self) -> Option<&serde_json::Value> {
        self.metadata.as_ref()
    }

    /// Why the job has been asked to stop, if it has, now: by an operator, a timeout or a
    /// shutdown. Read after `next.run()`, it says whether a failure followed an operator's
    /// cancel (the worker then records the job `cancelled`).
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.ctx.cancel_reason()
    }
}

/// The rest of a middleware chain: the next middleware, or the job's code after the last.
/// Given to [`Middleware::call`], which runs it once with [`Next::run`].
///
/// It borrows the run it belongs to, so it cannot be moved to another task: the chain is
/// polled by the job's task, under the run's lease checks, and nowhere else.
pub struct Next<'a> {
    rest: &'a [Layer],
    job: &'a JobRunInfo,
    code: Pin<&'a mut (dyn Future<Output = CodeEnded> + Send)>,
}

impl Next<'_> {
    /// Runs the rest of the chain and the job's code, and returns how the job's code ended.
    pub async fn run(self) -> RunResult {
        match self.rest.split_first() {
            Some((layer, rest)) => {
                let next = Next {
                    rest,
                    job: self.job,
                    code: self.code,
                };
                layer.middleware.call(self.job, next).await
            }
            None => RunResult(self.code.await),
        }
    }
}

impl fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Next")
            .field(
                "middleware",
                &self.rest.iter().map(|l| l.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// How the job's code ended, as [`Next::run`] returns it: read it with
/// [`outcome`](RunResult::outcome). Only `Next::run` makes one, so a middleware returns the
/// job's own result.
pub struct RunResult(CodeEnded);

impl RunResult {
    /// How the job's code ended.
    pub fn outcome(&self) -> RunOutcome<'_> {
        match &self.0 {
            CodeEnded::Finished(Ok(())) => RunOutcome::Succeeded,
            CodeEnded::Finished(Err(RunError::Job(e))) => RunOutcome::Failed(e),
            CodeEnded::Finished(Err(RunError::Payload(msg))) => RunOutcome::Unrunnable(msg),
            CodeEnded::Panicked(msg) => RunOutcome::Panicked(msg),
            CodeEnded::TimedOut(t) => RunOutcome::TimedOut(*t),
        }
    }

    pub(crate) fn into_inner(self) -> CodeEnded {
        self.0
    }
}

impl fmt::Debug for RunResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RunResult").field(&self.outcome()).finish()
    }
}

/// How a job's code ended, as a middleware sees it ([`RunResult::outcome`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum RunOutcome<'a> {
    /// The job returned `Ok`: it is recorded done (after
    /// [`JobContext::complete_in`](crate::JobContext::complete_in), done if its transaction
    /// committed).
    Succeeded,
    /// The job returned this error: a failed attempt (retried while attempts remain, unless
    /// [permanent](JobError::permanent)), a [snooze](JobError::snooze) or a
    /// [cancel](JobError::cancel), as the error says. Its `Display` is the text recorded as
    /// the attempt's error.
    Failed(&'a JobError),
    /// The job's code panicked, with this message: a failed attempt, retried while attempts
    /// remain.
    Panicked(&'a str),
    /// The job's code ran past its kind's timeout, this long, and was dropped: a failed
    /// attempt, retried while attempts remain.
    TimedOut(Duration),
    /// The job's arguments do not fit its kind in this binary (a payload of another
    /// release): the job waits for a worker that can run it, without spending the attempt
    /// (see [`WorkerBuilder::unrunnable_deadline`](crate::WorkerBuilder::unrunnable_deadline)).
    Unrunnable(&'a str),
}

/// How the job's code ended, before the run's outer protections (lease, shutdown) and the
/// decision see it.
pub(crate) enum CodeEnded {
    Finished(std::result::Result<(), RunError>),
    Panicked(String),
    TimedOut(Duration),
}

/// One registered middleware.
pub(crate) struct Layer {
    /// Its type's name, for `Debug`.
    name: &'static str,
    middleware: Box<dyn ErasedMiddleware>,
}

/// The middleware of a worker, outermost first.
#[derive(Default)]
pub(crate) struct Chain(Vec<Layer>);

impl Chain {
    pub(crate) fn push<M: Middleware>(&mut self, middleware: M) {
        self.0.push(Layer {
            name: std::any::type_name::<M>(),
            middleware: Box::new(middleware),
        });
    }

    /// Runs the chain around the job's `code`.
    pub(crate) async fn run(
        &self,
        job: &JobRunInfo,
        code: Pin<&mut (dyn Future<Output = CodeEnded> + Send)>,
    ) -> CodeEnded {
        Next {
            rest: &self.0,
            job,
            code,
        }
        .run()
        .await
        .into_inner()
    }
}

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|l| l.name))
            .finish()
    }
}

/// [`Middleware`] with its future boxed, so that a worker holds middlewares of many types.
trait ErasedMiddleware: Send + Sync + 'static {
    fn call<'a>(
        &'a self,
        job: &'a JobRunInfo,
        next: Next<'a>,
    ) -> Pin<Box<dyn Future<Output = RunResult> + Send + 'a>>;
}

impl<M: Middleware> ErasedMiddleware for M {
    fn call<'a>(
        &'a self,
        job: &'a JobRunInfo,
        next: Next<'a>,
    ) -> Pin<Box<dyn Future<Output = RunResult> + Send + 'a>> {
        Box::pin(Middleware::call(self, job, next))
    }
}
