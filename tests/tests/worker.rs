//! The worker against a real server: exactly-once execution across workers, retries and
//! failures, panics and bad payloads, lease renewal and lease loss, shutdown, empty claims,
//! unknown kinds, timeouts and the in-process wake-up.
//!
//! Every test runs on MySQL/MariaDB and on PostgreSQL (`mysql::name`, `postgres::name`), with
//! its own database and its own job kinds (one registry serves the whole binary). Jobs record
//! their side effects in an `effects` table of their test's database
//! (`tests::fresh_queue_with_effects_on`), reached through a pool the test gives its worker
//! (`.data(effects.clone())`, taken as a `Data<Effects>` parameter), so that "exactly once" is
//! counted where a user would count it. Every worker of this file gets one, even where its
//! jobs record nothing: its kinds share the default queue, and a worker serving a kind must
//! hold what the kind takes. A job that tells its test something picks the test's mailbox by
//! that pool's backend ([`on`]), since a test's two runs run at once.

use std::time::{Duration, Instant};

use jobqueue::context::CancelReason;
use jobqueue::{
    job, Data, Job, JobContext, JobError, JobOptions, JobStatus, Queue, Worker, WorkerHandle,
};
use tests::{
    count_status, effects, fresh_queue_with_effects_on, lock_job, lock_rows, on, on_every_backend,
    quick_worker, receive, record_effect_in, row, slot, sql_i64, start, stop, wait_for,
    wait_status, Arg, Backend, Effects, LogCapture, Mailbox, WorkerTask,
};

/// Microseconds from the database's clock to job `id`'s `lease_until` (negative once it has
/// passed).
async fn micros_left_of_lease(queue: &Queue, id: u64) -> i64 {
    let sql = match queue.backend() {
        Backend::Postgres => {
            "SELECT CAST(EXTRACT(EPOCH FROM (lease_until - job_queue_now())) * 1000000 AS BIGINT) \
             FROM job_queue WHERE id = ?"
        }
        _ => {
            "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until) FROM job_queue \
              WHERE id = ?"
        }
    };
    sql_i64(queue, sql, &[Arg::Int(id as i64)]).await
}

// ---------------------------------------------------------------------------------------
// 1. Many jobs, three workers: each job runs exactly once.
// ---------------------------------------------------------------------------------------

#[job(name = "worker_fanout")]
async fn fanout(ctx: JobContext, n: u32, effects: Data<Effects>) -> Result<(), JobError> {
    let _ = n;
    record_effect_in(&effects, &ctx, "done").await
}

async fn three_workers_run_two_hundred_jobs_exactly_once(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_fanout").await;

    let enqueued = queue
        .enqueue_many((0..200).map(|n| Fanout { n }))
        .await
        .expect("enqueue");
    assert_eq!(enqueued.iter().filter(|e| e.is_new()).count(), 200);

    let workers: Vec<_> = (0..3)
        .map(|i| {
            start(
                Worker::builder(queue.clone())
                    .data(effects_pool.clone())
                    .owner(format!("fanout-{i}"))
                    .concurrency(4)
                    .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
                    .build()
                    .expect("build"),
            )
        })
        .collect();

    wait_for("200 jobs done", Duration::from_secs(60), || async {
        (count_status(&queue, JobStatus::Done).await == 200).then_some(())
    })
    .await;
    let mut claimed = Vec::new();
    for (handle, task) in workers {
        stop(&handle, task).await;
        claimed.push(handle.metrics().claimed);
    }

    // Every job ran once: one effect per key, 200 keys, all by the first attempt.
    let effects = effects(&effects_pool).await;
    assert_eq!(effects.len(), 200, "one effect per job");
    let mut keys: Vec<&str> = effects.iter().map(|e| e.0.as_str()).collect();
    keys.dedup();
    assert_eq!(keys.len(), 200, "no job ran twice");
    assert!(
        effects.iter().all(|e| e.1 == 1),
        "every job ran at its first attempt"
    );
    let done = count_status(&queue, JobStatus::Done).await;
    let sum = match backend {
        Backend::Postgres => "SELECT CAST(SUM(attempts) AS BIGINT) FROM job_queue WHERE status = ?",
        _ => "SELECT CAST(SUM(attempts) AS SIGNED) FROM job_queue WHERE status = ?",
    };
    let attempts = sql_i64(&queue, sum, &[Arg::Text("done")]).await;
    assert_eq!(
        (done, attempts),
        (200, 200),
        "all done, each at its first attempt"
    );
    assert_eq!(
        claimed.iter().sum::<u64>(),
        200,
        "claims per worker: {claimed:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 2. Retries, exhaustion and permanent errors.
// ---------------------------------------------------------------------------------------

#[job(name = "worker_flaky", max_attempts = 5, backoff = "constant(50ms)")]
async fn flaky(ctx: JobContext) -> Result<(), JobError> {
    if ctx.attempt() < 3 {
        return Err(format!("flaky failure on attempt {}", ctx.attempt()).into());
    }
    Ok(())
}

#[job(
    name = "worker_always_fails",
    max_attempts = 3,
    backoff = "constant(50ms)"
)]
async fn always_fails(ctx: JobContext) -> Result<(), JobError> {
    Err(format!("upstream refused (attempt {})", ctx.attempt()).into())
}

