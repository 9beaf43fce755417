//! One claimed job's attempt, from its context to the report of how it ended
//! ([`Execution`]): the lease it holds, its code under its timeout, the shutdown's second
//! phase and the loss of its lease, with panics caught ([`run_one`]), its progress writer
//! beside it, the decision ([`decide`]) and the report to the outcome writer.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::builder::Config;
use super::lease::{Held, Leases};
use super::middleware::{Chain, CodeEnded, JobRunInfo};
use super::outcome::{decide, Ran, Report};
use super::Worker;
use crate::job::{CancelReason, ClaimFence, JobContext};
use crate::metrics::Metrics;
use crate::model::Claimed;
use crate::registry::{JobDescriptor, Registry, RunError};
use crate::store::Store;

/// What the claim loop hands to each job it starts.
pub(super) struct Running<'a> {
    pub(super) leases: &'a Leases,
    pub(super) reports: &'a mpsc::Sender<Report>,
    /// Fired in phase two of a shutdown.
    pub(super) shutdown: &'a CancellationToken,
    /// Jobs running per served queue.
    pub(super) per_queue: &'a PerQueue,
}

/// How many jobs of each served queue this worker runs, for
/// [`WorkerBuilder::queue_concurrency`](crate::WorkerBuilder::queue_concurrency).
#[derive(Debug)]
pub(super) struct PerQueue {
    running: std::sync::Arc<[(String, AtomicUsize)]>,
}

