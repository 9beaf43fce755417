//! Scheduling against a real server: delayed jobs start on time, priorities order a queue,
//! cancellation before and during a run, operator retry, paused queues, and retries that
//! wait in `scheduled`.
//!
//! Every test runs on every backend (`mysql::...`, `postgres::...`), with its own database
//! and its own job kinds. Jobs record each start in an `effects` table of their test's
//! database (`tests::fresh_queue_with_effects_on`) with the database's clock (MySQL's
//! `UTC_TIMESTAMP(6)`, PostgreSQL's `job_queue_now()`) and an auto-increment sequence, so
//! that start times are compared with `run_at` by the same clock that set it, and run order
//! is read from the sequence.
//!
//! This binary registers no periodic kind: periodic jobs are tested in `periodic_ticks.rs`
//! and `periodic_processes.rs`.

use std::time::Duration;

use jobqueue::admin::CancelOutcome;
use jobqueue::context::CancelReason;
use jobqueue::{job, Data, EnqueueOptions, Job, JobContext, JobError, JobStatus, Queue, Worker};
use sqlx::types::chrono::{DateTime, NaiveDateTime, Utc};
use tests::{
    all_effects, count_status, effects_of, fresh_queue_with_effects_on, on, on_every_backend,
    quick_worker, receive, record_effect_in, row, slot, sql_i64, start, stop, wait_for,
    wait_status, Arg, Backend, Effects, Mailbox,
};
use tokio::sync::Notify;

// ---------------------------------------------------------------------------------------
// Start times (the rest of the plumbing is in `tests/src/lib.rs`)
// ---------------------------------------------------------------------------------------

/// How long after its row's `run_at` the first effect of job `id`'s attempt `attempt` was
/// recorded, in microseconds (negative: before). Both times come from the database's clock.
async fn start_lag_us(queue: &Queue, id: u64, attempt: i64) -> i64 {
    let sql = match queue.backend() {
        Backend::Postgres => {
            "SELECT CAST(EXTRACT(EPOCH FROM (e.started_at - j.run_at)) * 1000000 AS BIGINT) \
             FROM job_queue j JOIN effects e ON e.task_key = j.task_key \
             WHERE j.id = ? AND e.attempt = ? ORDER BY e.seq LIMIT 1"
        }
        _ => {
            "SELECT TIMESTAMPDIFF(MICROSECOND, j.run_at, e.started_at) \
             FROM job_queue j JOIN effects e ON e.task_key = j.task_key \
             WHERE j.id = ? AND e.attempt = ? ORDER BY e.seq LIMIT 1"
        }
    };
    sql_i64(queue, sql, &[Arg::Int(id as i64), Arg::Int(attempt)]).await
}

/// The database's now plus `seconds`, by its clock (the queue's own: `UTC_TIMESTAMP(6)`,
/// `job_queue_now()`).
async fn database_now_plus(queue: &Queue, seconds: u32) -> DateTime<Utc> {
    let at: NaiveDateTime = match queue.backend() {
        Backend::Postgres => {
            sqlx::query_scalar("SELECT job_queue_now() + make_interval(secs => $1)")
                .bind(f64::from(seconds))
                .fetch_one(queue.postgres_pool().unwrap())
                .await
                .unwrap()
        }
        _ => sqlx::query_scalar("SELECT UTC_TIMESTAMP(6) + INTERVAL ? SECOND")
            .bind(seconds)
            .fetch_one(queue.mysql_pool().unwrap())
            .await
            .unwrap(),
    };
    at.and_utc()
}

/// Microseconds from `a` to `b`.
fn micros_between(a: DateTime<Utc>, b: DateTime<Utc>) -> i64 {
    (b - a).num_microseconds().expect("a small interval")
}

// ---------------------------------------------------------------------------------------
// 1. A delayed job starts no earlier than its time, and within the documented bound after.
// ---------------------------------------------------------------------------------------

#[job(name = "sched_delayed")]
async fn delayed(ctx: JobContext, label: String, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, &label).await
}