#[job(
    name = "worker_permanent",
    max_attempts = 5,
    backoff = "constant(50ms)"
)]
async fn permanent_failure() -> Result<(), JobError> {
    Err(JobError::permanent("invoice 17 does not exist"))
}

async fn retries_until_success_exhaustion_and_permanent_errors(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_retries").await;
    let flaky = queue.enqueue(Flaky {}).await.unwrap().id();
    let exhausted = queue.enqueue(AlwaysFails {}).await.unwrap().id();
    let permanent = queue.enqueue(PermanentFailure {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );

    let r = wait_status(&queue, flaky, JobStatus::Done, Duration::from_secs(15)).await;
    assert_eq!(r.attempts, 3, "failed twice, then succeeded");

    let r = wait_status(
        &queue,
        exhausted,
        JobStatus::Failed,
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(r.attempts, 3, "every attempt was used");
    assert_eq!(r.attempts, r.max_attempts);
    assert_eq!(
        r.last_error.as_deref(),
        Some("upstream refused (attempt 3) (attempt 3 of 3)")
    );
    assert!(r.finished_at.is_some());

    let r = wait_status(
        &queue,
        permanent,
        JobStatus::Failed,
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(r.attempts, 1, "a permanent error is not retried");
    assert_eq!(
        r.last_error.as_deref(),
        Some("invoice 17 does not exist (permanent error, not retried)")
    );

    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!(m.succeeded, 1);
    assert_eq!(
        m.retried,
        2 + 2,
        "two retries for each of the first two jobs"
    );
    assert_eq!(m.failed, 2);
    assert_eq!(m.claimed, 3 + 3 + 1);
}

// ---------------------------------------------------------------------------------------
// 3. A panic is a failure, a payload that does not fit waits for a worker that can read it,
//    and the worker goes on.
// ---------------------------------------------------------------------------------------

#[job(name = "worker_panics", max_attempts = 1)]
async fn panics(order: u32) {
    panic!("order {order} has no lines");
}

#[job(name = "worker_payload_target", max_attempts = 3)]
async fn payload_target(title: String, pages: u32) {
    let _ = (title, pages);
}

/// The same kind as `payload_target` with a field of another type, as an older release of
/// the program might have enqueued it. Not registered: it only writes rows.
#[derive(serde::Serialize, serde::Deserialize)]
struct OldPayloadTarget {
    title: u64,
    pages: u32,
}

impl Job for OldPayloadTarget {
    const KIND: &'static str = PayloadTarget::KIND;
    const OPTIONS: JobOptions = PayloadTarget::OPTIONS;
    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        unreachable!("never registered, never run")
    }
}

#[job(name = "worker_after_failures")]
async fn after_failures(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    record_effect_in(&effects, &ctx, "done").await
}

async fn panics_fail_clearly_bad_payloads_wait_and_the_worker_goes_on(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_panics").await;
    let panicking = queue.enqueue(Panics { order: 7 }).await.unwrap().id();
    let mismatched = queue
        .enqueue(OldPayloadTarget { title: 5, pages: 3 })
        .await
        .unwrap()
        .id();
    // One slot: the job after the failures runs in the same slot they ran in.
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .concurrency(1)
            .build()
            .unwrap(),
    );

    let r = wait_status(
        &queue,
        panicking,
        JobStatus::Failed,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(r.attempts, 1);
    assert_eq!(
        r.last_error.as_deref(),
        Some("job panicked: order 7 has no lines (attempt 1 of 1)")
    );

    // A payload that does not fit waits for a worker that can read it (a newer or older
    // release), without spending an attempt.
    let r = wait_status(
        &queue,
        mismatched,
        JobStatus::Scheduled,
        Duration::from_secs(10),
    )
    .await;
    // Whichever put-back the test met (each lasts about a second, and a busy test can miss
    // the first): none spent one of the 3 attempts.
    assert_eq!(
        r.max_attempts,
        r.attempts + 3,
        "the claims that could not read it spent no attempt: {r:?}"
    );
    let error = r.last_error.unwrap();
    assert!(
        error.starts_with("waiting for a worker that can run it: "),
        "{error}"
    );
    assert!(
        error.contains("`worker_payload_target`") && error.contains("`title`"),
        "the error names the kind and the field: {error}"
    );
    assert!(error.contains("expected a string"), "{error}");

    let next = queue.enqueue(AfterFailures {}).await.unwrap().id();
    let r = wait_status(&queue, next, JobStatus::Done, Duration::from_secs(10)).await;
    assert_eq!(r.attempts, 1);
    assert_eq!(effects(&effects_pool).await.len(), 1);

    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!((m.failed, m.succeeded), (1, 1), "{m:?}");
    assert!(m.deferred >= 1 && m.claimed == 2 + m.deferred, "{m:?}");
}

// ---------------------------------------------------------------------------------------
// 4. Lease renewal keeps a long job; renewals that cannot happen stop it.
// ---------------------------------------------------------------------------------------

/// `work` in small steps, stopping early if asked to; the effect is recorded only when the
/// work is complete. Later attempts finish at once.
async fn long_work(
    ctx: &JobContext,
    effects: &Effects,
    started: &[Mailbox<JobContext>; 2],
    work: Duration,
) -> Result<(), JobError> {
    started[on(effects)].send(ctx.clone());
    if ctx.attempt() == 1 {
        let end = Instant::now() + work;
        while Instant::now() < end {
            if ctx.is_cancelled() {
                return Err(format!("stopped: {:?}", ctx.cancel_reason()).into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    record_effect_in(effects, ctx, "done").await
}

static RENEWED_STARTED: [Mailbox<JobContext>; 2] = [Mailbox::new(), Mailbox::new()];

/// Works for more than two leases, so that it is renewed several times. The lease leaves a
/// renewal round a second of slack, so that a slow statement on a busy machine is not a
/// lost lease.
#[job(name = "worker_long_renewed", lease = "3s", max_attempts = 3)]
async fn long_renewed(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    long_work(&ctx, &effects, &RENEWED_STARTED, Duration::from_secs(7)).await
}

async fn a_job_longer_than_its_lease_is_renewed_and_runs_once(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_renewed").await;
    let mut started = RENEWED_STARTED[slot(backend)].open();
    let id = queue.enqueue(LongRenewed {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );

    let ctx = receive(&mut started, "the job to start", Duration::from_secs(10)).await;
    let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(15)).await;
    assert_eq!(r.attempts, 1, "never reclaimed, never run again");
    assert!(r.last_error.is_none(), "{:?}", r.last_error);
    assert!(!ctx.is_cancelled());
    assert_eq!(
        effects(&effects_pool).await,
        [(r.task_key.clone(), 1)],
        "the work completed once"
    );

    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!((m.reclaimed, m.lease_lost), (0, 0), "{m:?}");
    assert_eq!((m.claimed, m.succeeded), (1, 1));
    assert!(started.try_recv().is_err(), "the job started only once");
}

static BLOCKED_STARTED: [Mailbox<JobContext>; 2] = [Mailbox::new(), Mailbox::new()];

/// Would work far longer than its lease; its renewals are blocked, so it is stopped. The
/// lease is long enough that the time between the stop and the lease's end (a quarter of
/// it) is a second: room to observe the stop before the lease ends on a busy machine.
#[job(name = "worker_long_blocked", lease = "4s", max_attempts = 3)]
async fn long_blocked(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    long_work(&ctx, &effects, &BLOCKED_STARTED, Duration::from_secs(60)).await
}

/// Renewals are made impossible by a transaction that holds the job's row lock: a renewal
/// passes over a row another session holds, so the lease goes unrenewed, as when the server
/// is slow or partitioned away.
async fn a_job_whose_lease_cannot_be_renewed_is_stopped_and_taken_back(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_blocked").await;
    let mut started = BLOCKED_STARTED[slot(backend)].open();
    let id = queue.enqueue(LongBlocked {}).await.unwrap().id();
    let first = quick_worker(&queue)
        .data(effects_pool.clone())
        .owner("lease-a")
        .maintenance(false)
        .build()
        .unwrap();
    let (handle_a, task_a) = start(first);

    let ctx = receive(&mut started, "the first attempt", Duration::from_secs(10)).await;
    assert_eq!(ctx.attempt(), 1);
    let blocker = lock_job(&queue, id).await;

    // The worker cannot vouch for the lease any more: it stops the job once three quarters
    // of the 4 s lease have passed unrenewed, before another worker could take it.
    tokio::time::timeout(Duration::from_secs(15), ctx.cancelled())
        .await
        .expect("the job is cancelled while its renewal is blocked");
    let cancelled_at = Instant::now();
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::LeaseLost));
    // The stop came before the lease's end, by the database's clock, which set it. The
    // database's now, taken after `asked`, less the time since the stop was seen, is no
    // earlier than the stop.
    let asked = Instant::now();
    let left_us = micros_left_of_lease(&queue, id).await;
    let since_stop_us = (asked - cancelled_at).as_micros() as i64;
    assert!(
        left_us + since_stop_us > 0,
        "the job was stopped {since_stop_us} µs before a moment when {left_us} µs of its \
         lease were left: after its lease ended"
    );
    wait_metric(&handle_a, "the lost lease to be counted", 1, |m| {
        m.lease_lost
    })
    .await;
    // Nothing was written for that attempt (a plain read does not wait for the lock).
    let r = row(&queue, id).await;
    assert_eq!(
        (r.status, r.attempts, r.lease_owner.as_deref()),
        (JobStatus::Running, 1, Some("lease-a"))
    );

    blocker.release().await;
    stop(&handle_a, task_a).await;
    let m = handle_a.metrics();
    assert_eq!(
        (
            m.lease_lost,
            m.succeeded,
            m.retried,
            m.failed,
            m.handed_back
        ),
        (1, 0, 0, 0, 0),
        "the first worker recorded nothing for the lost attempt: {m:?}"
    );
    let r = row(&queue, id).await;
    assert_eq!((r.status, r.attempts), (JobStatus::Running, 1));

    // Another worker takes the job back once the lease has expired, and runs it.
    let (handle_b, task_b) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .owner("lease-b")
            .build()
            .unwrap(),
    );
    let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(15)).await;
    assert_eq!(r.attempts, 2);
    assert!(
        r.last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("lease of lease-a expired during attempt 1")),
        "{:?}",
        r.last_error
    );
    stop(&handle_b, task_b).await;
    let m = handle_b.metrics();
    assert_eq!((m.reclaimed, m.claimed, m.succeeded), (1, 1, 1), "{m:?}");
    assert_eq!(
        effects(&effects_pool).await,
        [(r.task_key.clone(), 2)],
        "only the second attempt did the work"
    );
}

// ---------------------------------------------------------------------------------------
// 5. Shutdown hands running jobs back.
// ---------------------------------------------------------------------------------------

static COOPERATIVE_STARTED: [Mailbox<JobContext>; 2] = [Mailbox::new(), Mailbox::new()];

/// Stops when asked to.
#[job(name = "worker_shutdown_cooperative")]
async fn shutdown_cooperative(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    COOPERATIVE_STARTED[on(&effects)].send(ctx.clone());
    if ctx.attempt() == 1 {
        ctx.cancelled().await;
        return Err("stopped before the end".into());
    }
    record_effect_in(&effects, &ctx, "done").await
}

static STUBBORN_STARTED: [Mailbox<JobContext>; 2] = [Mailbox::new(), Mailbox::new()];

/// Ignores cancellation: only dropping it stops it.
#[job(name = "worker_shutdown_stubborn")]
async fn shutdown_stubborn(ctx: JobContext, effects: Data<Effects>) -> Result<(), JobError> {
    STUBBORN_STARTED[on(&effects)].send(ctx.clone());
    if ctx.attempt() == 1 {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    record_effect_in(&effects, &ctx, "done").await
}

const GRACE: Duration = Duration::from_millis(200);
const CANCEL_GRACE: Duration = Duration::from_millis(200);
/// Room for the final writes on a loaded two-core machine, where a statement can wait for a
/// CPU for a second or more. Far below what the jobs would take by themselves (the
/// cooperative one never ends unless cancelled, the stubborn one sleeps 60 s), so a
/// shutdown that waited for them still fails.
const MARGIN: Duration = Duration::from_secs(8);

async fn shutdown_cancels_a_running_job_and_hands_it_back(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_shutdown").await;
    let mut started = COOPERATIVE_STARTED[slot(backend)].open();
    let id = queue.enqueue(ShutdownCooperative {}).await.unwrap().id();
    let worker = quick_worker(&queue)
        .data(effects_pool.clone())
        .shutdown_grace(GRACE)
        .cancel_grace(CANCEL_GRACE)
        .build()
        .unwrap();
    let (handle, task) = start(worker);
    let ctx = receive(&mut started, "the job to start", Duration::from_secs(10)).await;

    let t0 = Instant::now();
    handle.shutdown();
    task.await.unwrap().unwrap();
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= GRACE,
        "the job had its grace period: {elapsed:?}"
    );
    assert!(elapsed < GRACE + CANCEL_GRACE + MARGIN, "{elapsed:?}");
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::Shutdown));

    let r = row(&queue, id).await;
    assert_eq!((r.status, r.attempts), (JobStatus::Ready, 1), "{r:?}");
    assert_eq!(r.lease_owner, None);
    let m = handle.metrics();
    assert_eq!((m.handed_back, m.retried, m.failed), (1, 0, 0), "{m:?}");

    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );
    let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(10)).await;
    assert_eq!(r.attempts, 2);
    stop(&handle, task).await;
    assert_eq!(effects(&effects_pool).await, [(r.task_key.clone(), 2)]);
}

