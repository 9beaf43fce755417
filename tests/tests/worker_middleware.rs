//! Middleware against a real server: the chain wraps each run in registration order and
//! sees the job's kind, id and attempt; it sees a retryable error's text and then the
//! success of the next attempt; its span's fields are in the job's logs; and a middleware
//! that panics fails the attempt as a job panic does, the job is retried, and the worker
//! goes on; and it sees its job's code time out, recorded as without it.
//!
//! Every test runs on MySQL/MariaDB and on PostgreSQL (`mysql::name`, `postgres::name`), with
//! its own database, its own queue and its own job kinds; each middleware acts only on its
//! test's kinds, since one registry serves the whole binary. What a job keeps in a `static`
//! is kept per backend (a job's `run`, see [`run_of`]), since a test's two runs run at once.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobqueue::admin::AttemptOutcome;
use jobqueue::middleware::{JobRunInfo, Next, RunOutcome, RunResult};
use jobqueue::{job, EnqueueOptions, JobContext, JobError, JobStatus, Middleware};
use tests::{
    fresh_queue_on, on_every_backend, quick_worker, start, stop, wait_status, Backend, LogCapture,
};

/// The `run` of a test's job on `backend`: its index in a `static` pair.
fn run_of(backend: Backend) -> u32 {
    match backend {
        Backend::Postgres => 1,
        _ => 0,
    }
}

const WAIT: Duration = Duration::from_secs(30);

/// What the middlewares and jobs of one test did, in order.
#[derive(Clone, Default)]
struct Trail(Arc<Mutex<Vec<String>>>);

impl Trail {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// How a run ended, as a line of the trail.
fn describe(result: &RunResult) -> String {
    match result.outcome() {
        RunOutcome::Succeeded => "succeeded".into(),
        RunOutcome::Failed(e) => format!("failed: {e}"),
        RunOutcome::Panicked(msg) => format!("panicked: {msg}"),
        RunOutcome::TimedOut(t) => format!("timed out after {t:?}"),
        other => format!("{other:?}"),
    }
}

/// Writes what it sees before and after the rest of the chain, for one kind.
struct Recorder {
    name: &'static str,
    kind: &'static str,
    trail: Trail,
}

impl Middleware for Recorder {
    async fn call(&self, job: &JobRunInfo, next: Next<'_>) -> RunResult {
        if job.kind() != self.kind {
            return next.run().await;
        }
        self.trail.push(format!(
            "{} before: {} #{} attempt {} of {} on {}",
            self.name,
            job.kind(),
            job.id(),
            job.attempt(),
            job.max_attempts(),
            job.queue()
        ));
        let result = next.run().await;
        self.trail.push(format!(
            "{} after attempt {}: {}",
            self.name,
            job.attempt(),
            describe(&result)
        ));
        result
    }
}

// ---------------------------------------------------------------------------------------
// 1. Two middlewares wrap the run, the first registered outermost.
// ---------------------------------------------------------------------------------------

static ORDER_TRAIL: [Mutex<Option<Trail>>; 2] = [Mutex::new(None), Mutex::new(None)];

#[job(name = "middleware_order", queue = "middleware_order")]
async fn ordered(_ctx: JobContext, run: u32) -> Result<(), JobError> {
    if let Some(trail) = &*ORDER_TRAIL[run as usize].lock().unwrap() {
        trail.push("job".into());
    }
    Ok(())
}

async fn two_middlewares_wrap_a_job_outermost_first_and_see_its_kind_id_and_attempt(
    backend: Backend,
) {
    let queue = fresh_queue_on(backend, "mw_order").await;
    let run = run_of(backend);
    let trail = Trail::default();
    *ORDER_TRAIL[run as usize].lock().unwrap() = Some(trail.clone());
    let recorder = |name| Recorder {
        name,
        kind: "middleware_order",
        trail: trail.clone(),
    };
    let id = queue.enqueue(Ordered { run }).await.expect("enqueue").id();
    let (handle, task) = start(
        quick_worker(&queue)
            .queues(["middleware_order"])
            .middleware(recorder("outer"))
            .middleware(recorder("inner"))
            .build()
            .expect("build"),
    );
    wait_status(&queue, id, JobStatus::Done, WAIT).await;
    stop(&handle, task).await;

    // The whole chain has returned before the outcome is written.
    let seen = format!("middleware_order #{id} attempt 1 of 25 on middleware_order");
    assert_eq!(
        trail.lines(),
        [
            format!("outer before: {seen}"),
            format!("inner before: {seen}"),
            "job".to_owned(),
            "inner after attempt 1: succeeded".to_owned(),
            "outer after attempt 1: succeeded".to_owned(),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// 2. A retryable error, then success on the next attempt.
// ---------------------------------------------------------------------------------------

#[job(
    name = "middleware_flaky",
    queue = "middleware_flaky",
    max_attempts = 3,
    backoff = "constant(50ms)"
)]
async fn flaky(ctx: JobContext) -> Result<(), JobError> {
    if ctx.attempt() == 1 {
        return Err(format!("upstream refused (attempt {})", ctx.attempt()).into());
    }
    Ok(())
}

async fn a_middleware_sees_a_retryable_error_and_its_attempt_then_the_success_of_the_next(
    backend: Backend,
) {
    let queue = fresh_queue_on(backend, "mw_retry").await;
    let trail = Trail::default();
    let id = queue.enqueue(Flaky {}).await.expect("enqueue").id();
    let (handle, task) = start(
        quick_worker(&queue)
            .queues(["middleware_flaky"])
            .middleware(Recorder {
                name: "reporter",
                kind: "middleware_flaky",
                trail: trail.clone(),
            })
            .build()
            .expect("build"),
    );
    let done = wait_status(&queue, id, JobStatus::Done, WAIT).await;
    stop(&handle, task).await;

    assert_eq!(done.attempts, 2);
    let seen =
        |n| format!("reporter before: middleware_flaky #{id} attempt {n} of 3 on middleware_flaky");
    assert_eq!(
        trail.lines(),
        [
            seen(1),
            "reporter after attempt 1: failed: upstream refused (attempt 1)".to_owned(),
            seen(2),
            "reporter after attempt 2: succeeded".to_owned(),
        ]
    );
    // What the middleware saw is what the worker recorded.
    let attempts = queue.attempts(id).await.expect("attempts");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].outcome, AttemptOutcome::Retry);
    assert_eq!(
        attempts[0].error.as_deref(),
        Some("upstream refused (attempt 1)")
    );
    assert_eq!(attempts[1].outcome, AttemptOutcome::Done);
}