async fn a_delayed_job_starts_at_its_time_within_one_maintenance_interval(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "sched_delay").await;

    // The worker docs: "a due job starts within about one maintenance interval of its
    // time". Maintenance promotes due jobs every `maintenance` (±20 % jitter) and wakes the
    // workers of its process at once; a worker in another process finds the job at its next
    // poll, at most `poll_max` later. The margin covers the statements in between (promote,
    // claim, the job's own insert) on a busy two-core test machine, where one of them can
    // wait for a CPU for a second or more. A job left to wait for anything slower (a later
    // pass, a lost wake-up and a long poll) still fails it.
    let maintenance = Duration::from_millis(500);
    let poll_max = Duration::from_millis(500);
    let margin = Duration::from_millis(1_500);
    let bound = maintenance.mul_f64(1.2) + poll_max + margin;

    // The worker is idle and polling before the jobs exist, as in production.
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .data(effects.clone())
            .maintenance_interval(maintenance)
            .poll_interval(Duration::from_millis(50), poll_max)
            .build()
            .unwrap(),
    );

    let by_delay = queue
        .enqueue_with(
            Delayed {
                label: "delay".into(),
            },
            EnqueueOptions::default().delay(Duration::from_secs(2)),
        )
        .await
        .unwrap()
        .id();
    // Three seconds from the database's now, by the database's clock.
    let at = database_now_plus(&queue, 3).await;
    let by_time = queue
        .enqueue_with(
            Delayed {
                label: "run_at".into(),
            },
            EnqueueOptions::default().run_at(at),
        )
        .await
        .unwrap()
        .id();

    let r = row(&queue, by_delay).await;
    assert_eq!(
        r.status,
        JobStatus::Scheduled,
        "a delayed job waits in scheduled"
    );
    assert_eq!(
        micros_between(r.created_at, r.run_at),
        2_000_000,
        "run_at is the database's now plus the delay, to the microsecond"
    );
    let r = row(&queue, by_time).await;
    assert_eq!(r.status, JobStatus::Scheduled);
    assert_eq!(r.run_at, at, "run_at is stored as given (UTC)");

    for id in [by_delay, by_time] {
        wait_status(&queue, id, JobStatus::Done, Duration::from_secs(15)).await;
    }
    stop(&handle, task).await;

    for (id, what) in [(by_delay, "delay(2s)"), (by_time, "run_at(now + 3s)")] {
        let lag = start_lag_us(&queue, id, 1).await;
        println!(
            "{what}: started {:.1} ms after run_at (bound {bound:?})",
            lag as f64 / 1e3
        );
        assert!(lag >= 0, "{what}: started {lag} µs before its run_at");
        assert!(
            lag <= bound.as_micros() as i64,
            "{what}: started {lag} µs after its run_at, over the bound of {bound:?}"
        );
        let r = row(&queue, id).await;
        assert_eq!(r.attempts, 1);
        assert_eq!(
            effects_of(&effects, &r.task_key).await.len(),
            1,
            "{what} ran once"
        );
    }
    assert_eq!(handle.metrics().promoted, 2, "both went through promotion");
}

// ---------------------------------------------------------------------------------------
// 2. One slot, 100 jobs of mixed priorities: lower priority first, ties in enqueue order.
// ---------------------------------------------------------------------------------------

/// The kind's own priority, used by the jobs enqueued without an override.
const ORDERED_DEFAULT_PRIORITY: i16 = 1;

#[job(name = "sched_ordered", priority = 1)]
async fn ordered(ctx: JobContext, n: u32, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, &n.to_string()).await
}

/// Job `n`'s priority: every fourth keeps the kind's default, the others override it with a
/// value in -3..=3, scattered so that equal priorities are interleaved with others.
fn priority_of(n: u32) -> Option<i16> {
    match n % 4 {
        0 => None,
        _ => Some(((n * 37) % 7) as i16 - 3),
    }
}