async fn shutdown_drops_a_job_that_ignores_cancellation_and_hands_it_back(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_stubborn").await;
    let mut started = STUBBORN_STARTED[slot(backend)].open();
    let id = queue.enqueue(ShutdownStubborn {}).await.unwrap().id();
    let worker = quick_worker(&queue)
        .data(effects_pool.clone())
        .shutdown_grace(GRACE)
        .cancel_grace(CANCEL_GRACE)
        .build()
        .unwrap();
    let handle = worker.handle();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run_until(async {
        let _ = stop_rx.await;
    }));
    let ctx = receive(&mut started, "the job to start", Duration::from_secs(10)).await;

    let t0 = Instant::now();
    stop_tx.send(()).unwrap();
    task.await.unwrap().unwrap();
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= GRACE + CANCEL_GRACE,
        "both grace periods were given: {elapsed:?}"
    );
    assert!(elapsed < GRACE + CANCEL_GRACE + MARGIN, "{elapsed:?}");
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::Shutdown));

    let r = row(&queue, id).await;
    assert_eq!((r.status, r.attempts), (JobStatus::Ready, 1), "{r:?}");
    assert_eq!(handle.metrics().handed_back, 1);

    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );
    let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(10)).await;
    assert_eq!(r.attempts, 2);
    stop(&handle, task).await;
    assert_eq!(effects(&effects_pool).await, [(r.task_key.clone(), 2)]);
}