// ---------------------------------------------------------------------------------------
// 3. A middleware's span is in the job's logs.
// ---------------------------------------------------------------------------------------

/// Runs the job inside a `tenant` span named after its metadata.
struct TenantSpan;

impl Middleware for TenantSpan {
    async fn call(&self, job: &JobRunInfo, next: Next<'_>) -> RunResult {
        use tracing::Instrument;
        let tenant = job
            .metadata()
            .and_then(|m| m.get("tenant")?.as_str())
            .unwrap_or("none")
            .to_owned();
        next.run()
            .instrument(tracing::info_span!("tenant", tenant = %tenant))
            .await
    }
}

#[job(name = "middleware_tenant", queue = "middleware_tenant")]
async fn charge(_ctx: JobContext, cents: u64) -> Result<(), JobError> {
    tracing::info!(cents, "charging the card");
    Ok(())
}

// The log capture is per thread: the worker's tasks must run on this one.
async fn a_middlewares_span_and_its_fields_are_in_the_jobs_logs(backend: Backend) {
    let (logs, _guard) = LogCapture::install("info");
    let queue = fresh_queue_on(backend, "mw_span").await;
    let id = queue
        .enqueue_with(
            Charge { cents: 1250 },
            EnqueueOptions::default().meta("tenant", "acme"),
        )
        .await
        .expect("enqueue")
        .id();
    let (handle, task) = start(
        quick_worker(&queue)
            .queues(["middleware_tenant"])
            .middleware(TenantSpan)
            .build()
            .expect("build"),
    );
    wait_status(&queue, id, JobStatus::Done, WAIT).await;
    stop(&handle, task).await;

    // The job's event carries the middleware's span and its field.
    let lines = logs.lines_with(&["tenant{tenant=acme}", "charging the card", "cents=1250"]);
    assert_eq!(lines.len(), 1, "{}", logs.text());
}

// ---------------------------------------------------------------------------------------
// 4. A middleware that panics fails the attempt, and the worker goes on.
// ---------------------------------------------------------------------------------------

/// Panics at a job's first attempt, before running it.
struct PanicsOnce;