async fn one_slot_runs_jobs_by_priority_then_enqueue_order(backend: Backend) {
    assert_eq!(Ordered::OPTIONS.priority, ORDERED_DEFAULT_PRIORITY);
    let (queue, effects) = fresh_queue_with_effects_on(backend, "sched_priority").await;

    let mut ids = Vec::new();
    for n in 0..100u32 {
        let mut options = EnqueueOptions::default();
        if let Some(p) = priority_of(n) {
            options = options.priority(p);
        }
        let e = queue.enqueue_with(Ordered { n }, options).await.unwrap();
        assert!(e.is_new());
        ids.push(e.id());
    }
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids follow enqueue order"
    );
    for (n, id) in ids.iter().enumerate() {
        let want = priority_of(n as u32).unwrap_or(ORDERED_DEFAULT_PRIORITY);
        assert_eq!(row(&queue, *id).await.priority, want, "job {n}'s priority");
    }

    let (handle, task) = start(
        Worker::builder(queue.clone())
            .data(effects.clone())
            .concurrency(1)
            .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
            .build()
            .unwrap(),
    );
    wait_for("100 jobs done", Duration::from_secs(30), || async {
        (count_status(&queue, JobStatus::Done).await == 100).then_some(())
    })
    .await;
    stop(&handle, task).await;

    let ran: Vec<u32> = all_effects(&effects)
        .await
        .iter()
        .map(|(_, _, note)| note.parse().unwrap())
        .collect();
    let mut expected: Vec<u32> = (0..100).collect();
    // A stable sort keeps enqueue order among equal priorities.
    expected.sort_by_key(|&n| priority_of(n).unwrap_or(ORDERED_DEFAULT_PRIORITY));
    assert_eq!(ran, expected, "run order: priority, then enqueue order");
    let m = handle.metrics();
    assert_eq!((m.claimed, m.succeeded), (100, 100));
}

// ---------------------------------------------------------------------------------------
// 3. Cancellation: before the start, while running, after the end; operator retry.
// ---------------------------------------------------------------------------------------

static CANCEL_STARTED: [Mailbox<JobContext>; 2] = [Mailbox::new(), Mailbox::new()];

#[job(name = "sched_cancel_delayed")]
async fn cancel_delayed(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "ran").await
}

/// Runs after `sched_cancel_delayed`'s time: once it is done, maintenance has promoted what
/// was due and a worker has claimed since.
#[job(name = "sched_cancel_sentinel")]
async fn cancel_sentinel(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "ran").await
}

/// The first attempt works until it is asked to stop, then says why and fails; later
/// attempts finish at once. One attempt only, so that a retry of the cancelled job shows
/// `max_attempts` extended. Its lease leaves a renewal round a second of slack, so that a
/// slow statement on a busy machine does not turn the cancel into a lost lease.
#[job(name = "sched_cancel_running", lease = "3s", max_attempts = 1)]
async fn cancel_running(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "started").await?;
    if ctx.attempt() > 1 {
        return Ok(());
    }
    CANCEL_STARTED[on(&effects)].send(ctx.clone());
    tokio::select! {
        _ = ctx.cancelled() => {}
        _ = tokio::time::sleep(Duration::from_secs(30)) => {
            return Err(JobError::permanent("never asked to stop"));
        }
    }
    let reason = ctx.cancel_reason();
    record_effect_in(&effects, &ctx, &format!("stopping: {reason:?}")).await?;
    Err(format!("stopped on {reason:?}").into())
}

#[job(name = "sched_cancel_quick")]
async fn cancel_quick(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "ran").await
}