// ---------------------------------------------------------------------------------------
// 6. Empty claims are counted by cause and logged as nothing worse than info.
// ---------------------------------------------------------------------------------------

#[job(name = "worker_empty_probe")]
async fn empty_probe(n: u32) {
    let _ = n;
}

fn polling_worker(queue: &Queue, effects: &Effects) -> (WorkerHandle, WorkerTask) {
    start(
        Worker::builder(queue.clone())
            .data(effects.clone())
            .poll_interval(Duration::from_millis(20), Duration::from_millis(100))
            // The empty claims themselves are under test: no probe stands in for them.
            .idle_probe(None)
            .maintenance_interval(Duration::from_millis(100))
            .build()
            .unwrap(),
    )
}

/// Waits until `counter` of the worker's metrics reaches `n`.
async fn wait_metric(
    handle: &WorkerHandle,
    what: &str,
    n: u64,
    counter: impl Fn(&jobqueue::metrics::MetricsSnapshot) -> u64,
) {
    wait_for(what, Duration::from_secs(10), || async {
        (counter(&handle.metrics()) >= n).then_some(())
    })
    .await;
}

/// One thread: the log capture is the thread's default subscriber.
async fn empty_claims_are_idle_contended_or_leased_only_and_quiet(backend: Backend) {
    let (logs, _guard) = LogCapture::install("debug,sqlx=warn,jobqueue_runtime=debug");
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_empty").await;

    // Nothing at all: idle.
    let (handle, task) = polling_worker(&queue, &effects_pool);
    wait_metric(&handle, "idle empty claims", 4, |m| m.empty_idle).await;
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!(
        (m.claimed, m.empty_contended, m.empty_leased_only),
        (0, 0, 0),
        "{m:?}"
    );
    assert_eq!(m.database_errors, 0);

    // Ready jobs, every one locked by another transaction: contended.
    let ids: Vec<u64> = queue
        .enqueue_many((0..3).map(|n| EmptyProbe { n }))
        .await
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();
    let (locker, locked) = lock_rows(
        &queue,
        "SELECT id FROM job_queue WHERE status = 'ready' ORDER BY id FOR UPDATE",
        &[],
    )
    .await;
    assert_eq!(locked, ids);
    let (handle, task) = polling_worker(&queue, &effects_pool);
    wait_metric(&handle, "contended empty claims", 3, |m| m.empty_contended).await;
    assert_eq!(
        handle.metrics().claimed,
        0,
        "locked rows are skipped, not taken"
    );
    // Once the lock is gone the same worker runs them.
    locker.release().await;
    wait_for("the jobs done", Duration::from_secs(10), || async {
        (count_status(&queue, JobStatus::Done).await == 3).then_some(())
    })
    .await;
    stop(&handle, task).await;
    assert_eq!(handle.metrics().claimed, 3);

    // Only running jobs, leased by someone else: leased-only.
    queue
        .enqueue_many((3..5).map(|n| EmptyProbe { n }))
        .await
        .unwrap();
    let taken = queue
        .store()
        .claim("default", "elsewhere", 10)
        .await
        .unwrap();
    assert_eq!(taken.len(), 2);
    let (handle, task) = polling_worker(&queue, &effects_pool);
    wait_metric(&handle, "leased-only empty claims", 3, |m| {
        m.empty_leased_only
    })
    .await;
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!(
        (m.claimed, m.reclaimed, m.empty_contended),
        (0, 0, 0),
        "{m:?}"
    );
    assert_eq!(count_status(&queue, JobStatus::Running).await, 2);

    let text = logs.text();
    assert!(
        !logs.lines_with(&["worker starting"]).is_empty(),
        "the capture sees the worker's logs:\n{text}"
    );
    let loud = logs.warnings();
    assert!(
        loud.is_empty(),
        "empty claims logged warnings or errors: {loud:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// 7. A kind this binary does not know waits for a worker that has it, without spending its
//    attempts, and fails naming the kind once it has waited too long: never dropped.
// ---------------------------------------------------------------------------------------

/// Inserts a ready job of a kind no binary has, by SQL, as another program would.
async fn insert_unknown_kind(queue: &Queue) -> u64 {
    match queue.backend() {
        Backend::Postgres => {
            sql_i64(
                queue,
                "INSERT INTO job_queue (queue, kind, task_key, payload, status, run_at, \
                   max_attempts, lease_ms, created_at, updated_at) \
                 VALUES ('default', 'no_such_kind', 'no_such_kind:1', '{}', 'ready', \
                   job_queue_now(), 2, 30000, job_queue_now(), job_queue_now()) \
                 RETURNING id",
                &[],
            )
            .await as u64
        }
        _ => sqlx::query(
            "INSERT INTO job_queue (queue, kind, task_key, payload, status, run_at, \
                   max_attempts, lease_ms, created_at, updated_at) \
                 VALUES ('default', 'no_such_kind', 'no_such_kind:1', '{}', 'ready', \
                   UTC_TIMESTAMP(6), 2, 30000, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
        )
        .execute(queue.mysql_pool().unwrap())
        .await
        .unwrap()
        .last_insert_id(),
    }
}

async fn an_unknown_kind_waits_without_spending_attempts_then_fails_naming_the_kind(
    backend: Backend,
) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_unknown").await;
    let id = insert_unknown_kind(&queue).await;
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .unrunnable_deadline(Duration::from_millis(1500))
            .build()
            .unwrap(),
    );

    // Whichever claim put it back: each one waits about a second in `scheduled`, and a
    // busy test can miss the first.
    let (delay_us, attempts, max_attempts, error) = wait_for(
        "a claim to put the job back",
        Duration::from_secs(10),
        || async {
            let r = row(&queue, id).await;
            (r.status == JobStatus::Scheduled && r.attempts >= 1).then(|| {
                let delay = (r.run_at - r.updated_at).num_microseconds().unwrap();
                (delay, r.attempts, r.max_attempts, r.last_error.unwrap())
            })
        },
    )
    .await;
    assert!(
        delay_us >= 800_000,
        "put back with a delay, got {delay_us} µs"
    );
    assert_eq!(
        max_attempts,
        attempts + 2,
        "the claims did not spend one of the 2 attempts"
    );
    assert!(
        error.starts_with(
            "waiting for a worker that can run it: job kind `no_such_kind` is not registered in this worker"
        ),
        "{error}"
    );

    // Past the deadline (1.5 s here, 24 h by default), the next claim fails it.
    let r = wait_status(&queue, id, JobStatus::Failed, Duration::from_secs(15)).await;
    assert_eq!(
        r.max_attempts - r.attempts,
        1,
        "still no attempt spent: {r:?}"
    );
    let error = r.last_error.unwrap();
    assert!(
        error.starts_with(
            "no worker could run it within 1.5s of the first try: job kind `no_such_kind`"
        ),
        "{error}"
    );
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!(
        (m.claimed, m.deferred, m.retried, m.failed),
        (r.attempts.into(), r.attempts as u64 - 1, 0, 1),
        "{m:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 8. A per-job timeout cancels the attempt and counts it as failed.
// ---------------------------------------------------------------------------------------

static SLOW_STARTED: [Mailbox<JobContext>; 2] = [Mailbox::new(), Mailbox::new()];

#[job(
    name = "worker_too_slow",
    timeout = "200ms",
    max_attempts = 2,
    backoff = "constant(50ms)"
)]
async fn too_slow(ctx: JobContext, effects: Data<Effects>) {
    SLOW_STARTED[on(&effects)].send(ctx);
    tokio::time::sleep(Duration::from_secs(10)).await;
}