impl Middleware for PanicsOnce {
    async fn call(&self, job: &JobRunInfo, next: Next<'_>) -> RunResult {
        if job.kind() == "middleware_guarded" && job.attempt() == 1 {
            panic!("tenant lookup failed for job {}", job.id());
        }
        next.run().await
    }
}

static GUARDED_RUNS: [AtomicU32; 2] = [AtomicU32::new(0), AtomicU32::new(0)];

#[job(
    name = "middleware_guarded",
    queue = "middleware_guarded",
    max_attempts = 3,
    backoff = "constant(50ms)"
)]
async fn guarded(_ctx: JobContext, run: u32, n: u32) -> Result<(), JobError> {
    let _ = n;
    GUARDED_RUNS[run as usize].fetch_add(1, Ordering::SeqCst);
    Ok(())
}

async fn a_panicking_middleware_fails_the_attempt_like_a_job_panic_and_the_worker_survives(
    backend: Backend,
) {
    let queue = fresh_queue_on(backend, "mw_panic").await;
    let run = run_of(backend);
    let first = queue
        .enqueue(Guarded { run, n: 1 })
        .await
        .expect("enqueue")
        .id();
    let (handle, task) = start(
        quick_worker(&queue)
            .queues(["middleware_guarded"])
            .middleware(PanicsOnce)
            .build()
            .expect("build"),
    );
    let done = wait_status(&queue, first, JobStatus::Done, WAIT).await;
    assert_eq!(done.attempts, 2, "retried after the panic");
    let attempts = queue.attempts(first).await.expect("attempts");
    assert_eq!(attempts[0].outcome, AttemptOutcome::Retry);
    assert_eq!(
        attempts[0].error.as_deref(),
        Some(
            format!("job panicked: in a middleware: tenant lookup failed for job {first}").as_str()
        )
    );
    // The same worker runs the next job, through the same chain.
    let second = queue
        .enqueue(Guarded { run, n: 2 })
        .await
        .expect("enqueue")
        .id();
    let done = wait_status(&queue, second, JobStatus::Done, WAIT).await;
    assert_eq!(done.attempts, 2);
    stop(&handle, task).await;
    // The job's code ran only where the middleware let it: at each job's second attempt.
    assert_eq!(GUARDED_RUNS[run as usize].load(Ordering::SeqCst), 2);
}

// ---------------------------------------------------------------------------------------
// 5. The kind's timeout bounds the job's code, and the middleware sees it.
// ---------------------------------------------------------------------------------------

#[job(
    name = "middleware_slow",
    queue = "middleware_slow",
    timeout = "200ms",
    max_attempts = 1
)]
async fn slow(_ctx: JobContext) -> Result<(), JobError> {
    // Far past the timeout: only the timeout ends it.
    tokio::time::sleep(Duration::from_secs(600)).await;
    Ok(())
}

async fn a_middleware_sees_its_job_time_out_and_the_attempt_fails_as_without_it(backend: Backend) {
    let queue = fresh_queue_on(backend, "mw_timeout").await;
    let trail = Trail::default();
    let id = queue.enqueue(Slow {}).await.expect("enqueue").id();
    let (handle, task) = start(
        quick_worker(&queue)
            .queues(["middleware_slow"])
            .middleware(Recorder {
                name: "timer",
                kind: "middleware_slow",
                trail: trail.clone(),
            })
            .build()
            .expect("build"),
    );
    let failed = wait_status(&queue, id, JobStatus::Failed, WAIT).await;
    stop(&handle, task).await;

    assert_eq!(
        trail.lines(),
        [
            format!("timer before: middleware_slow #{id} attempt 1 of 1 on middleware_slow"),
            "timer after attempt 1: timed out after 200ms".to_owned(),
        ]
    );
    assert_eq!(
        failed.last_error.as_deref(),
        Some("timed out after 200ms (attempt 1 of 1)")
    );
}

on_every_backend!(
    two_middlewares_wrap_a_job_outermost_first_and_see_its_kind_id_and_attempt,
    a_middleware_sees_a_retryable_error_and_its_attempt_then_the_success_of_the_next,
    a_panicking_middleware_fails_the_attempt_like_a_job_panic_and_the_worker_survives,
    a_middleware_sees_its_job_time_out_and_the_attempt_fails_as_without_it;
    current_thread: a_middlewares_span_and_its_fields_are_in_the_jobs_logs,
);