async fn cancel_before_start_while_running_and_after_the_end_then_retry(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "sched_cancel").await;
    let mut started = CANCEL_STARTED[slot(backend)].open();

    // Before the start: a delayed job is cancelled at once and never runs.
    let delayed = queue
        .enqueue_with(
            CancelDelayed {},
            EnqueueOptions::default().delay(Duration::from_secs(1)),
        )
        .await
        .unwrap()
        .id();
    assert_eq!(
        queue.cancel(delayed).await.unwrap(),
        CancelOutcome::Cancelled
    );
    let r = row(&queue, delayed).await;
    assert_eq!(r.status, JobStatus::Cancelled);
    assert_eq!(r.attempts, 0);
    assert!(r.finished_at.is_some());
    assert_eq!(
        r.last_error.as_deref(),
        Some("cancelled by an operator before it ran")
    );
    assert_eq!(
        queue.cancel(delayed).await.unwrap(),
        CancelOutcome::AlreadyFinished(JobStatus::Cancelled),
        "a second cancel changes nothing"
    );
    let sentinel = queue
        .enqueue_with(
            CancelSentinel {},
            EnqueueOptions::default().delay(Duration::from_millis(1500)),
        )
        .await
        .unwrap()
        .id();
    assert!(row(&queue, sentinel).await.run_at > r.run_at);

    let running = queue.enqueue(CancelRunning {}).await.unwrap().id();
    let quick = queue.enqueue(CancelQuick {}).await.unwrap().id();
    let (handle, task) = start(quick_worker(&queue).data(effects.clone()).build().unwrap());

    // While running: the request reaches the job through its worker's next renewal (a
    // quarter of the 3 s lease); the job sees `Requested`, stops, and the row ends cancelled
    // without a retry.
    let ctx = receive(
        &mut started,
        "the long job to start",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ctx.id(), running);
    assert_eq!(
        queue.cancel(running).await.unwrap(),
        CancelOutcome::Requested
    );
    let r = wait_status(
        &queue,
        running,
        JobStatus::Cancelled,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::Requested));
    assert_eq!((r.attempts, r.max_attempts), (1, 1), "not retried");
    assert_eq!(r.last_error.as_deref(), Some("stopped on Some(Requested)"));
    assert!(r.finished_at.is_some() && r.lease_owner.is_none());
    assert_eq!(
        effects_of(&effects, &r.task_key).await,
        [
            (1, "started".into()),
            (1, "stopping: Some(Requested)".into())
        ]
    );

    // After the end: nothing to cancel.
    wait_status(&queue, quick, JobStatus::Done, Duration::from_secs(10)).await;
    assert_eq!(
        queue.cancel(quick).await.unwrap(),
        CancelOutcome::AlreadyFinished(JobStatus::Done)
    );
    assert_eq!(row(&queue, quick).await.status, JobStatus::Done);

    // The job cancelled before its start stays cancelled past its time: the sentinel, due
    // later, has been promoted and claimed, and the cancelled job has no effect.
    wait_status(&queue, sentinel, JobStatus::Done, Duration::from_secs(10)).await;
    let r = row(&queue, delayed).await;
    assert!(queue.now().await.unwrap() > r.run_at);
    assert_eq!((r.status, r.attempts), (JobStatus::Cancelled, 0));
    assert!(
        effects_of(&effects, &r.task_key).await.is_empty(),
        "never ran"
    );

    // Operator retry of the cancelled running job: it runs again as attempt 2. Its history
    // stays readable: attempts grow (they fence every claim), `max_attempts` is raised to
    // make room for the new attempt, and `last_error` keeps the cancel.
    assert!(queue.retry(running).await.unwrap());
    let r = wait_status(&queue, running, JobStatus::Done, Duration::from_secs(10)).await;
    assert_eq!((r.attempts, r.max_attempts), (2, 2));
    assert!(!r.cancel_requested, "the retry cleared the old request");
    assert_eq!(r.last_error.as_deref(), Some("stopped on Some(Requested)"));
    assert_eq!(
        effects_of(&effects, &r.task_key).await,
        [
            (1, "started".into()),
            (1, "stopping: Some(Requested)".into()),
            (2, "started".into())
        ]
    );
    assert!(
        !queue.retry(quick).await.unwrap(),
        "a done job is not retried"
    );

    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!(m.cancelled, 1, "{m:?}");
    assert_eq!(m.retried, 0, "{m:?}");
    assert_eq!(
        m.claimed, 4,
        "quick, sentinel, and the running job twice: {m:?}"
    );
    assert_eq!(m.succeeded, 3, "{m:?}");
}

/// A running job whose cancel is requested, but which fails (retryably) before its worker
/// passes the request on, is not retried: the request stands.
static CANCEL_FAILS_STARTED: [Mailbox<u64>; 2] = [Mailbox::new(), Mailbox::new()];
static CANCEL_FAILS_GO: [Notify; 2] = [Notify::const_new(), Notify::const_new()];

#[job(
    name = "sched_cancel_then_fail",
    max_attempts = 3,
    backoff = "constant(100ms)"
)]
async fn cancel_then_fail(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "started").await?;
    if ctx.attempt() == 1 {
        CANCEL_FAILS_STARTED[on(&effects)].send(ctx.id());
        CANCEL_FAILS_GO[on(&effects)].notified().await;
        return Err("failed after the cancel request".into());
    }
    Ok(())
}