async fn a_timeout_cancels_the_attempt_and_counts_as_a_failure(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_timeout").await;
    let mut started = SLOW_STARTED[slot(backend)].open();
    let id = queue.enqueue(TooSlow {}).await.unwrap().id();
    let (handle, task) = start(
        quick_worker(&queue)
            .data(effects_pool.clone())
            .build()
            .unwrap(),
    );

    // Cancelled at 200 ms; the bound leaves a busy machine seconds of room and still ends
    // well before the job's 10 s of sleep would.
    let first = receive(&mut started, "the first attempt", Duration::from_secs(10)).await;
    let t0 = Instant::now();
    tokio::time::timeout(Duration::from_secs(6), first.cancelled())
        .await
        .expect("the attempt is cancelled at its timeout, not at the end of its work");
    println!("cancelled {:?} after the start", t0.elapsed());
    assert_eq!(first.cancel_reason(), Some(CancelReason::Timeout));

    let second = receive(&mut started, "the retry", Duration::from_secs(10)).await;
    assert_eq!(second.attempt(), 2, "the timed-out attempt counted");
    let r = wait_status(&queue, id, JobStatus::Failed, Duration::from_secs(10)).await;
    assert_eq!(r.attempts, 2);
    assert_eq!(
        r.last_error.as_deref(),
        Some("timed out after 200ms (attempt 2 of 2)")
    );
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!((m.retried, m.failed), (1, 1), "{m:?}");
}