/// Counts one job of a queue as running until dropped (the job's task ends).
struct QueueSlot {
    running: std::sync::Arc<[(String, AtomicUsize)]>,
    index: usize,
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.running[self.index].1.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PerQueue {
    pub(super) fn new(queues: &[String]) -> Self {
        PerQueue {
            running: queues
                .iter()
                .map(|q| (q.clone(), AtomicUsize::new(0)))
                .collect(),
        }
    }

    pub(super) fn running(&self, queue: &str) -> usize {
        self.running
            .iter()
            .find(|(q, _)| q == queue)
            .map_or(0, |(_, n)| n.load(Ordering::Relaxed))
    }

    fn hold(&self, queue: &str) -> Option<QueueSlot> {
        let index = self.running.iter().position(|(q, _)| q == queue)?;
        self.running[index].1.fetch_add(1, Ordering::Relaxed);
        Some(QueueSlot {
            running: self.running.clone(),
            index,
        })
    }
}

/// One claimed job's attempt, and everything its task owns: made by the claim loop as the
/// claim commits (the job's context, its lease recorded, its queue's slot taken), then
/// [`run`](Execution::run) on a task of its own: the job's code, its progress, the decision,
/// the report.
pub(super) struct Execution {
    claimed: Claimed,
    ctx: JobContext,
    descriptor: Option<&'static JobDescriptor>,
    registry: Arc<Registry>,
    config: Arc<Config>,
    store: Store,
    metrics: Arc<Metrics>,
    leases: Leases,
    reports: mpsc::Sender<Report>,
    /// Fired in phase two of a shutdown.
    shutdown: CancellationToken,
    queue_slot: Option<QueueSlot>,
    middleware: Arc<Chain>,
    /// The job's span, `job` with its kind, id, attempt and queue.
    span: tracing::Span,
}

impl Execution {
    /// The attempt of claim `c`: its context, and its lease recorded in `run.leases` (an
    /// earlier attempt of the same job this worker still ran is stopped).
    pub(super) fn new(worker: &Worker, c: Claimed, run: &Running<'_>) -> Self {
        let ctx = JobContext {
            id: c.id,
            attempt: c.attempt,
            max_attempts: c.max_attempts,
            kind: c.kind.clone(),
            queue: c.queue.clone(),
            task_key: c.task_key.clone(),
            token: CancellationToken::new(),
            reason: Default::default(),
            data: worker.data.clone(),
            claim: Some(Arc::new(ClaimFence::new(
                worker.config.owner.clone(),
                c.holds_slot,
            ))),
            progress: Default::default(),
            output: Default::default(),
        };
        let displaced = run.leases.insert(
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
            worker.metrics.lease_lost(&c.queue, &c.kind);
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
        crate::trace::continue_trace(&span, c.traceparent.as_deref(), c.attempt);
        Execution {
            descriptor: worker.registry.get(&c.kind),
            registry: worker.registry.clone(),
            config: worker.config.clone(),
            store: worker.store.clone(),
            metrics: worker.metrics.clone(),
            leases: run.leases.clone(),
            reports: run.reports.clone(),
            shutdown: run.shutdown.clone(),
            queue_slot: run.per_queue.hold(&c.queue),
            middleware: worker.middleware.clone(),
            span,
            ctx,
            claimed: c,
        }
    }

    /// Runs the attempt in the job's span, to its report. A panic outside the job's own
    /// code (a tracing layer, a metrics recorder) must not leave the claim in the leases,
    /// renewed for ever: it is stopped and released, so that the lease runs out and the job
    /// is taken back.
    pub(super) async fn run(self) {
        let span = self.span.clone();
        let (ctx, leases) = (self.ctx.clone(), self.leases.clone());
        let (id, attempt) = (self.claimed.id, self.claimed.attempt);
        async move {
            if let Err(panic) = AssertUnwindSafe(self.attempt()).catch_unwind().await {
                ctx.cancel(CancelReason::LeaseLost);
                leases.release(id, attempt);
                tracing::error!(
                    job.id = id,
                    attempt,
                    panic = %panic_message(&*panic),
                    "the job's task panicked outside the job; its lease is released, and the job is taken back once it expires"
                );
            }
        }
        .instrument(span)
        .await
    }

    /// The job's code and its progress writer, then the decision and its report.
    async fn attempt(self) {
        let Execution {
            claimed: c,
            ctx,
            descriptor,
            registry,
            config,
            store,
            metrics,
            leases,
            reports,
            shutdown,
            queue_slot,
            middleware,
            span: _,
        } = self;
        let _queue_slot = queue_slot;
        let progress_done = CancellationToken::new();
        let progress = super::progress::write_progress(
            store,
            ctx.progress.clone(),
            (c.id, config.owner.clone(), c.attempt),
            config.progress_interval,
            progress_done.clone(),
        );
        let run = async {
            let outcome = run_one(
                descriptor,
                c.payload,
                ctx.clone(),
                config.cancel_grace,
                shutdown,
                &registry,
                (&middleware, c.metadata),
            )
            .await;
            // The last progress value is written before the outcome, while the row is
            // still this attempt's.
            progress_done.cancel();
            outcome
        };
        // The progress writer runs beside the job on this task (no task of its own per
        // job): it sleeps until the job reports progress, and returns once the job has,
        // after writing the value still unwritten.
        let (outcome, ()) = tokio::join!(run, progress);
        let (id, attempt) = (c.id, c.attempt);
        let Some(outcome) = decide(outcome, &ctx, descriptor, config.unrunnable_deadline) else {
            // Stopped for a lost lease: by the lease thread, which let the claim go, or
            // by the run itself at its stop-by moment, before the lease thread got to it.
            if leases.release(id, attempt) {
                metrics.lease_lost(&ctx.queue, &ctx.kind);
                tracing::error!(
                    job.id = id,
                    attempt,
                    "lease could not be renewed in time; job stopped, nothing of this attempt will be recorded, and it will run again after its lease expires"
                );
            }
            return;
        };
        let report = Report {
            id: c.id,
            attempt: c.attempt,
            kind: c.kind,
            queue: c.queue,
            holds_slot: c.holds_slot,
            outcome,
        };
        if reports.send(report).await.is_err() {
            tracing::error!(
                "outcome writer is gone; the job's lease will expire and it will run again"
            );
        }
    }
}

/// Runs the job's code of one attempt: under its timeout, the shutdown's second phase
/// (`shutdown`, then `cancel_grace`) and the loss of its lease, with panics caught, down to
/// how the run ended.
pub(crate) async fn run_one(
    descriptor: Option<&'static JobDescriptor>,
    payload: std::result::Result<serde_json::Value, String>,
    ctx: JobContext,
    cancel_grace: Duration,
    shutdown: CancellationToken,
    registry: &Registry,
    middleware: (&Chain, Option<serde_json::Value>),
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
            "job kind `{}` is not registered in this worker ({known}); deploy a worker that has it, or cancel the job",
            ctx.kind
        ));
    };
    let payload = match payload {
        Ok(p) => p,
        Err(e) => return Ran::Unreadable(e),
    };
    tracing::debug!("job started");
    let started = Instant::now();
    let timeout = d.options().timeout;
    let (chain, metadata) = middleware;
    let info = JobRunInfo::new(ctx.clone(), metadata);
    // The job's code under its timeout, which phase two of a shutdown lifts (the cancel
    // grace bounds it then). Its panics are caught here, so that a middleware sees them.
    let code = async {
        let mut code = AssertUnwindSafe(d.run(payload, ctx.clone())).catch_unwind();
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let ended = tokio::select! {
            r = &mut code => code_ended(r),
            _ = deadline => {
                ctx.cancel(CancelReason::Timeout);
                CodeEnded::TimedOut(timeout.unwrap_or_default())
            }
            _ = shutdown.cancelled() => code_ended((&mut code).await),
        };
        // Code that timed out is dropped here, outside the polls above: a destructor that
        // panics must not take the outcome with it.
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(code))) {
            tracing::error!(panic = %panic_message(&*panic), "the job panicked while being dropped");
        }
        ended
    };
    // The middleware chain around the code, boxed so that it can be dropped below, where a
    // panicking destructor is caught too. Every step of the chain, the job's code included,
    // checks the lease's stop-by moment first (see `Fenced`); a panic caught here is a
    // middleware's (the code's own are caught above).
    let chain = Box::pin(async {
        let code = std::pin::pin!(code);
        chain.run(&info, code).await
    });
    let mut run = Fenced {
        run: AssertUnwindSafe(chain).catch_unwind(),
        ctx: &ctx,
    };
    let ran = tokio::select! {
        r = &mut run => fenced(r),
        // Phase two of a shutdown (whatever the job was told before, an operator's cancel
        // included): it may stop by itself, and is dropped after `cancel_grace`.
        _ = shutdown.cancelled() => tokio::select! {
            r = &mut run => fenced(r),
            _ = tokio::time::sleep(cancel_grace) => Ran::Abandoned { hand_back: true },
            _ = ctx.lease_lost() => Ran::Abandoned { hand_back: false },
        },
        // Lease lost: another worker may run it now; stop at once, even if the job was told
        // of an operator's cancel or a shutdown before and is still deciding how to stop.
        // (An operator's cancel alone only tells the job.)
        _ = ctx.lease_lost() => Ran::Abandoned { hand_back: false },
    };
    // An unfinished run (abandoned) is dropped here: its destructors run now, outside the
    // polls above, and one that panics must not take the outcome with it.
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(run))) {
        tracing::error!(panic = %panic_message(&*panic), "the job panicked while being dropped");
    }
    metrics::histogram!(crate::metrics::JOB_DURATION, "queue" => ctx.queue.clone(), "kind" => d.kind())
        .record(started.elapsed().as_secs_f64());
    ran
}