async fn a_job_failing_after_a_cancel_request_is_cancelled_not_retried(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "sched_cancel_fail").await;
    let mut started = CANCEL_FAILS_STARTED[slot(backend)].open();
    let id = queue.enqueue(CancelThenFail {}).await.unwrap().id();
    let (handle, task) = start(quick_worker(&queue).data(effects.clone()).build().unwrap());
    let started_id = receive(&mut started, "the job to start", Duration::from_secs(10)).await;
    assert_eq!(started_id, id);
    // The default 30 s lease: the worker would pass the request on only at its renewal,
    // 10 s from now; the job fails long before.
    assert_eq!(queue.cancel(id).await.unwrap(), CancelOutcome::Requested);
    CANCEL_FAILS_GO[slot(backend)].notify_one();

    let r = wait_for("the job to end", Duration::from_secs(10), || async {
        let r = row(&queue, id).await;
        matches!(
            r.status,
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled
        )
        .then_some(r)
    })
    .await;
    assert_eq!(r.status, JobStatus::Cancelled, "{r:?}");
    assert_eq!(r.attempts, 1, "not run again after the cancel request");
    assert!(r.finished_at.is_some() && r.lease_owner.is_none(), "{r:?}");
    assert_eq!(
        r.last_error.as_deref(),
        Some("failed after the cancel request")
    );
    assert_eq!(
        effects_of(&effects, &r.task_key).await,
        [(1, "started".into())]
    );
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!(
        (m.cancelled, m.retried),
        (1, 0),
        "counted as what the row became: {m:?}"
    );
}

/// The same at shutdown: a job whose cancel is requested, stopped by its worker's shutdown
/// before the worker passed the request on, is cancelled instead of handed back.
static CANCEL_SHUTDOWN_STARTED: [Mailbox<JobContext>; 2] = [Mailbox::new(), Mailbox::new()];

#[job(name = "sched_cancel_at_shutdown")]
async fn cancel_at_shutdown(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "started").await?;
    CANCEL_SHUTDOWN_STARTED[on(&effects)].send(ctx.clone());
    ctx.cancelled().await;
    Err(format!("stopped on {:?}", ctx.cancel_reason()).into())
}

async fn a_job_stopped_at_shutdown_after_a_cancel_request_is_cancelled_not_handed_back(
    backend: Backend,
) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "sched_cancel_shutdown").await;
    let mut started = CANCEL_SHUTDOWN_STARTED[slot(backend)].open();
    let id = queue.enqueue(CancelAtShutdown {}).await.unwrap().id();
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .data(effects.clone())
            .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
            .shutdown_grace(Duration::from_millis(100))
            .build()
            .unwrap(),
    );
    let ctx = receive(&mut started, "the job to start", Duration::from_secs(10)).await;
    // The default 30 s lease: the request would reach the job at the renewal in 10 s; the
    // shutdown stops it first.
    assert_eq!(queue.cancel(id).await.unwrap(), CancelOutcome::Requested);
    stop(&handle, task).await;
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::Shutdown));

    let r = row(&queue, id).await;
    assert_eq!(r.status, JobStatus::Cancelled, "{r:?}");
    assert_eq!(r.attempts, 1);
    assert!(r.finished_at.is_some() && r.lease_owner.is_none(), "{r:?}");
    assert_eq!(
        r.last_error.as_deref(),
        Some("cancelled on request; its worker shut down before the job stopped")
    );
    assert_eq!(
        effects_of(&effects, &r.task_key).await,
        [(1, "started".into())]
    );
}

// ---------------------------------------------------------------------------------------
// 4. A paused queue keeps its jobs ready until it is resumed.
// ---------------------------------------------------------------------------------------

#[job(name = "sched_paused", queue = "sched_paused")]
async fn paused_job(ctx: JobContext, n: u32, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, &n.to_string()).await
}

async fn a_paused_queue_keeps_its_jobs_ready_until_resumed(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "sched_pause").await;
    queue.pause("sched_paused").await.unwrap();
    assert_eq!(queue.paused_queues().await.unwrap(), ["sched_paused"]);
    let ids: Vec<u64> = queue
        .enqueue_many((0..3).map(|n| PausedJob { n }))
        .await
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();
    assert_eq!(ids.len(), 3);

    let (handle, task) = start(
        Worker::builder(queue.clone())
            .data(effects.clone())
            .queues(["sched_paused"])
            .poll_interval(Duration::from_millis(20), Duration::from_millis(100))
            // Claims, not probes, are under test: every one of them must find nothing.
            .idle_probe(None)
            .build()
            .unwrap(),
    );
    wait_for(
        "five empty claims on the paused queue",
        Duration::from_secs(10),
        || async { (handle.metrics().empty_paused >= 5).then_some(()) },
    )
    .await;
    for &id in &ids {
        let r = row(&queue, id).await;
        assert_eq!((r.status, r.attempts), (JobStatus::Ready, 0), "job {id}");
    }
    let m = handle.metrics();
    assert_eq!(m.claimed, 0, "{m:?}");
    assert_eq!(
        m.empty_idle + m.empty_contended + m.empty_leased_only,
        0,
        "{m:?}"
    );
    let stats = queue.stats().await.unwrap();
    let s = stats.iter().find(|s| s.queue == "sched_paused").unwrap();
    assert!(s.paused && s.counts.ready == 3, "{s:?}");
    let ran = all_effects(&effects).await;
    assert!(ran.is_empty(), "nothing ran while paused: {ran:?}");

    queue.resume("sched_paused").await.unwrap();
    assert!(queue.paused_queues().await.unwrap().is_empty());
    for &id in &ids {
        let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(10)).await;
        assert_eq!(r.attempts, 1);
    }
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!((m.claimed, m.succeeded), (3, 3), "{m:?}");
}