// ---------------------------------------------------------------------------------------
// 9. An enqueue in this process wakes an idle worker at once.
// ---------------------------------------------------------------------------------------

static WAKE_STARTED: [Mailbox<Instant>; 2] = [Mailbox::new(), Mailbox::new()];

#[job(name = "worker_wake")]
async fn wake_probe(effects: Data<Effects>) {
    WAKE_STARTED[on(&effects)].send(Instant::now());
}

async fn an_enqueue_wakes_an_idle_worker_before_its_next_poll(backend: Backend) {
    let (queue, effects_pool) = fresh_queue_with_effects_on(backend, "worker_wake").await;
    let mut started = WAKE_STARTED[slot(backend)].open();
    let worker = Worker::builder(queue.clone())
        .data(effects_pool.clone())
        .poll_interval(Duration::from_secs(30), Duration::from_secs(60))
        // The wake-up must beat the polls, with no probe to help it.
        .idle_probe(None)
        .build()
        .unwrap();
    let (handle, task) = start(worker);
    // One empty claim: the worker now waits 30 s (± 20 %) before its next poll.
    wait_metric(&handle, "the first empty claim", 1, |m| m.empty_idle).await;

    let enqueued_at = Instant::now();
    let id = queue.enqueue(WakeProbe {}).await.unwrap().id();
    let started_at = receive(&mut started, "the job to start", Duration::from_secs(10)).await;
    let latency = started_at - enqueued_at;
    // Far sooner than the next poll, with room for a busy machine.
    assert!(
        latency < Duration::from_secs(8),
        "started after {latency:?}"
    );
    assert_eq!(
        handle.metrics().empty_idle,
        1,
        "no poll happened in between"
    );

    wait_status(&queue, id, JobStatus::Done, Duration::from_secs(10)).await;
    stop(&handle, task).await;
}

on_every_backend!(
    three_workers_run_two_hundred_jobs_exactly_once,
    retries_until_success_exhaustion_and_permanent_errors,
    panics_fail_clearly_bad_payloads_wait_and_the_worker_goes_on,
    a_job_longer_than_its_lease_is_renewed_and_runs_once,
    a_job_whose_lease_cannot_be_renewed_is_stopped_and_taken_back,
    shutdown_cancels_a_running_job_and_hands_it_back,
    shutdown_drops_a_job_that_ignores_cancellation_and_hands_it_back,
    an_unknown_kind_waits_without_spending_attempts_then_fails_naming_the_kind,
    a_timeout_cancels_the_attempt_and_counts_as_a_failure,
    an_enqueue_wakes_an_idle_worker_before_its_next_poll;
    current_thread: empty_claims_are_idle_contended_or_leased_only_and_quiet,
);
