//! How a worker stops, and that it always does: a shutdown is bounded for a job whose
//! operator cancel is pending and which ignores cancellation; with the default grace periods
//! a job that ignores cancellation is handed back before an orchestrator's default 30 s
//! kill; and dropping `run_until`'s future stops lease renewal, so another worker can take
//! over. Each test failed before the change it guards and guards against the bug coming
//! back.
//!
//! Every test has its own database and its own job kinds (one registry serves the whole
//! binary). Graceful shutdown's hand-back of a job on its last attempt is in
//! `worker_outcomes.rs`.

use std::time::{Duration, Instant};

use jobqueue::admin::CancelOutcome;

use jobqueue::context::CancelReason;

use jobqueue::{job, JobContext, JobStatus, Worker};
use sqlx::types::chrono::NaiveDateTime;
use tests::{
    fresh_queue, init_tracing, quick_worker, receive, row, start, stop, wait_for, wait_status,
    Mailbox,
};

// ---------------------------------------------------------------------------------------
// Shutdown is bounded for a job with a pending operator cancel that ignores it.
// ---------------------------------------------------------------------------------------

static DEAF_STARTED: Mailbox<JobContext> = Mailbox::new();

/// Ignores every cancellation: only dropping it stops it. The renewer notices an operator's
/// cancel within a quarter of the lease, under a second; the lease leaves a renewal round a second
/// of slack, so that a slow statement on a busy machine is not a lost lease.
#[job(name = "regressions_deaf_to_cancel", lease = "3s")]
async fn deaf_to_cancel(ctx: JobContext) {
    DEAF_STARTED.send(ctx);
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_for_a_job_that_ignores_a_pending_cancel() {
    init_tracing();
    let queue = fresh_queue("regressions_deaf").await;
    let mut started = DEAF_STARTED.open();
    let id = queue.enqueue(DeafToCancel {}).await.unwrap().id();
    let worker = quick_worker(&queue)
        .shutdown_grace(Duration::from_millis(200))
        .cancel_grace(Duration::from_millis(200))
        .build()
        .unwrap();
    let (handle, task) = start(worker);
    let ctx = receive(&mut started, "the job to start", Duration::from_secs(10)).await;

    assert_eq!(queue.cancel(id).await.unwrap(), CancelOutcome::Requested);
    tokio::time::timeout(Duration::from_secs(10), ctx.cancelled())
        .await
        .expect("the operator's cancel reaches the job");
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::Requested));

    // Both grace periods are 200 ms: the job, which goes on running, is dropped after them.
    // The bound leaves a busy machine seconds for the final writes, and is far below the
    // job's 120 s.
    let t0 = Instant::now();
    handle.shutdown();
    let returned = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert!(
        returned.is_ok(),
        "the worker was still shutting down after {:?}: a job with a pending cancel kept it waiting",
        t0.elapsed()
    );
    returned.unwrap().unwrap().unwrap();

    // Handed back while its cancel was pending: it ends cancelled, not back in line.
    let r = row(&queue, id).await;
    assert_eq!((r.status, r.attempts), (JobStatus::Cancelled, 1), "{r:?}");
    assert_eq!((r.lease_owner, r.lease_until), (None, None));
    assert!(r.finished_at.is_some());
    let m = handle.metrics();
    assert_eq!(
        (m.cancelled, m.handed_back, m.lease_lost),
        (1, 0, 0),
        "counted as what the row became: {m:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Dropping `run_until`'s future stops lease renewal.
// ---------------------------------------------------------------------------------------

static ABANDONED_STARTED: Mailbox<JobContext> = Mailbox::new();

/// The first attempt runs until its task is dropped; later ones finish at once.
#[job(name = "regressions_abandoned", lease = "1s", max_attempts = 3)]
async fn abandoned(ctx: JobContext) {
    let first = ctx.attempt() == 1;
    ABANDONED_STARTED.send(ctx);
    if first {
        tokio::time::sleep(Duration::from_secs(120)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_future_stops_renewals_and_another_worker_takes_over() {
    init_tracing();
    let queue = fresh_queue("regressions_dropped").await;
    let mut started = ABANDONED_STARTED.open();
    let id = queue.enqueue(Abandoned {}).await.unwrap().id();
    let worker = quick_worker(&queue)
        .owner("dropped-a")
        .maintenance(false)
        .build()
        .unwrap();
    let task = tokio::spawn(worker.run());
    let ctx = receive(&mut started, "the first attempt", Duration::from_secs(10)).await;
    assert_eq!(ctx.attempt(), 1);

    // Drop the future without a shutdown, as a caller's `select!` or timeout would.
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    // At most one renewal was in flight: the 1 s lease then runs out, and nobody extends it.
    let lease_until: NaiveDateTime = wait_for(
        "the dropped worker's lease to expire unrenewed",
        Duration::from_secs(5),
        || async {
            let (until, expired): (Option<NaiveDateTime>, bool) = sqlx::query_as(
                "SELECT lease_until, COALESCE(lease_until < UTC_TIMESTAMP(6), FALSE) \
                 FROM job_queue WHERE id = ?",
            )
            .bind(id)
            .fetch_one(queue.mysql_pool().unwrap())
            .await
            .unwrap();
            expired.then(|| until.expect("a running job has a lease"))
        },
    )
    .await;
    let r = row(&queue, id).await;
    assert_eq!(
        (
            r.status,
            r.attempts,
            r.lease_owner.as_deref(),
            r.lease_until
        ),
        (
            JobStatus::Running,
            1,
            Some("dropped-a"),
            Some(lease_until.and_utc())
        ),
        "nothing touched the row since its lease ran out"
    );

    // Another worker reclaims it after the lease and runs it.
    let (handle, task) = start(quick_worker(&queue).owner("dropped-b").build().unwrap());
    let r = wait_status(&queue, id, JobStatus::Done, Duration::from_secs(10)).await;
    assert_eq!(r.attempts, 2);
    let second = receive(&mut started, "the second attempt", Duration::from_secs(1)).await;
    assert_eq!(second.attempt(), 2);
    stop(&handle, task).await;
    let m = handle.metrics();
    assert_eq!((m.reclaimed, m.claimed, m.succeeded), (1, 1, 1), "{m:?}");
}

// ---------------------------------------------------------------------------------------
// Default shutdown fits Kubernetes' default termination grace
// ---------------------------------------------------------------------------------------

static STUBBORN_STARTED: Mailbox<u64> = Mailbox::new();

/// Ignores cancellation: only dropping it stops it.
#[job(name = "hardening_conn_stubborn", queue = "conn_stubborn")]
async fn stubborn(ctx: JobContext) {
    STUBBORN_STARTED.send(ctx.id());
    tokio::time::sleep(Duration::from_secs(300)).await;
}

/// With the default grace periods, a worker told to stop while a job
/// ignores cancellation has handed the job back before Kubernetes' default
/// `terminationGracePeriodSeconds` of 30 s would kill the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_shutdown_hands_jobs_back_within_thirty_seconds() {
    init_tracing();
    let queue = fresh_queue("conn_k8s").await;
    let mut started = STUBBORN_STARTED.open();
    let id = queue.enqueue(Stubborn {}).await.unwrap().id();
    let worker = Worker::builder(queue.clone())
        .queues(["conn_stubborn"])
        .build()
        .unwrap();
    let (handle, task) = start(worker);
    receive(&mut started, "the job to start", Duration::from_secs(20)).await;
    let t0 = Instant::now();
    handle.shutdown();
    let returned = tokio::time::timeout(Duration::from_secs(30), task).await;
    let took = t0.elapsed();
    assert!(
        returned.is_ok(),
        "the worker was still shutting down after {took:?}"
    );
    returned.unwrap().unwrap().unwrap();
    println!("default shutdown took {took:?}");
    let r = row(&queue, id).await;
    assert_eq!((r.status, r.attempts), (JobStatus::Ready, 1), "{r:?}");
}