// ---------------------------------------------------------------------------------------
// 5. A failed attempt waits for its backoff in `scheduled`, then runs again.
// ---------------------------------------------------------------------------------------

/// Its backoff keeps the retry in `scheduled` for seconds, so that the test, which looks
/// every 25 ms, sees that state even on a busy machine.
#[job(name = "sched_retry_once", max_attempts = 3, backoff = "constant(4s)")]
async fn retry_once(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "started").await?;
    if ctx.attempt() == 1 {
        return Err("the first attempt fails".into());
    }
    Ok(())
}

async fn a_retry_waits_in_scheduled_for_its_backoff(backend: Backend) {
    let (queue, effects) = fresh_queue_with_effects_on(backend, "sched_retry").await;
    let maintenance = Duration::from_millis(100);
    let (handle, task) = start(
        Worker::builder(queue.clone())
            .data(effects.clone())
            .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
            .maintenance_interval(maintenance)
            .build()
            .unwrap(),
    );
    let id = queue.enqueue(RetryOnce {}).await.unwrap().id();

    // The failure is written as `scheduled`, run_at = the write's now + 4 s ± 20 % jitter
    // (`updated_at` is set by the same statement).
    let r = wait_status(&queue, id, JobStatus::Scheduled, Duration::from_secs(10)).await;
    assert_eq!(r.attempts, 1);
    assert_eq!(r.last_error.as_deref(), Some("the first attempt fails"));
    assert!(r.lease_owner.is_none() && r.lease_until.is_none() && r.finished_at.is_none());
    let wait = micros_between(r.updated_at, r.run_at);
    assert!(
        (3_200_000..=4_800_000).contains(&wait),
        "run_at is {wait} µs after the failure, not 4 s ± 20 %"
    );
    let scheduled_run_at = r.run_at;

    let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(20)).await;
    assert_eq!(r.attempts, 2);
    assert_eq!(r.run_at, scheduled_run_at, "promotion keeps run_at");
    assert_eq!(
        effects_of(&effects, &r.task_key).await,
        [(1, "started".into()), (2, "started".into())]
    );
    // The row's run_at, which promotion kept: the time the retry was scheduled for.
    let second_start_lag = start_lag_us(&queue, id, 2).await;
    assert!(
        second_start_lag >= 0,
        "the retry started {second_start_lag} µs early"
    );
    // One maintenance pass, one poll, and a margin for the promote, claim and insert
    // statements of a busy two-core machine, where one of them can wait for a CPU for a
    // second or more.
    let bound = maintenance.mul_f64(1.2) + Duration::from_millis(200 + 2_000);
    assert!(
        second_start_lag <= bound.as_micros() as i64,
        "the retry started {second_start_lag} µs after its run_at (bound {bound:?})"
    );

    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!(
        (m.claimed, m.retried, m.succeeded, m.promoted),
        (2, 1, 1, 1),
        "{m:?}"
    );
}

on_every_backend!(
    a_delayed_job_starts_at_its_time_within_one_maintenance_interval,
    one_slot_runs_jobs_by_priority_then_enqueue_order,
    cancel_before_start_while_running_and_after_the_end_then_retry,
    a_job_failing_after_a_cancel_request_is_cancelled_not_retried,
    a_job_stopped_at_shutdown_after_a_cancel_request_is_cancelled_not_handed_back,
    a_paused_queue_keeps_its_jobs_ready_until_resumed,
    a_retry_waits_in_scheduled_for_its_backoff,
);