/// The job's future, polled only while the attempt's lease may still be held: a poll past the
/// moment by which the worker must have stopped the run (three quarters of the lease after
/// the last renewal sent) ends it as a lost lease without polling the job. The lease thread
/// stops such runs as well, but after a freeze of the whole process (SIGSTOP, a stalled VM)
/// the job's task can wake first, and one more step of the job (a write of its own) would
/// run outside its claim.
struct Fenced<'a, F> {
    run: F,
    ctx: &'a JobContext,
}

impl<F: std::future::Future + Unpin> std::future::Future for Fenced<'_, F> {
    type Output = Option<F::Output>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if self.ctx.past_stop_by() {
            self.ctx.cancel(CancelReason::LeaseLost);
            return std::task::Poll::Ready(None);
        }
        std::pin::Pin::new(&mut self.run).poll(cx).map(Some)
    }
}

/// What a run that `Fenced` let end, or stopped, came to.
fn fenced(r: Option<std::result::Result<CodeEnded, Box<dyn std::any::Any + Send>>>) -> Ran {
    match r {
        Some(Ok(CodeEnded::Finished(Err(RunError::Payload(msg))))) => Ran::Unrunnable(msg),
        Some(Ok(CodeEnded::Finished(r))) => Ran::Finished(r),
        Some(Ok(CodeEnded::Panicked(msg))) => Ran::Panicked(msg),
        Some(Ok(CodeEnded::TimedOut(t))) => Ran::TimedOut(t),
        Some(Err(panic)) => Ran::Panicked(format!("in a middleware: {}", panic_message(&*panic))),
        None => Ran::Abandoned { hand_back: false },
    }
}

fn code_ended(
    r: std::result::Result<std::result::Result<(), RunError>, Box<dyn std::any::Any + Send>>,
) -> CodeEnded {
    match r {
        Ok(r) => CodeEnded::Finished(r),
        Err(panic) => CodeEnded::Panicked(panic_message(&*panic)),
    }
}

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}
